// The C ABI (bevpool_handoff.h) over the core's classes: handles are the objects' addresses.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "bevpool_handoff.h"
#include "cuda_driver.h"
#include "error.h"
#include "fanout.h"
#include "launcher.h"
#include "ring.h"
#include "ros_copy.h"
#include "setloop.h"
#include "templates.h"
#include "waiter.h"

#ifndef BP_SOURCE_DIGEST
#define BP_SOURCE_DIGEST "unknown"
#endif

#define BP_EXPORT __attribute__((visibility("default")))

using namespace bevpool;

namespace {
TemplateStore* store(void* p) { return static_cast<TemplateStore*>(p); }
Fanout* fan(void* p) { return static_cast<Fanout*>(p); }
Ring* ring(void* p) { return static_cast<Ring*>(p); }
Waiter* waiter(void* p) { return static_cast<Waiter*>(p); }
SetLoop* loop(void* p) { return static_cast<SetLoop*>(p); }
Launcher* launcher(void* p) { return static_cast<Launcher*>(p); }
std::vector<std::array<uint8_t, 64>> handles_of(const uint8_t* data, uint32_t count) {
    std::vector<std::array<uint8_t, 64>> out(count);
    for (uint32_t i = 0; i < count; ++i) std::memcpy(out[i].data(), data + 64 * i, 64);
    return out;
}
thread_local std::string text;  // what bp_setloop_configure returns, until the thread's next call
}  // namespace

extern "C" {

BP_EXPORT int bp_abi_version(void) { return BP_ABI_VERSION; }
BP_EXPORT const char* bp_source_digest(void) { return BP_SOURCE_DIGEST; }
BP_EXPORT uint32_t bp_sizeof(int what) {
    switch (what) {
        case 0: return sizeof(bp_values);
        case 1: return sizeof(bp_item);
        case 2: return sizeof(bp_arrival);
        case 3: return sizeof(bp_record);
        case 4: return sizeof(bp_member);
        case 5: return sizeof(bp_launch);
        default: return 0;
    }
}
BP_EXPORT const char* bp_last_error(void) { return last_error(); }
BP_EXPORT int bp_driver_available(void) { return driver() != nullptr; }

BP_EXPORT void* bp_templates_new(void) { return new TemplateStore(); }
BP_EXPORT void bp_templates_free(void* s) { delete store(s); }
BP_EXPORT int32_t bp_templates_add(void* s, const uint8_t* data, uint32_t length, const int32_t* offsets,
                                   uint64_t ring_id) {
    return store(s)->add(data, length, offsets, ring_id);
}
BP_EXPORT int bp_templates_remove(void* s, int32_t id) { return store(s)->remove(id) ? BP_OK : BP_E_ARGUMENT; }
BP_EXPORT int bp_templates_encode(void* s, int32_t id, const bp_values* values, uint8_t* out, uint32_t capacity) {
    return store(s)->encode(id, *values, out, capacity);
}
BP_EXPORT int32_t bp_templates_read(void* s, const uint8_t* data, uint32_t length, bp_values* values) {
    uint64_t ring_id;
    return store(s)->read(data, length, values, &ring_id);
}

BP_EXPORT void* bp_fanout_new(void) { return new Fanout(); }
BP_EXPORT void bp_fanout_free(void* f) { delete fan(f); }
BP_EXPORT void bp_fanout_add(void* f, int fd) { fan(f)->add(fd); }
BP_EXPORT int bp_fanout_consumers(void* f) { return fan(f)->consumers(); }
BP_EXPORT void bp_fanout_send(void* f, const uint8_t* data, uint32_t length) { fan(f)->send(data, length); }
BP_EXPORT uint64_t bp_fanout_dropped(void* f) { return fan(f)->dropped(); }

BP_EXPORT void* bp_ring_new(int64_t* control_words, uint32_t ring_size, const uint64_t* slot_ptrs,
                            uint64_t slot_bytes, const uint64_t* events, const uint8_t* event_handles) {
    return new Ring(control_words, ring_size, slot_ptrs, slot_bytes, events, event_handles);
}
BP_EXPORT void bp_ring_free(void* r) { delete ring(r); }
BP_EXPORT void bp_ring_claim(void* r, uint32_t* slot, uint64_t* sequence) { ring(r)->claim(slot, sequence); }
BP_EXPORT int bp_ring_finish(void* r, uint32_t slot, uint64_t sequence, uint64_t stream) {
    return ring(r)->finish(slot, sequence, stream);
}
BP_EXPORT int bp_ring_write(void* r, uint64_t src, uint64_t nbytes, uint64_t stream, uint32_t* slot,
                            uint64_t* sequence) {
    return ring(r)->write(src, nbytes, stream, slot, sequence);
}
BP_EXPORT int bp_ring_publish_set(void* r, void* templates, void* fanout, int32_t sec, uint32_t nanosec,
                                  bp_item* items, uint32_t count, uint8_t* out, uint32_t capacity) {
    return ring(r)->publish_set(store(templates), fan(fanout), sec, nanosec, items, count, out, capacity);
}

BP_EXPORT void* bp_waiter_new(void* templates, int wait_events) {
    auto* w = new Waiter(store(templates), wait_events != 0);
    if (!w->ok()) {
        delete w;
        return nullptr;
    }
    return w;
}
BP_EXPORT void bp_waiter_free(void* w) { delete waiter(w); }
BP_EXPORT int bp_waiter_add(void* w, int fd, uint64_t* link) { return waiter(w)->add(fd, link); }
BP_EXPORT void bp_waiter_remove(void* w, uint64_t link) { waiter(w)->remove(link); }
BP_EXPORT int bp_waiter_watch(void* w, uint64_t ring_id, const int64_t* control_words, uint32_t ring_size,
                              uint32_t event_count, const uint8_t* event_handles, const uint64_t* events,
                              uint64_t context) {
    WatchedRing r{control_words, ring_size, {}, {}, reinterpret_cast<void*>(context)};
    r.handles.resize(event_count);
    r.events.resize(event_count);
    for (uint32_t i = 0; i < event_count; ++i) {
        std::memcpy(r.handles[i].data(), event_handles + 64 * i, 64);
        r.events[i] = reinterpret_cast<void*>(events[i]);
    }
    waiter(w)->watch(ring_id, std::move(r));
    return BP_OK;
}
BP_EXPORT void bp_waiter_unwatch(void* w, uint64_t ring_id) { waiter(w)->unwatch(ring_id); }
BP_EXPORT int bp_waiter_wait(void* w, bp_arrival* arrival, uint8_t* buffer, uint32_t capacity) {
    return waiter(w)->wait(arrival, buffer, capacity);
}
BP_EXPORT void bp_waiter_shutdown(void* w) { waiter(w)->shutdown(); }

BP_EXPORT void* bp_setloop_new(const char* cameras, uint32_t count) {
    std::vector<std::string> names;
    std::string all(cameras), name;
    for (char c : all) {
        if (c == '\n') {
            names.push_back(name);
            name.clear();
        } else {
            name += c;
        }
    }
    names.push_back(name);
    if (names.size() != count || count == 0 || count > 32) {
        set_error("the set loop takes 1 to 32 named cameras, got " + std::to_string(count));
        return nullptr;
    }
    auto* l = new SetLoop(std::move(names));
    if (!l->ok()) {
        delete l;
        return nullptr;
    }
    return l;
}
BP_EXPORT void bp_setloop_free(void* l) { delete loop(l); }
BP_EXPORT const char* bp_setloop_configure(void* l, double slop, double camera_timeout, int policy,
                                           int min_cameras, int max_pending) {
    text = loop(l)->configure(slop, camera_timeout, policy, min_cameras, max_pending);
    return text.c_str();
}
BP_EXPORT void bp_setloop_checks(void* l, double max_future_s, int64_t clock_offset_ns) {
    loop(l)->checks(max_future_s, clock_offset_ns);
}
BP_EXPORT int bp_setloop_link(void* l, int fd, uint64_t* link) { return loop(l)->link(fd, link); }
BP_EXPORT void bp_setloop_unlink(void* l, uint64_t link) { loop(l)->unlink(link); }
BP_EXPORT int bp_setloop_watch(void* l, uint64_t ring_id, const int64_t* control_words, uint32_t ring_size) {
    loop(l)->watch(ring_id, control_words, ring_size);
    return BP_OK;
}
BP_EXPORT void bp_setloop_unwatch(void* l, uint64_t ring_id) { loop(l)->unwatch(ring_id); }
BP_EXPORT int32_t bp_setloop_learn(void* l, const uint8_t* data, uint32_t length, const int32_t* offsets,
                                   uint64_t ring_id, int camera, int stream, int dtype) {
    return loop(l)->learn(data, length, offsets, ring_id, camera, stream, dtype);
}
BP_EXPORT void bp_setloop_forget(void* l, int32_t template_id) { loop(l)->forget(template_id); }
BP_EXPORT int bp_setloop_claim(void* l, uint64_t ring_id, uint64_t sequence, int way) {
    return loop(l)->claim(ring_id, sequence, way) ? 1 : 0;
}
BP_EXPORT int bp_setloop_seen(void* l, uint64_t ring_id, uint64_t sequence) { return loop(l)->seen(ring_id, sequence); }
BP_EXPORT void bp_setloop_sequence(void* l, uint64_t link, uint64_t ring_id, uint64_t sequence) {
    loop(l)->sequence(link, ring_id, sequence);
}
BP_EXPORT void bp_setloop_offer(void* l, int camera, int stream, int64_t stamp, uint64_t token, double now) {
    loop(l)->offer(camera, stream, stamp, token, now);
}
BP_EXPORT void bp_setloop_poll(void* l, double now) { loop(l)->poll(now); }
BP_EXPORT void bp_setloop_reset(void* l) { loop(l)->reset(); }
BP_EXPORT int bp_setloop_run(void* l, int timeout_ms) { return loop(l)->run(timeout_ms); }
BP_EXPORT int bp_setloop_next(void* l, bp_record* record, bp_member* members, uint32_t capacity, uint8_t* data,
                              uint32_t data_capacity) {
    return loop(l)->next(record, members, capacity, data, data_capacity) ? 1 : 0;
}
BP_EXPORT void bp_setloop_wake(void* l) { loop(l)->wake(); }
BP_EXPORT void bp_setloop_shutdown(void* l) { loop(l)->shutdown(); }
BP_EXPORT int bp_setloop_counts(void* l, char* out, uint32_t capacity) {
    std::string s = loop(l)->counts();
    if (s.size() + 1 > capacity) return -static_cast<int>(s.size() + 1);
    std::memcpy(out, s.c_str(), s.size() + 1);
    return static_cast<int>(s.size());
}
BP_EXPORT int64_t bp_setloop_state(void* l, int what) { return loop(l)->state(what); }
BP_EXPORT int64_t bp_setloop_launching_since(void* l) { return loop(l)->launching_since(); }
BP_EXPORT void bp_setloop_inject_stall(void* l, int ms) { loop(l)->inject_stall(ms); }
BP_EXPORT void bp_setloop_launch_with(void* l, void* launcher_or_null, int64_t* gate) {
    loop(l)->launch_with(launcher(launcher_or_null), gate);
}

BP_EXPORT void* bp_launcher_new(uint64_t context, uint64_t stream, uint64_t flags, uint64_t grid, uint64_t grid_bytes,
                                void* output_ring, void* templates, int32_t template_id, const uint8_t* slot_handles,
                                uint32_t ring_size, void* fanout) {
    LauncherConfig c{reinterpret_cast<void*>(context), reinterpret_cast<void*>(stream),
                     reinterpret_cast<const volatile uint32_t*>(flags), grid, grid_bytes, ring(output_ring),
                     store(templates), template_id, slot_handles, ring_size, fan(fanout)};
    return new Launcher(c);
}
BP_EXPORT void bp_launcher_free(void* l) { delete launcher(l); }
BP_EXPORT void bp_launcher_ring(void* l, uint64_t ring_id, const int64_t* control_words, uint32_t ring_size,
                                uint32_t event_count, const uint8_t* event_handles, const uint64_t* events) {
    std::vector<void*> evs(event_count);
    for (uint32_t i = 0; i < event_count; ++i) evs[i] = reinterpret_cast<void*>(events[i]);
    launcher(l)->ring(ring_id, control_words, ring_size, handles_of(event_handles, event_count), std::move(evs));
}
BP_EXPORT void bp_launcher_unring(void* l, uint64_t ring_id) { launcher(l)->unring(ring_id); }
BP_EXPORT void bp_launcher_remember(void* l, const uint64_t* key, uint32_t words, uint64_t graph_exec) {
    launcher(l)->remember(std::vector<uint64_t>(key, key + words), reinterpret_cast<void*>(graph_exec));
}
BP_EXPORT void bp_launcher_forget(void* l, const uint64_t* key, uint32_t words) {
    launcher(l)->forget(std::vector<uint64_t>(key, key + words));
}
BP_EXPORT void bp_launcher_forget_all(void* l) { launcher(l)->forget_all(); }
BP_EXPORT int bp_launcher_launch(void* l, const bp_member* members, uint32_t count, int32_t sec, uint32_t nanosec,
                                 bp_launch* result, uint8_t* out, uint32_t capacity) {
    return launcher(l)->launch(members, count, sec, nanosec, result, out, capacity);
}
BP_EXPORT void bp_launcher_ros_copy(void* l, void* copy) { launcher(l)->ros_copy(static_cast<RosCopy*>(copy)); }
BP_EXPORT void* bp_ros_copy_new(const char* librcl, uint64_t publisher) {
    auto* copy = new RosCopy(librcl != nullptr ? librcl : "", publisher);
    if (copy->ok()) return copy;
    delete copy;
    return nullptr;
}
BP_EXPORT void bp_ros_copy_free(void* copy) { delete static_cast<RosCopy*>(copy); }
BP_EXPORT int bp_ros_copy_publish(void* copy, const uint8_t* data, uint32_t length) {
    return static_cast<RosCopy*>(copy)->publish(data, length);
}
BP_EXPORT void bp_launcher_hold(void* l) { launcher(l)->hold(); }
BP_EXPORT void bp_launcher_release(void* l) { launcher(l)->release(); }

}  // extern "C"
