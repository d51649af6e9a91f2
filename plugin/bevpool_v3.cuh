// BEVPoolV3: interval-owned, no atomics, every output cell written exactly once by one launch.
//
// Work unit = a "slot": a run of at most K consecutive entries of ONE interval (entries are the
// interval's points, or with DEPTH_PAIRS its points merged in pairs that share a feature row).
// A short interval is one slot; a long one is split over a TEAM of consecutive groups of one
// block whose partial sums are reduced (shuffles within a warp, shared memory across warps) and
// written once by the team's first group (the owner). The split is computed once per
// calibration (bevpool_ros/kernels/schedule.py).
//
// A GROUP of G lanes executes a slot, each lane owning VEC consecutive channels: the G lanes
// load the same index pair and depth value (one broadcast request) and neighbouring feature
// bytes (one coalesced row of G * VEC channels). Group q of warp w = lanes [q*G, (q+1)*G);
// groups per warp GPW = 32 / G (lanes beyond GPW*G idle); a block holds (blockDim.x/32) * GPW
// groups; slots[block * groups_per_block + g].
//
//   slots[s] = int4 {first entry, entry count, output cell (-1: not the writer),
//                    team end | cross-warp flag << BEVPOOL_TEAM_FLAG_SHIFT}
//                    (team end = group index in the block one past the team's last group; the
//                    flag is set on every slot of a block holding a team that crosses a warp)
//   pidx[e]  = int2 {ranks_depth, ranks_feat * C}; with DEPTH_PAIRS bit 31 of .y marks a pair:
//                    the entry's weight is depth[.x] + depth[.x + pair_stride] (one row load)
//   empty[i] = a cell without points: zeroed by the trailing blocks of the same launch.
// grid = (compute_blocks + zero_blocks, C / (G * VEC)); blockIdx.y selects a G*VEC channel chunk.
// Dynamic shared memory: (blockDim.x / 32) * G * VEC floats (cross-warp team partials).
// Entry points: generated from launch.V3_KERNELS (nvrtc_build.entry_points_source).
#pragma once
#include "bevpool_v3_device.cuh"

template <typename IN, int VEC, bool ACC_F32, bool STREAM, int UNROLL, int G_FIXED, int C_FIXED, bool PREFETCH,
          bool DEPTH_PAIRS>
__device__ __forceinline__ void bevpool_v3_body(const IN* __restrict__ depth, const IN* __restrict__ feat,
                                                const int4* __restrict__ slots, const int2* __restrict__ pidx,
                                                const int* __restrict__ empty_cells, int n_empty,
                                                int compute_blocks, int c_runtime, int g_runtime, int pair_stride,
                                                float out_scale, typename Io<IN>::Out* __restrict__ out) {
  constexpr int IN_BYTES = VEC * (int)sizeof(IN);
  constexpr int IN_WORDS = tile_words(IN_BYTES);
  constexpr unsigned int TEAM_MASK = (1u << BEVPOOL_TEAM_FLAG_SHIFT) - 1u;
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

  const int block = blockIdx.x;
  if (block >= compute_blocks) {  // trailing blocks: the empty cells' single write
    const int e = (block - compute_blocks) * gpb + gib;
    if (active && e < n_empty) write_zeros<IN, VEC>(out + (size_t)__ldg(empty_cells + e) * C + c0, STREAM);
    return;
  }

  // idle lanes read their warp's first slot only for the block-uniform flag
  const int4 s = __ldg(slots + block * gpb + (active ? gib : warp * GPW));
  const int begin = s.x, count = active ? s.y : 0, cell = active ? s.z : -1;
  const int team_end = active ? (int)((unsigned int)s.w & TEAM_MASK) : 0;
  const bool block_has_cross_warp_team = (s.w >> BEVPOOL_TEAM_FLAG_SHIFT) & 1;  // same on the whole block

  LaneAcc<IN, VEC, ACC_F32> acc;
  acc.zero();

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
    typename LaneAcc<IN, VEC, ACC_F32>::Weight dv[UNROLL];
    unsigned int fw[UNROLL][IN_WORDS];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      int off = ix[u].y;
      dv[u] = LaneAcc<IN, VEC, ACC_F32>::weight(Io<IN>::depth_h(depth, ix[u].x));
      if constexpr (DEPTH_PAIRS) {
        if (off < 0) {  // two depth bins of one pixel in this cell: one row, summed weights
          dv[u] += LaneAcc<IN, VEC, ACC_F32>::weight(Io<IN>::depth_h(depth, ix[u].x + pair_stride));
          off &= 0x7fffffff;
        }
      }
      load_words<IN_BYTES>(feat + off + c0, fw[u]);
    }
    if (PREFETCH && j + UNROLL < count) {
#pragma unroll
      for (int u = 0; u < UNROLL; u++) ix[u] = __ldg(pidx + begin + min(j + UNROLL + u, count - 1));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
      if (j + u < count) acc.fma(dv[u], fw[u]);
  }

  float r[VEC];
  acc.to_float(r);

  // (1) groups of one warp: segmented shuffle tree over group index (stride G lanes); after
  // offset `off`, group q holds the sum of groups [q, min(q + 2*off, seg_end)).
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

  if (cell >= 0) write_tile<IN, VEC>(out + (size_t)cell * C + c0, r, out_scale, STREAM);  // the owner's one write
}

// One extern "C" entry point per row of launch.V3_KERNELS (the generated bevpool_entries.cuh).
#define BEVPOOL_V3_ENTRY(NAME, IN, VEC, ACC_F32, STREAM, UNROLL, G_FIXED, C_FIXED, PREFETCH, DEPTH_PAIRS,       \
                         MAX_THREADS)                                                                           \
  extern "C" __global__ void __launch_bounds__(MAX_THREADS) NAME(                                               \
      const IN* depth, const IN* feat, const int4* slots, const int2* pidx, const int* empty_cells,             \
      int n_empty, int compute_blocks, int c, int g, int pair_stride, float out_scale, Io<IN>::Out* out) {      \
    bevpool_v3_body<IN, VEC, ACC_F32, STREAM, UNROLL, G_FIXED, C_FIXED, PREFETCH, DEPTH_PAIRS>(                 \
        depth, feat, slots, pidx, empty_cells, n_empty, compute_blocks, c, g, pair_stride, out_scale, out);     \
  }
