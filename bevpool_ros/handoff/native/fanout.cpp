#include "fanout.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace bevpool {

Fanout::~Fanout() {
    for (int fd : fds_) ::close(fd);
}

void Fanout::add(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    fds_.push_back(fd);
}

int Fanout::consumers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(fds_.size());
}

namespace {

ssize_t send_once(int fd, const uint8_t* data, uint32_t length) {
    ssize_t n;
    do {
        n = ::send(fd, data, length, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
}

bool full(ssize_t n) { return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK); }

}  // namespace

void Fanout::send(const uint8_t* data, uint32_t length) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < fds_.size();) {
        int fd = fds_[i];
        ssize_t n = send_once(fd, data, length);
        if (full(n) && lagging_.count(fd) == 0) {
            // a set's burst outran the consumer's queue (net.unix.max_dgram_qlen, 10 by default, is
            // less than a set's 12 announcements): wait for room, briefly, as a reading consumer makes it
            pollfd p{fd, POLLOUT, 0};
            if (::poll(&p, 1, FULL_WAIT_MS) > 0) n = send_once(fd, data, length);
        }
        if (n >= 0) {
            lagging_.erase(fd);
            ++i;
            continue;
        }
        if (full(n)) {  // still full: it loses this one (it still gets the ROS message) and is not
            dropped_.fetch_add(1);  // waited for again until it reads
            lagging_.insert(fd);
            ++i;
            continue;
        }
        lagging_.erase(fd);
        ::close(fd);  // it went away
        fds_.erase(fds_.begin() + static_cast<long>(i));
    }
}

}  // namespace bevpool
