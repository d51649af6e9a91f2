#include "pyfmt.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace bevpool {

std::string py_repr(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    // the shortest digits that read back as `v` (what repr() chooses), as d.ddde[+-]x
    char sci[40];
    int digits = 1;
    for (; digits <= 17; ++digits) {
        std::snprintf(sci, sizeof(sci), "%.*e", digits - 1, v);
        if (std::strtod(sci, nullptr) == v) break;
    }
    std::string s(sci);
    size_t e = s.find('e');
    int exponent = std::atoi(s.c_str() + e + 1);
    std::string mantissa = s.substr(0, e);
    bool negative = mantissa[0] == '-';
    std::string ds;
    for (char c : mantissa) {
        if (c >= '0' && c <= '9') ds += c;
    }
    std::string out = negative ? "-" : "";
    if (exponent < -4 || exponent >= 16) {  // float_repr_style: scientific, at least two exponent digits
        out += ds.substr(0, 1);
        if (ds.size() > 1) out += "." + ds.substr(1);
        char ex[16];
        std::snprintf(ex, sizeof(ex), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        return out + ex;
    }
    if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + ds;
    size_t point = static_cast<size_t>(exponent) + 1;
    if (ds.size() <= point) return out + ds + std::string(point - ds.size(), '0') + ".0";
    return out + ds.substr(0, point) + "." + ds.substr(point);
}

}  // namespace bevpool
