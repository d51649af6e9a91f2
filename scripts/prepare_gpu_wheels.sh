#!/usr/bin/env bash
# Run HERE (with network), not on the GPU machine: packs the ROS 2 runtime for the GPU machine's
# Python (3.12 by default; it has no internet and no ROS) into one git-ignored archive that a
# device call carries:  .whl/ros_py312.tar.xz  (~20 MB; the carry limit is 64 MiB per call).
#
#   scripts/prepare_gpu_wheels.sh [PYTHON]        # default: python3.12 (pyenv's if not on PATH)
#
# 1. a build venv (build/py312) gets the cp312 ros-kilted-* wheels pinned in requirements.txt
#    (rclpy, rmw-fastrtps-cpp, the message packages, and rosidl's generators to build ours), and
#    rosbags (the bag tools and their tests), which the GPU machine lacks too;
# 2. scripts/build_msgs.sh builds bevpool_msgs for that Python into the same venv;
# 3. the venv's runtime part is packed, pruned of what only builds need (generators, cmake
#    files, headers, pip) and of numpy (the GPU machine's own numpy is used: bevpool_msgs is
#    compiled against numpy 2.4 headers, which newer numpy 2.x accepts).
# scripts/gpu_check.sh (ROS block) unpacks it with scripts/install_ros_runtime.sh for the machine's python3.
# Idempotent: a stamp of requirements.txt + msg/ skips the work when nothing changed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${1:-python3.12}
if ! "$PY" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
  PY=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | tail -n1)
fi
[ -x "$PY" ] || { echo "[prepare_gpu_wheels] no python3.12 found (pass its path)" >&2; exit 2; }
TAG=py$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
VENV=$ROOT/build/$TAG
OUT=$ROOT/.whl/ros_$TAG.tar.xz
mkdir -p "$ROOT/.whl" "$ROOT/build"

STAMP=$(cat "$ROOT/requirements.txt" "$ROOT"/msg/*.msg "$ROOT/msg/CMakeLists.txt" "$ROOT"/bench/dds_probe_msgs/msg/*.msg "$0" \
  | sha256sum | cut -c1-16)
if [ -f "$OUT" ] && [ "$(cat "$OUT.stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "[prepare_gpu_wheels] $OUT up to date" >&2; exit 0
fi

# (1) pinned cp312 wheels: the ROS lines of requirements.txt + what rosidl needs to build
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
grep -E '^(ros-kilted-|catkin_pkg|numpy==|pyyaml==|rosbags==)' "$ROOT/requirements.txt" > "$VENV/requirements.ros.txt"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$VENV/requirements.ros.txt"

# (2) bevpool_msgs for this Python, and the bounded probe type of bench/dds_hop.py
BEVPOOL_MSGS_BUILD=$ROOT/build/bevpool_msgs_$TAG "$ROOT/scripts/build_msgs.sh" "$VENV"
"$VENV/bin/python" "$ROOT/bench/dds_hop.py" --build-probe-type

# (3) the runtime, pruned. Kept: every .so under lib/ (message type supports, rcl, rmw, Fast DDS),
# site-packages of the runtime (rclpy, rosidl runtime, rosidl_parser.definition + generator_py's import_type_support, the
# message packages, bevpool_msgs, the LD_LIBRARY_PATH bootstrapper), share/ for the ament index.
SP=lib/python3.${TAG#py3}/site-packages
LIST=$(mktemp)
(
  cd "$VENV"
  find lib -maxdepth 1 -name '*.so*' -print
  find "$SP" -mindepth 1 -maxdepth 1 \
    ! -name 'numpy*' ! -name 'pip*' ! -name 'setuptools*' ! -name '_distutils_hack' ! -name 'distutils-precedence.pth' \
    ! -name 'ament_cmake*' ! -name 'ros_ament_cmake*' ! -name 'ros_kilted_ament_cmake*' \
    ! -name 'catkin_pkg*' ! -name 'docutils*' ! -name 'lark*' ! -name 'em*.py' ! -name 'empy*' \
    ! -name 'pyparsing*' ! -name 'packaging*' ! -name 'dateutil' ! -name 'python_dateutil*' \
    ! -name 'rosidl_adapter' ! -name 'rosidl_cli' ! -name 'rosidl_cmake' \
    ! -name 'rosidl_pycommon' ! -name 'rosidl_generator_c' ! -name 'rosidl_generator_cpp' \
    ! -name 'rosidl_generator_type_description' ! -name 'yaml' ! -name '_yaml' ! -name 'pyyaml*' \
    ! -name '__pycache__' -print
  find share -path '*/cmake' -prune -o \( -type f ! -name '*.cmake' ! -name '*.idl' -print \)
) > "$LIST"
tar -C "$VENV" --exclude='__pycache__' --exclude='*.pyc' --exclude='*/include/*' -cf - -T "$LIST" \
  | xz -9 -T0 > "$OUT.tmp"
rm -f "$LIST"
mv "$OUT.tmp" "$OUT"
echo "$STAMP" > "$OUT.stamp"
echo "[prepare_gpu_wheels] $OUT ($(du -h "$OUT" | cut -f1)) for $("$VENV/bin/python" -V)" >&2
