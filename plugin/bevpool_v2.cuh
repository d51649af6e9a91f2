// V2 baseline, after BEVDet's bev_pool_v2 (structure reproduced, code written here):
// one thread per (interval, channel); index = tid / C and channel = tid % C decoded at run
// time; every thread re-reads the interval's indices (C times per point in total); FP16 in,
// FP32 accumulate, one FP32 write per (cell, channel). Empty cells are NOT written: the host
// zeroes the output first (a memset that is part of every V2 timing, as in BEVDet).
#pragma once
#include "bevpool_common.cuh"

extern "C" __global__ void bevpool_v2_fp16(int c, int n_intervals,
                                           const __half* __restrict__ depth,
                                           const __half* __restrict__ feat,
                                           const int* __restrict__ ranks_depth,
                                           const int* __restrict__ ranks_feat,
                                           const int* __restrict__ ranks_bev,
                                           const int* __restrict__ interval_starts,
                                           const int* __restrict__ interval_lengths,
                                           float* __restrict__ out) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  int index = idx / c;
  int cur_c = idx % c;
  if (index >= n_intervals) return;
  int interval_start = interval_starts[index];
  int interval_length = interval_lengths[index];
  float psum = 0.f;
  for (int i = 0; i < interval_length; i++) {
    const float d = __half2float(depth[ranks_depth[interval_start + i]]);
    const float f = __half2float(feat[ranks_feat[interval_start + i] * c + cur_c]);
    psum += d * f;
  }
  out[ranks_bev[interval_start] * c + cur_c] = psum;
}
