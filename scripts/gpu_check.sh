#!/usr/bin/env bash
# One device call: build (NVRTC) -> GPU tests -> Table-1 benchmark -> Nsight Compute summary.
# Usage (repo root, on the GPU machine):  scripts/gpu_check.sh [--no-tests] [--no-ncu] [--no-frame] [--no-bench] [--no-ros]
#                                         [--no-inprocess] [--tune W1,W2]
# Results go to $OUT (default ./gpu_out): h200.json, h200_meta.json, h200.md, gpu_report.jsonl,
# pytest.log, bench.log, h200_frame_latency_cuda.json, ncu.txt, env.txt.  Extra bench flags: BENCH_ARGS="...".
# ROS block (needs .whl/ros_py312.tar.xz from scripts/prepare_gpu_wheels.sh, carried): ros_pytest.log,
# h200_node_latency.json (one row per configuration in ROS_LATENCY), ros_latency.md, latency_runs.tgz (each
# run's .json and .md, numbered), ros_install.log,
# flood_cuda.json/.log (ROS_FLOODS floods against the node on the cuda backend), pause_cuda.json/.log (ROS_PAUSES).
# In-process block (BevPooler, no ROS; needs PyTorch and CuPy with CUDA): inprocess_pytest.log, and one row per
# configuration in INPROCESS_LATENCY appended to h200_node_latency.json, inprocess_latency.md; the calls' host
# side without the GPU: inprocess_host_cost.md/.json; the cold path and the call's floors: cold_path.json/.txt.
set -u -o pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export BEVPOOL_KERNEL_CACHE=${BEVPOOL_KERNEL_CACHE:-/tmp/bevpool_kcache}
RUN_TESTS=1 RUN_NCU=1 RUN_FRAME=1 RUN_BENCH=1 RUN_ROS=1 RUN_INPROCESS=1 TUNE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) RUN_TESTS=0 ;;
    --no-ncu) RUN_NCU=0 ;;
    --no-frame) RUN_FRAME=0 ;;
    --no-bench) RUN_BENCH=0 ;;
    --no-ros) RUN_ROS=0 ;;
    --no-inprocess) RUN_INPROCESS=0 ;;
    --tune) TUNE="$2"; shift ;;
    *) echo "unknown flag $1"; exit 2 ;;
  esac
  shift
done
status=0
rm -f "$OUT/h200_node_latency.json"  # the ROS and in-process blocks append their rows to it

{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  $PY -c 'import sys, numpy, cuda.bindings; print(sys.version); print("numpy", numpy.__version__, "cuda-bindings", cuda.bindings.__version__)'
  $PY -m pip list 2>/dev/null | grep -i -E "nvrtc|cuda-runtime|pyyaml|hypothesis|pytest" || true
  t0=$(date +%s.%N)
  $PY -c 'from bevpool_ros.device.nvrtc_build import get_kernel_image, nvrtc_version; print("nvrtc", nvrtc_version()); print("sm_90 cubin bytes", len(get_kernel_image("sm_90")))'
  echo "compile s: $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null)"
} > "$OUT/env.txt" 2>&1 || status=1
# the hand-off core (bevpool_ros/handoff/native: C++, loaded with ctypes) for this machine, before any test:
# every test and benchmark below runs it (BEVPOOL_NATIVE=auto, the default) and the hand-off benchmarks its
# Python twin too (--native off)
$PY -m bevpool_ros.handoff.native.build >> "$OUT/env.txt" 2>&1 || status=1
export BEVPOOL_NATIVE=${BEVPOOL_NATIVE:-auto}
cat "$OUT/env.txt"

if [ "$RUN_TESTS" = 1 ]; then
  rm -f "$OUT/gpu_report.jsonl"
  # every gpu-marked test that needs no rclpy (the node tests run on the CPU machines)
  BEVPOOL_GPU_REPORT="$OUT/gpu_report.jsonl" timeout 300 $PY -m pytest -q --no-header -p no:cacheprovider \
      -m gpu -rs test/test_cuda_backend_gpu.py test/test_gpu_frame_gpu.py test/test_depth_image_gpu.py \
      test/test_rig_variants_gpu.py test/test_backend_fallback.py test/test_tensorrt_backend.py \
      test/test_tensorrt_build.py test/test_pooling_fp8_codes.py test/test_gpu_share.py test/test_kernel_copies_gpu.py 2>&1 | tee "$OUT/pytest.log" | tail -25 || status=1
fi

# the node's pooling stage per frame (no ROS on this machine): payloads in -> BEV in the message payload
if [ "$RUN_FRAME" = 1 ]; then
  timeout 120 $PY bench/frame_latency.py --backend cuda --precision fp16 fp8 --wire-dtype float16 float32 float8_e4m3 \
      --out-dtype float16 float32 --prefix h200_ --out "$OUT" 2>&1 | tee -a "$OUT/frame_latency.log" | tail -9 || status=1
  # depth cameras (input.depth_mode: image): 640x480 16UC1 images, expanded into distributions on the device
  timeout 60 $PY bench/frame_latency.py --backend cuda --precision fp16 fp8 --wire-dtype float16 --out-dtype float16 \
      --depth-input distribution image --prefix h200_depth_image_ --out "$OUT" 2>&1 | tee -a "$OUT/frame_latency.log" \
      | tail -5 || status=1
fi

if [ "$RUN_BENCH" = 1 ]; then
  # shellcheck disable=SC2086
  timeout 280 $PY -m bevpool_ros.cli.bench --json "$OUT/h200.json" --md "$OUT/h200.md" --hot \
      ${TUNE:+--tune $TUNE} ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -av "^tune" || status=1
fi

if [ "$RUN_NCU" = 1 ] && command -v ncu >/dev/null; then
  timeout 100 ncu --clock-control none -k regex:bevpool_ \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      $PY -m bevpool_ros.cli.bench --ncu-once ${NCU_WORKLOADS:-canonical,blog49,very_large} ${BENCH_ARGS:-} \
      > "$OUT/ncu.txt" 2>&1 || echo "ncu failed (see ncu.txt)"
  grep -E "bevpool_|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput" "$OUT/ncu.txt" | head -120
fi
# ---- TensorRT plugin block (owner: tensorrt helper) -------------------------------------------------
# No TensorRT on this machine: the plugin's runtime half runs through a stand-in of the TensorRT base
# classes (backends/tensorrt/standin.py): two calibrations through one plugin config vs the FP64
# reference, host cost per frame eager vs CUDA graph, the plugin inside the shared GpuFrame.
# Writes $OUT/trt_plugin_h200.json (commit as bench/results/trt_plugin_h200.json). Skip: RUN_TRT=0.
if [ "${RUN_TRT:-1}" = 1 ]; then
  timeout 100 $PY -m pytest -q --no-header -p no:cacheprovider -m gpu -rs test/test_tensorrt_plugin_gpu.py \
      2>&1 | tee "$OUT/trt_plugin_pytest.log" | tail -4 || status=1
  timeout 150 $PY bench/trt_plugin_host_cost.py --out "$OUT" 2>&1 | tee "$OUT/trt_plugin.log" | tail -8 || status=1
fi
# ---- end of the TensorRT plugin block ----------------------------------------------------------------
# ---- TensorRT C++ plugin library block (owner: trtlib helper) ----------------------------------------
# No TensorRT here either: bench/trt_cpp_plugin.py builds libbevpool_trt_plugin.so for this GPU
# (scripts/build_trt_plugin.sh, nvcc + cmake) and its driver program plays TensorRT's part: nuScenes
# (two calibrations, one config) and two rig variants, fp16 and fp8, enqueue eager and from a CUDA
# graph over NaN-poisoned outputs vs the FP64 reference and bitwise vs the NVRTC build; host time per
# enqueue. Needs the TensorRT headers: BEVPOOL_TRT_HEADERS (the folder holding 10.13/include), else
# shared/, ../shared/ or .carry/ third_party copies. Writes $OUT/trt_cpp_plugin_h200.json (commit as
# bench/results/trt_cpp_plugin_h200.json). Skip: RUN_TRT_CPP=0.
if [ "${RUN_TRT_CPP:-1}" = 1 ]; then
  trt_headers=""
  for d in "${BEVPOOL_TRT_HEADERS:-}" shared/third_party/tensorrt-oss-headers \
           ../shared/third_party/tensorrt-oss-headers .carry/tensorrt-oss-headers; do
    if [ -n "$d" ] && [ -f "$d/10.13/include/NvInferRuntime.h" ]; then trt_headers=$d; break; fi
  done
  if [ -z "$trt_headers" ]; then
    echo "TensorRT C++ plugin: no TensorRT headers found (set BEVPOOL_TRT_HEADERS)"; status=1
  else
    BEVPOOL_TRT_HEADERS=$trt_headers timeout 500 $PY bench/trt_cpp_plugin.py --out "$OUT" \
        --build-dir /tmp/bevpool_trt_cpp_build 2>&1 | tee "$OUT/trt_cpp_plugin.log" | tail -9 || status=1
  fi
fi
# ---- end of the TensorRT C++ plugin library block -----------------------------------------------------

# --- ROS 2 on the GPU machine: the carried cp312 runtime, the ROS test suite, the node's latency --------
# Publisher, node and subscriber in three processes over real DDS (and the GPU hand-off).
# ROS_FRAMES (default 1000) sets per configuration at 30 Hz; ROS_MARK the pytest marker expression;
# ROS_TESTS the test paths (default test/; one after the other the whole suite takes ~12 min there:
# ROS_JOBS=6 runs it one pytest per file, six at once, in ~2.5 min; ROS_MARK="" selects every test).
if [ "$RUN_ROS" = 1 ]; then
  ROS_PREFIX=${ROS_PREFIX:-/tmp/bevpool_ros_runtime}
  if scripts/install_ros_runtime.sh "${ROS_ARCHIVE:-.whl/ros_py312.tar.xz}" "$ROS_PREFIX" "$PY" \
      > "$OUT/ros_install.log" 2>&1; then
    tail -1 "$OUT/ros_install.log"
    (
      # shellcheck disable=SC1091
      . "$ROS_PREFIX/ros_env.sh"
      RPY=$PY rstatus=0
      # the whole suite but the kernel GPU tests above, now with a GPU present (backends pick cuda);
      # ROS_JOBS > 1: one pytest per file, that many at once (scripts/ros_suite_parallel.sh)
      { tstatus=0
        if [ "${ROS_JOBS:-1}" -gt 1 ]; then
          timeout "${ROS_TEST_TIMEOUT:-600}" scripts/ros_suite_parallel.sh "${ROS_JOBS}" "$OUT/ros_pytest_files" \
              -m "${ROS_MARK-not gpu}" -- ${ROS_TESTS:-test/} || tstatus=1
        else
          # shellcheck disable=SC2086
          timeout "${ROS_TEST_TIMEOUT:-600}" $RPY -m pytest -q -rs --no-header -p no:cacheprovider -m "${ROS_MARK-not gpu}" \
              ${ROS_TESTS:-test/} --ignore=test/test_eval_many.py --ignore=test/test_colcon_install.py || tstatus=1  # Ray, colcon: CI only
        fi
        if [ "${ROS_HANDOFF_TESTS:-1}" = 1 ]; then  # 0: when the suite is split over calls, run these in one
          timeout 120 $RPY -m pytest -q --no-header -p no:cacheprovider test/test_handoff_gpu.py || tstatus=1
          # the hand-off core against its Python twin: ring copies, a set's announcements, a second process
          timeout 300 $RPY -m pytest -q -rs --no-header -p no:cacheprovider test/test_handoff_native_gpu.py || tstatus=1
          # the input hand-off: producer process + node + consumer on this GPU (issue 15 item 2)
          timeout "${ROS_HANDOFF_TIMEOUT:-420}" $RPY -m pytest -q -rs --no-header -p no:cacheprovider test/test_handoff_input_gpu.py \
              || tstatus=1
        fi
        exit $tstatus
      } 2>&1 | tee "$OUT/ros_pytest.log" | { grep -E "passed|failed|error|FAILED|ERROR" | tail -40; true; } || rstatus=1
      # robot conditions: ROS_FLOODS floods of 30 s in a row against one node on the cuda backend, each
      # followed by 200 sets at 20 Hz (recovery) and valid sets that must all come back (bench/flood.py;
      # 0: skip); about 55 s each (ROS_FLOOD_ARGS: more bench/flood.py arguments, e.g. "--stream 100
      # --valid-sets 2", ~40 s each). ROS_PAUSES="10 60": SIGSTOP pauses the node must survive (bench/pause.py;
      # empty: skip).
      if [ "${ROS_FLOODS:-5}" -gt 0 ]; then
        # shellcheck disable=SC2086
        timeout $(( ${ROS_FLOODS:-5} * 75 + 90 )) $RPY bench/flood.py --floods "${ROS_FLOODS:-5}" --seconds 30 \
            --backend cuda --precision fp16 ${ROS_FLOOD_ARGS:-} --json "$OUT/flood_cuda.json" 2>&1 \
            | tee "$OUT/flood_cuda.log" | tail -"$(( ${ROS_FLOODS:-5} + 2 ))" || rstatus=1
      fi
      if [ -n "${ROS_PAUSES-10 60}" ]; then
        # shellcheck disable=SC2086
        timeout 300 $RPY bench/pause.py --backend cuda --pauses ${ROS_PAUSES-10 60} --json "$OUT/pause_cuda.json" \
            2>&1 | tee "$OUT/pause_cuda.log" | tail -4 || rstatus=1
      fi
      rm -rf "$OUT/ros_latency.md" "$OUT/latency_runs"; mkdir -p "$OUT/latency_runs"
      # ROS_LATENCY="precision bev_dtype transport [rig [rate_hz [input_dtype [extra,bench,args]]]];..." (empty:
      # skip the runs); defaults: nuscenes, 30 Hz, float16 inputs. About ROS_FRAMES / rate + 15 s each. The
      # node runs its default executor (auto: the EventsExecutor where rclpy has it); the second dds row is the DDS
      # deployment docs/dds.md measures (consumer heap settings too), the third the same under single_threaded;
      # handoff_both runs with the hand-off core (built above) and again with --native off (its Python twin).
      IFS=';' read -r -a cfgs <<< "${ROS_LATENCY-fp16 float16 dds nuscenes 30 float16 --split;fp16 float16 dds nuscenes 30 float16 --split,--consumer-heap;fp16 float16 dds nuscenes 30 float16 --split,--consumer-heap,--param=executor=single_threaded;fp8 float16 dds;fp16 float32 dds nuscenes 30 float32;fp16 float16 handoff_out;fp16 float16 handoff_out nuscenes 100;fp16 float16 handoff_out wide_c256;fp16 float16 handoff_both;fp16 float16 handoff_both nuscenes 30 float16 --native,off;fp16 float16 handoff_both nuscenes 100;fp16 float16 handoff_both wide_c256}"
      run=0
      for cfg in "${cfgs[@]}"; do
        # shellcheck disable=SC2086
        set -- $cfg
        rig=${4:-nuscenes} rate=${5:-30} idt=${6:-float16} extra=${7:-} run=$((run + 1))
        # shellcheck disable=SC2046
        timeout $(( ${ROS_FRAMES:-1000} / ${rate%.*} + ${ROS_CFG_SLACK:-90} )) $RPY bench/latency.py --backend cuda \
            --precision "$1" --bev-dtype "$2" --transport "$3" --rig "$rig" --rate "$rate" --input-dtype "$idt" \
            --frames "${ROS_FRAMES:-1000}" --out "$OUT/latency_runs/${run}_$1_$2_$3_${rig}_${rate}_$idt${extra//[^a-z]/_}" \
            --rows "$OUT/h200_node_latency.json" $(echo "$extra" | tr ',' ' ') >> "$OUT/ros_latency.md" 2>&1 \
            || { echo "latency $cfg failed (see ros_latency.md)"; rstatus=1; }
      done
      [ -f "$OUT/ros_latency.md" ] && grep -E "^# |end to end|pooling stage|kernel alone|^Sets|^Drops" "$OUT/ros_latency.md"
      # one archive: a call brings back only a few files
      tar czf "$OUT/latency_runs.tgz" -C "$OUT" latency_runs && rm -rf "$OUT/latency_runs"
      # a GPU shared with networks (docs/gpu_sharing.md): GPU_SHARE_REPEATS rounds (0: skip) of the cells in
      # GPU_SHARE_CELLS ("transport:condition[:bench,args]" separated by spaces; condition alone | gemm | gemm_mps |
      # conv | conv_mps | thread_gemm: inprocess only, the load in the caller's process), each round in that order,
      # so drift hits every cell alike; FP16, float16 in and out, nuScenes, GPU_SHARE_FRAMES sets at 30 Hz; dds runs
      # with the consumer heap settings docs/dds.md advises; the last two default cells leave the pool call SMs
      # (the load at 90% of them: MPS's per-client share, a green context). Rows appended to h200_node_latency.json
      # and summed up by bench/gpu_share_table.py in gpu_share.md. About 45 s per cell: the default 11 cells take
      # ~9 min a round, so one round per device call (GPU_SHARE_REPEATS=1), then
      # `python bench/gpu_share_table.py CALL1.json CALL2.json CALL3.json` over the calls' rows.
      if [ "${GPU_SHARE_REPEATS:-0}" -gt 0 ]; then
        cells=${GPU_SHARE_CELLS:-handoff_both:alone dds:alone inprocess:alone handoff_both:gemm dds:gemm inprocess:gemm handoff_both:gemm_mps dds:gemm_mps inprocess:gemm_mps inprocess:gemm_mps:--gpu-load-sm-percent,90 inprocess:thread_gemm:--gpu-load-sm-percent,90}
        for rep in $(seq 1 "$GPU_SHARE_REPEATS"); do
          for cell in $cells; do
            IFS=':' read -r tr cond cellargs <<< "$cell"
            case "$cond" in
              alone) load=() ;;
              thread_*) load=(--gpu-load "${cond#thread_}" --gpu-load-in thread) ;;
              *_mps) load=(--gpu-load "${cond%_mps}" --mps) ;;
              *) load=(--gpu-load "$cond") ;;
            esac
            extra=()
            [ "$tr" = inprocess ] && extra=(--tensors torch)
            [ "$tr" = dds ] && extra=(--consumer-heap)
            # shellcheck disable=SC2046
            timeout $(( ${GPU_SHARE_FRAMES:-1000} / 30 + 100 )) $RPY bench/latency.py --backend cuda --precision fp16 \
                --bev-dtype float16 --input-dtype float16 --transport "$tr" --rate 30 --frames "${GPU_SHARE_FRAMES:-1000}" \
                "${load[@]}" "${extra[@]}" $(echo "$cellargs" | tr ',' ' ') --out "/tmp/bevpool_share_${tr}_${cond}_$rep" \
                --rows "$OUT/h200_node_latency.json" >> "$OUT/gpu_share_runs.md" 2>&1 \
                || { echo "gpu share $cell $rep failed (see gpu_share_runs.md)"; rstatus=1; }
            echo "$(date -u +%T) $cell $rep done"
          done
        done
        $RPY bench/gpu_share_table.py "$OUT/h200_node_latency.json" > "$OUT/gpu_share.md" && cat "$OUT/gpu_share.md"
      fi
      # optional (ROS_DDS_HOP=1, ~1 min): the DDS hop of one 1 KB / 2.6 MB / 5.2 MB message per transport
      # setting on an idle 16-core host (docs/dds.md); the CPU machines are too loaded for clean numbers
      if [ "${ROS_DDS_HOP:-0}" = 1 ]; then
        timeout 240 $RPY bench/dds_hop.py --messages 120 --out "$OUT/dds_hop_h200.json" \
            --settings shipped_profile,builtin_default,shipped_profile_sync,shipped_profile_async,bounded_type,bounded_type_qos_from_xml \
            2>&1 | grep '^{"setting' | cut -c1-230
      fi
      exit $rstatus
    ) || status=1
  else
    echo "ROS runtime not installed (see ros_install.log)"; tail -5 "$OUT/ros_install.log"; status=1
  fi
fi
# --- In-process block: BevPooler with PyTorch / CuPy tensors (issue 15), no ROS ---------------------------------
# The device-path GPU tests (torch and CuPy tensors vs the FP64 reference), then the in-process latency rows:
# INPROCESS_LATENCY="precision bev_dtype input_dtype rig rate_hz tensors;..." (empty: skip), INPROCESS_FRAMES sets
# (default 1000). Each row: about INPROCESS_FRAMES / rate + 10 s.
if [ "$RUN_INPROCESS" = 1 ]; then
  timeout "${INPROCESS_TEST_TIMEOUT:-300}" $PY -m pytest -q --no-header -p no:cacheprovider -rs \
      test/test_inprocess_gpu.py test/test_inprocess.py 2>&1 | tee "$OUT/inprocess_pytest.log" | tail -12 || status=1
  rm -f "$OUT/inprocess_latency.md"
  IFS=';' read -r -a cfgs <<< "${INPROCESS_LATENCY-fp16 float16 float16 nuscenes 30 torch;fp8 float16 float16 nuscenes 30 torch;fp8 float16 float8_e4m3 nuscenes 30 torch;fp16 float16 float16 wide_c256 30 torch;fp16 float16 float16 nuscenes 100 torch;fp16 float32 float32 nuscenes 30 driver}"
  for cfg in "${cfgs[@]}"; do
    # shellcheck disable=SC2086
    set -- $cfg
    timeout $(( ${INPROCESS_FRAMES:-1000} / ${5%.*} + 60 )) $PY bench/latency.py --transport inprocess --backend cuda \
        --precision "$1" --bev-dtype "$2" --input-dtype "$3" --rig "$4" --rate "$5" --tensors "$6" \
        --frames "${INPROCESS_FRAMES:-1000}" --out "/tmp/bevpool_inprocess_$1_$2_$3_$4_$5_$6" \
        --rows "$OUT/h200_node_latency.json" >> "$OUT/inprocess_latency.md" 2>&1 \
        || echo "in-process latency $cfg failed (see inprocess_latency.md)"
  done
  [ -f "$OUT/inprocess_latency.md" ] && grep -E "^# |end to end|on the host|kernel alone|p99 minus|Error|error" \
      "$OUT/inprocess_latency.md"
  # the same calls' Python on this host's CPU over a counting stand-in driver (driver calls per call, no GPU
  # time): the real call's host cost minus this is what the driver calls cost here. Skip: INPROCESS_HOST_COST=0.
  if [ "${INPROCESS_HOST_COST:-1}" = 1 ]; then
    timeout 300 $PY bench/inprocess_host_cost.py --calls 2000 --repeats 3 --json "$OUT/inprocess_host_cost.json" \
        2>&1 | tee "$OUT/inprocess_host_cost.md" || status=1
  fi
  # the per-set Python steps and the in-process call's floors (a bare graph launch, its device time) warm and
  # paced at 30 Hz: cold_path.json / .txt (about 70 s; needs the ROS runtime of the ROS block). Skip: COLD_PATH=0.
  if [ "${COLD_PATH:-1}" = 1 ] && $PY -c "import rclpy, bevpool_msgs" 2>/dev/null; then
    timeout 300 $PY bench/cold_path.py --calls 120 --pool --json "$OUT/cold_path.json" 2>&1 \
        | tee "$OUT/cold_path.txt" || status=1
  fi
fi
exit $status
