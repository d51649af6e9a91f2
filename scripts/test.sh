#!/usr/bin/env bash
# The test command (README quick start, .ci/run): bootstrap .venv, the linter, then the whole pytest suite.
# GPU tests skip without a CUDA device; scripts/gpu_check.sh runs them on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/ruff check .   # ruff.toml: pyflakes, pycodestyle, import order, line length 120
# In parallel (pytest-xdist): a worker per CPU core (BEVPOOL_TEST_JOBS=N for N, 0 for one process),
# whole files to a worker, the slowest first (test/conftest.py SLOW_FILES); each worker claims its
# own DDS domains, and files marked `alone` run with no other file beside them. Every argument
# passes through to pytest, after these (a later -n or --dist wins).
exec .venv/bin/python -m pytest -n "${BEVPOOL_TEST_JOBS:-auto}" --dist loadfile --no-loadscope-reorder "$@"
