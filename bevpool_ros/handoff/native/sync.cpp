#include "sync.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "pyfmt.h"

namespace bevpool {
namespace {

const char* const STREAM_NAMES[SYNC_STREAMS] = {"depth", "feat"};

int64_t floordiv2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

SetSync::SetSync(std::vector<std::string> cameras)
    : missing_by_camera(cameras.size(), 0), cameras_(std::move(cameras)) {}

bool SetSync::Pending::fits(int64_t stamp, int64_t slop) const {
    return std::max(hi, stamp) - std::min(lo, stamp) <= slop;
}

std::string SetSync::configure(double slop, double camera_timeout, int policy, int min_cameras, int max_pending) {
    if (!(0.0 <= slop && slop <= 10.0)) return "slop: expected 0..10 s, got " + py_repr(slop);
    if (!(0.0 < camera_timeout && camera_timeout <= 60.0))
        return "camera_timeout: expected (0, 60] s, got " + py_repr(camera_timeout);
    if (policy != POLICY_DROP && policy != POLICY_ZERO_FILL) return "missing_policy: unknown policy";
    int n = static_cast<int>(cameras_.size());
    if (!(1 <= min_cameras && min_cameras <= n))
        return "min_cameras: expected 1.." + std::to_string(n) + ", got " + std::to_string(min_cameras);
    if (max_pending < 1) return "max_pending: expected >= 1, got " + std::to_string(max_pending);
    slop_ns_ = static_cast<int64_t>(std::nearbyint(slop * 1e9));  // Python's round(): half to even
    timeout_ = camera_timeout;
    policy_ = policy;
    min_cameras_ = min_cameras;
    max_pending_ = max_pending;
    return "";
}

std::string SetSync::name(int camera, int stream) const {
    return cameras_[camera] + "/" + STREAM_NAMES[stream];
}

size_t SetSync::held_messages() const {
    size_t n = 0;
    for (const auto& [key, msgs] : held_) n += msgs.size();
    return n;
}

double SetSync::next_deadline() const {
    double first = -1.0;
    for (const Pending& p : pending_) {
        double due = p.first_arrival + timeout_;
        if (first < 0 || due < first) first = due;
    }
    return first;
}

std::vector<SetSync::Held>* SetSync::find_held(const Key& key) {
    for (auto& [k, msgs] : held_) {
        if (k == key) return &msgs;
    }
    return nullptr;
}

void SetSync::add(int camera, int stream, int64_t stamp, uint64_t token, double now) {
    if (camera < 0 || camera >= static_cast<int>(cameras_.size()) || stream < 0 || stream >= SYNC_STREAMS) {
        counts["unknown_stream"] += 1;
        released.push_back(token);
        return;
    }
    Key key{camera, stream};
    auto it = newest_.find(key);
    bool known = it != newest_.end();
    int64_t newest = known ? it->second : 0;
    bool jumped = known && stamp < newest - CLOCK_RESET_NS;
    if (jumped || (known && continues_held(key, stamp))) {
        jumped_back(camera, stream, stamp, token, now, newest);
        return;
    }
    if (find_held(key) != nullptr) drop_held(key, "its stream went on without it");
    if (known && stamp <= newest) {
        dropped(stamp == newest ? "duplicate" : "out_of_order",
                name(camera, stream) + " stamp " + str(stamp) + " ns, the stream's newest is " + str(newest) + " ns");
        released.push_back(token);
        return;
    }
    if (has_last_emitted_ && stamp <= last_emitted_) {
        dropped("late", name(camera, stream) + " stamp " + str(stamp) + " ns, its set already left (last set " +
                            str(last_emitted_) + " ns)");
        released.push_back(token);
        return;
    }
    newest_[key] = stamp;
    poll(now);  // time-outs first, so a stale set cannot swallow this message
    int target = -1;
    int64_t best = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
        const Pending& p = pending_[i];
        if (!p.fits(stamp, slop_ns_) || p.has[camera][stream]) continue;
        int64_t d = std::llabs(floordiv2(p.lo + p.hi) - stamp);
        if (target < 0 || d < best) {
            target = static_cast<int>(i);
            best = d;
        }
    }
    if (target < 0) {
        Pending p{};
        p.first_arrival = p.last_arrival = now;
        p.lo = p.hi = stamp;
        // appended then sorted by lo, stably: after every pending set of a lo not above it
        auto at = std::upper_bound(pending_.begin(), pending_.end(), stamp,
                                   [](int64_t s, const Pending& q) { return s < q.lo; });
        target = static_cast<int>(at - pending_.begin());
        pending_.insert(at, p);
    }
    Pending& t = pending_[target];
    t.has[camera][stream] = true;
    t.msg[camera][stream] = SyncMessage{stamp, token};
    t.lo = std::min(t.lo, stamp);
    t.hi = std::max(t.hi, stamp);
    t.last_arrival = now;
    counts["accepted_messages"] += 1;
    if (is_complete(t)) {
        for (int i = 0; i < target; ++i) resolve(pending_[i], now, "superseded");  // sets leave in stamp order
        Pending done = t;
        pending_.erase(pending_.begin(), pending_.begin() + target + 1);
        emit(done, now, true, present(done));
    }
    while (static_cast<int>(pending_.size()) > max_pending_) {
        Pending oldest = pending_.front();
        pending_.erase(pending_.begin());
        resolve(oldest, now, "evicted");
    }
}

void SetSync::poll(double now) {
    int last = -1;
    std::vector<bool> expired(pending_.size(), false);
    for (size_t i = 0; i < pending_.size(); ++i) {
        if (now - pending_[i].first_arrival >= timeout_) {
            expired[i] = true;
            last = static_cast<int>(i);
        }
    }
    if (last < 0) return;
    // an expired set takes every older pending set with it, so sets leave in stamp order
    std::vector<Pending> leaving(pending_.begin(), pending_.begin() + last + 1);
    pending_.erase(pending_.begin(), pending_.begin() + last + 1);
    for (size_t i = 0; i < leaving.size(); ++i) resolve(leaving[i], now, expired[i] ? "incomplete_timeout" : "superseded");
}

void SetSync::reset() {
    while (!held_.empty()) drop_held(held_.front().first, "the synchroniser was reset");
    counts["discarded_on_reset"] += pending_.size();
    for (const Pending& p : pending_) release(p, {});
    pending_.clear();
    newest_.clear();
    has_last_emitted_ = false;
}

void SetSync::jumped_back(int camera, int stream, int64_t stamp, uint64_t token, double now, int64_t newest) {
    Key key{camera, stream};
    std::vector<Held>* held = find_held(key);
    if (held == nullptr) {
        held_.emplace_back(key, std::vector<Held>{});
        held = &held_.back().second;
    }
    if (!held->empty() && stamp <= held->back().stamp) {
        dropped("stray_stamp", name(camera, stream) + " stamp " + str(stamp) +
                                   " ns is not newer than its previous jumped-back stamp " + str(held->back().stamp) +
                                   " ns");
        released.push_back(token);
        return;
    }
    held->push_back(Held{stamp, token, now});
    if (held->size() > CONFIRM_SETS) {  // bounded: only the newest few are kept for the restart
        Held old = held->front();
        held->erase(held->begin());
        released.push_back(old.token);
        dropped("stray_stamp", name(camera, stream) + " stamp " + str(old.stamp) + " ns: more than " +
                                   std::to_string(CONFIRM_SETS) + " messages held while the reset is unconfirmed");
    }
    size_t confirmed = 0;
    for (const auto& [k, msgs] : held_) confirmed += msgs.size() >= CONFIRM_SETS;
    if (2 * confirmed <= cameras_.size() * SYNC_STREAMS) return;  // a few streams alone restart nothing
    auto candidate = std::move(held_);
    held_.clear();
    size_t pending = pending_.size();
    reset();
    epoch += 1;
    char jump[64];
    std::snprintf(jump, sizeof(jump), "%.1f", static_cast<double>(newest - stamp) / 1e9);
    dropped("clock_reset", std::to_string(confirmed) + " streams jumped back (e.g. " + name(camera, stream) + " by " +
                               jump + " s) for " + std::to_string(CONFIRM_SETS) + " messages each: starting over, " +
                               std::to_string(pending) + " pending set(s) discarded");
    struct Replay {
        double arrival;
        int camera, stream;
        int64_t stamp;
        uint64_t token;
    };
    std::vector<Replay> messages;
    for (const auto& [k, msgs] : candidate) {
        for (const Held& h : msgs) messages.push_back(Replay{h.arrival, k.first, k.second, h.stamp, h.token});
    }
    std::stable_sort(messages.begin(), messages.end(),
                     [](const Replay& a, const Replay& b) { return a.arrival < b.arrival; });
    for (const Replay& m : messages) add(m.camera, m.stream, m.stamp, m.token, now);  // their timeouts start now
}

bool SetSync::continues_held(const Key& key, int64_t stamp) {
    std::vector<Held>* held = find_held(key);
    return held != nullptr && !held->empty() && held->back().stamp < stamp && stamp <= newest_[key];
}

void SetSync::drop_held(const Key& key, const std::string& why) {
    for (size_t i = 0; i < held_.size(); ++i) {
        if (held_[i].first != key) continue;
        std::vector<Held> msgs = std::move(held_[i].second);
        held_.erase(held_.begin() + static_cast<long>(i));
        for (const Held& h : msgs) {
            released.push_back(h.token);
            dropped("stray_stamp", name(key.first, key.second) + " stamp " + str(h.stamp) + " ns jumped back (" + why +
                                       ")");
        }
        return;
    }
}

bool SetSync::is_complete(const Pending& p) const {
    for (size_t c = 0; c < cameras_.size(); ++c) {
        if (!p.has[c][0] || !p.has[c][1]) return false;
    }
    return true;
}

std::vector<int> SetSync::present(const Pending& p) const {
    std::vector<int> out;
    for (size_t c = 0; c < cameras_.size(); ++c) {
        if (p.has[c][0] && p.has[c][1]) out.push_back(static_cast<int>(c));
    }
    return out;
}

void SetSync::release(const Pending& p, const std::vector<int>& kept) {
    for (size_t c = 0; c < cameras_.size(); ++c) {
        if (std::find(kept.begin(), kept.end(), static_cast<int>(c)) != kept.end()) continue;
        for (int s = 0; s < SYNC_STREAMS; ++s) {
            if (p.has[c][s]) released.push_back(p.msg[c][s].token);
        }
    }
}

void SetSync::resolve(Pending& p, double now, const std::string& why) {
    std::vector<int> here = present(p);
    std::string missing;
    for (size_t c = 0; c < cameras_.size(); ++c) {
        if (std::find(here.begin(), here.end(), static_cast<int>(c)) != here.end()) continue;
        missing_by_camera[c] += 1;
        missing += (missing.empty() ? "" : ", ") + cameras_[c];
    }
    if (policy_ == POLICY_ZERO_FILL && static_cast<int>(here.size()) >= min_cameras_) {
        emit(p, now, false, here);
        return;
    }
    dropped(why, "set " + str(p.hi) + " ns without " + missing);
    release(p, {});
    mark_emitted(p);  // its stragglers are late now, whatever happened to it
}

void SetSync::emit(Pending& p, double now, bool complete, const std::vector<int>& here) {
    EmittedSet s;
    for (int c : here) {
        s.frames.emplace_back();
        s.frames.back().first = c;
        for (int k = 0; k < SYNC_STREAMS; ++k) s.frames.back().second[k] = p.msg[c][k];
    }
    for (size_t c = 0; c < cameras_.size(); ++c) {
        if (std::find(here.begin(), here.end(), static_cast<int>(c)) == here.end()) s.missing.push_back(static_cast<int>(c));
    }
    s.first_arrival = p.first_arrival;
    s.last_arrival = now;
    s.complete = complete;
    s.epoch = epoch;
    release(p, here);  // a camera with one stream of two is not in the set
    counts[complete ? "sets_complete" : "sets_partial"] += 1;
    mark_emitted(p);
    emitted.push_back(std::move(s));
}

void SetSync::dropped(const std::string& reason, const std::string& detail) {
    counts[reason] += 1;
    drops.push_back(SyncDrop{reason, detail});
}

void SetSync::mark_emitted(const Pending& p) {
    last_emitted_ = has_last_emitted_ ? std::max(last_emitted_, p.hi) : p.hi;
    has_last_emitted_ = true;
}

}  // namespace bevpool
