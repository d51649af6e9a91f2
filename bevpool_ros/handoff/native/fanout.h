// The producer's half of a ring's signal socket (the twin of signal.SignalServer.send): one
// datagram to every connected consumer, never blocking. A consumer whose queue is full loses the
// datagram (counted: it still gets the ROS message); one that went away is forgotten.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace bevpool {

class Fanout {
public:
    ~Fanout();
    void add(int fd);
    int consumers() const;
    void send(const uint8_t* data, uint32_t length);
    uint64_t dropped() const { return dropped_.load(); }

private:
    mutable std::mutex mutex_;
    std::vector<int> fds_;
    std::atomic<uint64_t> dropped_{0};
};

}  // namespace bevpool
