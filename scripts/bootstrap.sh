#!/usr/bin/env bash
# Create/refresh .venv with the pinned environment, build the ROS messages, install the package.
# Idempotent: a stamp of requirements.txt + msg/ skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${BEVPOOL_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

stamp_of() { cat requirements.txt msg/*.msg msg/CMakeLists.txt msg/package.xml setup.py bevpool_ros/handoff/native/*.cpp \
  bevpool_ros/handoff/native/*.h 2>/dev/null | sha256sum | cut -c1-16; }
STAMP=$(stamp_of)
if [ -f "$VENV/.bevpool_stamp" ] && [ "$(cat "$VENV/.bevpool_stamp")" = "$STAMP" ]; then
  exit 0
fi
echo "[bootstrap] creating $VENV (pinned requirements.txt)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt
if [ -f msg/CMakeLists.txt ]; then
  "$ROOT/scripts/build_msgs.sh" "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e .
echo "$STAMP" > "$VENV/.bevpool_stamp"
echo "[bootstrap] ready: $VENV" >&2
