"""bevpool_ros: installable with pip (venv, CI) and by colcon (ament_python) alike."""
import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "bevpool_ros"


def share(sub, pattern="*"):
    """data_files entries installing sub/ (recursively) under share/bevpool_ros/."""
    by_dir = {}
    for f in sorted(glob(f"{sub}/{pattern}", recursive=True)):
        if os.path.isfile(f):
            by_dir.setdefault(os.path.dirname(f), []).append(f)
    return [(f"share/{PACKAGE}/{d}", fs) for d, fs in by_dir.items()]


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *share("launch"),
        *share("config", "**/*.yaml"),
        *share("config", "**/*.xml"),  # Fast DDS profile for multi-MB tensors (config/dds/)
        *share("plugin", "**/*"),
    ],
    python_requires=">=3.11",  # the pinned ROS 2 kilted wheels are cp311 (README)
    install_requires=["numpy", "pyyaml", "scipy"],
    extras_require={
        "cuda": ["cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime"],
        "viz": ["matplotlib"],
        "test": ["pytest", "hypothesis"],
    },
    zip_safe=True,
    maintainer="bevpool_ros maintainers",
    maintainer_email="maintainers@bevpool-ros.invalid",
    description="Multi-camera BEV pooling (BEVPoolV3) as a ROS 2 node",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "bevpool-inspect = bevpool_ros.cli.inspect:main",
            "bevpool-bench = bevpool_ros.cli.bench:main",
            "bevpool-demo = bevpool_ros.cli.demo:main",
            "bevpool-synthetic = bevpool_ros.cli.synthetic:main",
            "bevpool_node = bevpool_ros.node.main:main",
            "bevpool-trt-build = bevpool_ros.backends.tensorrt.prebuild:main",
            "bevpool-onnx-insert = bevpool_ros.backends.tensorrt.onnx_insert:main",
            "bevpool-trtexec-inputs = bevpool_ros.backends.tensorrt.trtexec_inputs:main",
            "bevpool-bag = bevpool_ros.cli.bag:main",
            "bevpool_occupancy = bevpool_ros.occupancy.node:main",
        ],
    },
)
