// The consumer's half of the signal sockets (the per-datagram work of announcements.py's links):
// one thread blocks in wait() on every linked socket at once (epoll), reads the next datagram,
// reads it through a learnt template, and for a ring the caller watches checks the seqlock (the
// slot still holds the announced sequence) and, when asked to, waits on the host for the slot's
// IPC event, all without the GIL. What stays in Python: de-duplication with the ROS copies, gaps,
// content filters (announcements.AnnouncementLinks), the message object and the user's callback.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "bevpool_handoff.h"
#include "templates.h"

namespace bevpool {

struct WatchedRing {
    const int64_t* words;
    uint32_t size;
    std::vector<std::array<uint8_t, 64>> handles;
    std::vector<void*> events;
    void* context;
};

class Waiter {
public:
    Waiter(const TemplateStore* templates, bool wait_events);
    ~Waiter();
    bool ok() const { return epoll_ >= 0 && wake_ >= 0; }
    int add(int fd, uint64_t* link);
    void remove(uint64_t link);  // reported by wait() as BP_WAKE_CLOSED, its socket closed then
    void watch(uint64_t ring_id, WatchedRing ring);
    void unwatch(uint64_t ring_id);  // returns once no check of that ring is running
    // BP_WAKE_TIMEOUT after `timeout_ms` (-1: none) or an interrupt(); `ring_id`: the matched template's ring
    int wait(bp_arrival* arrival, uint8_t* buffer, uint32_t capacity, int timeout_ms = -1,
             uint64_t* ring_id = nullptr);
    void shutdown();
    void interrupt() { wake(); }  // a wait() in progress returns BP_WAKE_TIMEOUT: its caller looks again

private:
    struct Link {
        int fd;
        bool closing;
    };
    void close_link(uint64_t link);  // (mutex_ held)
    int check(uint64_t ring_id, const bp_values& values);
    void wake();

    const TemplateStore* templates_;
    bool wait_events_;
    int epoll_ = -1;
    int wake_ = -1;  // an eventfd: remove() and shutdown() interrupt the epoll wait
    std::mutex mutex_;
    std::map<uint64_t, Link> links_;
    std::deque<uint64_t> closed_;
    uint64_t next_link_ = 1;
    bool shutdown_ = false;
    std::mutex rings_mutex_;  // held while a ring is checked: unwatch() waits for it
    std::map<uint64_t, WatchedRing> rings_;
    void* current_context_ = nullptr;  // of the waiting thread (one thread waits)
};

}  // namespace bevpool
