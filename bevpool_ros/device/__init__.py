"""The device layer: everything that touches a CUDA device or a device tensor, below every backend,
the in-process API and the hand-off. Driver wrappers (``driver``), NVRTC compile-and-cache
(``nvrtc_build``), the loaded module and a map on the device (``runtime``), graph timing
(``timing``) and the V3 autotune that uses it (``autotune``), device tensors read from any
framework (``tensors``: DLPack / ``__cuda_array_interface__``; ``dlpack``: capsules we export;
``streams``: a framework's stream as a handle) and camera payloads that live on a GPU
(``device_payloads``). Importing it needs no GPU."""
