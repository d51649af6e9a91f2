// Kernel name -> the host handle cudaLaunchKernel takes (the library's nvcc-built kernels).
#pragma once
#include <string>

namespace bevpool {

// nullptr for a name the library does not contain
const void* kernel_function(const std::string& name);

}  // namespace bevpool
