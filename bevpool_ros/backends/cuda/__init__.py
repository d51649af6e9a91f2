"""The CUDA layer: driver wrappers (``driver``), NVRTC compile-and-cache (``nvrtc_build``), the loaded
module and a map on the device (``runtime``), graph timing (``timing``). Importing it needs no GPU."""
