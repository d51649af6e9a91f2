#include "error.h"

namespace bevpool {
namespace {
thread_local std::string message;
}

void set_error(const std::string& m) { message = m; }
const char* last_error() { return message.c_str(); }

}  // namespace bevpool
