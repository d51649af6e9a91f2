#include "setloop.h"

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "error.h"
#include "launcher.h"
#include "pyfmt.h"

namespace bevpool {
namespace {

const char* const STREAM_NAMES[SYNC_STREAMS] = {"depth", "feat"};
const char* const DTYPE_NAMES[3] = {"float32", "float16", "float8_e4m3"};  // handoff_input.DTYPES
constexpr int E4M3 = 2;
constexpr uint32_t ANNOUNCEMENT_CAPACITY = 65536;  // a BevHandoff is a few hundred bytes

int64_t gate_word(const int64_t* gate, int word) { return __atomic_load_n(&gate[word], __ATOMIC_ACQUIRE); }

int64_t realtime_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

double monotonic_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool power_of_two(float scale) {
    if (!(scale > 0) || !std::isfinite(scale)) return false;
    int exponent;
    return std::frexp(static_cast<double>(scale), &exponent) == 0.5;
}

}  // namespace

SetLoop::SetLoop(std::vector<std::string> cameras)
    : cameras_(cameras), waiter_(&templates_, false), sync_(std::move(cameras)) {}

std::string SetLoop::configure(double slop, double camera_timeout, int policy, int min_cameras, int max_pending) {
    std::string why;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        why = sync_.configure(slop, camera_timeout, policy, min_cameras, max_pending);
    }
    waiter_.interrupt();  // a new timeout: the waiting thread looks again
    return why;
}

void SetLoop::checks(double max_future_s, int64_t clock_offset_ns) {
    std::lock_guard<std::mutex> lock(mutex_);
    max_future_s_ = max_future_s;
    clock_offset_ns_ = clock_offset_ns;
}

void SetLoop::watch(uint64_t ring_id, const int64_t* words, uint32_t size) {
    waiter_.watch(ring_id, WatchedRing{words, size, {}, {}, nullptr});
}

int32_t SetLoop::learn(const uint8_t* data, uint32_t length, const int32_t* offsets, uint64_t ring_id, int camera,
                       int stream, int dtype) {
    if (camera < 0 || camera >= static_cast<int>(cameras_.size()) || stream < 0 || stream >= SYNC_STREAMS ||
        dtype < 0 || dtype > E4M3) {
        set_error("no camera stream " + std::to_string(camera) + "/" + std::to_string(stream));
        return -1;
    }
    // registered before the template can match: a datagram it reads always finds its stream
    std::lock_guard<std::mutex> lock(mutex_);
    int32_t id = templates_.add(data, length, offsets, ring_id);
    if (id >= 0) streams_[id] = StreamOf{camera, stream, dtype};
    return id;
}

void SetLoop::forget(int32_t template_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    templates_.remove(template_id);
    streams_.erase(template_id);
}

bool SetLoop::claim(uint64_t ring_id, uint64_t sequence, int way) {
    std::lock_guard<std::mutex> lock(mutex_);
    return claim_locked(ring_id, sequence, way);
}

bool SetLoop::claim_locked(uint64_t ring_id, uint64_t sequence, int way) {
    auto key = std::make_pair(ring_id, sequence);
    if (seen_.count(key)) return false;
    seen_[key] = way;
    seen_order_.push_back(key);
    intake_[way == SEEN_SIGNAL ? "signal_first" : "dds_first"] += 1;
    while (seen_order_.size() > SEEN_KEPT) {
        seen_.erase(seen_order_.front());
        seen_order_.pop_front();
    }
    return true;
}

int SetLoop::seen(uint64_t ring_id, uint64_t sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = seen_.find(std::make_pair(ring_id, sequence));
    return it == seen_.end() ? SEEN_NONE : it->second;
}

void SetLoop::offer(int camera, int stream, int64_t stamp, uint64_t token, double now) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        sync_.add(camera, stream, stamp, token & ~BP_TOKEN_ANNOUNCEMENT, now);
        flush();
    }
    waiter_.interrupt();  // perhaps a new pending set: its timeout
}

void SetLoop::poll(double now) {
    std::lock_guard<std::mutex> lock(mutex_);
    sync_.poll(now);
    flush();
}

void SetLoop::reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    sync_.reset();
    flush();
}

void SetLoop::wake() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        woken_ = true;
    }
    waiter_.interrupt();
}

void SetLoop::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        shutdown_ = true;
    }
    waiter_.shutdown();
}

int SetLoop::wait_ms(int remaining_ms) const {
    double deadline = sync_.next_deadline();
    if (deadline < 0) return remaining_ms;
    double ms = std::ceil((deadline - monotonic_s()) * 1e3);
    int until = ms < 0 ? 0 : (ms > 1e6 ? 1000000 : static_cast<int>(ms));
    return remaining_ms < 0 ? until : std::min(until, remaining_ms);
}

double SetLoop::records_due() const {
    for (const Record& r : outbox_) {
        if (r.head.kind != BP_REC_LAUNCHED) return 0;  // Python has work before a set: now
    }
    return outbox_.front().queued_at + LAUNCHED_BATCH_S;
}

int SetLoop::run(int timeout_ms) {
    bp_arrival arrival{};
    std::vector<uint8_t> buffer(65536);
    double end = monotonic_s() + timeout_ms * 1e-3;
    for (;;) {
        int wait;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (shutdown_) return 0;
            int batch = -1;  // ms until the launched sets waiting are due
            if (!outbox_.empty()) {
                double due = records_due() - monotonic_s();
                if (due <= 0) return 1;
                batch = static_cast<int>(std::ceil(due * 1e3));
            }
            if (woken_) {
                woken_ = false;
                return 2;
            }
            int remaining = timeout_ms < 0 ? -1 : static_cast<int>(std::ceil((end - monotonic_s()) * 1e3));
            if (timeout_ms >= 0 && remaining <= 0) return 2;
            wait = wait_ms(remaining < 0 && timeout_ms >= 0 ? 0 : remaining);
            if (batch >= 0 && (wait < 0 || batch < wait)) wait = batch;
        }
        uint64_t ring_id = 0;
        int kind = waiter_.wait(&arrival, buffer.data(), static_cast<uint32_t>(buffer.size()), wait, &ring_id);
        std::lock_guard<std::mutex> lock(mutex_);
        switch (kind) {
            case BP_WAKE_SHUTDOWN:
                shutdown_ = true;
                return 0;
            case BP_WAKE_CLOSED: {
                last_.erase(arrival.link);
                Record r{};
                r.head.kind = BP_REC_CLOSED;
                r.head.link = arrival.link;
                outbox_.push_back(std::move(r));
                break;
            }
            case BP_WAKE_RAW:
                raw(arrival, buffer.data());
                break;
            case BP_WAKE_TEMPLATE:
                take(arrival, ring_id, buffer.data());
                break;
            case BP_WAKE_TIMEOUT:
                sync_.poll(monotonic_s());
                flush();
                break;
            default:
                return kind;  // an error (bp_last_error)
        }
    }
}

void SetLoop::raw(const bp_arrival& arrival, const uint8_t* data) {
    Record r{};
    r.head.kind = BP_REC_RAW;
    r.head.link = arrival.link;
    r.head.first_arrival = static_cast<double>(arrival.arrival_ns) * 1e-9;
    r.head.count = arrival.length;
    r.data.assign(data, data + arrival.length);
    outbox_.push_back(std::move(r));
}

void SetLoop::take(const bp_arrival& arrival, uint64_t ring_id, const uint8_t* data) {
    auto it = streams_.find(arrival.template_id);
    // not a camera stream's template, or a ring not watched: Python reads it, as the twin does
    if (it == streams_.end() || arrival.check == BP_UNCHECKED) {
        raw(arrival, data);
        return;
    }
    const StreamOf& of = it->second;
    const bp_values& v = arrival.values;
    count(arrival.link, ring_id, v.sequence);
    if (!claim_locked(ring_id, v.sequence, SEEN_SIGNAL)) {
        intake_["signal_copies_ignored"] += 1;  // its ROS copy came first
        return;
    }
    std::string where = cameras_[of.camera] + "/" + STREAM_NAMES[of.stream] + " (hand-off): ";
    int64_t stamp = static_cast<int64_t>(v.sec) * 1000000000 + v.nanosec;
    if (stamp == 0) {
        drop("stamp_zero", where + "stamp 0 (the producer never set it)");
        return;
    }
    double ahead = static_cast<double>(stamp - (realtime_ns() + clock_offset_ns_)) / 1e9;
    if (ahead > max_future_s_) {
        char text[160];
        std::snprintf(text, sizeof(text), "stamp %.3f s ahead of this node's clock (sync.max_future_s %s)", ahead,
                      py_repr(max_future_s_).c_str());
        drop("stamp_in_future", where + text);
        return;
    }
    if (!power_of_two(v.scale)) {
        drop("bad_handoff", where + "scale " + py_repr(v.scale) + " is not a positive power of two");
        return;
    }
    if (v.scale != 1.0f && of.dtype != E4M3) {
        drop("bad_handoff", where + "scale " + py_repr(v.scale) + " on a " + DTYPE_NAMES[of.dtype] +
                                " tensor (E4M3 codes only)");
        return;
    }
    if (arrival.check == BP_OVERWRITTEN) {
        drop("handoff_overwritten", where + "grid " + std::to_string(v.sequence) + " in slot " +
                                        std::to_string(v.slot) + " was already overwritten");
        return;
    }
    uint64_t token = BP_TOKEN_ANNOUNCEMENT | next_announcement_++;
    announcements_[token] = Announcement{ring_id, arrival.template_id, v};
    sync_.add(of.camera, of.stream, stamp, token, static_cast<double>(arrival.arrival_ns) * 1e-9);
    flush();
}

void SetLoop::sequence(uint64_t link, uint64_t ring_id, uint64_t sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    count(link, ring_id, sequence);
}

void SetLoop::count(uint64_t link, uint64_t ring_id, uint64_t sequence) {
    // a gap in the link's sequence: datagrams the producer could not queue for us (AnnouncementLinks)
    auto last = last_.find(link);
    if (last != last_.end() && last->second.first == ring_id && sequence > last->second.second + 1) {
        Record r{};
        r.head.kind = BP_REC_GAP;
        r.head.link = link;
        r.head.ring_id = ring_id;
        r.head.lost = sequence - last->second.second - 1;
        intake_["lost"] += r.head.lost;
        outbox_.push_back(std::move(r));
    }
    last_[link] = std::make_pair(ring_id, sequence);
}

void SetLoop::drop(const std::string& reason, const std::string& detail, bool intake) {
    Record r{};
    r.head.kind = BP_REC_DROP;
    r.head.token = intake ? 1 : 0;
    r.data.assign(reason.begin(), reason.end());
    r.data.push_back(0);
    r.data.insert(r.data.end(), detail.begin(), detail.end());
    r.head.count = static_cast<uint32_t>(r.data.size());
    outbox_.push_back(std::move(r));
}

void SetLoop::flush() {
    for (const SyncDrop& d : sync_.drops) drop(d.reason, d.detail, false);
    sync_.drops.clear();
    for (uint64_t token : sync_.released) {
        if (token & BP_TOKEN_ANNOUNCEMENT) {
            announcements_.erase(token);
            continue;
        }
        Record r{};
        r.head.kind = BP_REC_RELEASED;
        r.head.token = token;
        outbox_.push_back(std::move(r));
    }
    sync_.released.clear();
    for (EmittedSet& s : sync_.emitted) {
        Record r{};
        r.head.kind = BP_REC_SET;
        r.head.epoch = s.epoch;
        r.head.first_arrival = s.first_arrival;
        r.head.last_arrival = s.last_arrival;
        r.head.complete = s.complete;
        for (int c : s.missing) r.head.missing |= 1u << c;
        for (const auto& [camera, msgs] : s.frames) {
            for (int k = 0; k < SYNC_STREAMS; ++k) {
                bp_member m{};
                m.camera = camera;
                m.stream = k;
                m.stamp = msgs[k].stamp;
                m.token = msgs[k].token;
                m.template_id = -1;
                auto a = announcements_.find(m.token);
                if (m.token & BP_TOKEN_ANNOUNCEMENT && a != announcements_.end()) {
                    m.ring_id = a->second.ring_id;
                    m.template_id = a->second.template_id;
                    m.values = a->second.values;
                    announcements_.erase(a);
                }
                r.members.push_back(m);
            }
        }
        r.head.count = static_cast<uint32_t>(r.members.size());
        int64_t stamp = 0;
        for (const bp_member& m : r.members) stamp = std::max(stamp, m.stamp);
        if (launchable(r) && launched(r, stamp)) continue;
        outbox_.push_back(std::move(r));
    }
    sync_.emitted.clear();
}

void SetLoop::inject_stall(int ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    stall_ms_ = ms;
}

void SetLoop::launch_with(Launcher* launcher, int64_t* gate) {
    std::lock_guard<std::mutex> lock(mutex_);  // launches run under it: none runs once it is taken
    launcher_ = launcher;
    gate_ = gate;
}

bool SetLoop::launchable(const Record& set) const {
    if (launcher_ == nullptr || !set.head.complete || set.members.size() != SYNC_STREAMS * cameras_.size()) return false;
    int64_t armed = gate_word(gate_, BP_GATE_ARMED);
    if (armed < 0 || armed != gate_word(gate_, BP_GATE_VERSION) || gate_word(gate_, BP_GATE_BUSY) != 0) return false;
    for (const bp_member& m : set.members) {
        if (!(m.token & BP_TOKEN_ANNOUNCEMENT) || m.template_id < 0) return false;  // a payload Python holds
    }
    for (const Record& r : outbox_) {
        if (r.head.kind == BP_REC_SET) return false;  // an earlier set waits for Python: this one follows it
    }
    return true;
}

bool SetLoop::launched(Record& set, int64_t stamp) {
    int64_t epoch = gate_word(gate_, BP_GATE_EPOCH);
    if (epoch == set.head.epoch && stamp <= gate_word(gate_, BP_GATE_STAMP)) {  // publishing.py's rule
        drop("stamp_regression", "set " + std::to_string(stamp) + " ns is not newer than the last published " +
                                     std::to_string(gate_word(gate_, BP_GATE_STAMP)) + " ns");
        return true;
    }
    bp_launch result{};
    announcement_.resize(ANNOUNCEMENT_CAPACITY);
    int32_t sec = static_cast<int32_t>(stamp / 1000000000);
    uint32_t nanosec = static_cast<uint32_t>(stamp % 1000000000);
    launching_since_.store(static_cast<int64_t>(monotonic_s() * 1e9));
    while (stall_ms_ < 0) std::this_thread::sleep_for(std::chrono::seconds(1));  // injected: for good
    if (stall_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms_));
    int rc = launcher_->launch(set.members.data(), static_cast<uint32_t>(set.members.size()), sec, nanosec, &result,
                               announcement_.data(), ANNOUNCEMENT_CAPACITY);
    launching_since_.store(0);
    if (rc != BP_OK) {  // the set is lost with its device work; Python disarms (its launch_failed)
        __atomic_store_n(&gate_[BP_GATE_ARMED], -1, __ATOMIC_RELEASE);
        intake_["launch_failed"] += 1;
        drop("internal_error", std::string("hand-off core launch failed: ") + last_error() +
                                   "; set not published, the next sets are pooled by Python");
        return true;
    }
    switch (result.result) {
        case BP_LAUNCH_MISS:
            intake_["launch_misses"] += 1;
            return false;
        case BP_LAUNCH_NONFINITE_INPUT:
            drop("non_finite", "inputs hold NaN/Inf (or values beyond FP16's range)");
            return true;
        case BP_LAUNCH_NONFINITE_OUTPUT:
            drop("non_finite_output", "the grid holds NaN/Inf (overflow of the published dtype?); set not published");
            return true;
        case BP_LAUNCH_OVERWRITTEN: {
            const bp_member& m = set.members[static_cast<size_t>(result.member)];
            drop("handoff_overwritten", "hand-off tensors " + cameras_[m.camera] + "/" + STREAM_NAMES[m.stream] +
                                            " were overwritten by their producer while it was read; set not published");
            return true;
        }
        default:
            break;
    }
    __atomic_store_n(&gate_[BP_GATE_EPOCH], set.head.epoch, __ATOMIC_RELEASE);
    __atomic_store_n(&gate_[BP_GATE_STAMP], stamp, __ATOMIC_RELEASE);
    intake_["launched"] += 1;
    Record r{};
    r.head = set.head;
    r.head.kind = BP_REC_LAUNCHED;
    r.queued_at = monotonic_s();
    r.head.stamp = stamp;
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&result);
    r.data.assign(bytes, bytes + sizeof(result));
    r.data.insert(r.data.end(), announcement_.begin(), announcement_.begin() + result.length);
    r.head.count = static_cast<uint32_t>(r.data.size());
    outbox_.push_back(std::move(r));
    return true;
}

bool SetLoop::next(bp_record* record, bp_member* members, uint32_t capacity, uint8_t* data, uint32_t data_capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (outbox_.empty()) return false;
    Record& r = outbox_.front();
    if (r.members.size() > capacity || r.data.size() > data_capacity) {
        set_error("a set-loop record larger than the caller's buffers");
        record->kind = BP_REC_NONE;
        outbox_.pop_front();
        return true;
    }
    *record = r.head;
    if (!r.members.empty()) std::memcpy(members, r.members.data(), r.members.size() * sizeof(bp_member));
    if (!r.data.empty()) std::memcpy(data, r.data.data(), r.data.size());
    outbox_.pop_front();
    return true;
}

std::string SetLoop::counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (const auto& [name, n] : sync_.counts) out += name + " " + std::to_string(n) + "\n";
    for (size_t c = 0; c < cameras_.size(); ++c) {
        if (sync_.missing_by_camera[c]) out += "missing_" + cameras_[c] + " " + std::to_string(sync_.missing_by_camera[c]) + "\n";
    }
    for (const auto& [name, n] : intake_) out += "intake_" + name + " " + std::to_string(n) + "\n";
    return out;
}

int64_t SetLoop::state(int what) {
    std::lock_guard<std::mutex> lock(mutex_);
    switch (what) {
        case 0: return static_cast<int64_t>(sync_.pending_sets());
        case 1: return static_cast<int64_t>(sync_.held_messages());
        default: return sync_.epoch;
    }
}

}  // namespace bevpool
