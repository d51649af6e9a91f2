#include "ros_copy.h"

#include <dlfcn.h>

#include <cstddef>

#include "error.h"

namespace bevpool {
namespace {

// rcutils_uint8_array_t (rcl_serialized_message_t), as rcutils lays it out; rmw reads the buffer and
// its length only
struct Allocator {
    void* allocate;
    void* deallocate;
    void* reallocate;
    void* zero_allocate;
    void* state;
};
struct SerializedMessage {
    uint8_t* buffer;
    size_t buffer_length;
    size_t buffer_capacity;
    Allocator allocator;
};

}  // namespace

RosCopy::RosCopy(const std::string& librcl, uint64_t publisher) : publisher_(reinterpret_cast<const void*>(publisher)) {
    void* lib = dlopen(librcl.c_str(), RTLD_NOW | RTLD_NOLOAD);  // the process's own rcl, never a second one
    if (lib == nullptr) {
        const char* e = dlerror();
        set_error(std::string("rcl not loaded from ") + librcl + " (" + (e ? e : "?") + ")");
        return;
    }
    publish_ = reinterpret_cast<Publish>(dlsym(lib, "rcl_publish_serialized_message"));
    if (publish_ == nullptr) set_error("rcl_publish_serialized_message not in " + librcl);
}

int RosCopy::publish(const uint8_t* data, uint32_t length) const {
    SerializedMessage m{const_cast<uint8_t*>(data), length, length, {}};
    return publish_(publisher_, &m, nullptr);
}

}  // namespace bevpool
