#!/usr/bin/env bash
# Unpack the packed ROS 2 runtime (scripts/prepare_gpu_wheels.sh) into PREFIX for this machine's
# own Python, which keeps its numpy, cupy, torch and cuda-bindings: used on the GPU machine.
#   scripts/install_ros_runtime.sh ARCHIVE PREFIX [PYTHON]
# Writes PREFIX/ros_env.sh; after `. PREFIX/ros_env.sh`, PYTHON imports rclpy and bevpool_msgs
# (PYTHONPATH for the packages, LD_LIBRARY_PATH for the wheels' libraries, AMENT_PREFIX_PATH for
# the ament index that locates the RMW). Child processes inherit all three.
set -euo pipefail
ARCHIVE=$1 PREFIX=$2 PY=${3:-python3}
[ -f "$ARCHIVE" ] || { echo "[install_ros_runtime] $ARCHIVE missing: run scripts/prepare_gpu_wheels.sh first" >&2; exit 2; }
mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)
tar -C "$PREFIX" -xJf "$ARCHIVE"
WANT=$(cd "$PREFIX/lib" && ls -d python3.* | head -n1)
HAVE=python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
[ "$WANT" = "$HAVE" ] || { echo "[install_ros_runtime] archive is for $WANT, $PY is $HAVE" >&2; exit 2; }
SP=$PREFIX/lib/$WANT/site-packages
LIBS=$PREFIX/lib$(for d in "$SP"/ros_*.libs; do printf ':%s' "$d"; done)
cat > "$PREFIX/ros_env.sh" <<ENV
export PYTHONPATH=$SP\${PYTHONPATH:+:\$PYTHONPATH}
export LD_LIBRARY_PATH=$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export AMENT_PREFIX_PATH=$PREFIX
export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
ENV
# shellcheck disable=SC1091
. "$PREFIX/ros_env.sh"
"$PY" -c 'import rclpy, numpy; from bevpool_msgs.msg import Tensor, BevFeature, BevHandoff, TensorHandoff; rclpy.init(); rclpy.create_node("install_check"); rclpy.shutdown(); print("[install_ros_runtime] rclpy + bevpool_msgs ok, numpy", numpy.__version__)'
