#!/usr/bin/env bash
# The main job (README quick start): bootstrap .venv, then the ROS 2 demo on the best backend
# available here (synthetic 6-camera publisher -> bevpool_node -> consumer; BEV PNG + latency).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/bevpool-demo "$@"
