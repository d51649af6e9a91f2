"""bevpool_ros: installable with pip (venv, CI) and by colcon (ament_python) alike."""
import importlib.util
import os
from glob import glob

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

PACKAGE = "bevpool_ros"
NATIVE = f"{PACKAGE}/handoff/native"


def native_build():
    """bevpool_ros/handoff/native/build.py, loaded by path: nothing the package needs is installed yet."""
    spec = importlib.util.spec_from_file_location("bevpool_native_build", f"{NATIVE}/build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildHandoffCore(build_ext):
    """The hand-off core is a plain shared library loaded with ctypes (any Python version), built by
    native/build.py with a C++ compiler alone. Where it cannot be built (no compiler) the package
    installs without it: the Python path runs and says why once (docs/gpu_handoff.md)."""

    def get_ext_filename(self, ext_name):
        return os.path.join(*ext_name.split(".")[:-1], native_build().LIBRARY)

    def build_extension(self, ext):
        build = native_build()
        out = os.path.dirname(self.get_ext_fullpath(ext.name))
        try:
            build.build(out)
        except build.BuildError as e:
            print(f"bevpool_ros: the hand-off core was not built, the Python path will run: {e}")

    def copy_extensions_to_source(self):  # in-place builds (pip install -e, develop): only what was built
        self.extensions = [e for e in self.extensions
                           if os.path.exists(os.path.join(self.build_lib, self.get_ext_filename(e.name)))]
        super().copy_extensions_to_source()


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
    ext_modules=[Extension(f"{PACKAGE}.handoff.native.libbevpool_handoff", sources=sorted(glob(f"{NATIVE}/*.cpp")),
                           depends=sorted(glob(f"{NATIVE}/*.h")))],
    cmdclass={"build_ext": BuildHandoffCore},
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
    zip_safe=False,  # a shared library inside (ctypes loads it from a file)
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
