// The producer's half of a ring's signal socket (the twin of signal.SignalServer.send): one
// datagram to every connected consumer. A consumer whose queue is full is waited for FULL_WAIT_MS
// at most (a set's burst of announcements outruns a reading consumer's queue of 10); still full, it
// loses the datagram (counted: it still gets the ROS message) and is not waited for again until a
// datagram reaches it, so a stuck consumer costs the producer one wait. One that went away is forgotten.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

namespace bevpool {

constexpr int FULL_WAIT_MS = 1;  // signal.FULL_WAIT_S

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
    std::set<int> lagging_;  // consumers found full and not waited for
    std::atomic<uint64_t> dropped_{0};
};

}  // namespace bevpool
