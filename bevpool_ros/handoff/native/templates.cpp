#include "templates.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "error.h"

namespace bevpool {

const uint32_t ROLE_SIZES[BP_ROLES] = {4, 4, 4, 8, 64, 4};

namespace {

// where each role's value lives in bp_values
const uint8_t* field(const bp_values& v, int role) {
    switch (role) {
        case BP_SEC: return reinterpret_cast<const uint8_t*>(&v.sec);
        case BP_NANOSEC: return reinterpret_cast<const uint8_t*>(&v.nanosec);
        case BP_SLOT: return reinterpret_cast<const uint8_t*>(&v.slot);
        case BP_SEQUENCE: return reinterpret_cast<const uint8_t*>(&v.sequence);
        case BP_EVENT_HANDLE: return v.event_handle;
        default: return reinterpret_cast<const uint8_t*>(&v.scale);
    }
}

uint8_t* field(bp_values& v, int role) { return const_cast<uint8_t*>(field(const_cast<const bp_values&>(v), role)); }

}  // namespace

int32_t TemplateStore::add(const uint8_t* data, uint32_t length, const int32_t* offsets, uint64_t ring_id) {
    Template t;
    t.data.assign(data, data + length);
    t.ring_id = ring_id;
    std::vector<std::pair<uint32_t, uint32_t>> varying;
    for (int r = 0; r < BP_ROLES; ++r) {
        t.offsets[r] = offsets[r];
        if (offsets[r] < 0) continue;
        uint32_t begin = static_cast<uint32_t>(offsets[r]);
        if (begin + ROLE_SIZES[r] > length) {
            set_error("template field " + std::to_string(r) + " ends past the message");
            return -1;
        }
        varying.emplace_back(begin, begin + ROLE_SIZES[r]);
    }
    std::sort(varying.begin(), varying.end());
    uint32_t at = 0;
    for (const auto& [begin, end] : varying) {
        if (begin < at) {
            set_error("template fields overlap");
            return -1;
        }
        if (begin > at) t.fixed.emplace_back(at, begin);
        at = end;
    }
    if (at < length) t.fixed.emplace_back(at, length);
    std::lock_guard<std::mutex> lock(mutex_);
    t.id = next_id_++;
    templates_.insert(templates_.begin(), std::move(t));
    return templates_.front().id;
}

bool TemplateStore::remove(int32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(templates_.begin(), templates_.end(), [id](const Template& t) { return t.id == id; });
    if (it == templates_.end()) return false;
    templates_.erase(it);
    return true;
}

int TemplateStore::encode(int32_t id, const bp_values& values, uint8_t* out, uint32_t capacity) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Template& t : templates_) {
        if (t.id != id) continue;
        if (t.data.size() > capacity) {
            set_error("announcement larger than the output buffer");
            return -1;
        }
        std::memcpy(out, t.data.data(), t.data.size());
        for (int r = 0; r < BP_ROLES; ++r) {
            if (t.offsets[r] >= 0) std::memcpy(out + t.offsets[r], field(values, r), ROLE_SIZES[r]);
        }
        return static_cast<int>(t.data.size());
    }
    set_error("no template " + std::to_string(id));
    return -1;
}

int32_t TemplateStore::read(const uint8_t* data, uint32_t length, bp_values* values, uint64_t* ring_id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Template& t : templates_) {
        if (t.data.size() != length) continue;
        bool same = true;
        for (const auto& [begin, end] : t.fixed) {
            if (std::memcmp(data + begin, t.data.data() + begin, end - begin) != 0) {
                same = false;
                break;
            }
        }
        if (!same) continue;
        std::memset(values, 0, sizeof(*values));
        values->scale = 1.0f;  // a message without a scale (BevHandoff)
        for (int r = 0; r < BP_ROLES; ++r) {
            if (t.offsets[r] >= 0) std::memcpy(field(*values, r), data + t.offsets[r], ROLE_SIZES[r]);
        }
        *ring_id = t.ring_id;
        return t.id;
    }
    return -1;
}

}  // namespace bevpool
