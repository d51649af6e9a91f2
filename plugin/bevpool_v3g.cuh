// BEVPoolV3, grouped: a GROUP of G lanes owns one slot, each lane VEC consecutive channels.
//
// Why groups: in a thread-per-(slot, channel tile) launch every tile re-reads the point's index
// pair and depth value as its own 32-byte L2 sector, so L2 traffic is ~(C / TILE) x 64 B per
// point on top of the features, and the first H200 run was L2-throughput bound (70-92 % of L2
// peak, 2-4x slower than this). Here the G lanes of a group load the same index/depth address
// (one broadcast request) and neighbouring feature bytes (one coalesced row of G * VEC channels).
//
// Slots, teams, owners and empty cells as in bevpool_v3.cuh, counted in GROUPS:
//   group q of warp w = lanes [q*G, (q+1)*G); groups per warp GPW = 32 / G (lanes beyond GPW*G
//   idle); a block holds (blockDim.x / 32) * GPW groups; slots[blockIdx.x * groups_per_block + g].
//   team end = group index in the block one past the team's last group (low 16 bits of slot.w;
//   bit 16 = this block holds a team that crosses a warp, set on all of its slots).
// grid = (compute_blocks + zero_blocks, C / (G * VEC)); blockIdx.y selects a G*VEC channel chunk.
// Dynamic shared memory: (blockDim.x / 32) * G * VEC floats (cross-warp team partials).
#pragma once
#include "bevpool_v3.cuh"

#define BEVPOOL_V3G_MAX_BLOCK 512  // threads; caps registers at 128 per thread

template <typename IN, int VEC, bool ACC_F32, bool STREAM, int UNROLL, int G_FIXED, int C_FIXED, bool PREFETCH>
__device__ __forceinline__ void bevpool_v3g_body(const IN* __restrict__ depth, const IN* __restrict__ feat,
                                                 const int4* __restrict__ slots, const int2* __restrict__ pidx,
                                                 const int* __restrict__ empty_cells, int n_empty,
                                                 int compute_blocks, int c_runtime, int g_runtime,
                                                 float out_scale, typename Io<IN>::Out* __restrict__ out) {
  typedef typename Io<IN>::Out OUT;
  constexpr int IN_BYTES = VEC * (int)sizeof(IN);
  constexpr int IN_WORDS = IN_BYTES / 4;
  constexpr int OUT_BYTES = VEC * (int)sizeof(OUT);
  constexpr int OUT_WORDS = OUT_BYTES / 4;
  constexpr int PAIRS = VEC / 2;
  const int C = C_FIXED > 0 ? C_FIXED : c_runtime;
  const int G = G_FIXED > 0 ? G_FIXED : g_runtime;
  const int GPW = 32 / G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q = lane / G;          // once per thread (constant-folded when G is fixed)
  const int sub = lane - q * G;
  const bool active = q < GPW;
  const int gpb = (blockDim.x >> 5) * GPW;
  const int gib = warp * GPW + q;
  const int c0 = blockIdx.y * (G * VEC) + sub * VEC;

  if ((int)blockIdx.x >= compute_blocks) {  // trailing blocks: the empty cells' single write
    const int e = (blockIdx.x - compute_blocks) * gpb + gib;
    if (active && e < n_empty) {
      unsigned int z[OUT_WORDS];
#pragma unroll
      for (int i = 0; i < OUT_WORDS; i++) z[i] = 0u;
      store_words<OUT_BYTES>(out + (size_t)__ldg(empty_cells + e) * C + c0, z, STREAM);
    }
    return;
  }

  // idle lanes read their warp's first slot only for the block-uniform flag
  const int4 s = __ldg(slots + blockIdx.x * gpb + (active ? gib : warp * GPW));
  const int begin = s.x, count = active ? s.y : 0, cell = active ? s.z : -1;
  const int team_end = active ? (s.w & 0xffff) : 0;
  const bool block_has_cross_warp_team = (s.w >> 16) != 0;  // same on every slot of the block

  float accf[ACC_F32 ? VEC : 1];
  __half2 acch[ACC_F32 ? 1 : PAIRS];
  if constexpr (ACC_F32) {
#pragma unroll
    for (int k = 0; k < VEC; k++) accf[k] = 0.f;
  } else {
#pragma unroll
    for (int k = 0; k < PAIRS; k++) acch[k] = __float2half2_rn(0.f);
  }

  // PREFETCH: the next batch's index pairs are requested before this batch's products, so a
  // lane's chain per batch is one dependent load (features) instead of two (indices, features).
  int2 ix[UNROLL];
  if (PREFETCH && count > 0) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) ix[u] = __ldg(pidx + begin + min(u, count - 1));
  }
  for (int j = 0; j < count; j += UNROLL) {
    if (!PREFETCH) {
#pragma unroll
      for (int u = 0; u < UNROLL; u++) ix[u] = __ldg(pidx + begin + min(j + u, count - 1));
    }
    __half dv[UNROLL];
    unsigned int fw[UNROLL][IN_WORDS];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      dv[u] = Io<IN>::depth_h(depth, ix[u].x);
      load_words<IN_BYTES>(feat + ix[u].y + c0, fw[u]);
    }
    if (PREFETCH && j + UNROLL < count) {
#pragma unroll
      for (int u = 0; u < UNROLL; u++) ix[u] = __ldg(pidx + begin + min(j + UNROLL + u, count - 1));
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

  float r[VEC];
  if constexpr (ACC_F32) {
#pragma unroll
    for (int k = 0; k < VEC; k++) r[k] = accf[k];
  } else {
#pragma unroll
    for (int k = 0; k < PAIRS; k++) {
      const float2 f = __half22float2(acch[k]);
      r[2 * k] = f.x; r[2 * k + 1] = f.y;
    }
  }

  // (1) groups of one warp: segmented shuffle tree over group index (stride G lanes).
  const int wgbase = warp * GPW;
  const int seg_end = active ? min(team_end, wgbase + GPW) - wgbase : 0;
  for (int off = 1; off < GPW; off <<= 1) {
    if (!__any_sync(0xffffffffu, q + off < seg_end)) break;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      const float o = __shfl_down_sync(0xffffffffu, r[k], off * G);
      if (q + off < seg_end) r[k] += o;
    }
  }
  // (2) teams crossing warps: group 0 of each warp publishes, the owner adds the later warps.
  extern __shared__ float part[];  // [warps][G * VEC]
  if (block_has_cross_warp_team) {  // block-uniform: other blocks skip the barrier
    const int chunk = G * VEC;
    if (active && q == 0) {
#pragma unroll
      for (int k = 0; k < VEC; k++) part[warp * chunk + sub * VEC + k] = r[k];
    }
    __syncthreads();
    if (cell >= 0) {
      for (int w = warp + 1; w * GPW < team_end; ++w) {
#pragma unroll
        for (int k = 0; k < VEC; k++) r[k] += part[w * chunk + sub * VEC + k];
      }
    }
  }

  if (cell >= 0) {  // the owner group: one write of this cell's channel chunk
    unsigned int ow[OUT_WORDS];
    if constexpr (sizeof(OUT) == 4) {
#pragma unroll
      for (int k = 0; k < VEC; k++) ow[k] = __float_as_uint(r[k] * out_scale);
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

#define BEVPOOL_V3G_ENTRY(NAME, IN, VEC, ACC_F32, STREAM, UNROLL, G_FIXED, C_FIXED, PREFETCH)              \
  extern "C" __global__ void __launch_bounds__(BEVPOOL_V3G_MAX_BLOCK) NAME(                                                 \
      const IN* depth, const IN* feat, const int4* slots, const int2* pidx, const int* empty_cells,        \
      int n_empty, int compute_blocks, int c, int g, float out_scale, Io<IN>::Out* out) {                  \
    bevpool_v3g_body<IN, VEC, ACC_F32, STREAM, UNROLL, G_FIXED, C_FIXED, PREFETCH>(                        \
        depth, feat, slots, pidx, empty_cells, n_empty, compute_blocks, c, g, out_scale, out);             \
  }
