// Shared device helpers for every BEV-pooling kernel (compiled at run time by NVRTC).
// Operator (docs/contracts.md):  bev[ranks_bev[t], c] += depth[ranks_depth[t]] * feat[ranks_feat[t], c]
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

typedef unsigned char fp8_e4m3;  // raw E4M3 byte; converted with the cuda_fp8.h intrinsics

// One E4M3 byte -> float (exact: every E4M3 value is representable in half and float).
__device__ __forceinline__ float fp8_to_float(fp8_e4m3 v) {
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3);
  return __half2float(__half(h));
}

// Two packed E4M3 bytes (low byte = lower channel) -> __half2 (one cvt instruction on sm_89+).
__device__ __forceinline__ __half2 fp8x2_to_half2(unsigned short v) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
  return __half2(h);
}

// Streaming store: st.global.cs marks the line evict-first, so a large output does not push
// the (re-read, small) index arrays out of L2.
__device__ __forceinline__ void store_f4(float4* p, float4 v, bool streaming) {
  if (streaming) __stcs(p, v); else *p = v;
}
__device__ __forceinline__ void store_u4(uint4* p, uint4 v, bool streaming) {
  if (streaming) __stcs(p, v); else *p = v;
}
