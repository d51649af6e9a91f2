"""BevPooler's device path on a real GPU, with PyTorch and CuPy tensors.

Every input dtype (float32, float16, E4M3 codes with their scales) x precision (fp16, fp8) x grid
dtype, from both frameworks, against the FP64 reference, into outputs poisoned first (NaN, and
0xFF bytes); several rigs; graphs replayed over new values; ordering on the caller's stream
(a non-default one, the framework's current one, one named explicitly), with no host wait: the
call returns while a long kernel enqueued before it still runs; calls from worker threads and
on alternating streams; replayed graphs' own flags and events; recycled grid memory reused on
another stream only after its consumer; the value checks; the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
import rig_variants as rv
from test_gpu_frame_gpu import assert_matches, in_thread
from test_inprocess import DOC, doc_example

from bevpool_ros import BevPooler
from bevpool_ros.errors import InputError, NonFiniteInput, NonFiniteOutput
from bevpool_ros.fp8 import decode
from bevpool_ros.kernels.fp8 import quantize
from bevpool_ros.workloads import get_workload

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 4_000_000_000  # ~2 s of GPU spinning: far longer than any host call here
SCALES = {"fp16": (4.0, 2.0), "fp8": (16.0, 16.0)}  # raw E4M3 scales (powers of two) per precision


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    return torch


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


def pooler(source, precision="fp16", **kw) -> BevPooler:
    p = BevPooler(source, precision=precision, backend="cuda", fallback=False, autotune=False, **kw)
    assert p.on_gpu and p.precision == precision
    return p


def host_inputs(smap, seed, wire, precision):
    """(depth, feat) as the tensors to hand over, and (d, f) as assert_matches wants them: what
    the kernel saw before its own rounding (float16 values at fp16, the values at fp8)."""
    rng = np.random.default_rng(seed)
    d, f = rng.random(smap.depth_shape), rng.uniform(-1, 1, smap.feat_shape)
    if wire == "e4m3":
        sd, sf = SCALES[precision]
        cd, cf = quantize(d, sd), quantize(f, sf)
        d, f = decode(cd, np.float64) / sd, decode(cf, np.float64) / sf
        return (cd, cf), (d, f)
    d, f = d.astype(wire), f.astype(wire)
    if precision == "fp16":
        return (d, f), (d.astype(np.float16), f.astype(np.float16))
    return (d, f), (d.astype(np.float64), f.astype(np.float64))


def to_device(framework, name, a):
    if name == "torch":
        return framework.from_numpy(np.ascontiguousarray(a)).cuda()
    return framework.asarray(a)


def to_host(framework, name, x):
    return x.cpu().numpy() if name == "torch" else framework.asnumpy(x)


def poisoned_out(framework, name, shape, dtype, byte=None):
    """A device grid filled with NaN (or every byte ``byte``) before the pool writes it."""
    if name == "torch":
        t = framework.empty(shape, dtype=getattr(framework, np.dtype(dtype).name), device="cuda")
        t.view(framework.uint8).fill_(byte) if byte is not None else t.fill_(float("nan"))
        return t
    t = framework.empty(shape, dtype=dtype)
    t.view(framework.uint8).fill(byte) if byte is not None else t.fill(np.nan)
    return t


@pytest.fixture(params=["torch", "cupy"])
def framework(request):
    return request.param, request.getfixturevalue(request.param)


# --- values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("wire", [np.float32, np.float16, "e4m3"])
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_every_input_dtype_matches_the_reference(framework, precision, wire, grid_dtype):
    name, fw = framework
    smap = get_workload("small")
    p = pooler(smap, precision, fp8_scales=SCALES[precision], grid_dtype=grid_dtype)
    what = f"{name} {precision} {wire} -> {np.dtype(grid_dtype).name}"
    for seed, byte in ((0, None), (1, 0xFF)):  # poisoned with NaN, then with 0xFF bytes
        (hd, hf), (d, f) = host_inputs(smap, seed, wire, precision)
        depth, feat = to_device(fw, name, hd), to_device(fw, name, hf)
        out = poisoned_out(fw, name, smap.bev_shape, grid_dtype, byte)
        grid = p.pool(depth, feat, out=out).check()
        assert grid.out is out and grid.dtype == grid_dtype
        assert_matches(to_host(fw, name, out), smap, precision, d, f, what)
        own = p.pool(depth, feat).check()  # the pooler's own buffer, in the grid dtype
        assert own.dtype == np.dtype(p.grid_dtype) and own.out is None
        assert_matches(
            to_host(fw, name, fw.from_dlpack(own)), smap, precision, d, f, f"{what}, own buffer"
        )
    p.close()


def test_the_documented_torch_example_runs(torch, capsys):
    exec(compile(doc_example("torch"), str(DOC), "exec"), {})
    assert "torch.Size([1, 10, 128, 128])" in capsys.readouterr().out


def test_torch_float8_tensors_are_e4m3_codes(torch):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    smap = get_workload("small")
    p = pooler(smap, "fp8", fp8_scales=SCALES["fp8"], grid_dtype=np.float32)
    (cd, cf), (d, f) = host_inputs(smap, 2, "e4m3", "fp8")
    depth = torch.from_numpy(cd).cuda().view(torch.float8_e4m3fn)  # only DLPack can describe it
    feat = torch.from_numpy(cf).cuda().view(torch.float8_e4m3fn)
    try:
        torch.utils.dlpack.to_dlpack(depth)
    except Exception:  # noqa: BLE001 - older PyTorch: float8 has no DLPack code there
        pytest.skip("this PyTorch cannot export float8_e4m3fn through DLPack")
    out = poisoned_out(torch, "torch", smap.bev_shape, np.float32)
    p.pool(depth, feat, out=out).check()
    assert_matches(out.cpu().numpy(), smap, "fp8", d, f, "torch float8_e4m3fn")


@pytest.mark.parametrize(
    "name", ["tri_c17", "quad_c64_d40_z2", "hexa_c100_z4", "duo_c256_z3", "blind_c80"]
)
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_several_rigs(torch, name, precision):
    rig = rv.rig(name)
    p = pooler(rig, precision, grid_dtype=np.float32)
    d, f = rv.random_inputs(rig, seed=7)
    depth, feat = (
        torch.from_numpy(d.astype(np.float16)).cuda(),
        torch.from_numpy(f.astype(np.float16)).cuda(),
    )
    out = poisoned_out(torch, "torch", p.grid_shape, np.float32)
    p.pool(depth, feat, out=out).check()
    seen = (
        (d.astype(np.float16), f.astype(np.float16))
        if precision == "fp16"
        else (d.astype(np.float16).astype(np.float64), f.astype(np.float16).astype(np.float64))
    )
    assert_matches(out.cpu().numpy(), p.smap, precision, *seen, f"{name} {precision}")


def test_the_nuscenes_rig_with_torch_both_precisions(torch, canonical_map):
    for precision in ("fp16", "fp8"):
        p = pooler(canonical_map, precision, grid_dtype=np.float16)
        (hd, hf), (d, f) = host_inputs(canonical_map, 3, np.float16, precision)
        grid = p.pool(torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda())
        bev = torch.from_dlpack(grid)
        del grid  # the tensor keeps the grid's memory alive
        assert bev.shape == tuple(canonical_map.bev_shape) and bev.dtype == torch.float16
        assert_matches(bev.cpu().numpy(), canonical_map, precision, d, f, f"nuScenes {precision}")
        p.close()


def test_graphs_replay_over_new_values(torch):
    """Same tensors (same addresses) frame after frame: captured once, and every replay reads
    what the tensors hold then."""
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    depth = torch.empty(smap.depth_shape, dtype=torch.float16, device="cuda")
    feat = torch.empty(smap.feat_shape, dtype=torch.float16, device="cuda")
    out = torch.empty(smap.bev_shape, dtype=torch.float32, device="cuda")
    for seed in range(4):
        (hd, hf), (d, f) = host_inputs(smap, seed, np.float16, "fp16")
        depth.copy_(torch.from_numpy(hd))
        feat.copy_(torch.from_numpy(hf))
        out.fill_(float("nan"))
        p.pool(depth, feat, out=out).check()
        assert_matches(out.cpu().numpy(), smap, "fp16", d, f, f"frame {seed}")
    stats = p.describe()
    assert stats["eager_frames"] == 1 and stats["graph_replays"] == 3


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_unaligned_tensors_are_copied_not_faulted(torch, precision):
    """Views 2 (inputs) and 4 (grid) bytes into their storage: the kernel's 16-byte vector loads
    and stores cannot take them in place, so they are copied; element-misaligned ones refused."""
    smap = get_workload("small")
    p = pooler(smap, precision, fp8_scales=SCALES[precision], grid_dtype=np.float32)
    wire = np.float16 if precision == "fp16" else "e4m3"
    (hd, hf), (d, f) = host_inputs(smap, 11, wire, precision)
    tdt = torch.float16 if precision == "fp16" else torch.uint8

    def shifted(host, offset_elements, dtype):
        n = host.size
        store = torch.empty(n + 16, dtype=dtype, device="cuda")
        view = store[offset_elements:offset_elements + n].view(host.shape)
        view.copy_(torch.from_numpy(np.ascontiguousarray(host)))
        assert view.data_ptr() % 16
        return view

    depth, feat = shifted(hd, 1, tdt), shifted(hf, 1, tdt)
    out = shifted(np.full(smap.bev_shape, np.nan, np.float32), 1, torch.float32)
    for _ in range(2):  # eager, then a captured graph
        out.fill_(float("nan"))
        p.pool(depth, feat, out=out).check()
        assert_matches(out.cpu().numpy(), smap, precision, d, f, f"unaligned {precision}")

    class OddAddress:  # a producer claiming float16 at an odd byte address
        __cuda_array_interface__ = {"shape": tuple(smap.depth_shape), "typestr": "<f2",
                                    "data": (depth.data_ptr() | 1, False), "version": 2}

    with pytest.raises(InputError, match="aligned"):
        p.pool(OddAddress(), feat)


def test_host_arrays_on_the_gpu_pooler_come_back_as_numpy():
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    (hd, hf), (d, f) = host_inputs(smap, 4, np.float32, "fp16")
    got = p.pool(hd, hf)
    assert isinstance(got, np.ndarray)
    assert_matches(got, smap, "fp16", d, f, "host arrays")


# --- streams and threads --------------------------------------------------------------------------
def test_ordered_on_a_side_stream_without_a_host_wait(torch):
    """On a non-default stream: a ~2 s kernel, then new input values, then the pool. The call
    returns while the long kernel still runs (no host wait), and the grid is of the new values
    (the pool ran after them, in stream order)."""
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    (hd, hf), (d, f) = host_inputs(smap, 5, np.float16, "fp16")
    depth = torch.zeros(smap.depth_shape, dtype=torch.float16, device="cuda")
    feat = torch.zeros(smap.feat_shape, dtype=torch.float16, device="cuda")
    src_d, src_f = torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # no stream argument: PyTorch's current stream
        torch.cuda._sleep(SLEEP_CYCLES)
        long_kernel_done = torch.cuda.Event()
        long_kernel_done.record(side)
        depth.copy_(src_d)
        feat.copy_(src_f)
        grid = p.pool(depth, feat)
        assert not long_kernel_done.query(), "pool waited for the stream on the host"
        assert not grid.ready()
    assert grid.stream == side.cuda_stream
    bev = torch.from_dlpack(grid)  # the default stream is made to wait for the grid
    assert_matches(bev.cpu().numpy(), smap, "fp16", d, f, "side stream")
    assert grid.ready()


def test_stream_argument_in_every_form(torch, cupy):
    smap = get_workload("small")
    p = pooler(smap, "fp8", grid_dtype=np.float16)
    (hd, hf), (d, f) = host_inputs(smap, 6, np.float32, "fp8")
    depth, feat = torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda()
    torch_stream, cupy_stream = torch.cuda.Stream(), cupy.cuda.Stream(non_blocking=True)
    for stream, handle in (
        (torch_stream, torch_stream.cuda_stream),
        (cupy_stream, cupy_stream.ptr),
        (torch_stream.cuda_stream, torch_stream.cuda_stream),
        (0, 0),
    ):
        torch.cuda.synchronize()  # the inputs were written on the default stream
        grid = p.pool(depth, feat, stream=stream)
        assert grid.stream == handle
        assert_matches(grid.numpy(), smap, "fp8", d, f, f"stream {stream!r}")


def test_cupy_current_stream_and_producer_stream(cupy):
    """CuPy exports its current stream with the array (__cuda_array_interface__ v3): a pool on
    another stream waits for it on the device."""
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    (hd, hf), (d, f) = host_inputs(smap, 7, np.float32, "fp16")
    producer, consumer = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    with producer:
        depth, feat = cupy.asarray(hd), cupy.asarray(hf)  # written on the producer stream
        grid = p.pool(depth, feat, stream=consumer)
    assert grid.stream == consumer.ptr
    with consumer:
        bev = cupy.from_dlpack(grid)
        assert_matches(cupy.asnumpy(bev), smap, "fp16", d, f, "cupy streams")


def test_from_worker_threads_on_alternating_streams(torch):
    """Calls from threads that never touched CUDA, each on its own stream: the device orders
    them (shared buffers) and every grid is its own inputs'."""
    smap = get_workload("small")
    p = in_thread(lambda: pooler(smap, "fp16", grid_dtype=np.float32))
    frames = [host_inputs(smap, 10 + i, np.float32, "fp16") for i in range(4)]
    tensors = [(torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda()) for (hd, hf), _ in frames]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in frames]
    grids = []
    for i, (depth, feat) in enumerate(tensors):
        with torch.cuda.stream(streams[i]):
            torch.cuda._sleep(SLEEP_CYCLES // 20 if i == 0 else 0)  # the first call's stream lags
        grids.append(in_thread(lambda: p.pool(depth, feat, stream=streams[i])))
    for grid, (_, (d, f)) in zip(grids, frames):
        assert_matches(grid.check().numpy(), smap, "fp16", d, f, "threads")


# --- the steady state: replayed graphs, recycled grid memory ------------------------------------
def test_replayed_calls_carry_their_own_flags_and_events(torch):
    """Frame after frame into the pooler's own grid, each dropped before the next: one memory,
    one slot, so one graph replayed, whose flag copy and event are its own nodes. Every
    replay's flags are its frame's (a poisoned frame between clean ones), and its event is
    recorded by the replay (not ready while a long kernel before it runs)."""
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    (hd, hf), (d, f) = host_inputs(smap, 12, np.float16, "fp16")
    depth, feat = torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda()
    bad = torch.from_numpy(hf).cuda()
    bad.view(-1, smap.channels)[int(smap.ranks_feat[0]), 0] = float("nan")
    clean = feat.clone()
    addresses = set()
    for frame, poisoned in enumerate((False, False, False, True, False, True, False)):
        feat.copy_(bad if poisoned else clean)  # same tensor, same address: the same binding
        grid = p.pool(depth, feat)
        addresses.add(grid.ptr)
        if poisoned:
            with pytest.raises(NonFiniteInput):
                grid.check()
        else:
            assert_matches(grid.check().numpy(), smap, "fp16", d, f, f"replay {frame}")
        grid = None
    assert len(addresses) == 1
    stats = p.describe()
    assert stats["eager_frames"] == 1 and stats["graph_replays"] == 6
    torch.cuda._sleep(SLEEP_CYCLES // 4)  # on the current stream, before a replayed call
    grid = p.pool(depth, feat)
    assert not grid.ready(), "the replayed event was recorded before the frame ran"
    assert_matches(grid.check().numpy(), smap, "fp16", d, f, "after a long kernel")
    assert p.describe()["graph_replays"] == 7


def test_replayed_calls_on_two_streams_stay_ordered(torch):
    """Calls alternating between streams A and B, each a graph replay by then: B's call waits
    on the device for A's (they share the pooler's buffers) through the event A's graph
    recorded; it is not ready while a long kernel holds A back, and both grids are right."""
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    frames = [host_inputs(smap, 30 + i, np.float32, "fp16") for i in range(2)]
    inputs = [(torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda()) for (hd, hf), _ in frames]
    outs = [torch.empty(smap.bev_shape, dtype=torch.float32, device="cuda") for _ in frames]
    torch.cuda.synchronize()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()

    def both(sleep_first: bool):
        if sleep_first:
            with torch.cuda.stream(a):
                torch.cuda._sleep(SLEEP_CYCLES // 4)
        ga = p.pool(*inputs[0], out=outs[0], stream=a)
        gb = p.pool(*inputs[1], out=outs[1], stream=b)
        return ga, gb

    for _ in range(3):  # eager, captured, replayed: the same slots when released in this order
        ga, gb = both(False)
        gb.check().release()
        ga.check().release()
    replays = p.describe()["graph_replays"]
    ga, gb = both(True)
    assert p.describe()["graph_replays"] == replays + 2
    assert not gb.ready(), "B's call did not wait for A's, held back by a long kernel"
    for grid, out, (_, (d, f)) in zip((ga, gb), outs, frames):
        grid.check()
        assert_matches(out.cpu().numpy(), smap, "fp16", d, f, "two streams, replayed")


def test_recycled_grid_memory_waits_for_its_consumer_on_another_stream(torch):
    """A grid made and read on stream A (its consumer held back by a long kernel) is dropped;
    the next call, on stream B, gets the same memory and must not overwrite it before A's
    consumer read it: the consumer's copy is the first frame's grid, B's grid the second's."""
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    frames = [host_inputs(smap, 20 + i, np.float16, "fp16") for i in range(2)]
    inputs = [(torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda()) for (hd, hf), _ in frames]
    torch.cuda.synchronize()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        grid = p.pool(*inputs[0])
        first_ptr = grid.ptr
        bev = torch.from_dlpack(grid)  # on A: no wait needed
        torch.cuda._sleep(SLEEP_CYCLES // 4)
        seen_by_consumer = bev.clone()  # runs on A after the long kernel
        del bev, grid  # every use is enqueued: the memory goes back
    with torch.cuda.stream(b):
        second = p.pool(*inputs[1])
    assert second.ptr == first_ptr, "the released memory was not reused"
    torch.cuda.synchronize()
    (_, (d0, f0)), (_, (d1, f1)) = frames
    assert_matches(seen_by_consumer.cpu().numpy(), smap, "fp16", d0, f0, "A's consumer")
    assert_matches(second.check().numpy(), smap, "fp16", d1, f1, "B's grid")


# --- value checks and refusals ------------------------------------------------------------------
def test_non_finite_inputs_and_grids_are_reported(torch):
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float16)
    (hd, hf), _ = host_inputs(smap, 8, np.float32, "fp16")
    bad = hf.copy()
    bad.reshape(-1, smap.channels)[smap.ranks_feat[0], 0] = np.nan
    depth, feat = torch.from_numpy(hd).cuda(), torch.from_numpy(bad).cuda()
    grid = p.pool(depth, feat)  # no host wait: the flags come with the grid
    with pytest.raises(NonFiniteInput):
        grid.check()
    with pytest.raises(NonFiniteInput):
        p.pool(depth, feat, sync=True)
    huge = torch.full(smap.feat_shape, 6e4, dtype=torch.float16, device="cuda")
    with pytest.raises(NonFiniteOutput):  # each value fits FP16, the float16 sums do not
        p.pool(torch.ones(smap.depth_shape, dtype=torch.float16, device="cuda"), huge, sync=True)
    assert np.isfinite(
        p.pool(depth, torch.from_numpy(hf).cuda()).check().numpy()
    ).all()  # fine after


def test_bad_device_tensors_are_refused(torch):
    smap = get_workload("small")
    p = pooler(smap, "fp16")
    depth = torch.rand(smap.depth_shape, device="cuda")
    feat = torch.rand(smap.feat_shape, device="cuda")
    with pytest.raises(InputError, match="shape"):
        p.pool(depth[:, :-1].contiguous(), feat)
    with pytest.raises(InputError, match="contiguous"):  # a slice of a tensor: strided, refused as such
        p.pool(depth[:, :-1], feat)
    with pytest.raises(InputError, match="contiguous"):
        p.pool(depth.transpose(2, 3).contiguous().transpose(2, 3), feat)
    with pytest.raises(InputError, match="dtype"):
        p.pool(depth.double(), feat)
    with pytest.raises(InputError, match="grad"):
        p.pool(depth.requires_grad_(True), feat)
    depth = depth.detach().requires_grad_(False)
    with pytest.raises(InputError, match="one is a device tensor"):
        p.pool(depth, feat.cpu())
    with pytest.raises(InputError, match="float32/float16"):
        p.pool(depth, feat, out=torch.empty(smap.bev_shape, dtype=torch.float64, device="cuda"))
    with pytest.raises(InputError, match="host array"):
        p.pool(depth, feat, out=np.empty(smap.bev_shape, np.float32))
    with pytest.raises(InputError, match="powers of two"):
        p.pool(depth.to(torch.uint8), feat.to(torch.uint8), fp8_scales=(3.0, 1.0))
    assert p.pool(depth, feat).check().numpy().shape == tuple(smap.bev_shape)  # still fine after


def test_a_grid_outlives_its_pooler(torch):
    smap = get_workload("small")
    p = pooler(smap, "fp16", grid_dtype=np.float32)
    (hd, hf), (d, f) = host_inputs(smap, 9, np.float16, "fp16")
    grid = p.pool(torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda())
    p.close()  # waits for the device, frees the pooler's buffers; the grid's memory is its own
    bev = torch.from_dlpack(grid.check())
    assert_matches(bev.cpu().numpy(), smap, "fp16", d, f, "after close")
    with pytest.raises(RuntimeError, match="closed"):
        p.pool(torch.from_numpy(hd).cuda(), torch.from_numpy(hf).cuda())


# --- input hand-off: camera tensors from another process ---------------------------------------
PRODUCER = """
import json, sys
import numpy as np, torch
from bevpool_ros.handoff.camera_producer import CameraTensorProducer
from bevpool_ros.workloads import get_workload

smap = get_workload("small")
rng = np.random.default_rng(int(sys.argv[1]))
d = rng.random(smap.depth_shape).astype(np.float16)
f = rng.uniform(-1, 1, smap.feat_shape).astype(np.float16)
ring_size = 2 * smap.depth_shape[0] + 2  # every tensor below in its own slot
producer = CameraTensorProducer(max(d.nbytes, f.nbytes), ring_size)
td, tf = torch.from_numpy(d).cuda(), torch.from_numpy(f).cuda()


def described(h):
    return dict(vars(h), event_handle=h.event_handle.hex(), device_uuid=h.device_uuid.hex(),
                shape=list(h.shape))


out = {"cameras": [[described(producer.publish(td[n])), described(producer.publish(tf[n]))]
                   for n in range(smap.depth_shape[0])],
       "stacked": [described(producer.publish(td)), described(producer.publish(tf))]}
print(json.dumps(out), flush=True)
if sys.stdin.readline().strip() == "overwrite":  # every slot reused
    for _ in range(ring_size):
        producer.publish(tf[0])
    torch.cuda.synchronize()
    print("done", flush=True)
sys.stdin.readline()
producer.close()
"""


def test_camera_tensors_handed_over_from_another_process(torch):
    """A producer process (PyTorch tensors) hands per-camera and stacked tensors over through
    the ring; here they are pooled where they lie (stacked) or gathered on the device (per
    camera), against the reference of the producer's values; then the producer reuses every
    slot and the old announcements read as overwritten, never as data."""
    import json
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    from bevpool_ros.handoff.reader import HandoffOverwritten, HandoffReader

    def message(m):
        return SimpleNamespace(**dict(m, event_handle=bytes.fromhex(m["event_handle"]),
                                      device_uuid=bytes.fromhex(m["device_uuid"])))

    smap = get_workload("small")
    rng = np.random.default_rng(5)
    d = rng.random(smap.depth_shape).astype(np.float16)
    f = rng.uniform(-1, 1, smap.feat_shape).astype(np.float16)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, "5"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        announced = json.loads(proc.stdout.readline())
        reader = HandoffReader()
        p = pooler(smap, "fp16", grid_dtype=np.float32)
        views = [[reader.open(message(m)) for m in cam] for cam in announced["cameras"]]
        assert views[0][0].shape == tuple(smap.depth_shape[1:])
        grid = p.pool_cameras(views).check()
        assert all(v.still_valid() for cam in views for v in cam)  # read before any reuse
        assert_matches(grid.numpy(), smap, "fp16", d, f, "per-camera hand-off")
        stacked = [reader.open(message(m)) for m in announced["stacked"]]
        out = poisoned_out(torch, "torch", smap.bev_shape, np.float32)
        p.pool(*stacked, out=out).check()  # read in place: the kernel's input is the ring slot
        assert_matches(out.cpu().numpy(), smap, "fp16", d, f, "stacked hand-off")
        proc.stdin.write("overwrite\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        assert not views[0][0].still_valid() and not stacked[0].still_valid()
        with pytest.raises(HandoffOverwritten):
            reader.open(message(announced["cameras"][0][0]))
        assert reader.overwritten == 1
    finally:
        try:
            proc.stdin.write("close\n")
            proc.stdin.close()
        except OSError:  # the producer is already gone: its error is in the test's output
            pass
        proc.wait(30)
