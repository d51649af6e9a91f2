// A camera set's device work and its grid's hand-off, in the core: what the cuda backend's
// device-input path (backends/gpu/device_inputs.py) and the node's output hand-off
// (node/handoff_output.py) do per set, for a set whose every tensor is a hand-off announcement
// and whose slot combination the backend already replayed as a CUDA graph:
//
//   the stream waits on each producer's IPC event      (cuStreamWaitEvent: on the device)
//   the set's graph is launched                        (gather, checks, pooling, epilogue, flag word)
//   the grid is copied into the output ring's next slot, its event recorded (ring.h: claimed first)
//   one host wait for the stream (an event of its own, blocking sync: the thread sleeps; a stream
//   synchronize spun a CPU core for the GPU work and, beside another process's, its time slice)
//   the flag word read                                 (NaN/Inf in the inputs or the grid: no announcement)
//   the seqlock's second look at every camera tensor   (overwritten while read: no announcement)
//   the grid's BevHandoff written from its template and sent to the ring's linked consumers, and
//   published to ROS (ros_copy.h) where Python handed over its publisher
//
// Python builds the graphs (the backend captures one per slot combination it meets twice) and
// hands each to the launcher with the rings' slots it reads (remember); a set it has no graph for
// is a miss, pooled by Python as before. One set at a time: the backend's buffers are shared, so
// Python's own pooling holds the launcher (hold / release) while it runs.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "bevpool_handoff.h"
#include "fanout.h"
#include "ring.h"
#include "ros_copy.h"
#include "templates.h"

namespace bevpool {

struct LauncherConfig {
    void* context;      // CUcontext of the backend
    void* stream;       // CUstream the backend's frames run on
    const volatile uint32_t* flags;  // the page-locked flag word the graphs copy their flags to
    uint64_t grid;      // device address of the grid the graphs write
    uint64_t grid_bytes;
    Ring* ring;         // the output ring (its claims, copy, event record, publish)
    const TemplateStore* templates;
    int32_t template_id;  // the grid's BevHandoff template
    const uint8_t* slot_handles;  // the output ring's event handles, 64 bytes per slot
    uint32_t ring_size;
    Fanout* fanout;     // its signal socket's consumers
};

class Launcher {
public:
    explicit Launcher(const LauncherConfig& config);
    ~Launcher();
    // a producer's ring: its control block and its slots' events by handle
    void ring(uint64_t ring_id, const int64_t* words, uint32_t size, std::vector<std::array<uint8_t, 64>> handles,
              std::vector<void*> events);
    void unring(uint64_t ring_id);
    void remember(std::vector<uint64_t> key, void* graph_exec);  // key: (ring id, slot) per member
    void forget(const std::vector<uint64_t>& key);
    void forget_all();
    void ros_copy(const RosCopy* copy);  // null: Python publishes the copies; kept until undone
    int launch(const bp_member* members, uint32_t count, int32_t sec, uint32_t nanosec, bp_launch* result,
               uint8_t* out, uint32_t capacity);
    void hold() { pool_.lock(); }
    void release() { pool_.unlock(); }

private:
    struct ProducerRing {
        const int64_t* words;
        uint32_t size;
        std::vector<std::array<uint8_t, 64>> handles;
        std::vector<void*> events;
    };
    void* event_of(const bp_member& m) const;  // (mutex_ held) the member's producer event, or nullptr

    LauncherConfig config_;
    void* done_ = nullptr;  // CUevent (blocking sync) recorded after a set's work, made at its first launch
    std::vector<std::array<uint8_t, 64>> slot_handles_;
    std::mutex pool_;   // one set at a time on the backend's buffers
    std::mutex mutex_;  // the maps
    std::map<uint64_t, ProducerRing> rings_;
    std::map<std::vector<uint64_t>, void*> graphs_;
    const RosCopy* ros_ = nullptr;  // (pool_ held to change)
};

}  // namespace bevpool
