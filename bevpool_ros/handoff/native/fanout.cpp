#include "fanout.h"

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

void Fanout::send(const uint8_t* data, uint32_t length) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < fds_.size();) {
        ssize_t n;
        do {
            n = ::send(fds_[i], data, length, MSG_DONTWAIT | MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        if (n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
            if (n < 0) dropped_.fetch_add(1);  // its queue is full: it still gets the ROS message
            ++i;
            continue;
        }
        ::close(fds_[i]);  // it went away
        fds_.erase(fds_.begin() + static_cast<long>(i));
    }
}

}  // namespace bevpool
