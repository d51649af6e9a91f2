// The calling thread's last error message: what the C functions returning an error code mean
// (Python reads it with bp_last_error and raises it).
#pragma once

#include <string>

namespace bevpool {

void set_error(const std::string& message);
const char* last_error();

}  // namespace bevpool
