#!/usr/bin/env bash
# The test command (README quick start, .ci/run): bootstrap .venv, then the whole pytest suite.
# GPU tests skip without a CUDA device; scripts/gpu_check.sh runs them on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
