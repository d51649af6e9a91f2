// The C ABI of the hand-off core (libbevpool_handoff.so), what Python calls through ctypes
// (bevpool_ros/handoff/native/core.py declares the same prototypes and structs). Plain C: the
// library is independent of the Python version, and ctypes releases the GIL for every call.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BP_ABI_VERSION 4

// error codes (bp_last_error: the calling thread's message)
#define BP_OK 0
#define BP_E_ARGUMENT -1  // a value out of range (a tensor larger than a slot, a bad template)
#define BP_E_DRIVER -2    // no CUDA driver, or a driver call failed
#define BP_E_SYSTEM -3    // a system call failed (epoll, eventfd)

// the fields an announcement changes from one tensor to the next (cdr_template.VARYING), by role
enum bp_role { BP_SEC, BP_NANOSEC, BP_SLOT, BP_SEQUENCE, BP_EVENT_HANDLE, BP_SCALE, BP_ROLES };

typedef struct {
    int32_t sec;
    uint32_t nanosec;
    uint32_t slot;
    float scale;
    uint64_t sequence;
    uint8_t event_handle[64];
} bp_values;

// one tensor of a camera set (bp_ring_publish_set): in, then what the core did with it
typedef struct {
    uint64_t src;       // device address of the tensor
    uint64_t nbytes;
    uint64_t stream;    // CUstream the copy and the event record go on
    int32_t template_id;  // the announcement's template; -1: no datagram (the caller serialises it)
    float scale;
    uint64_t sequence;  // out
    uint32_t slot;      // out
    uint32_t offset;    // out: the announcement's bytes in the output buffer
    uint32_t length;    // out: 0 without a template
    uint32_t pad;
} bp_item;

// what bp_waiter_wait returns (its kind), and how a datagram read through a template was checked
enum bp_wake { BP_WAKE_SHUTDOWN, BP_WAKE_CLOSED, BP_WAKE_RAW, BP_WAKE_TEMPLATE, BP_WAKE_TIMEOUT };
enum bp_check { BP_UNCHECKED, BP_OVERWRITTEN, BP_READY };

typedef struct {
    uint64_t link;
    int64_t arrival_ns;   // CLOCK_MONOTONIC when the datagram was read (Python's perf_counter clock)
    uint32_t length;      // the datagram's bytes in the caller's buffer
    int32_t template_id;  // BP_WAKE_TEMPLATE: the template it matched
    int32_t check;        // bp_check
    uint32_t pad;
    bp_values values;
} bp_arrival;

// what the set loop hands to Python (bp_setloop_next), in the order it happened
enum bp_record_kind {
    BP_REC_NONE,
    BP_REC_SET,       // a set the synchroniser emitted: `count` bp_member follow
    BP_REC_DROP,      // a drop: data = reason NUL detail; token 1: the intake's checks, 0: the synchroniser's
    BP_REC_RAW,       // a datagram no registered template read: data = its bytes (Python reads it)
    BP_REC_CLOSED,    // a link closed (its producer went away)
    BP_REC_GAP,       // a link's ring skipped `lost` sequences (datagrams the producer could not queue)
    BP_REC_RELEASED,  // a caller's payload the synchroniser let go without a set (`token`)
    BP_REC_LAUNCHED,  // a set the launcher pooled and announced (bp_setloop_launch_with): data = its
                      // bp_launch, then the announcement's bytes; `stamp`, `epoch`, the arrivals
};

typedef struct {
    int32_t kind;
    uint32_t count;     // BP_REC_SET: members; BP_REC_DROP / BP_REC_RAW: bytes of data
    uint64_t link;      // BP_REC_RAW / BP_REC_CLOSED / BP_REC_GAP
    uint64_t token;     // BP_REC_RELEASED
    uint64_t lost;      // BP_REC_GAP
    uint64_t ring_id;   // BP_REC_GAP
    int64_t epoch;      // BP_REC_SET
    double first_arrival;  // BP_REC_SET (perf_counter seconds); BP_REC_RAW: its arrival
    double last_arrival;
    uint32_t complete;
    uint32_t missing;   // bit per camera (rig order)
    int64_t stamp;      // BP_REC_LAUNCHED: the set's (its members' newest)
} bp_record;

typedef struct {
    int32_t camera;
    int32_t stream;     // 0 depth, 1 feat
    int64_t stamp;
    uint64_t token;     // the caller's (bp_setloop_offer), or BP_TOKEN_ANNOUNCEMENT | n
    uint64_t ring_id;   // an announcement's: its ring, template and values
    int32_t template_id;
    uint32_t pad;
    bp_values values;
} bp_member;

#define BP_TOKEN_ANNOUNCEMENT (1ull << 63)

// what bp_launcher_launch did with a set
enum bp_launch_result {
    BP_LAUNCH_DONE,              // pooled, its grid in the output ring and announced (`length` bytes)
    BP_LAUNCH_MISS,              // no graph for its slots (or a ring it does not know): nothing enqueued
    BP_LAUNCH_NONFINITE_INPUT,   // the flag word: NaN/Inf (or beyond FP16) in the inputs; not announced
    BP_LAUNCH_NONFINITE_OUTPUT,  // NaN/Inf in the grid; not announced
    BP_LAUNCH_OVERWRITTEN,       // tensor `member` was overwritten while read; not announced
};

typedef struct {
    int32_t result;       // bp_launch_result
    uint32_t flags;       // the flag word
    uint32_t slot;        // the output ring's slot and sequence the grid went to
    uint32_t length;      // BP_LAUNCH_DONE: the announcement's bytes in the caller's buffer
    uint64_t sequence;
    int32_t member;       // BP_LAUNCH_OVERWRITTEN: which
    uint32_t ros_copy;    // BP_LAUNCH_DONE: 1 the announcement also went to ROS (bp_launcher_ros_copy)
    int64_t launched_ns;  // CLOCK_MONOTONIC: the first driver call, the host wait's end
    int64_t done_ns;
} bp_launch;

int bp_abi_version(void);
const char* bp_source_digest(void);
uint32_t bp_sizeof(int what);  // 0: bp_values, 1: bp_item, 2: bp_arrival, 3: bp_record, 4: bp_member,
                               // 5: bp_launch
                               // (the ctypes mirrors are checked against it)
const char* bp_last_error(void);
int bp_driver_available(void);  // 1: libcuda.so.1 loaded (else bp_last_error says why)

// templates (cdr_template.CdrTemplate's bytes and offsets; -1: the message has no such field)
void* bp_templates_new(void);
void bp_templates_free(void* store);
int32_t bp_templates_add(void* store, const uint8_t* data, uint32_t length, const int32_t* offsets,
                         uint64_t ring_id);
int bp_templates_remove(void* store, int32_t id);
int bp_templates_encode(void* store, int32_t id, const bp_values* values, uint8_t* out, uint32_t capacity);
int32_t bp_templates_read(void* store, const uint8_t* data, uint32_t length, bp_values* values);

// producer: the fan-out of datagrams to the consumers of a ring's signal socket
void* bp_fanout_new(void);
void bp_fanout_free(void* fanout);       // closes every consumer's socket
void bp_fanout_add(void* fanout, int fd);  // takes the descriptor (non-blocking SOCK_SEQPACKET)
int bp_fanout_consumers(void* fanout);
void bp_fanout_send(void* fanout, const uint8_t* data, uint32_t length);
uint64_t bp_fanout_dropped(void* fanout);

// producer: the ring (control block words, slot addresses, their IPC events and event handles)
void* bp_ring_new(int64_t* control_words, uint32_t ring_size, const uint64_t* slot_ptrs, uint64_t slot_bytes,
                  const uint64_t* events, const uint8_t* event_handles);
void bp_ring_free(void* ring);
void bp_ring_claim(void* ring, uint32_t* slot, uint64_t* sequence);
int bp_ring_finish(void* ring, uint32_t slot, uint64_t sequence, uint64_t stream);
int bp_ring_write(void* ring, uint64_t src, uint64_t nbytes, uint64_t stream, uint32_t* slot, uint64_t* sequence);
int bp_ring_publish_set(void* ring, void* templates, void* fanout, int32_t sec, uint32_t nanosec, bp_item* items,
                        uint32_t count, uint8_t* out, uint32_t capacity);

// consumer: one thread blocked on every signal socket of a consumer (bp_waiter_wait)
void* bp_waiter_new(void* templates, int wait_events);
void bp_waiter_free(void* waiter);
int bp_waiter_add(void* waiter, int fd, uint64_t* link);  // takes the descriptor
void bp_waiter_remove(void* waiter, uint64_t link);
int bp_waiter_watch(void* waiter, uint64_t ring_id, const int64_t* control_words, uint32_t ring_size,
                    uint32_t event_count, const uint8_t* event_handles, const uint64_t* events, uint64_t context);
void bp_waiter_unwatch(void* waiter, uint64_t ring_id);
int bp_waiter_wait(void* waiter, bp_arrival* arrival, uint8_t* buffer, uint32_t capacity);
void bp_waiter_shutdown(void* waiter);

// the node's set loop: intake of announcements from linked signal sockets, their checks,
// de-duplication with the ROS copies, and the camera-set synchroniser (sync.h)
void* bp_setloop_new(const char* cameras, uint32_t count);  // names separated by '\n'
void bp_setloop_free(void* loop);
const char* bp_setloop_configure(void* loop, double slop, double camera_timeout, int policy, int min_cameras,
                                 int max_pending);  // "" or why not
void bp_setloop_checks(void* loop, double max_future_s, int64_t clock_offset_ns);
int bp_setloop_link(void* loop, int fd, uint64_t* link);  // takes the descriptor
void bp_setloop_unlink(void* loop, uint64_t link);
int bp_setloop_watch(void* loop, uint64_t ring_id, const int64_t* control_words, uint32_t ring_size);
void bp_setloop_unwatch(void* loop, uint64_t ring_id);
int32_t bp_setloop_learn(void* loop, const uint8_t* data, uint32_t length, const int32_t* offsets, uint64_t ring_id,
                         int camera, int stream, int dtype);  // a camera stream's template (dtype: 0 float32,
                         // 1 float16, 2 E4M3 codes): its id, or -1
void bp_setloop_forget(void* loop, int32_t template_id);
int bp_setloop_claim(void* loop, uint64_t ring_id, uint64_t sequence, int way);  // 1: first copy; 0: seen
int bp_setloop_seen(void* loop, uint64_t ring_id, uint64_t sequence);  // 0 unseen, 1 signal, 2 dds
// a BP_REC_RAW datagram's ring and sequence, as Python read them: its link's gaps are counted on
void bp_setloop_sequence(void* loop, uint64_t link, uint64_t ring_id, uint64_t sequence);
void bp_setloop_offer(void* loop, int camera, int stream, int64_t stamp, uint64_t token, double now);
void bp_setloop_poll(void* loop, double now);
void bp_setloop_reset(void* loop);
int bp_setloop_run(void* loop, int timeout_ms);  // 1: records wait (bp_setloop_next); 2: timed out or
                                                // woken; 0: shut down
void bp_setloop_wake(void* loop);                // a thread in bp_setloop_run returns (2)
int bp_setloop_next(void* loop, bp_record* record, bp_member* members, uint32_t capacity, uint8_t* data,
                    uint32_t data_capacity);  // 1: a record; 0: none
void bp_setloop_shutdown(void* loop);
// counters as text lines "<name> <value>" (the synchroniser's counts, missing_<camera>, the intake's)
int bp_setloop_counts(void* loop, char* out, uint32_t capacity);
int64_t bp_setloop_state(void* loop, int what);  // 0 pending sets, 1 held messages, 2 epoch
// The loop's complete sets of announcements go to `launcher` (null: none do) while the gate allows it:
// words written by Python (armed: the calibration version the launcher's graphs were made for, -1 off;
// version: the current one; busy: sets Python queued or pools) and by both (the last published set).
enum bp_gate { BP_GATE_ARMED, BP_GATE_VERSION, BP_GATE_BUSY, BP_GATE_EPOCH, BP_GATE_STAMP, BP_GATE_WORDS };
void bp_setloop_launch_with(void* loop, void* launcher, int64_t* gate);
// CLOCK_MONOTONIC ns the loop's launch in progress began, 0: none (lock-free, for the watchdog)
int64_t bp_setloop_launching_since(void* loop);
void bp_setloop_inject_stall(void* loop, int ms);  // fault injection: each launch first sleeps (-1: for good)

// a set's device work and its grid's hand-off (launcher.h); `flags`: the page-locked flag word
void* bp_launcher_new(uint64_t context, uint64_t stream, uint64_t flags, uint64_t grid, uint64_t grid_bytes, void* ring,
                      void* templates, int32_t template_id, const uint8_t* slot_handles, uint32_t ring_size,
                      void* fanout);
void bp_launcher_free(void* launcher);
void bp_launcher_ring(void* launcher, uint64_t ring_id, const int64_t* control_words, uint32_t ring_size,
                      uint32_t event_count, const uint8_t* event_handles, const uint64_t* events);
void bp_launcher_unring(void* launcher, uint64_t ring_id);
void bp_launcher_remember(void* launcher, const uint64_t* key, uint32_t words, uint64_t graph_exec);
void bp_launcher_forget(void* launcher, const uint64_t* key, uint32_t words);
void bp_launcher_forget_all(void* launcher);
int bp_launcher_launch(void* launcher, const bp_member* members, uint32_t count, int32_t sec, uint32_t nanosec,
                       bp_launch* result, uint8_t* out, uint32_t capacity);
// the grid's announcement also published to ROS by the launcher (null: the caller publishes the copies)
void bp_launcher_ros_copy(void* launcher, void* ros_copy);

// a ROS publisher's serialised publish through rcl (ros_copy.h; `librcl`: the library the process
// loaded; `publisher`: an rcl_publisher_t*, alive as long as this): null when rcl cannot be reached
// (bp_last_error says why)
void* bp_ros_copy_new(const char* librcl, uint64_t publisher);
void bp_ros_copy_free(void* ros_copy);
int bp_ros_copy_publish(void* ros_copy, const uint8_t* data, uint32_t length);  // rcl_ret_t: 0 published
void bp_launcher_hold(void* launcher);     // Python pools a set on the same buffers meanwhile
void bp_launcher_release(void* launcher);

#ifdef __cplusplus
}
#endif
