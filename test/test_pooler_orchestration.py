"""BevPooler's device path without a GPU: the driver replaced by a recorder, to check what a call
enqueues and in which order (its stream, the wait for the previous call on another stream and
for a producer's stream, the flag word's copy and the grid's event, gathers for per-camera
tensors, the caller's grid, E4M3 exponents, the flags raised by ``check``). The values are tested
on the H200 (test_inprocess_gpu.py)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from test_device_frame import Recorder

from bevpool_ros.backends.gpu import device_frame as df
from bevpool_ros.backends.gpu import device_intake, kernel_copies
from bevpool_ros.backends.gpu.frame import FLAG_INPUT, FLAG_OUTPUT
from bevpool_ros.errors import InputError, NonFiniteInput, NonFiniteOutput
from bevpool_ros.inprocess import grid as grid_module
from bevpool_ros.inprocess import grid_memory
from bevpool_ros.inprocess import pooler as pooler_module
from bevpool_ros.workloads import get_workload

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
_addresses = itertools.count(1)


class Tensor:
    """A device tensor as CuPy shows it: __cuda_array_interface__ v3, its own address."""

    def __init__(self, shape, typestr="<f2", stream=None):
        self.ptr = 0x7000_0000_0000 + next(_addresses) * (1 << 24)
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": stream,
        }


@pytest.fixture
def rig(monkeypatch):
    rec = Recorder()
    events = itertools.count(1)

    class Event:
        def __init__(self, ctx=None):
            self.id = next(events)

        def record(self, stream, external=False):
            rec.log.append(("record", self.id, int(stream)))

        def wait(self, stream):
            rec.log.append(("wait", self.id, int(stream)))

        def synchronize(self):
            rec.log.append(("synchronize", self.id))

        def done(self):
            return True

        def destroy(self):
            pass

    class Stream(rec.Stream):
        def __init__(self, name="own"):
            if name in ("highest", "normal"):  # the pooler's own stream, made at a priority
                name = "own"
            super().__init__(name)
            self.handle = 0x5000 if name == "own" else name

        @classmethod
        def wrap(cls, handle):
            return cls(int(handle))

    class Pinned:
        def __init__(self, shape, dtype, mapped=False, ctx=None):
            self.array = np.zeros(shape, dtype)
            self.device_ptr = 0x7E00_0000_0000 if mapped else 0

        def free(self):
            pass

    class OwnGrid:
        def __init__(self, nbytes, stream, ctx, pools):
            self.ptr, self.nbytes = 0x9000_0000_0000 + next(_addresses) * (1 << 24), nbytes
            rec.log.append(("alloc", int(stream), nbytes))

        def free(self, stream):
            rec.log.append(("free", self.ptr, stream))

    for module, name, value in (
        (df, "DeviceBuffer", rec.Buffer),
        (df, "Stream", Stream),
        (df, "Graph", rec.Graph),
        (df, "launch_args", rec.launch),
        (kernel_copies, "launch_args", rec.launch),
        (device_intake, "DeviceBuffer", rec.Buffer),
        (device_intake, "Event", Event),
        (pooler_module, "Stream", Stream),
        (grid_memory, "StreamOrderedBuffer", OwnGrid),
        (grid_memory, "Event", Event),
        (pooler_module, "bind", lambda ctx: None),
        (device_intake, "pointer_device", lambda ptr: 0),
        (grid_module, "Event", Event),
        (grid_module, "PinnedBuffer", Pinned),
        (pooler_module, "check", lambda result, what: 1),
        (
            pooler_module,
            "api",
            lambda: SimpleNamespace(
                cuDeviceGetAttribute=lambda attribute, dev: (0, 1),
                CUdevice_attribute=SimpleNamespace(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED=0),
            ),
        ),
    ):
        monkeypatch.setattr(module, name, value)

    def backend(name, precision, fallback=True, *, check_finite=True, **options):
        device = SimpleNamespace(ordinal=0, ctx=None, dev=0, sm_count=132)
        rt = SimpleNamespace(device=device, module=SimpleNamespace(function=lambda name: name))
        be = SimpleNamespace(name="cuda", precision=precision, check_finite=check_finite, close=lambda: None)
        be.prepare = lambda smap: setattr(be, "smap", smap)
        be.device_frame = lambda: df.DeviceFrame(rt, be.smap, precision, rec.pool, check_finite=check_finite)
        return be

    monkeypatch.setattr(pooler_module, "create_backend", backend)
    return rec


def make(rig, precision="fp16", **kw):
    p = pooler_module.BevPooler(get_workload("small"), precision=precision, **kw)
    rig.log.clear()
    return p


def inputs(p, typestr="<f2", stream=None):
    return (Tensor(p.smap.depth_shape, typestr, stream), Tensor(p.smap.feat_shape, typestr, stream))


def kinds(log):
    return [e[0] if e[0] != "launch" else e[2] for e in log]


def test_one_call_in_order_on_its_stream(rig):
    p = make(rig)
    d, f = inputs(p)
    grid = p.pool(d, f, stream=0x77)
    assert kinds(rig.log) == [
        "alloc",
        "copy_many",
        "zero",
        "bevconv_check_f16",
        "bevconv_check_f16",
        "pool",
        "bevconv_out_f32_to_f16",
        "copy_many",  # the flag word's copy: a table of one
        "copy",
        "record",
    ]
    assert {e[1] for e in rig.log if e[0] in ("copy_many", "zero", "launch", "pool", "copy")} == {0x77}
    assert rig.log[0] == ("alloc", 0x77, p._grid_cells * 2)  # the grid's own memory, float16
    assert rig.entries("pool")[0][2:4] == (d.ptr, f.ptr)  # the caller's memory, read in place
    flags = rig.entries("copy")[0]  # by a kernel, into the call's mapped flag word
    assert flags[3] == p._device.flags.ptr and flags[4] == 4 and flags[2] >= 0x7E00_0000_0000
    assert grid.stream == 0x77 and grid.out is None and grid.dtype == F16
    assert grid.__cuda_array_interface__["stream"] == 0x77


def test_another_stream_waits_for_the_previous_call_and_producers(rig):
    p = make(rig)
    grids = [p.pool(*inputs(p), stream=0x77)]
    rig.log.clear()
    grids.append(p.pool(*inputs(p), stream=0x77))
    assert not rig.entries("wait")  # same stream: ordered already
    previous = rig.entries("record")[-1][1]  # the latest call's grid event
    rig.log.clear()
    grids.append(p.pool(*inputs(p, stream=0x99), stream=0x88))  # CuPy says: written on 0x99
    sync = p._intake._producer_sync.id
    assert rig.entries("wait") == [("wait", previous, 0x88), ("wait", sync, 0x88)]
    assert ("record", sync, 0x99) in rig.log
    assert kinds(rig.log).index("wait") < kinds(rig.log).index("copy_many")  # before any work


def test_no_stream_named_means_the_pooler_own(rig):
    p = make(rig)
    assert p.pool(*inputs(p)).stream == 0x5000


def test_into_the_callers_grid(rig):
    p = make(rig)
    out = Tensor(p.grid_shape, "<f4")
    grid = p.pool(*inputs(p), out=out, stream=0x77)
    assert not rig.entries("alloc") and grid.out is out and grid.ptr == out.ptr
    assert rig.entries("pool")[0][4] == out.ptr  # the kernel writes it: float32, aligned
    with pytest.raises(InputError, match="float32/float16"):
        p.pool(*inputs(p), out=Tensor(p.grid_shape, "<f8"), stream=0x77)
    with pytest.raises(InputError, match="shape"):
        p.pool(*inputs(p), out=Tensor((1, 2, 3, 4), "<f4"), stream=0x77)


def test_e4m3_exponents_reach_the_frame(rig):
    p = make(rig, "fp8", fp8_scales=(16.0, 0.25))
    p.pool(*inputs(p, "|u1"), stream=0x77)
    scratch = p._device._scratch.ptr
    assert ("fill_u32", 0x77, scratch + 12, 4, 1) in rig.log
    assert ("fill_u32", 0x77, scratch + 16, (-2) & 0xFFFFFFFF, 1) in rig.log


@pytest.mark.parametrize(
    "flag, error", [(FLAG_INPUT, NonFiniteInput), (FLAG_OUTPUT, NonFiniteOutput)]
)
def test_flags_come_back_with_the_grid(rig, flag, error):
    p = make(rig)
    grid = p.pool(*inputs(p), stream=0x77)
    grid._slot._words[grid._slot.index] = flag  # what the device's copy of the flag word wrote
    with pytest.raises(error):
        grid.check()
    assert ("synchronize", grid.event.id) in rig.log
    clean = p.pool(*inputs(p), stream=0x77)
    assert clean.check() is clean


def test_per_camera_tensors_are_gathered_first(rig):
    p = make(rig)
    n, D, H, W = p.smap.depth_shape
    cams = [(Tensor((D, H, W)), Tensor((H, W, p.smap.channels))) for _ in range(n)]
    cams[1] = (None, None)  # a missing camera: zeros
    p.pool_cameras(cams, stream=0x77)
    flags = p._device.flags.ptr
    scratch = p._device._scratch.ptr
    # one launch: every camera and stream, then the scratch words; then the flag word's copy
    assert rig.entries("copy_many") == [("copy_many", 0x77, 2 * n + 1), ("copy_many", 0x77, 1)]
    gather = [e for e in rig.log if e[0] in ("copy", "zero") and e[2] != scratch and e[3] != flags]
    assert len(gather) == 2 * n and sum(e[0] == "zero" for e in gather) == 2
    depth_slot = D * H * W * 2
    assert gather[0] == ("copy", 0x77, p._intake._stacked["depth"].ptr, cams[0][0].ptr, depth_slot)
    assert gather[1] == ("zero", 0x77, p._intake._stacked["depth"].ptr + depth_slot, depth_slot)
    assert kinds(rig.log).index("pool") > kinds(rig.log).index("copy")
    assert rig.entries("pool")[0][2] == p._intake._stacked["depth"].ptr
    mixed = [(Tensor((D, H, W), "<f4"), c[1]) if i == 0 else c for i, c in enumerate(cams)]
    with pytest.raises(InputError, match="mixed"):
        p.pool_cameras(mixed, stream=0x77)
