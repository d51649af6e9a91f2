// BEVPoolV3: interval-owned, no atomics, every output cell written exactly once by one launch.
//
// Work unit = a "slot": a contiguous run of at most K points of ONE interval (K is chosen per
// calibration by the schedule, bevpool_ros/backends/cuda/schedule.py). A short interval is one
// slot; a long interval is split over a TEAM of consecutive lanes of one block, whose partial sums
// are reduced (shuffles within a warp, shared memory across warps) and written once by the team's
// first lane (the owner).
// So no launch waits on one serial owner walking a 400-point interval.
//
//   slots[s]  = int4 {first point, point count, output cell (-1: not the writer),
//                     team end = block lane one past the team's last lane}
//   pidx[t]   = int2 {ranks_depth[t], ranks_feat[t] * C}      (precomputed: no run-time decode)
//   empty[e]  = cell with no points: zeroed by the trailing blocks of the same launch.
// grid = (compute_blocks + zero_blocks, C / TILE); blockIdx.y selects the channel tile.
#pragma once
#include "bevpool_common.cuh"

#define BEVPOOL_MAX_BLOCK 256  // largest V3 block (teams never cross a block)

// ---- vector loads/stores of BYTES (4, 8, 16 or a multiple of 16) as 32-bit words ----------
template <int BYTES>
__device__ __forceinline__ void load_words(const void* __restrict__ p, unsigned int (&w)[BYTES / 4]) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; i++) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
  } else if constexpr (BYTES == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x; w[1] = v.y;
  } else {
    static_assert(BYTES == 4, "tile must be 4, 8 or 16*k bytes");
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
}

template <int BYTES>
__device__ __forceinline__ void store_words(void* p, const unsigned int (&w)[BYTES / 4], bool streaming) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; i++)
      store_u4(reinterpret_cast<uint4*>(p) + i, make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]), streaming);
  } else if constexpr (BYTES == 8) {
    uint2* q = reinterpret_cast<uint2*>(p);
    if (streaming) __stcs(q, make_uint2(w[0], w[1])); else *q = make_uint2(w[0], w[1]);
  } else {
    static_assert(BYTES == 4, "tile must be 4, 8 or 16*k bytes");
    unsigned int* q = reinterpret_cast<unsigned int*>(p);
    if (streaming) __stcs(q, w[0]); else *q = w[0];
  }
}

// ---- element types -----------------------------------------------------------------------
// IN = __half: FP16 depth/feat, FP32 output.   IN = fp8_e4m3: E4M3 depth/feat, FP16 output.
template <typename IN> struct Io;
template <> struct Io<__half> {
  typedef float Out;
  static __device__ __forceinline__ __half depth_h(const __half* d, int i) { return __ldg(d + i); }
  // 32-bit word of features -> half2 pairs (1 per word)
  static constexpr int PAIRS_PER_WORD = 1;
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

// ---- the kernel body ---------------------------------------------------------------------
// TILE channels per thread; ACC_F32: accumulate in FP32 (else __half2 + __hfma2 per lane, FP32 for
// the team reduction and the write); STREAM: evict-first output stores; UNROLL points in flight;
// C_FIXED > 0 specialises the channel count at compile time (0: run-time C).
template <typename IN, int TILE, bool ACC_F32, bool STREAM, int UNROLL, int C_FIXED>
__device__ __forceinline__ void bevpool_v3_body(const IN* __restrict__ depth, const IN* __restrict__ feat,
                                                const int4* __restrict__ slots, const int2* __restrict__ pidx,
                                                const int* __restrict__ empty_cells, int n_empty,
                                                int compute_blocks, int c_runtime, float out_scale,
                                                typename Io<IN>::Out* __restrict__ out) {
  typedef typename Io<IN>::Out OUT;
  constexpr int IN_BYTES = TILE * (int)sizeof(IN);
  constexpr int IN_WORDS = IN_BYTES / 4;
  constexpr int OUT_BYTES = TILE * (int)sizeof(OUT);
  constexpr int OUT_WORDS = OUT_BYTES / 4;
  constexpr int PAIRS = TILE / 2;
  const int C = C_FIXED > 0 ? C_FIXED : c_runtime;
  const int c0 = blockIdx.y * TILE;

  if ((int)blockIdx.x >= compute_blocks) {  // trailing blocks: the empty cells' single write
    const int e = (blockIdx.x - compute_blocks) * blockDim.x + threadIdx.x;
    if (e < n_empty) {
      unsigned int z[OUT_WORDS];
#pragma unroll
      for (int i = 0; i < OUT_WORDS; i++) z[i] = 0u;
      store_words<OUT_BYTES>(out + (size_t)__ldg(empty_cells + e) * C + c0, z, STREAM);
    }
    return;
  }

  const int lane = threadIdx.x & 31;
  const int4 s = __ldg(slots + blockIdx.x * blockDim.x + threadIdx.x);
  const int begin = s.x, count = s.y, cell = s.z, team_end = s.w & 0xffff;

  float accf[ACC_F32 ? TILE : 1];
  __half2 acch[ACC_F32 ? 1 : PAIRS];
  if constexpr (ACC_F32) {
#pragma unroll
    for (int k = 0; k < TILE; k++) accf[k] = 0.f;
  } else {
#pragma unroll
    for (int k = 0; k < PAIRS; k++) acch[k] = __float2half2_rn(0.f);
  }

  for (int j = 0; j < count; j += UNROLL) {
    // all loads of UNROLL points issued before the first use; tail lanes re-read the last point
    int2 ix[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) ix[u] = __ldg(pidx + begin + min(j + u, count - 1));
    __half dv[UNROLL];
    unsigned int fw[UNROLL][IN_WORDS];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      dv[u] = Io<IN>::depth_h(depth, ix[u].x);
      load_words<IN_BYTES>(feat + ix[u].y + c0, fw[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      if (j + u < count) {
        if constexpr (ACC_F32) {
          const float w = __half2float(dv[u]);
#pragma unroll
          for (int k = 0; k < PAIRS; k++) {
            const float2 f = __half22float2(Io<IN>::pair(fw[u][k / Io<IN>::PAIRS_PER_WORD], k % Io<IN>::PAIRS_PER_WORD));
            accf[2 * k] = fmaf(w, f.x, accf[2 * k]);
            accf[2 * k + 1] = fmaf(w, f.y, accf[2 * k + 1]);
          }
        } else {
          const __half2 w2 = __half2half2(dv[u]);
#pragma unroll
          for (int k = 0; k < PAIRS; k++)
            acch[k] = __hfma2(w2, Io<IN>::pair(fw[u][k / Io<IN>::PAIRS_PER_WORD], k % Io<IN>::PAIRS_PER_WORD), acch[k]);
        }
      }
    }
  }

  float r[TILE];
  if constexpr (ACC_F32) {
#pragma unroll
    for (int k = 0; k < TILE; k++) r[k] = accf[k];
  } else {
#pragma unroll
    for (int k = 0; k < PAIRS; k++) {
      const float2 f = __half22float2(acch[k]);
      r[2 * k] = f.x; r[2 * k + 1] = f.y;
    }
  }

  // Team reduction. A team is a run of consecutive lanes of one block ending at block lane
  // `team_end`. (1) Within each warp, a segmented shuffle tree (warp-uniform; skipped by warps
  // without a team): after offset `off`, lane l holds the sum of lanes [l, min(l + 2*off, seg_end)).
  // (2) Teams that cross warps: each warp's lane 0 publishes its segment sum in shared memory and
  // the owner adds the following warps' sums (block-uniform; skipped by blocks without such teams).
  const int tid = threadIdx.x;
  const int wbase = tid & ~31;
  const int seg_end = min(team_end, wbase + 32) - wbase;
  for (int off = 1; off < 32; off <<= 1) {
    if (!__any_sync(0xffffffffu, lane + off < seg_end)) break;
#pragma unroll
    for (int k = 0; k < TILE; k++) {
      const float o = __shfl_down_sync(0xffffffffu, r[k], off);
      if (lane + off < seg_end) r[k] += o;
    }
  }
  __shared__ float part[BEVPOOL_MAX_BLOCK / 32][TILE];
  if (__syncthreads_or(team_end > wbase + 32)) {
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < TILE; k++) part[tid >> 5][k] = r[k];
    }
    __syncthreads();
    if (cell >= 0) {
      for (int w = (tid >> 5) + 1; (w << 5) < team_end; ++w) {
#pragma unroll
        for (int k = 0; k < TILE; k++) r[k] += part[w][k];
      }
    }
  }

  if (cell >= 0) {  // the owner: one write of this cell's channel tile
    unsigned int ow[OUT_WORDS];
    if constexpr (sizeof(OUT) == 4) {
#pragma unroll
      for (int k = 0; k < TILE; k++) ow[k] = __float_as_uint(r[k] * out_scale);
    } else {
#pragma unroll
      for (int k = 0; k < PAIRS; k++) {
        const __half2 h = __floats2half2_rn(r[2 * k] * out_scale, r[2 * k + 1] * out_scale);
        ow[k] = *reinterpret_cast<const unsigned int*>(&h);
      }
    }
    store_words<OUT_BYTES>(out + (size_t)cell * C + c0, ow, STREAM);
  }
}

#define BEVPOOL_V3T_ENTRY(NAME, IN, TILE, ACC_F32, STREAM, UNROLL, C_FIXED)                               \
  extern "C" __global__ void __launch_bounds__(BEVPOOL_MAX_BLOCK) NAME(                                                \
      const IN* depth, const IN* feat, const int4* slots, const int2* pidx, const int* empty_cells,      \
      int n_empty, int compute_blocks, int c, float out_scale, Io<IN>::Out* out) {                       \
    bevpool_v3_body<IN, TILE, ACC_F32, STREAM, UNROLL, C_FIXED>(depth, feat, slots, pidx, empty_cells,   \
                                                                n_empty, compute_blocks, c, out_scale, out); \
  }
