"""The device-free description of every kernel: what runs, with which launch, and why.

The one kernel table (``table``), the interval schedules (``schedule``), the launch derivation
(``planning``, with ``LaunchChoice``), the FP8 rules (``fp8``), the precision rule (``precision``)
and the float64 twin of the V3 kernels (``twin``). Nothing here touches a GPU (the autotune that
times launches lives in the device layer, ``backends/cuda``): the NVRTC backend, the Python
TensorRT plugin and the C++ plugin library all read it.
"""
