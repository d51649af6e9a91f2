// The C ABI of the hand-off core (libbevpool_handoff.so), what Python calls through ctypes
// (bevpool_ros/handoff/native/core.py declares the same prototypes and structs). Plain C: the
// library is independent of the Python version, and ctypes releases the GIL for every call.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BP_ABI_VERSION 1

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
enum bp_wake { BP_WAKE_SHUTDOWN, BP_WAKE_CLOSED, BP_WAKE_RAW, BP_WAKE_TEMPLATE };
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

int bp_abi_version(void);
const char* bp_source_digest(void);
uint32_t bp_sizeof(int what);  // 0: bp_values, 1: bp_item, 2: bp_arrival (the ctypes mirrors are checked against it)
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

#ifdef __cplusplus
}
#endif
