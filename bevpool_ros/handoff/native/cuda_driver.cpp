#include "cuda_driver.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "error.h"

namespace bevpool {
namespace {

Driver table;
const Driver* loaded = nullptr;
std::string why_not;

// The exported names of the current ABI of each call (the `_v2` suffix where CUDA kept one).
template <typename F>
bool find(void* lib, const char* name, F*& out) {
    out = reinterpret_cast<F*>(dlsym(lib, name));
    if (out == nullptr) why_not = std::string("libcuda.so.1 has no ") + name;
    return out != nullptr;
}

void load() {
    // the library cuda.bindings opened already, when it did: one driver per process
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        const char* e = dlerror();
        why_not = std::string("no CUDA driver (") + (e ? e : "libcuda.so.1 not found") + ")";
        return;
    }
    if (find(lib, "cuMemcpyDtoDAsync_v2", table.cuMemcpyDtoDAsync) && find(lib, "cuEventRecord", table.cuEventRecord) &&
        find(lib, "cuEventSynchronize", table.cuEventSynchronize) &&
        find(lib, "cuCtxSetCurrent", table.cuCtxSetCurrent) && find(lib, "cuCtxGetCurrent", table.cuCtxGetCurrent) &&
        find(lib, "cuGetErrorName", table.cuGetErrorName) && find(lib, "cuStreamWaitEvent", table.cuStreamWaitEvent) &&
        find(lib, "cuGraphLaunch", table.cuGraphLaunch) && find(lib, "cuStreamSynchronize", table.cuStreamSynchronize) &&
        find(lib, "cuEventCreate", table.cuEventCreate) && find(lib, "cuEventDestroy_v2", table.cuEventDestroy) &&
        find(lib, "cuEventQuery", table.cuEventQuery)) {
        loaded = &table;
    }
}

}  // namespace

const Driver* driver() {
    static std::once_flag once;
    std::call_once(once, load);
    if (loaded == nullptr) set_error(why_not);
    return loaded;
}

CUresult driver_failed(CUresult result, const char* call) {
    const char* name = nullptr;
    if (loaded == nullptr || loaded->cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
        set_error(std::string(call) + " failed: CUresult " + std::to_string(result));
    } else {
        set_error(std::string(call) + " failed: " + name);
    }
    return result;
}

}  // namespace bevpool
