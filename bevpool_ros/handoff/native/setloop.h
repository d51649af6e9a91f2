// bevpool_node's set loop: from the producers' announcement datagrams to complete camera sets,
// without Python. One thread (a Python thread blocked in run(), GIL released) waits on every
// linked producer's signal socket (waiter.h); each datagram is read through the template Python
// learnt for its camera stream (learn(): the template's fixed bytes carry camera, stream, dtype,
// shape, nbytes, layout and boot id, all checked in Python on the stream's first announcement),
// then checked as handoff_input.py checks an announcement (stamp, scale, the slot still holding
// it: the seqlock), de-duplicated with its ROS copy (claim(): one "seen" record for both ways)
// and offered to the synchroniser (sync.h). What Python must see goes to an outbox it drains
// (next()): sets, drops with their reason and text, datagrams no template read, closed links,
// gaps, payloads let go.
//
// With a launcher (launch_with), a complete set of announcements whose slots the launcher has a
// graph for never reaches Python before its grid's datagram is sent: the loop's thread launches it
// (launcher.h) as the set completes, and the outbox gets what Python does after (the ROS copy, the
// counters): a BP_REC_LAUNCHED record, or the set's drop. The gate's words say when it may: the
// launcher's graphs are of the current calibration, and no set Python took is still queued or pooled
// (sets leave in the order they completed; the last published stamp is one word both sides check).
// Launched sets wake Python in batches (LAUNCHED_BATCH_S): its work for them (counters, statistics,
// housekeeping) comes after their grids went out to the consumers and to ROS.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bevpool_handoff.h"
#include "sync.h"
#include "templates.h"
#include "waiter.h"

namespace bevpool {

class Launcher;

enum SeenWay { SEEN_NONE = 0, SEEN_SIGNAL = 1, SEEN_DDS = 2 };
constexpr size_t SEEN_KEPT = 4096;  // announcements.SEEN_KEPT
constexpr double LAUNCHED_BATCH_S = 0.1;

class SetLoop {
public:
    explicit SetLoop(std::vector<std::string> cameras);
    bool ok() const { return waiter_.ok(); }

    std::string configure(double slop, double camera_timeout, int policy, int min_cameras, int max_pending);
    void checks(double max_future_s, int64_t clock_offset_ns);
    int link(int fd, uint64_t* id) { return waiter_.add(fd, id); }
    void unlink(uint64_t id) { waiter_.remove(id); }
    void watch(uint64_t ring_id, const int64_t* words, uint32_t size);
    void unwatch(uint64_t ring_id) { waiter_.unwatch(ring_id); }
    int32_t learn(const uint8_t* data, uint32_t length, const int32_t* offsets, uint64_t ring_id, int camera,
                  int stream, int dtype);  // dtype: 0 float32, 1 float16, 2 E4M3 codes
    void forget(int32_t template_id);
    bool claim(uint64_t ring_id, uint64_t sequence, int way);  // true: the first copy
    void sequence(uint64_t link, uint64_t ring_id, uint64_t sequence);  // a raw datagram's, read by Python
    int seen(uint64_t ring_id, uint64_t sequence);
    void offer(int camera, int stream, int64_t stamp, uint64_t token, double now);
    void poll(double now);
    void reset();
    int run(int timeout_ms);
    bool next(bp_record* record, bp_member* members, uint32_t capacity, uint8_t* data, uint32_t data_capacity);
    void wake();  // run() returns (2) now, once
    void shutdown();
    std::string counts();
    int64_t state(int what);
    void launch_with(Launcher* launcher, int64_t* gate);  // (null: no launches) returns once none runs
    // CLOCK_MONOTONIC ns the launch in progress began, 0: none (lock-free: the watchdog reads it while
    // a launch holds the loop)
    int64_t launching_since() const { return launching_since_.load(); }
    void inject_stall(int ms);  // fault injection: each launch first sleeps `ms` (-1: for good)

private:
    struct StreamOf {
        int camera, stream, dtype;
    };
    struct Announcement {
        uint64_t ring_id;
        int32_t template_id;
        bp_values values;
    };
    struct Record {
        bp_record head;
        std::vector<bp_member> members;
        std::vector<uint8_t> data;
        double queued_at = 0;  // BP_REC_LAUNCHED: when (Python takes those in batches)
    };

    void take(const bp_arrival& arrival, uint64_t ring_id, const uint8_t* data);  // (mutex_ held)
    bool claim_locked(uint64_t ring_id, uint64_t sequence, int way);
    void count(uint64_t link, uint64_t ring_id, uint64_t sequence);  // gaps (mutex_ held)
    void raw(const bp_arrival& arrival, const uint8_t* data);
    void drop(const std::string& reason, const std::string& detail, bool intake = true);
    void flush();  // the synchroniser's sets, drops and released payloads into the outbox
    bool launchable(const Record& set) const;  // (mutex_ held)
    bool launched(Record& set, int64_t stamp);  // (mutex_ held) false: a miss, the set goes to Python
    int wait_ms(int remaining_ms) const;
    double records_due() const;  // (mutex_ held) when Python should take the outbox: now, or a batch's end

    std::vector<std::string> cameras_;
    TemplateStore templates_;
    Waiter waiter_;
    std::mutex mutex_;
    SetSync sync_;
    std::map<int32_t, StreamOf> streams_;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> last_;  // link -> (ring, last sequence)
    std::map<std::pair<uint64_t, uint64_t>, int> seen_;
    std::deque<std::pair<uint64_t, uint64_t>> seen_order_;
    std::unordered_map<uint64_t, Announcement> announcements_;
    uint64_t next_announcement_ = 0;
    std::deque<Record> outbox_;
    std::map<std::string, uint64_t> intake_;  // signal_first, dds_first, signal_copies_ignored, lost
    double max_future_s_ = 1.0;
    int64_t clock_offset_ns_ = 0;
    bool shutdown_ = false;
    bool woken_ = false;
    Launcher* launcher_ = nullptr;
    int64_t* gate_ = nullptr;  // bp_gate words (Python's memory)
    std::atomic<int64_t> launching_since_{0};
    int stall_ms_ = 0;
    std::vector<uint8_t> announcement_;  // a launched set's BevHandoff
};

}  // namespace bevpool
