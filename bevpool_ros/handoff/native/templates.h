// Announcement templates (the twin of handoff/cdr_template.py's CdrTemplate): a message's CDR
// bytes and where its varying fields sit. encode() writes values into a copy; read() finds the
// template whose every other byte equals a datagram's and reads the values out of it.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "bevpool_handoff.h"

namespace bevpool {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the templates are little-endian CDR");

struct Template {
    int32_t id;
    std::vector<uint8_t> data;
    int32_t offsets[BP_ROLES];
    uint64_t ring_id;
    std::vector<std::pair<uint32_t, uint32_t>> fixed;  // [begin, end) ranges outside the varying fields
};

class TemplateStore {
public:
    // the id of the new template, or -1 (the offsets do not describe `data`: last_error says why)
    int32_t add(const uint8_t* data, uint32_t length, const int32_t* offsets, uint64_t ring_id);
    bool remove(int32_t id);
    // the bytes of template `id` with `values` written in; their length, or -1
    int encode(int32_t id, const bp_values& values, uint8_t* out, uint32_t capacity) const;
    // the id of the template `data` matches (values read), or -1
    int32_t read(const uint8_t* data, uint32_t length, bp_values* values, uint64_t* ring_id) const;

private:
    mutable std::mutex mutex_;
    std::vector<Template> templates_;  // newest first, as TemplateReader tries them
    int32_t next_id_ = 0;
};

// the size of each role's field in the CDR bytes
extern const uint32_t ROLE_SIZES[BP_ROLES];

}  // namespace bevpool
