// The few CUDA driver entry points the hand-off core calls, declared here so that building the
// core needs a C++ compiler only (no CUDA toolkit). libcuda.so.1 is opened at first use; a
// machine without it still loads the core (sockets and templates need no GPU).
#pragma once

#include <cstddef>
#include <cstdint>

namespace bevpool {

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUstream = void*;
using CUevent = void*;
using CUcontext = void*;
using CUgraphExec = void*;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;

struct Driver {
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*cuEventRecord)(CUevent event, CUstream stream);
    CUresult (*cuEventSynchronize)(CUevent event);
    CUresult (*cuCtxSetCurrent)(CUcontext ctx);
    CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
    CUresult (*cuGetErrorName)(CUresult error, const char** name);
    CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned int flags);
    CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream);
    CUresult (*cuStreamSynchronize)(CUstream stream);
    CUresult (*cuEventCreate)(CUevent* event, unsigned int flags);
    CUresult (*cuEventDestroy)(CUevent event);
    CUresult (*cuEventQuery)(CUevent event);
};
constexpr unsigned int CU_EVENT_BLOCKING_SYNC = 0x1;  // a host wait on it sleeps, not spins
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;

// The driver's table, or nullptr (the error buffer then says why: no libcuda.so.1, a symbol missing).
const Driver* driver();

// "cuEventRecord failed: CUDA_ERROR_..." into the thread's last error; returns `result`.
CUresult driver_failed(CUresult result, const char* call);

}  // namespace bevpool
