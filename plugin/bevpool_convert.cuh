// Per-frame conversions and value checks that run on the GPU inside the frame's CUDA graph
// (bevpool_ros/backends/gpu/frame.py), so the host never touches a payload element by element.
//
//   input:    wire dtype (float32 | float16 | E4M3 codes) -> kernel input (float16 | E4M3)
//   fp8:      amax -> power-of-two scale 2^k with amax * 2^k in (8, 16] (docs/kernels.md), read
//             from device memory by the quantiser and the epilogue: a new scale needs no re-capture
//   epilogue: kernel output -> published dtype (float32 | float16), times 2^(8 - k_depth - k_feat)
//             after an FP8 kernel launched with out_scale 2^-8 (powers of two: exact)
// Every kernel ORs a bit into *flags when it meets a value it must not pass on; the host reads
// the word after the frame's sync. flags == nullptr: no check (input.check_finite off).
#pragma once
#include "bevpool_common.cuh"

#define BEVPOOL_FLAG_INPUT_NONFINITE 1u   // NaN/Inf, an E4M3 NaN code, or beyond FP16
#define BEVPOOL_FLAG_OUTPUT_NONFINITE 2u  // NaN/Inf in the BEV about to be published
#define BEVPOOL_FP8_KERNEL_LOG2_SCALE 8   // the FP8 pooling kernel runs with out_scale = 2^-8

namespace bevconv {

__device__ __forceinline__ float load_f(const float* p, long long i) { return __ldg(p + i); }
__device__ __forceinline__ float load_f(const __half* p, long long i) { return __half2float(__ldg(p + i)); }
__device__ __forceinline__ float load_f(const fp8_e4m3* p, long long i) { return fp8_to_float(__ldg(p + i)); }

__device__ __forceinline__ bool bad_code(fp8_e4m3 c) { return (c & 0x7f) == 0x7f; }

// The scaling rule's exponent k for amax (bit pattern of a non-negative float): 2^k * amax in (8, 16].
// amax = m * 2^e with m in [0.5, 1): k = 4 - e, or 5 - e when m == 0.5 exactly; 0 for amax 0 or non-finite.
__device__ __forceinline__ int pow2_exponent(unsigned amax_bits) {
  const float a = __uint_as_float(amax_bits);
  if (!(a > 0.f) || !isfinite(a)) return 0;
  int e;
  const float m = frexpf(a, &e);
  const int k = (m == 0.5f ? 5 : 4) - e;
  return max(-126, min(127, k));  // 2^k stays a normal float
}

__device__ __forceinline__ long long grid_start() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long grid_step() { return (long long)gridDim.x * blockDim.x; }

}  // namespace bevconv

// ---- input: wire dtype -> FP16 kernel input ---------------------------------------------------
template <typename IN>
__device__ __forceinline__ void bevconv_to_half(const IN* x, __half* y, long long n, unsigned* flags) {
  bool bad = false;
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step()) {
    const float v = bevconv::load_f(x, i);
    const __half h = __float2half_rn(v);
    y[i] = h;
    bad |= !isfinite(v) || __hisinf(h);  // Inf after rounding: a finite float32 beyond FP16
  }
  if (flags != nullptr && bad) atomicOr(flags, BEVPOOL_FLAG_INPUT_NONFINITE);
}

extern "C" __global__ void bevconv_f32_to_f16(const float* x, __half* y, long long n, unsigned* flags) {
  bevconv_to_half<float>(x, y, n, flags);
}
extern "C" __global__ void bevconv_e4m3_to_f16(const fp8_e4m3* x, __half* y, long long n, unsigned* flags) {
  // E4M3 values are exact in FP16; only NaN codes can be bad
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step()) {
    const fp8_e4m3 c = __ldg(x + i);
    y[i] = __half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3));
    if (flags != nullptr && bevconv::bad_code(c)) atomicOr(flags, BEVPOOL_FLAG_INPUT_NONFINITE);
  }
}

// ---- input checks where the wire dtype is already the kernel's ---------------------------------
extern "C" __global__ void bevconv_check_f16(const __half* x, long long n, unsigned* flags) {
  const unsigned short* u = reinterpret_cast<const unsigned short*>(x);
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step())
    if ((__ldg(u + i) & 0x7c00u) == 0x7c00u) atomicOr(flags, BEVPOOL_FLAG_INPUT_NONFINITE);
}
extern "C" __global__ void bevconv_check_e4m3(const fp8_e4m3* x, long long n, unsigned* flags) {
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step())
    if (bevconv::bad_code(__ldg(x + i))) atomicOr(flags, BEVPOOL_FLAG_INPUT_NONFINITE);
}

// ---- FP8: amax, then quantise with the scale derived from it on the device ---------------------
// *amax_bits must be zeroed before (a memset node of the same graph).
template <typename IN>
__device__ __forceinline__ void bevconv_amax(const IN* x, long long n, unsigned* amax_bits, unsigned* flags) {
  float m = 0.f;
  bool bad = false;
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step()) {
    const float v = fabsf(bevconv::load_f(x, i));
    if (isfinite(v)) m = fmaxf(m, v); else bad = true;
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0 && m > 0.f) atomicMax(amax_bits, __float_as_uint(m));  // m >= 0: bits order as floats
  if (flags != nullptr && bad) atomicOr(flags, BEVPOOL_FLAG_INPUT_NONFINITE);
}
extern "C" __global__ void bevconv_amax_f32(const float* x, long long n, unsigned* amax_bits, unsigned* flags) {
  bevconv_amax<float>(x, n, amax_bits, flags);
}
extern "C" __global__ void bevconv_amax_f16(const __half* x, long long n, unsigned* amax_bits, unsigned* flags) {
  bevconv_amax<__half>(x, n, amax_bits, flags);
}

// y = E4M3(x * 2^k), k from *amax_bits; thread 0 records k in *k_out for the epilogue.
// Saturating, round-to-nearest-even: the host codec's rule (bevpool_ros/fp8.py).
template <typename IN>
__device__ __forceinline__ void bevconv_quantize(const IN* x, fp8_e4m3* y, long long n, const unsigned* amax_bits,
                                                 int* k_out) {
  const int k = bevconv::pow2_exponent(*amax_bits);
  if (blockIdx.x == 0 && threadIdx.x == 0) *k_out = k;
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step())
    y[i] = (fp8_e4m3)__nv_cvt_float_to_fp8(ldexpf(bevconv::load_f(x, i), k), __NV_SATFINITE, __NV_E4M3);
}
extern "C" __global__ void bevconv_f32_to_e4m3(const float* x, fp8_e4m3* y, long long n, const unsigned* amax_bits,
                                               int* k_out) {
  bevconv_quantize<float>(x, y, n, amax_bits, k_out);
}
extern "C" __global__ void bevconv_f16_to_e4m3(const __half* x, fp8_e4m3* y, long long n, const unsigned* amax_bits,
                                               int* k_out) {
  bevconv_quantize<__half>(x, y, n, amax_bits, k_out);
}

// ---- epilogue: kernel output -> published dtype, output check ----------------------------------
// k_pair == nullptr: no scaling (FP16 kernels). Else y = x * 2^(8 - k_pair[0] - k_pair[1]).
template <typename IN, typename OUT>
__device__ __forceinline__ void bevconv_epilogue(const IN* x, OUT* y, long long n, const int* k_pair, unsigned* flags) {
  const int shift = k_pair == nullptr ? 0 : BEVPOOL_FP8_KERNEL_LOG2_SCALE - k_pair[0] - k_pair[1];
  bool bad = false;
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step()) {
    const float v = ldexpf(bevconv::load_f(x, i), shift);
    if constexpr (sizeof(OUT) == 2) {
      const __half h = __float2half_rn(v);
      y[i] = h;
      bad |= __hisinf(h) || __hisnan(h);
    } else {
      y[i] = v;
      bad |= !isfinite(v);
    }
  }
  if (bad) atomicOr(flags, BEVPOOL_FLAG_OUTPUT_NONFINITE);
}
extern "C" __global__ void bevconv_out_f32_to_f16(const float* x, __half* y, long long n, const int* k, unsigned* f) {
  bevconv_epilogue<float, __half>(x, y, n, k, f);
}
extern "C" __global__ void bevconv_out_f16_to_f16(const __half* x, __half* y, long long n, const int* k, unsigned* f) {
  bevconv_epilogue<__half, __half>(x, y, n, k, f);
}
extern "C" __global__ void bevconv_out_f16_to_f32(const __half* x, float* y, long long n, const int* k, unsigned* f) {
  bevconv_epilogue<__half, float>(x, y, n, k, f);
}
// float32 kernel output published as float32 with a scale (E4M3 inputs pooled by an FP16 kernel)
extern "C" __global__ void bevconv_out_f32_to_f32(const float* x, float* y, long long n, const int* k, unsigned* f) {
  bevconv_epilogue<float, float>(x, y, n, k, f);
}
// float32 kernel output published as float32: the check alone, no second buffer
extern "C" __global__ void bevconv_check_out_f32(const float* x, long long n, unsigned* flags) {
  bool bad = false;
  for (long long i = bevconv::grid_start(); i < n; i += bevconv::grid_step()) bad |= !isfinite(__ldg(x + i));
  if (bad) atomicOr(flags, BEVPOOL_FLAG_OUTPUT_NONFINITE);
}

// ---- depth images: metric depth at the feature grid -> distribution over the depth bins ---------
// The device half of bevpool_ros/metric_depth.py (depth_distribution is its float32 twin: same
// operations in the same order, no contraction). metres: [N][hw] float32, slots first .. first +
// count - 1 hold depth-image cameras; out: [N][D][hw] in the depth stream's wire dtype. One thread
// per pixel writes its whole column, so each bin's store is coalesced across pixels. Depth outside
// [lo, hi), non-finite or <= 0 -> a zero column. sigma == 0: one-hot in the nearest bin; else a
// Gaussian of width sigma normalised over the bins. E4M3 output carries the depth stream's scale 2^k
// (*k_depth; nullptr: 2^0), like raw E4M3 inputs do.
namespace bevconv {
__device__ __forceinline__ void store(float* p, float v, int) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v, int) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(fp8_e4m3* p, float v, int k) {
  *p = (fp8_e4m3)__nv_cvt_float_to_fp8(ldexpf(v, k), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float gaussian(float start, float step, int b, float d, float sigma) {
  const float q = __fdiv_rn(__fsub_rn(__fadd_rn(start, __fmul_rn(step, (float)b)), d), sigma);
  return expf(__fmul_rn(__fmul_rn(-0.5f, q), q));
}
}  // namespace bevconv

template <typename OUT>
__device__ __forceinline__ void bevconv_expand_depth(const float* metres, OUT* out, int first, int count, int D,
                                                     int hw, float start, float step, float sigma, float lo,
                                                     float hi, const int* k_depth) {
  const int k = k_depth == nullptr ? 0 : *k_depth;
  const long long total = (long long)count * hw;
  for (long long t = bevconv::grid_start(); t < total; t += bevconv::grid_step()) {
    const long long cam = first + t / hw;
    const long long p = t % hw;
    const float d = __ldg(metres + cam * hw + p);
    const bool valid = isfinite(d) && d > 0.f && d >= lo && d < hi;
    OUT* col = out + cam * D * hw + p;
    if (!valid) {
      for (int b = 0; b < D; ++b) bevconv::store(col + (long long)b * hw, 0.f, k);
    } else if (sigma == 0.f) {
      const int nearest = min(max((int)rintf(__fdiv_rn(__fsub_rn(d, start), step)), 0), D - 1);
      for (int b = 0; b < D; ++b) bevconv::store(col + (long long)b * hw, b == nearest ? 1.f : 0.f, k);
    } else {
      float sum = 0.f;
      for (int b = 0; b < D; ++b) sum = __fadd_rn(sum, bevconv::gaussian(start, step, b, d, sigma));
      const float norm = fmaxf(sum, 1e-30f);
      for (int b = 0; b < D; ++b)
        bevconv::store(col + (long long)b * hw, __fdiv_rn(bevconv::gaussian(start, step, b, d, sigma), norm), k);
    }
  }
}
#define BEVCONV_EXPAND_DEPTH(NAME, OUT)                                                                         \
  extern "C" __global__ void NAME(const float* metres, OUT* out, int first, int count, int D, int hw,          \
                                  float start, float step, float sigma, float lo, float hi, const int* k) { \
    bevconv_expand_depth<OUT>(metres, out, first, count, D, hw, start, step, sigma, lo, hi, k);             \
  }
BEVCONV_EXPAND_DEPTH(bevconv_expand_depth_f32, float)
BEVCONV_EXPAND_DEPTH(bevconv_expand_depth_f16, __half)
BEVCONV_EXPAND_DEPTH(bevconv_expand_depth_e4m3, fp8_e4m3)

// ---- copies and fills as kernels ------------------------------------------------------------------
// A frame's copies (gathering hand-off slots, host memory mapped into the device, the flag word) and
// fills run as kernels instead of copy-engine or memset operations, so that a frame's work is one
// stream of kernels: on a GPU time-sliced between processes, each switch between the copy engine and
// the SMs inside a frame cost a time slice of its own (docs/gpu_sharing.md).
namespace bevconv {
// nbytes from src to dst (zeros where src is null) by the grid's x dimension: 16-byte vectors for the
// bulk where both ends are aligned, bytes for the tail
__device__ __forceinline__ void copy_range(const unsigned char* src, unsigned char* dst, long long nbytes) {
  const bool vec = ((reinterpret_cast<unsigned long long>(src) | reinterpret_cast<unsigned long long>(dst)) & 15) == 0;
  long long done = 0;
  if (vec) {
    const long long n16 = nbytes >> 4;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (long long i = grid_start(); i < n16; i += grid_step()) d[i] = src ? s[i] : make_uint4(0, 0, 0, 0);
    done = n16 << 4;
  }
  for (long long i = done + grid_start(); i < nbytes; i += grid_step()) dst[i] = src ? src[i] : 0;
}
}  // namespace bevconv
// Up to BEVCONV_COPY_MANY copies (or zero fills: a null src) in one launch, passed by value: a frame's
// gather of per-camera tensors is one kernel instead of one per camera and stream, a single copy a table
// of one. blockIdx.y picks the entry, the x dimension strides over its bytes.
#define BEVCONV_COPY_MANY 16
struct BevconvCopyTable {
  const unsigned char* src[BEVCONV_COPY_MANY];
  unsigned char* dst[BEVCONV_COPY_MANY];
  long long nbytes[BEVCONV_COPY_MANY];
};
extern "C" __global__ void bevconv_copy_many(BevconvCopyTable table, int count) {
  const int e = blockIdx.y;
  if (e < count) bevconv::copy_range(table.src[e], table.dst[e], table.nbytes[e]);
}
extern "C" __global__ void bevconv_fill_u32(unsigned* dst, unsigned value, long long count) {
  for (long long i = bevconv::grid_start(); i < count; i += bevconv::grid_step()) dst[i] = value;
}
