#!/usr/bin/env bash
# Generate and install the bevpool_msgs interface package (msg/) into a venv with rosidl
# from the ros-kilted-* PyPI wheels. Usage: scripts/build_msgs.sh [VENV]  (default: .venv)
#
# Workarounds (docs/environment.md):
#  1. generator packages missing from wheel metadata come from requirements.txt;
#  2. cmake is configured with AMENT_PREFIX_PATH / CMAKE_PREFIX_PATH / install prefix = venv
#     and the venv's Python, so the result is importable with no environment variables;
#  3. the wheels' exported cmake files hard-code the include paths of the Python they were built
#     with (/opt/python/cp3XX-cp3XX/..., cp311 or cp312 wheels alike): they are rewritten to this
#     interpreter's include dir and numpy's include dir, whatever the Python version.
# Idempotent and fast: a stamp of the inputs skips everything when nothing changed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$(cd "${1:-$ROOT/.venv}" && pwd)
PY=$VENV/bin/python
BUILD=${BEVPOOL_MSGS_BUILD:-$ROOT/build/bevpool_msgs}
mkdir -p "$(dirname "$BUILD")"

inputs_hash() { cat "$ROOT"/msg/*.msg "$ROOT/msg/CMakeLists.txt" "$ROOT/msg/package.xml" "$ROOT/scripts/build_msgs.sh" | sha256sum | cut -c1-16; }
STAMP_FILE=$VENV/share/bevpool_msgs/.build_stamp
STAMP=$(inputs_hash)
if [ -f "$STAMP_FILE" ] && [ "$(cat "$STAMP_FILE")" = "$STAMP" ] \
   && "$PY" -c "import bevpool_msgs.msg" 2>/dev/null; then
  echo "[build_msgs] bevpool_msgs up to date" >&2
  exit 0
fi

# (3) fix the hard-coded include paths, only in files that still carry them
PY_INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
NP_INC=$("$PY" -c "import numpy; print(numpy.get_include())")
WHEEL_PY='/opt/python/cp3[0-9]+-cp3[0-9]+'
{ grep -rlE --include='*.cmake' "$WHEEL_PY" "$VENV/share" 2>/dev/null || true; } | while read -r f; do
  sed -i -E -e "s#$WHEEL_PY/lib/python3\.[0-9]+/site-packages/numpy/_core/include#$NP_INC#g" \
            -e "s#$WHEEL_PY/include/python3\.[0-9]+#$PY_INC#g" "$f"
done

# (2) configure, build, install into the venv prefix
export AMENT_PREFIX_PATH=$VENV
export PATH=$VENV/bin:$PATH
cmake -S "$ROOT/msg" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" \
  -DPython3_EXECUTABLE="$PY" -DBUILD_TESTING=OFF >"$BUILD.log" 2>&1 \
  || { cat "$BUILD.log" >&2; echo "[build_msgs] cmake configure failed" >&2; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >>"$BUILD.log" 2>&1 \
  && cmake --install "$BUILD" >>"$BUILD.log" 2>&1 \
  || { tail -n 60 "$BUILD.log" >&2; echo "[build_msgs] build failed (log: $BUILD.log)" >&2; exit 1; }

"$PY" -c "from bevpool_msgs.msg import Tensor, BevFeature" \
  || { echo "[build_msgs] built, but 'import bevpool_msgs.msg' fails in $PY" >&2; exit 1; }
mkdir -p "$(dirname "$STAMP_FILE")"
echo "$STAMP" > "$STAMP_FILE"
echo "[build_msgs] bevpool_msgs installed into $VENV" >&2
