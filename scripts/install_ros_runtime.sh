#!/usr/bin/env bash
# Install the packed ROS 2 runtime (scripts/prepare_gpu_wheels.sh) into a venv that sees the
# machine's own packages (numpy, cupy, torch, cuda-bindings): used on the GPU machine.
#   scripts/install_ros_runtime.sh ARCHIVE PREFIX [PYTHON]
# Afterwards PREFIX/bin/python imports rclpy and bevpool_msgs. The wheels' bootstrap .pth
# re-executes the interpreter once with LD_LIBRARY_PATH set; ros_env.sh in PREFIX sets the same
# variables explicitly for tools that start other programs.
set -euo pipefail
ARCHIVE=$1 PREFIX=$2 PY=${3:-python3}
[ -f "$ARCHIVE" ] || { echo "[install_ros_runtime] $ARCHIVE missing: run scripts/prepare_gpu_wheels.sh here first" >&2; exit 2; }
"$PY" -m venv --system-site-packages "$PREFIX"
tar -C "$PREFIX" -xJf "$ARCHIVE"
SP=$("$PREFIX/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
LIBS=$PREFIX/lib$(for d in "$SP"/ros_*.libs; do printf ':%s' "$d"; done)
cat > "$PREFIX/ros_env.sh" <<ENV
export LD_LIBRARY_PATH=$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export AMENT_PREFIX_PATH=$PREFIX
export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
ENV
# shellcheck disable=SC1091
. "$PREFIX/ros_env.sh"
"$PREFIX/bin/python" -c 'import rclpy, numpy; from bevpool_msgs.msg import Tensor, BevFeature, BevHandoff; print("[install_ros_runtime] rclpy + bevpool_msgs ok, numpy", numpy.__version__)'
