#include "ring.h"

#include <cstring>
#include <string>

#include "cuda_driver.h"
#include "error.h"

namespace bevpool {

Ring::Ring(int64_t* control_words, uint32_t ring_size, const uint64_t* slot_ptrs, uint64_t slot_bytes,
           const uint64_t* events, const uint8_t* event_handles)
    : words_(control_words), size_(ring_size), slot_bytes_(slot_bytes), slots_(slot_ptrs, slot_ptrs + ring_size),
      events_(ring_size), handles_(ring_size) {
    for (uint32_t i = 0; i < ring_size; ++i) {
        events_[i] = reinterpret_cast<void*>(events[i]);
        std::memcpy(handles_[i].data(), event_handles + 64 * i, 64);
    }
}

void Ring::claim(uint32_t* slot, uint64_t* sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    *sequence = ++sequence_;
    *slot = static_cast<uint32_t>((*sequence - 1) % size_);
    __atomic_store_n(&words_[CONTROL_HEADER_WORDS + *slot], static_cast<int64_t>(*sequence), __ATOMIC_SEQ_CST);
}

int Ring::finish(uint32_t slot, uint64_t sequence, uint64_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    return finish_locked(slot, sequence, stream);
}

int Ring::finish_locked(uint32_t slot, uint64_t sequence, uint64_t stream) {
    const Driver* cu = driver();
    if (cu == nullptr) return BP_E_DRIVER;
    CUresult r = cu->cuEventRecord(events_[slot], reinterpret_cast<CUstream>(stream));
    if (r != CUDA_SUCCESS) {
        driver_failed(r, "cuEventRecord");
        return BP_E_DRIVER;
    }
    __atomic_store_n(&words_[3], static_cast<int64_t>(sequence), __ATOMIC_SEQ_CST);
    return BP_OK;
}

int Ring::write(uint64_t src, uint64_t nbytes, uint64_t stream, uint32_t* slot, uint64_t* sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    return write_locked(src, nbytes, stream, slot, sequence);
}

int Ring::write_locked(uint64_t src, uint64_t nbytes, uint64_t stream, uint32_t* slot, uint64_t* sequence) {
    if (nbytes == 0 || nbytes > slot_bytes_) {
        set_error(std::to_string(nbytes) + " bytes do not fit a " + std::to_string(slot_bytes_) +
                  "-byte hand-off slot");
        return BP_E_ARGUMENT;
    }
    const Driver* cu = driver();
    if (cu == nullptr) return BP_E_DRIVER;
    *sequence = ++sequence_;
    *slot = static_cast<uint32_t>((*sequence - 1) % size_);
    __atomic_store_n(&words_[CONTROL_HEADER_WORDS + *slot], static_cast<int64_t>(*sequence), __ATOMIC_SEQ_CST);
    CUresult r = cu->cuMemcpyDtoDAsync(slots_[*slot], src, nbytes, reinterpret_cast<CUstream>(stream));
    if (r != CUDA_SUCCESS) {
        driver_failed(r, "cuMemcpyDtoDAsync(hand-off)");
        return BP_E_DRIVER;
    }
    return finish_locked(*slot, *sequence, stream);
}

int Ring::publish_set(const TemplateStore* templates, Fanout* fanout, int32_t sec, uint32_t nanosec, bp_item* items,
                      uint32_t count, uint8_t* out, uint32_t capacity) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (uint32_t i = 0; i < count; ++i) {
            bp_item& it = items[i];
            int r = write_locked(it.src, it.nbytes, it.stream, &it.slot, &it.sequence);
            if (r != BP_OK) return r;
        }
    }
    bp_values values{};
    values.sec = sec;
    values.nanosec = nanosec;
    uint32_t at = 0;
    for (uint32_t i = 0; i < count; ++i) {
        bp_item& it = items[i];
        it.offset = at;
        it.length = 0;
        if (it.template_id < 0) continue;  // the caller serialises this one
        values.slot = it.slot;
        values.sequence = it.sequence;
        values.scale = it.scale;
        std::memcpy(values.event_handle, handles_[it.slot].data(), 64);
        int n = templates->encode(it.template_id, values, out + at, capacity - at);
        if (n < 0) return BP_E_ARGUMENT;
        it.length = static_cast<uint32_t>(n);
        at += it.length;
        if (fanout != nullptr) fanout->send(out + it.offset, it.length);
    }
    return BP_OK;
}

}  // namespace bevpool
