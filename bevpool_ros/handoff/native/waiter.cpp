#include "waiter.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cuda_driver.h"
#include "error.h"

namespace bevpool {
namespace {

constexpr uint64_t WAKE = 0;  // the epoll key of the eventfd; links count from 1

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

Waiter::Waiter(const TemplateStore* templates, bool wait_events) : templates_(templates), wait_events_(wait_events) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!ok()) {
        set_error(std::string("epoll/eventfd: ") + std::strerror(errno));
        return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = WAKE;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
}

Waiter::~Waiter() {
    for (auto& [id, link] : links_) ::close(link.fd);
    if (epoll_ >= 0) ::close(epoll_);
    if (wake_ >= 0) ::close(wake_);
}

void Waiter::wake() {
    uint64_t one = 1;
    ssize_t n = ::write(wake_, &one, sizeof(one));
    (void)n;  // a counter already non-zero wakes the waiter just as well
}

int Waiter::add(int fd, uint64_t* link) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t id = next_link_++;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        set_error(std::string("epoll_ctl: ") + std::strerror(errno));
        ::close(fd);
        return BP_E_SYSTEM;
    }
    links_[id] = Link{fd, false};
    *link = id;
    return BP_OK;
}

void Waiter::close_link(uint64_t link) {
    auto it = links_.find(link);
    if (it == links_.end() || it->second.closing) return;
    it->second.closing = true;
    epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    closed_.push_back(link);
}

void Waiter::remove(uint64_t link) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        close_link(link);
    }
    wake();
}

void Waiter::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        shutdown_ = true;
    }
    wake();
}

void Waiter::watch(uint64_t ring_id, WatchedRing ring) {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    rings_[ring_id] = std::move(ring);
}

void Waiter::unwatch(uint64_t ring_id) {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    rings_.erase(ring_id);
}

int Waiter::check(uint64_t ring_id, const bp_values& values) {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    auto it = rings_.find(ring_id);
    if (it == rings_.end()) return BP_UNCHECKED;
    const WatchedRing& ring = it->second;
    if (values.slot >= ring.size) return BP_UNCHECKED;  // the Python reader says what is wrong
    int64_t held = __atomic_load_n(&ring.words[4 + values.slot], __ATOMIC_SEQ_CST);
    if (held != static_cast<int64_t>(values.sequence)) return BP_OVERWRITTEN;
    if (!wait_events_) return BP_READY;
    for (size_t i = 0; i < ring.handles.size(); ++i) {
        if (std::memcmp(ring.handles[i].data(), values.event_handle, 64) != 0) continue;
        const Driver* cu = driver();
        if (cu == nullptr) return BP_UNCHECKED;
        if (ring.context != nullptr && ring.context != current_context_) {
            if (cu->cuCtxSetCurrent(ring.context) != CUDA_SUCCESS) return BP_UNCHECKED;
            current_context_ = ring.context;
        }
        return cu->cuEventSynchronize(ring.events[i]) == CUDA_SUCCESS ? BP_READY : BP_UNCHECKED;
    }
    return BP_UNCHECKED;  // an event the ring does not have: the reader raises it
}

int Waiter::wait(bp_arrival* arrival, uint8_t* buffer, uint32_t capacity, int timeout_ms, uint64_t* matched_ring) {
    epoll_event events[16];
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (shutdown_) return BP_WAKE_SHUTDOWN;
            if (!closed_.empty()) {
                uint64_t id = closed_.front();
                closed_.pop_front();
                ::close(links_[id].fd);
                links_.erase(id);
                arrival->link = id;
                return BP_WAKE_CLOSED;
            }
        }
        int n = epoll_wait(epoll_, events, 16, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return BP_WAKE_TIMEOUT;
        if (n < 0) {
            set_error(std::string("epoll_wait: ") + std::strerror(errno));
            return BP_E_SYSTEM;
        }
        bool woken = false;
        for (int i = 0; i < n; ++i) {
            uint64_t id = events[i].data.u64;
            if (id == WAKE) {
                uint64_t count;
                ssize_t r = ::read(wake_, &count, sizeof(count));
                (void)r;
                woken = true;
                continue;
            }
            ssize_t got;
            {
                std::lock_guard<std::mutex> lock(mutex_);
                auto it = links_.find(id);
                if (it == links_.end() || it->second.closing) continue;
                // MSG_TRUNC: the datagram's whole length, even where the buffer cut it
                got = ::recv(it->second.fd, buffer, capacity, MSG_DONTWAIT | MSG_TRUNC);
                if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
                if (got <= 0) {  // the producer closed it, or it broke
                    close_link(id);
                    continue;
                }
            }
            arrival->arrival_ns = now_ns();
            arrival->link = id;
            arrival->length = static_cast<uint32_t>(got) < capacity ? static_cast<uint32_t>(got) : capacity;
            arrival->check = BP_UNCHECKED;
            arrival->template_id = -1;
            uint64_t ring_id = 0;
            if (static_cast<uint64_t>(got) <= capacity) {
                arrival->template_id = templates_->read(buffer, arrival->length, &arrival->values, &ring_id);
            }
            if (arrival->template_id < 0) return BP_WAKE_RAW;
            if (matched_ring != nullptr) *matched_ring = ring_id;
            arrival->check = check(ring_id, arrival->values);
            return BP_WAKE_TEMPLATE;
        }
        // interrupted with nothing to read: the caller looks again (a new deadline, a stop); a
        // shutdown or a closed link is returned by the next call's first look
        if (woken) return BP_WAKE_TIMEOUT;
    }
}

}  // namespace bevpool
