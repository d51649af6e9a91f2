"""BevPooler (bevpool_ros/inprocess) where every machine can run it: host arrays on the cpu
backend against the FP64 reference, every argument check, and the tensor/stream readers on
protocol objects built here (no GPU, no framework needed). The device path: test_inprocess_gpu.py.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import rig_variants as rv
from fake_cuda import torch_stand_in

from bevpool_ros import BevPooler
from bevpool_ros.device import dlpack, streams, tensors
from bevpool_ros.errors import BackendUnavailable, InputError, NonFiniteInput
from bevpool_ros.fp8 import decode
from bevpool_ros.kernels.fp8 import quantize
from bevpool_ros.reference import pool_reference
from bevpool_ros.scatter_map import build_scatter_map
from bevpool_ros.tolerance import error_ratio

SMALL_RIGS = ("mono_c1_d1", "pair_c3_z2", "tri_c17", "blind_c80")
DOC = Path(__file__).resolve().parent.parent / "docs" / "inprocess.md"


def doc_example(kind: str) -> str:
    """The code block docs/inprocess.md marks with <!-- example: kind -->."""
    text = DOC.read_text()
    marker = f"<!-- example: {kind} -->\n```python\n"
    start = text.index(marker) + len(marker)
    return text[start : text.index("```", start)]


def cpu_pooler(source, **kw) -> BevPooler:
    return BevPooler(source, backend="cpu", **kw)


@pytest.fixture(scope="module")
def tri():
    rig = rv.rig("tri_c17")
    return rig, build_scatter_map(rig)


class CudaLike:
    """A device-array stand-in: what a CuPy array shows through __cuda_array_interface__."""

    def __init__(
        self, shape, typestr="<f2", strides=None, ptr=0x7F0000000000, stream=None, version=3
    ):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": version,
            "stream": stream,
        }


class DLPackLike:
    """A DLPack producer of a capsule over an address (never read here)."""

    def __init__(self, shape, dtype, device_type=dlpack.KDL_CUDA, ptr=0x7F0000000000):
        self.shape, self.dtype, self.device_type, self.ptr = (
            shape,
            np.dtype(dtype),
            device_type,
            ptr,
        )
        self.streams = []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return dlpack.to_capsule(self.ptr, self.shape, self.dtype, self.device_type, 0, owner=self)

    def __dlpack_device__(self):
        return self.device_type, 0


# --- host arrays on the cpu backend -------------------------------------------------------------
@pytest.mark.parametrize("name", SMALL_RIGS)
def test_host_arrays_match_the_fp64_reference(name, tmp_path):
    rig = rv.rig(name)
    pooler = cpu_pooler(rv.write_rig(name, tmp_path), grid_dtype="float32")
    assert pooler.precision == "fp32" and not pooler.on_gpu
    depth, feat = rv.random_inputs(rig, seed=3)
    ref = pool_reference(depth, feat, pooler.smap)
    for dtype in (np.float32, np.float16):
        d, f = depth.astype(dtype), feat.astype(dtype)
        got = pooler.pool(d, f)
        assert got.shape == pooler.grid_shape and got.dtype == np.float32
        # float16 inputs: the reference of what the pooler was given
        want = ref if dtype == np.float32 else pool_reference(d, f, pooler.smap)
        assert error_ratio(got, want, "fp32") <= 1.0


@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
def test_host_out_is_written_in_place_over_poison(tri, out_dtype):
    rig, smap = tri
    pooler = cpu_pooler(smap)
    d, f = rv.random_inputs(rig, seed=5)
    out = np.full(smap.bev_shape, np.nan, out_dtype)
    got = pooler.pool(d.astype(np.float32), f.astype(np.float32), out=out)
    assert got is out
    precision = "fp32" if out_dtype == np.float32 else "fp16"  # a float16 grid rounds once more
    assert error_ratio(out, pool_reference(d, f, smap), precision) <= 1.0


def test_own_grid_takes_the_grid_dtype(tri):
    rig, smap = tri
    d, f = rv.random_inputs(rig, seed=1)
    for dtype in ("float16", "float32"):
        assert (
            cpu_pooler(smap, grid_dtype=dtype)
            .pool(d.astype(np.float32), f.astype(np.float32))
            .dtype
            == dtype
        )


def test_sources_rig_scatter_map_and_files_agree(tri, tmp_path):
    rig, smap = tri
    npz = smap.save(tmp_path / "tri.npz")
    yaml = rv.write_rig("tri_c17", tmp_path)
    d, f = (a.astype(np.float32) for a in rv.random_inputs(rig, seed=2))
    grids = [
        cpu_pooler(src, grid_dtype="float32").pool(d, f) for src in (rig, smap, npz, str(yaml))
    ]
    for g in grids[1:]:
        np.testing.assert_array_equal(g, grids[0])
    with pytest.raises(TypeError, match="Rig, a ScatterMap"):
        BevPooler(42, backend="cpu")


def test_e4m3_codes_with_their_scales(tri):
    rig, smap = tri
    d, f = rv.random_inputs(rig, seed=4)
    scales = (16.0, 8.0)
    cd, cf = quantize(d, scales[0]), quantize(f, scales[1])
    got = cpu_pooler(smap, grid_dtype="float32", fp8_scales=scales).pool(cd, cf)
    want = pool_reference(
        decode(cd, np.float64) / scales[0], decode(cf, np.float64) / scales[1], smap
    )
    assert error_ratio(got, want, "fp32") <= 1.0
    # per call, the scales given there win
    again = cpu_pooler(smap, grid_dtype="float32").pool(cd, cf, fp8_scales=scales)
    np.testing.assert_array_equal(again, got)


def test_per_camera_arrays_pool_like_the_stacked_ones(tri):
    rig, smap = tri
    pooler = cpu_pooler(smap, grid_dtype="float32")
    d, f = (a.astype(np.float32) for a in rv.random_inputs(rig, seed=8))
    stacked = pooler.pool(d, f)
    np.testing.assert_array_equal(pooler.pool_cameras(list(zip(d, f))), stacked)
    # a missing camera pools as zeros
    missing = [(None, None)] + list(zip(d[1:], f[1:]))
    d0, f0 = d.copy(), f.copy()
    d0[0], f0[0] = 0, 0
    np.testing.assert_array_equal(pooler.pool_cameras(missing), pooler.pool(d0, f0))
    with pytest.raises(InputError, match="pairs"):
        pooler.pool_cameras(list(zip(d, f))[:-1])
    with pytest.raises(InputError, match="mixed"):
        pooler.pool_cameras([(CudaLike(d[0].shape), f[0])] + list(zip(d[1:], f[1:])))


def test_torch_like_cpu_tensors_are_host_arrays(tri):
    """A DLPack CPU tensor (what a PyTorch CPU tensor is) is read as numpy without a copy."""
    rig, smap = tri
    d, f = (a.astype(np.float32) for a in rv.random_inputs(rig, seed=6))

    class CpuTensor:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    assert not tensors.is_device(CpuTensor(d))
    np.testing.assert_array_equal(
        cpu_pooler(smap).pool(CpuTensor(d), CpuTensor(f)), cpu_pooler(smap).pool(d, f)
    )


def test_from_worker_threads(tri):
    rig, smap = tri
    pooler = cpu_pooler(smap, grid_dtype="float32")
    inputs = [tuple(a.astype(np.float32) for a in rv.random_inputs(rig, seed=s)) for s in range(4)]
    want = [pool_reference(d, f, smap) for d, f in inputs]
    errors, results = [], {}

    def work(i):
        try:
            for _ in range(3):
                results[i] = pooler.pool(*inputs[i])
        except Exception as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        assert error_ratio(results[i], want[i], "fp32") <= 1.0


def test_the_documented_numpy_example_runs(capsys):
    exec(compile(doc_example("numpy"), str(DOC), "exec"), {})
    assert "(1, 128, 128, 80) float32" in capsys.readouterr().out


# --- what is refused ------------------------------------------------------------------------------
def test_bad_inputs_are_refused_with_one_line(tri):
    rig, smap = tri
    pooler = cpu_pooler(smap)
    d, f = (a.astype(np.float32) for a in rv.random_inputs(rig, seed=0))
    with pytest.raises(InputError, match="shape"):
        pooler.pool(d[:, :-1], f)
    with pytest.raises(InputError, match="dtype"):
        pooler.pool(d.astype(np.float64), f)
    with pytest.raises(InputError, match="numpy array or a device tensor"):
        pooler.pool(d.tolist(), f)
    with pytest.raises(InputError, match="one is a device tensor"):
        pooler.pool(CudaLike(smap.depth_shape), f)
    with pytest.raises(InputError, match="cpu backend"):
        pooler.pool(CudaLike(smap.depth_shape), CudaLike(smap.feat_shape))
    with pytest.raises(InputError, match="host array"):
        pooler.pool(d, f, out=CudaLike(smap.bev_shape, "<f4"))
    with pytest.raises(ValueError, match="out"):
        pooler.pool(d, f, out=np.empty(smap.bev_shape, np.float64))
    bad = d.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(NonFiniteInput):
        pooler.pool(bad, f)
    with pytest.raises(InputError, match="powers of two"):
        pooler.pool(d, f, fp8_scales=(3.0, 1.0))
    with pytest.raises(InputError, match="two numbers"):
        pooler.pool(d, f, fp8_scales=1.0)


def test_closed_pooler_says_so(tri):
    rig, smap = tri
    d, f = (a.astype(np.float32) for a in rv.random_inputs(rig, seed=0))
    with cpu_pooler(smap) as pooler:
        pooler.pool(d, f)
    with pytest.raises(RuntimeError, match="closed"):
        pooler.pool(d, f)


def test_bad_construction_is_refused(tri):
    _, smap = tri
    with pytest.raises(ValueError, match="grid_dtype"):
        BevPooler(smap, backend="cpu", grid_dtype="float64")
    with pytest.raises(ValueError, match="backend"):
        BevPooler(smap, backend="tpu")
    with pytest.raises(ValueError, match="precision"):
        BevPooler(smap, backend="cpu", precision="int4")
    with pytest.raises(InputError, match="powers of two"):
        BevPooler(smap, backend="cpu", fp8_scales=(0.0, 1.0))


def test_without_a_gpu_the_default_says_so_once(tri, caplog):
    """BevPooler's backend is create_backend's decision: cuda, else cpu with its one warning."""
    from bevpool_ros.device.driver import live_l2_bytes

    if live_l2_bytes() is not None:
        pytest.skip("a GPU is present: the default runs cuda")
    _, smap = tri
    with caplog.at_level("WARNING"):
        pooler = BevPooler(smap)
    assert not pooler.on_gpu and pooler.backend.name == "cpu"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "'cuda' unavailable" in warnings[0] and "using 'cpu'" in warnings[0]
    with pytest.raises(BackendUnavailable, match="cuda"):
        BevPooler(smap, fallback=False)


def test_the_old_backend_name_auto_is_refused_naming_the_new_one(tri):
    _, smap = tri
    with pytest.raises(ValueError, match=r"'auto' is now 'cuda'"):
        BevPooler(smap, backend="auto")


def test_a_backend_that_cannot_run_the_map_hands_over_to_cpu(tri, caplog, monkeypatch):
    """The prepare-time rule is create_backend's room's too (backends.cpu_instead), as in the node."""
    from bevpool_ros.backends.cpu import CpuBackend
    from bevpool_ros.inprocess import pooler as pooler_module

    class Refusing(CpuBackend):
        name = "cuda"

        def prepare(self, smap):
            raise RuntimeError("no kernel for C = 17")

    monkeypatch.setattr(pooler_module, "create_backend", lambda name, precision, fallback, **o: Refusing())
    _, smap = tri
    with caplog.at_level("WARNING"):
        pooler = BevPooler(smap)
    assert pooler.backend.name == "cpu"
    assert any("backend 'cuda' cannot run the map (C = 17" in r.getMessage() for r in caplog.records)
    with pytest.raises(BackendUnavailable, match="cannot run the map"):
        BevPooler(smap, fallback=False)


# --- reading device tensors (descriptions only: nothing is dereferenced) -------------------------
def test_cuda_array_interface_is_read_and_checked():
    t = tensors.device_tensor(CudaLike((2, 3, 4), "<f2", stream=7), "x")
    assert (t.shape, t.dtype, t.stream, t.device) == ((2, 3, 4), np.float16, 7, None)
    # C strides given explicitly, and any stride on a size-1 dimension: still contiguous
    assert tensors.device_tensor(CudaLike((2, 1, 4), "<f4", strides=(16, 999, 4)), "x").shape == (
        2,
        1,
        4,
    )
    with pytest.raises(InputError, match="contiguous"):
        tensors.device_tensor(CudaLike((2, 3), "<f4", strides=(4, 8)), "x")
    assert tensors.device_tensor(CudaLike((2,), "<f2", stream=7, version=2), "x").stream is None
    both = CudaLike((2,), "<f2")
    both.__dlpack_device__ = lambda: (dlpack.KDL_CUDA, 3)  # the device DLPack reports is taken
    assert tensors.device_tensor(both, "x").device == 3
    with pytest.raises(InputError, match="malformed"):
        tensors.device_tensor(
            type("Broken", (), {"__cuda_array_interface__": {"shape": (2,)}})(), "x"
        )


def test_a_view_that_read_its_protocols_once_is_taken_as_it_is():
    """A hand-off view carries the DeviceTensor its protocols describe (read when it was opened):
    taken without reading them again; an attribute of that name that is not one is ignored."""
    view = CudaLike((2, 3), "<f2")
    view.device_tensor = tensors.DeviceTensor(0x7000_0000, np.dtype(np.float16), (2, 3), 0)
    view.__cuda_array_interface__ = None  # would be refused if it were read
    assert tensors.device_tensor(view, "x") is view.device_tensor
    other = CudaLike((2, 3), "<f2")
    other.device_tensor = "not a tensor"
    assert tensors.device_tensor(other, "x").shape == (2, 3)


def test_dlpack_capsules_are_read_and_released():
    before = len(dlpack._alive)
    producer = DLPackLike((3, 5), np.float16)
    assert tensors.is_device(producer)
    t = tensors.device_tensor(producer, "x", stream=5)
    assert (t.ptr, t.shape, t.dtype, t.device) == (producer.ptr, (3, 5), np.float16, 0)
    assert producer.streams == [5]  # the producer is told which stream will read
    assert len(dlpack._alive) == before  # consumed and released: nothing held
    assert tensors.device_tensor(DLPackLike((4,), np.uint8), "x").dtype == np.uint8
    with pytest.raises(InputError, match="not CUDA memory"):
        tensors.device_tensor(DLPackLike((4,), np.float32, device_type=dlpack.KDL_CPU), "x")
    with pytest.raises(InputError, match="neither"):
        tensors.device_tensor(object(), "x")
    assert len(dlpack._alive) == before


def test_a_capsule_nobody_consumed_lets_its_owner_go():
    """Its destructor finds it (tensors.py reading capsules once shared, and retyped, the C-API
    functions the destructor calls: every unconsumed capsule's owner was kept for good)."""
    import gc

    before = len(dlpack._alive)
    tensors.device_tensor(DLPackLike((2,), np.float16), "x")  # the consumer's side, used first
    capsule = DLPackLike((3,), np.float16).__dlpack__()
    assert len(dlpack._alive) == before + 1
    del capsule
    gc.collect()
    assert len(dlpack._alive) == before


@pytest.fixture
def torch_like(monkeypatch):
    """test/fake_cuda.py's PyTorch stand-in as ``torch`` (PyTorch itself: test_inprocess_gpu)."""
    torch = torch_stand_in()
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_torch_tensors_are_read_through_their_accessors(torch_like):
    """A plain CUDA tensor: address, dtype (float8_e4m3fn as E4M3 codes), shape, device read
    without its (Python, slow) protocol methods; the current stream as PyTorch's raw handle."""
    T = torch_like.Tensor
    t = T((2, 3), torch_like.float16, 0x7000, device=1)
    assert tensors.is_device(t) and not tensors.is_device(T((2,), torch_like.float16, 0, None))
    got = tensors.device_tensor(t, "x")
    assert (got.ptr, got.dtype, got.shape, got.device, got.stream) == (
        0x7000, np.float16, (2, 3), 1, None
    )
    assert tensors.device_tensor(T((4,), torch_like.float8_e4m3fn, 0x7100), "x").dtype == np.uint8
    assert T.protocol_reads == 0
    assert streams.framework_stream(t) == (0xC0DE + 1, None)


def test_torch_tensors_the_accessors_cannot_vouch_for_go_through_the_protocols(torch_like):
    """Requires grad, not contiguous, a dtype the kernels do not take, another layout, a
    subclass: the protocols judge them and their refusals are what the caller reads."""
    T = torch_like.Tensor
    with pytest.raises(InputError, match="requires grad"):
        tensors.device_tensor(T((2,), torch_like.float16, 0x7000, requires_grad=True), "depth")
    with pytest.raises(InputError, match="contiguous"):
        tensors.device_tensor(T((2, 3), torch_like.float16, 0x7000, contiguous=False), "x")
    assert tensors.device_tensor(T((2,), torch_like.float64, 0x7000), "x").dtype == np.float64
    sparse = T((2,), torch_like.float16, 0x7000, layout=torch_like.sparse_coo)
    with pytest.raises(InputError):
        tensors.device_tensor(sparse, "x")
    reads = T.protocol_reads
    subclass = type("Parameter", (T,), {})((2,), torch_like.float16, 0x7000)
    assert tensors.device_tensor(subclass, "x").shape == (2,)
    assert T.protocol_reads > reads  # not a plain tensor: read as any other producer
    assert tensors.device_tensor(CudaLike((2,), "<f2"), "x").ptr == 0x7F0000000000


def test_torch_current_stream_without_the_raw_accessor(torch_like):
    """An older PyTorch: the public current stream, held as the stream's owner."""
    current = type("Stream", (), {"cuda_stream": 0x51})()
    torch_like._C = SimpleNamespace()
    torch_like.cuda = SimpleNamespace(current_stream=lambda device: current)
    t = torch_like.Tensor((2,), torch_like.float16, 0x7000)
    assert streams.framework_stream(t) == (0x51, current)


def test_a_producer_refusal_is_an_input_error():
    class RequiresGrad:  # what PyTorch does for a tensor that requires grad
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

        def __dlpack__(self, stream=None):
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")

    with pytest.raises(InputError, match="requires grad"):
        tensors.device_tensor(RequiresGrad(), "depth")


def test_streams_in_every_form():
    assert streams.stream_handle(0) == 0 and streams.stream_handle(0x55) == 0x55
    assert streams.stream_handle(type("TorchLike", (), {"cuda_stream": 0x10})()) == 0x10
    assert streams.stream_handle(type("CupyLike", (), {"ptr": 0x20})()) == 0x20
    assert (
        streams.stream_handle(type("Protocol", (), {"__cuda_stream__": lambda self: (0, 0x30)})())
        == 0x30
    )
    for bad in (True, -3, "default", object()):
        with pytest.raises(InputError, match="stream"):
            streams.stream_handle(bad)
    assert (
        streams.same_stream(0, 1)
        and streams.same_stream(0x55, 0x55)
        and not streams.same_stream(0, 2)
        and not streams.same_stream(2, 2)  # the per-thread stream: another one in each thread
        and not streams.same_stream(None, 0)
    )
    assert streams.exported(0) == 1 and streams.exported(0x40) == 0x40
    assert streams.current_stream(np.zeros(1)) is None


def test_input_handoff_producer_falls_back_with_one_warning(monkeypatch, caplog):
    """Where the device cannot export memory (no VMM / fd handles / IPC events), the producer
    says so once and refuses to publish: the caller sends CameraTensor messages instead."""
    from bevpool_ros.handoff import camera_producer
    from bevpool_ros.handoff.vmm import HandoffUnsupported

    def refuse(*_a, **_k):
        raise HandoffUnsupported("output.gpu_handoff needs POSIX file-descriptor memory handles")

    monkeypatch.setattr(camera_producer, "Device", lambda ordinal: object())
    no_event = type("NoEvent", (), {"destroy": lambda self: None})
    monkeypatch.setattr(camera_producer, "Event", no_event)
    monkeypatch.setattr(camera_producer, "HandoffRing", refuse)
    with caplog.at_level("WARNING"):
        producer = camera_producer.CameraTensorProducer(1024, 4)
    assert not producer.available and "file-descriptor" in producer.fallback_reason
    assert len([r for r in caplog.records if "CameraTensor" in r.getMessage()]) == 1
    with pytest.raises(HandoffUnsupported, match="file-descriptor"):
        producer.publish(CudaLike((4,), "<f2"))
    producer.close()
