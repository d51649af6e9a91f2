// The camera-set synchroniser in the core: the twin of cameras/sync.py's CameraSetSynchronizer,
// the same policy to the byte of its drop texts (stamp matching within slop, the missing-camera
// policy, the camera timeout, duplicates / out of order / late, confirmed clock resets, bounded
// pending sets). Payloads are opaque 64-bit tokens: the set loop's announcements, or a Python
// caller's objects (native/sync.py keeps those). test_sync.py runs every case through both.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bevpool {

constexpr int SYNC_STREAMS = 2;                          // depth, feat
constexpr int64_t CLOCK_RESET_NS = 2000000000;          // sync.CLOCK_RESET_NS
constexpr size_t CONFIRM_SETS = 3;                      // sync.CONFIRM_SETS
enum SyncPolicy { POLICY_DROP = 0, POLICY_ZERO_FILL = 1 };

struct SyncMessage {
    int64_t stamp;
    uint64_t token;
};

struct EmittedSet {
    // per present camera (rig order), its depth and feat
    std::vector<std::pair<int, SyncMessage[SYNC_STREAMS]>> frames;
    std::vector<int> missing;
    double first_arrival;
    double last_arrival;
    bool complete;
    int64_t epoch;
};

struct SyncDrop {
    std::string reason;
    std::string detail;
};

class SetSync {
public:
    explicit SetSync(std::vector<std::string> cameras);
    // "" or the ValueError text of CameraSetSynchronizer.configure
    std::string configure(double slop, double camera_timeout, int policy, int min_cameras, int max_pending);
    // camera < 0 or stream outside [0, 2): unknown_stream. Emitted sets queue in `emitted`.
    void add(int camera, int stream, int64_t stamp, uint64_t token, double now);
    void poll(double now);
    void reset();

    size_t pending_sets() const { return pending_.size(); }
    size_t held_messages() const;
    // the earliest monotonic time a pending set times out (poll then), or a negative number
    double next_deadline() const;

    std::map<std::string, uint64_t> counts;
    std::vector<uint64_t> missing_by_camera;
    int64_t epoch = 0;
    std::deque<EmittedSet> emitted;
    std::deque<SyncDrop> drops;        // each drop's reason and text (on_drop)
    std::vector<uint64_t> released;    // tokens let go without a set (the caller frees their payloads)
    const std::vector<std::string>& cameras() const { return cameras_; }

private:
    struct Pending {
        double first_arrival, last_arrival;
        int64_t lo, hi;
        bool has[32][SYNC_STREAMS];  // per camera (at most 32 cameras), per stream
        SyncMessage msg[32][SYNC_STREAMS];
        bool fits(int64_t stamp, int64_t slop) const;
    };
    struct Held {
        int64_t stamp;
        uint64_t token;
        double arrival;
    };
    using Key = std::pair<int, int>;

    void jumped_back(int camera, int stream, int64_t stamp, uint64_t token, double now, int64_t newest);
    bool continues_held(const Key& key, int64_t stamp);
    void drop_held(const Key& key, const std::string& why);
    bool is_complete(const Pending& p) const;
    std::vector<int> present(const Pending& p) const;
    void resolve(Pending& p, double now, const std::string& why);
    void emit(Pending& p, double now, bool complete, const std::vector<int>& present);
    void dropped(const std::string& reason, const std::string& detail);
    void mark_emitted(const Pending& p);
    void release(const Pending& p, const std::vector<int>& kept);
    std::string name(int camera, int stream) const;

    std::vector<std::string> cameras_;
    std::vector<Pending> pending_;  // sorted by lo (stable)
    std::map<Key, int64_t> newest_;
    std::vector<std::pair<Key, std::vector<Held>>> held_;  // in insertion order, as Python's dict
    std::vector<Held>* find_held(const Key& key);
    bool has_last_emitted_ = false;
    int64_t last_emitted_ = 0;
    int64_t slop_ns_ = 0;
    double timeout_ = 0.1;
    int policy_ = POLICY_DROP;
    int min_cameras_ = 1;
    int max_pending_ = 4;
};

}  // namespace bevpool
