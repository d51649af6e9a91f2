// Device blocks of the V3 kernels: vector loads/stores of a lane's channel tile, the element
// types (FP16 in / FP32 out, E4M3 in / FP16 out), a lane's accumulator and the owner's write.
// Constants that Python also uses (BEVPOOL_TEAM_FLAG_SHIFT, BEVPOOL_V3_MAX_THREADS) arrive as -D
// options generated from bevpool_ros/kernels/table.py, so they are defined once.
#pragma once
#include "bevpool_common.cuh"

#ifndef BEVPOOL_TEAM_FLAG_SHIFT
#error "BEVPOOL_TEAM_FLAG_SHIFT comes from launch.py (nvrtc_build passes it as -D)"
#endif

// ---- vector loads/stores of BYTES (1, 2, 4, 8 or a multiple of 16) as 32-bit words ---------
// A tile under 4 bytes (one or two channels: any C, odd ones included) sits zero-extended in the
// low bits of one word, so the unused half of a channel pair reads as +0 and adds nothing.
__host__ __device__ constexpr int tile_words(int bytes) { return bytes < 4 ? 1 : bytes / 4; }

template <int BYTES>
__device__ __forceinline__ void load_words(const void* __restrict__ p, unsigned int (&w)[tile_words(BYTES)]) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; i++) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
  } else if constexpr (BYTES == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x; w[1] = v.y;
  } else if constexpr (BYTES == 4) {
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else if constexpr (BYTES == 2) {
    w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else {
    static_assert(BYTES == 1, "tile must be 1, 2, 4, 8 or 16*k bytes");
    w[0] = __ldg(reinterpret_cast<const unsigned char*>(p));
  }
}

template <int BYTES>
__device__ __forceinline__ void store_words(void* p, const unsigned int (&w)[tile_words(BYTES)], bool streaming) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; i++)
      store_u4(reinterpret_cast<uint4*>(p) + i, make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]), streaming);
  } else if constexpr (BYTES == 8) {
    uint2* q = reinterpret_cast<uint2*>(p);
    if (streaming) __stcs(q, make_uint2(w[0], w[1])); else *q = make_uint2(w[0], w[1]);
  } else if constexpr (BYTES == 4) {
    unsigned int* q = reinterpret_cast<unsigned int*>(p);
    if (streaming) __stcs(q, w[0]); else *q = w[0];
  } else {
    static_assert(BYTES == 2, "output tile must be 2, 4, 8 or 16*k bytes");
    unsigned short* q = reinterpret_cast<unsigned short*>(p);
    const unsigned short v = (unsigned short)(w[0] & 0xffffu);
    if (streaming) __stcs(q, v); else *q = v;
  }
}

// ---- element types -----------------------------------------------------------------------
// IN = __half: FP16 depth/feat, FP32 output.   IN = fp8_e4m3: E4M3 depth/feat, FP16 output.
template <typename IN> struct Io;
template <> struct Io<__half> {
  typedef float Out;
  static __device__ __forceinline__ __half depth_h(const __half* d, int i) { return __ldg(d + i); }
  static constexpr int PAIRS_PER_WORD = 1;  // __half2 pairs per 32-bit word of features
  static __device__ __forceinline__ __half2 pair(unsigned int w, int k) {
    (void)k;
    return *reinterpret_cast<const __half2*>(&w);
  }
};
template <> struct Io<fp8_e4m3> {
  typedef __half Out;
  static __device__ __forceinline__ __half depth_h(const fp8_e4m3* d, int i) {
    return __half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)__ldg(d + i), __NV_E4M3));
  }
  static constexpr int PAIRS_PER_WORD = 2;  // 4 E4M3 bytes per word
  static __device__ __forceinline__ __half2 pair(unsigned int w, int k) {
    return fp8x2_to_half2((unsigned short)(k ? (w >> 16) : (w & 0xffffu)));
  }
};

template <bool B, typename T, typename F> struct Pick { typedef T type; };  // std::conditional, no <type_traits>
template <typename T, typename F> struct Pick<false, T, F> { typedef F type; };

// ---- a lane's accumulator: VEC channels, FP32 (default) or __half2 ------------------------
// Weight: a point's (or a depth pair's summed) depth value, in the accumulator's precision.
// VEC = 1 keeps one padded pair: its upper half multiplies the zero-extended load (adds +0).
template <typename IN, int VEC, bool ACC_F32>
struct LaneAcc {
  static constexpr int PAIRS = (VEC + 1) / 2;
  typedef typename Pick<ACC_F32, float, __half>::type Weight;
  float f[ACC_F32 ? 2 * PAIRS : 1];
  __half2 h[ACC_F32 ? 1 : PAIRS];

  static __device__ __forceinline__ Weight weight(__half d) {
    if constexpr (ACC_F32) return __half2float(d); else return d;
  }

  __device__ __forceinline__ void zero() {
    if constexpr (ACC_F32) {
#pragma unroll
      for (int k = 0; k < 2 * PAIRS; k++) f[k] = 0.f;
    } else {
#pragma unroll
      for (int k = 0; k < PAIRS; k++) h[k] = __float2half2_rn(0.f);
    }
  }
  // acc += w * row, row = the lane's VEC channels as 32-bit words
  __device__ __forceinline__ void fma(Weight w, const unsigned int* row) {
    if constexpr (ACC_F32) {
      const float wf = w;
#pragma unroll
      for (int k = 0; k < PAIRS; k++) {
        const float2 v = __half22float2(Io<IN>::pair(row[k / Io<IN>::PAIRS_PER_WORD], k % Io<IN>::PAIRS_PER_WORD));
        f[2 * k] = fmaf(wf, v.x, f[2 * k]);
        f[2 * k + 1] = fmaf(wf, v.y, f[2 * k + 1]);
      }
    } else {
      const __half2 w2 = __half2half2(w);
#pragma unroll
      for (int k = 0; k < PAIRS; k++)
        h[k] = __hfma2(w2, Io<IN>::pair(row[k / Io<IN>::PAIRS_PER_WORD], k % Io<IN>::PAIRS_PER_WORD), h[k]);
    }
  }
  // FP32 view for the team reduction
  __device__ __forceinline__ void to_float(float (&r)[VEC]) const {
    if constexpr (ACC_F32) {
#pragma unroll
      for (int k = 0; k < VEC; k++) r[k] = f[k];
    } else {
#pragma unroll
      for (int k = 0; k < PAIRS; k++) {
        const float2 v = __half22float2(h[k]);
        r[2 * k] = v.x;
        if (2 * k + 1 < VEC) r[2 * k + 1] = v.y;
      }
    }
  }
};

// ---- the single writes: an owner's cell tile (scaled) and an empty cell's zeros -------------
template <typename IN, int VEC>
__device__ __forceinline__ void write_tile(typename Io<IN>::Out* p, const float (&r)[VEC], float scale, bool streaming) {
  typedef typename Io<IN>::Out OUT;
  constexpr int OUT_BYTES = VEC * (int)sizeof(OUT);
  unsigned int w[tile_words(OUT_BYTES)];
  if constexpr (sizeof(OUT) == 4) {
#pragma unroll
    for (int k = 0; k < VEC; k++) w[k] = __float_as_uint(r[k] * scale);
  } else {
#pragma unroll
    for (int k = 0; k < (VEC + 1) / 2; k++) {  // odd VEC: the last pair's upper half is not stored
      const __half2 h = __floats2half2_rn(r[2 * k] * scale, 2 * k + 1 < VEC ? r[2 * k + 1] * scale : 0.f);
      w[k] = *reinterpret_cast<const unsigned int*>(&h);
    }
  }
  store_words<OUT_BYTES>(p, w, streaming);
}

template <typename IN, int VEC>
__device__ __forceinline__ void write_zeros(typename Io<IN>::Out* p, bool streaming) {
  constexpr int OUT_BYTES = VEC * (int)sizeof(typename Io<IN>::Out);
  unsigned int z[tile_words(OUT_BYTES)];
#pragma unroll
  for (int i = 0; i < tile_words(OUT_BYTES); i++) z[i] = 0u;
  store_words<OUT_BYTES>(p, z, streaming);
}
