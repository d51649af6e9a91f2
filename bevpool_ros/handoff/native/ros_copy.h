// A ROS publisher's serialised publish, from the core: the grid's BevHandoff goes to ROS subscribers
// from the thread that sent its datagram, without Python. rcl is reached through the librcl the
// process loaded already (its path from Python; dlopen RTLD_NOLOAD) and one call,
// rcl_publish_serialized_message, whose signature every ROS 2 release since Foxy keeps; building the
// core still needs no ROS headers. The publisher stays Python's (rclpy): it must outlive this object.
#pragma once

#include <cstdint>
#include <string>

namespace bevpool {

class RosCopy {
public:
    // `librcl`: the loaded library's path; `publisher`: an rcl_publisher_t* (rclpy's handle.pointer)
    RosCopy(const std::string& librcl, uint64_t publisher);
    bool ok() const { return publish_ != nullptr; }
    int publish(const uint8_t* data, uint32_t length) const;  // rcl_ret_t: 0 published

private:
    using Publish = int (*)(const void* publisher, const void* serialized, void* allocation);
    Publish publish_ = nullptr;
    const void* publisher_;
};

}  // namespace bevpool
