#include "launcher.h"

#include <sched.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_driver.h"
#include "error.h"

namespace bevpool {
namespace {

constexpr uint32_t FLAG_INPUT = 1;   // backends/gpu/frame.py FLAG_INPUT
constexpr uint32_t FLAG_OUTPUT = 2;  // FLAG_OUTPUT

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool failed(CUresult r, const char* call) {
    if (r == CUDA_SUCCESS) return false;
    driver_failed(r, call);
    return true;
}

// How the launch waits (BEVPOOL_LAUNCH_WAIT, an experiment's switch: "prewait", "spin", "prewait_spin"):
// prewait: the producers' events are complete on the host before the set's work is submitted, so the
// node's stream never waits on the device for another process's context (time-sliced without MPS);
// spin: the set's completion is polled, not slept for (no interrupt and event-handler thread wake-up).
struct WaitMode {
    bool prewait = false, spin = false;
};

const WaitMode& wait_mode() {
    static const WaitMode mode = [] {
        WaitMode m;
        const char* v = std::getenv("BEVPOOL_LAUNCH_WAIT");
        std::string s = v ? v : "";
        m.prewait = s.find("prewait") != std::string::npos;
        m.spin = s.find("spin") != std::string::npos;
        return m;
    }();
    return mode;
}

int64_t thread_cpu_ns() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// BEVPOOL_LAUNCH_PROFILE=<file>: the launches' wall and thread-CPU time by phase (submit, host wait,
// checks and consumer datagrams, ROS copy), summed and rewritten every 50 launches (a measurement aid).
struct Profile {
    static constexpr int PHASES = 4;
    const char* path = std::getenv("BEVPOOL_LAUNCH_PROFILE");
    int64_t launches = 0, wall[PHASES] = {}, cpu[PHASES] = {};
    int64_t last_wall = 0, last_cpu = 0;
    int phase = 0;

    void start() {
        if (path == nullptr) return;
        phase = 0;
        last_wall = now_ns();
        last_cpu = thread_cpu_ns();
    }
    void mark() {
        if (path == nullptr || phase >= PHASES) return;
        int64_t w = now_ns(), c = thread_cpu_ns();
        wall[phase] += w - last_wall;
        cpu[phase] += c - last_cpu;
        last_wall = w;
        last_cpu = c;
        if (++phase == PHASES && ++launches % 50 == 0) write();
    }
    void write() const {
        FILE* f = std::fopen(path, "w");
        if (f == nullptr) return;
        static const char* names[PHASES] = {"submit", "host_wait", "checks_datagrams", "ros_copy"};
        std::fprintf(f, "{\"launches\": %lld", static_cast<long long>(launches));
        for (int i = 0; i < PHASES; ++i) {
            std::fprintf(f, ", \"%s_wall_us\": %.1f, \"%s_cpu_us\": %.1f", names[i], wall[i] / 1e3 / launches, names[i],
                         cpu[i] / 1e3 / launches);
        }
        std::fprintf(f, "}\n");
        std::fclose(f);
    }
};

Profile& profile() {
    static Profile p;
    return p;
}

constexpr int64_t PREWAIT_LIMIT_NS = 5000000;  // then the device waits, as without prewait

// Polls ``event`` until it completes: true; false on a driver error (its text set) or, with a
// limit, when ``limit_ns`` passed first (the caller goes on).
bool poll(const Driver* cu, CUevent event, int64_t limit_ns, bool* done) {
    const int64_t start = now_ns();
    *done = false;
    for (;;) {
        CUresult r = cu->cuEventQuery(event);
        if (r == CUDA_SUCCESS) {
            *done = true;
            return true;
        }
        if (r != CUDA_ERROR_NOT_READY) return !failed(r, "cuEventQuery");
        if (limit_ns > 0 && now_ns() - start > limit_ns) return true;
        sched_yield();
    }
}

}  // namespace

Launcher::Launcher(const LauncherConfig& config) : config_(config), slot_handles_(config.ring_size) {
    for (uint32_t i = 0; i < config.ring_size; ++i) std::memcpy(slot_handles_[i].data(), config.slot_handles + 64 * i, 64);
}

Launcher::~Launcher() {
    const Driver* cu = done_ != nullptr ? driver() : nullptr;
    if (cu != nullptr) {
        CUcontext current = nullptr;
        cu->cuCtxGetCurrent(&current);
        if (current == config_.context || cu->cuCtxSetCurrent(config_.context) == CUDA_SUCCESS) cu->cuEventDestroy(done_);
    }
}

void Launcher::ring(uint64_t ring_id, const int64_t* words, uint32_t size, std::vector<std::array<uint8_t, 64>> handles,
                    std::vector<void*> events) {
    std::lock_guard<std::mutex> lock(mutex_);
    rings_[ring_id] = ProducerRing{words, size, std::move(handles), std::move(events)};
}

void Launcher::unring(uint64_t ring_id) {
    std::lock_guard<std::mutex> lock(mutex_);  // no launch reads its control block any more
    rings_.erase(ring_id);
}

void Launcher::remember(std::vector<uint64_t> key, void* graph_exec) {
    std::lock_guard<std::mutex> lock(mutex_);
    graphs_[std::move(key)] = graph_exec;
}

void Launcher::forget(const std::vector<uint64_t>& key) {
    std::lock_guard<std::mutex> lock(mutex_);  // returns once no launch uses it: it may be destroyed then
    graphs_.erase(key);
}

void Launcher::ros_copy(const RosCopy* copy) {
    std::lock_guard<std::mutex> pool(pool_);  // returns once no launch publishes with the old one
    ros_ = copy;
}

void Launcher::forget_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    graphs_.clear();
}

void* Launcher::event_of(const bp_member& m) const {
    auto it = rings_.find(m.ring_id);
    if (it == rings_.end()) return nullptr;
    const ProducerRing& r = it->second;
    for (size_t i = 0; i < r.handles.size(); ++i) {
        if (std::memcmp(r.handles[i].data(), m.values.event_handle, 64) == 0) return r.events[i];
    }
    return nullptr;
}

int Launcher::launch(const bp_member* members, uint32_t count, int32_t sec, uint32_t nanosec, bp_launch* result,
                     uint8_t* out, uint32_t capacity) {
    std::memset(result, 0, sizeof(*result));
    result->member = -1;
    std::lock_guard<std::mutex> pool(pool_);
    std::lock_guard<std::mutex> lock(mutex_);  // the rings and the graph stay while the set runs
    std::vector<uint64_t> key;
    std::vector<void*> events;
    for (uint32_t i = 0; i < count; ++i) {
        key.push_back(members[i].ring_id);
        key.push_back(members[i].values.slot);
        void* event = event_of(members[i]);
        if (event == nullptr) {
            result->result = BP_LAUNCH_MISS;  // a ring or an event the launcher does not know: Python's
            return BP_OK;
        }
        events.push_back(event);
    }
    auto graph = graphs_.find(key);
    if (graph == graphs_.end()) {
        result->result = BP_LAUNCH_MISS;
        return BP_OK;
    }
    const Driver* cu = driver();
    if (cu == nullptr) return BP_E_DRIVER;
    CUcontext current = nullptr;
    if (failed(cu->cuCtxGetCurrent(&current), "cuCtxGetCurrent")) return BP_E_DRIVER;
    if (current != config_.context && failed(cu->cuCtxSetCurrent(config_.context), "cuCtxSetCurrent")) {
        return BP_E_DRIVER;
    }
    if (done_ == nullptr &&
        failed(cu->cuEventCreate(&done_, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), "cuEventCreate")) {
        done_ = nullptr;
        return BP_E_DRIVER;
    }
    result->launched_ns = now_ns();
    Profile& prof = profile();
    prof.start();
    CUstream stream = config_.stream;
    const WaitMode& mode = wait_mode();
    for (void* event : events) {  // the producers' writes, ordered on the device
        bool done = false;
        if (mode.prewait && !poll(cu, event, PREWAIT_LIMIT_NS, &done)) return BP_E_DRIVER;
        if (!done && failed(cu->cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")) return BP_E_DRIVER;
    }
    if (failed(cu->cuGraphLaunch(graph->second, stream), "cuGraphLaunch")) return BP_E_DRIVER;
    uint64_t sequence = 0;
    uint32_t slot = 0;
    int r = config_.ring->write(config_.grid, config_.grid_bytes, reinterpret_cast<uint64_t>(stream), &slot, &sequence);
    if (r != BP_OK) return r;
    if (failed(cu->cuEventRecord(done_, stream), "cuEventRecord")) return BP_E_DRIVER;
    prof.mark();
    bool done = false;
    if (mode.spin ? !poll(cu, done_, 0, &done) : failed(cu->cuEventSynchronize(done_), "cuEventSynchronize")) {
        return BP_E_DRIVER;
    }
    result->done_ns = now_ns();
    prof.mark();
    result->slot = slot;
    result->sequence = sequence;
    result->flags = *config_.flags;
    if (result->flags & FLAG_INPUT) {
        result->result = BP_LAUNCH_NONFINITE_INPUT;
        return BP_OK;
    }
    if (result->flags & FLAG_OUTPUT) {
        result->result = BP_LAUNCH_NONFINITE_OUTPUT;
        return BP_OK;
    }
    for (uint32_t i = 0; i < count; ++i) {  // the seqlock's second look: not overwritten while read
        const bp_member& m = members[i];
        const ProducerRing& ring = rings_.at(m.ring_id);
        if (m.values.slot >= ring.size ||
            __atomic_load_n(&ring.words[CONTROL_HEADER_WORDS + m.values.slot], __ATOMIC_SEQ_CST) !=
                static_cast<int64_t>(m.values.sequence)) {
            result->result = BP_LAUNCH_OVERWRITTEN;
            result->member = static_cast<int32_t>(i);
            return BP_OK;
        }
    }
    bp_values values{};
    values.sec = sec;
    values.nanosec = nanosec;
    values.slot = slot;
    values.sequence = sequence;
    values.scale = 1.0f;
    std::memcpy(values.event_handle, slot_handles_[slot].data(), 64);
    int n = config_.templates->encode(config_.template_id, values, out, capacity);
    if (n < 0) return BP_E_ARGUMENT;
    result->length = static_cast<uint32_t>(n);
    if (config_.fanout != nullptr) config_.fanout->send(out, result->length);
    prof.mark();
    result->ros_copy = ros_ != nullptr && ros_->publish(out, result->length) == 0 ? 1 : 0;
    prof.mark();
    result->result = BP_LAUNCH_DONE;
    return BP_OK;
}

}  // namespace bevpool
