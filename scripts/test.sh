#!/usr/bin/env bash
# The test command (README quick start, .ci/run): bootstrap .venv, the linter, then the whole pytest suite.
# GPU tests skip without a CUDA device; scripts/gpu_check.sh runs them on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/ruff check .   # ruff.toml: pyflakes, pycodestyle, import order, line length 120
exec .venv/bin/python -m pytest "$@"
