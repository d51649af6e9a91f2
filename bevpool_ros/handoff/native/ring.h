// The producer's ring (the twin of producer.HandoffRing.write): sequence `s` goes to slot
// (s - 1) % ring_size; the control block (ring.ControlBlock: int64 words [magic, ring_id,
// ring_size, published, slot_seq...]) records each slot's sequence. A slot is claimed before the
// copy that overwrites it is enqueued (the seqlock consumers check), its IPC event recorded after
// the copy, and the sequence published last.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

#include "bevpool_handoff.h"
#include "fanout.h"
#include "templates.h"

namespace bevpool {

constexpr int CONTROL_HEADER_WORDS = 4;  // ring.HEADER_WORDS

class Ring {
public:
    Ring(int64_t* control_words, uint32_t ring_size, const uint64_t* slot_ptrs, uint64_t slot_bytes,
         const uint64_t* events, const uint8_t* event_handles);
    void claim(uint32_t* slot, uint64_t* sequence);
    int finish(uint32_t slot, uint64_t sequence, uint64_t stream);  // event record, then published
    int write(uint64_t src, uint64_t nbytes, uint64_t stream, uint32_t* slot, uint64_t* sequence);
    // every copy of the set enqueued first, then each announcement patched and sent
    int publish_set(const TemplateStore* templates, Fanout* fanout, int32_t sec, uint32_t nanosec, bp_item* items,
                    uint32_t count, uint8_t* out, uint32_t capacity);

private:
    int write_locked(uint64_t src, uint64_t nbytes, uint64_t stream, uint32_t* slot, uint64_t* sequence);
    int finish_locked(uint32_t slot, uint64_t sequence, uint64_t stream);

    std::mutex mutex_;  // a producer may publish from several threads
    int64_t* words_;
    uint32_t size_;
    uint64_t sequence_ = 0;
    uint64_t slot_bytes_;
    std::vector<uint64_t> slots_;
    std::vector<void*> events_;
    std::vector<std::array<uint8_t, 64>> handles_;
};

}  // namespace bevpool
