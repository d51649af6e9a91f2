"""DeviceFrame's recorded work, without a GPU: which launches, copies and fills (kernels too) each binding
enqueues (caller memory read in place, conversions, the epilogue and its exponents, unaligned
tensors), every launch checked against its kernel's signature in plugin/bevpool_convert.cuh, and
the graph policy (captured on a binding's second use, the most recent few kept). The values are
tested on the H200 (test_inprocess_gpu.py)."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import numpy as np
import pytest

from bevpool_ros.backends.gpu import device_frame as df
from bevpool_ros.backends.gpu import kernel_copies
from bevpool_ros.device.driver import DeviceView
from bevpool_ros.kernels.table import CONVERT_KERNELS
from bevpool_ros.paths import plugin_dir
from bevpool_ros.workloads import get_workload

F16, F32, E4M3 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.uint8)
_KINDS = (("*", "ptr"), ("long long", "i64"), ("unsigned", "u32"), ("float", "f32"), ("int", "i32"),
          ("BevconvCopyTable", "bytes"))


def signatures() -> dict[str, tuple[str, ...]]:
    """extern "C" kernel -> its parameters' launch kinds, read from the CUDA source."""
    src = (plugin_dir() / "bevpool_convert.cuh").read_text()
    out = {}
    for name, params in re.findall(r'extern "C" __global__ void (\w+)\(([^)]*)\)', src):
        kinds = []
        for p in params.split(","):
            kinds.append(next(kind for token, kind in _KINDS if token in p))
        out[name] = tuple(kinds)
    return out


SIGNATURES = signatures()
# the frame's copies and fills are kernels too (backends/gpu/kernel_copies.py): (dst, src, bytes),
# (dst, value, count) in the log
COPY_KERNELS = {"bevconv_fill_u32": "fill_u32"}


def copy_table_entries(table: bytes, count: int) -> list[tuple]:
    """A bevconv_copy_many launch as what it does: ("copy", dst, src, bytes) or ("zero", dst, bytes)."""
    src, dst, nbytes = np.frombuffer(table, dtype=np.uint64).reshape(3, kernel_copies.COPY_MANY)
    assert not nbytes[count:].any(), "entries beyond the count"
    return [("copy", int(d), int(s), int(n)) if s else ("zero", int(d), int(n))
            for s, d, n in zip(src[:count], dst[:count], nbytes[:count])]


class Recorder:
    """Stands in for the driver: buffers, streams, launches and graphs, all logged."""

    def __init__(self):
        self.log = []
        self._next = itertools.count(1)
        self.destroyed = 0
        rec = self

        class Buffer:
            def __init__(self, nbytes):
                self.nbytes, self.ptr = int(nbytes), 0x10_0000_0000 + next(rec._next) * (1 << 28)

            def view(self, offset, nbytes):
                return DeviceView(self.ptr + offset, nbytes)

            def free(self):
                pass

        class Stream:
            def __init__(self, name="capture"):
                self.name = self.handle = name

            def d2h(self, dst, src, nbytes):
                rec.log.append(("d2h", self.name, dst, src.ptr, nbytes))

        class Graph:
            def __init__(self, stream, record):
                rec.log.append(("capture",))
                record(stream)

            def replay(self, stream):
                rec.log.append(("replay", stream.name))

            def destroy(self):
                rec.destroyed += 1

        self.Buffer, self.Stream, self.Graph = Buffer, Stream, Graph

    def launch(self, module, kernel, grid, block, args, stream, shared=0):
        assert kernel in SIGNATURES, f"{kernel} is not a kernel of bevpool_convert.cuh"
        kinds = tuple(k for k, _ in args)
        assert kinds == SIGNATURES[kernel], (
            f"{kernel}: launched with {kinds}, takes {SIGNATURES[kernel]}"
        )
        values = tuple(v for _, v in args)
        if kernel == "bevconv_copy_many":  # logged as one launch, then each entry as what it does
            assert grid[1] == values[1] <= kernel_copies.COPY_MANY, "one block row per entry"
            self.log.append(("copy_many", stream.name, values[1]))
            self.log += [(what, stream.name, *rest) for what, *rest in copy_table_entries(*values)]
            return
        if kernel in COPY_KERNELS:  # kernel_copies.py: logged as what they do
            what = COPY_KERNELS[kernel]
            dst_first = (values[1], values[0], values[2]) if what == "copy" else values
            self.log.append((what, stream.name, *dst_first))
            return
        self.log.append(("launch", stream.name, kernel, values))

    def pool(self, stream, bindings):
        self.log.append(
            ("pool", stream.name, bindings["depth"].ptr, bindings["feat"].ptr, bindings["out"].ptr)
        )

    def entries(self, kind):
        return [e for e in self.log if e[0] == kind]

    def kernels(self):
        return [e[2] for e in self.entries("launch")]


@pytest.fixture
def rec(monkeypatch):
    r = Recorder()
    monkeypatch.setattr(df, "DeviceBuffer", r.Buffer)
    monkeypatch.setattr(df, "Stream", r.Stream)
    monkeypatch.setattr(df, "Graph", r.Graph)
    monkeypatch.setattr(df, "launch_args", r.launch)
    monkeypatch.setattr(kernel_copies, "launch_args", r.launch)
    return r


def frame(rec, precision, check_finite=True):
    def function(name):
        assert name in CONVERT_KERNELS, name
        return name

    rt = SimpleNamespace(
        module=SimpleNamespace(function=function), device=SimpleNamespace(sm_count=132)
    )
    f = df.DeviceFrame(rt, get_workload("small"), precision, rec.pool, check_finite=check_finite)
    rec.log.clear()
    return f


DEPTH, FEAT, OUT = 0x7000_0000_0000, 0x7100_0000_0000, 0x7200_0000_0000  # 16-byte aligned


def binding(dd=F16, fd=F16, od=F32, depth=DEPTH, feat=FEAT, out=OUT, k=(0, 0)):
    return df.Binding(depth, dd, feat, fd, out, od, *k)


def run(rec, f, b):
    f.enqueue(rec.Stream("caller"), b)
    return rec.log


def test_fp16_inputs_are_read_where_they_lie_and_the_grid_written_in_place(rec):
    f = frame(rec, "fp16")
    run(rec, f, binding())
    assert rec.kernels() == ["bevconv_check_f16", "bevconv_check_f16", "bevconv_check_out_f32"]
    assert rec.entries("pool") == [("pool", "caller", DEPTH, FEAT, OUT)]
    assert not rec.entries("copy")
    scratch = f._scratch.ptr
    assert rec.entries("zero") == [("zero", "caller", scratch, 12)]  # flags, amaxes
    assert rec.entries("copy_many") == [("copy_many", "caller", 1)] and not rec.entries("fill_u32")


def test_fp16_converts_float32_into_its_own_buffers(rec):
    f = frame(rec, "fp16")
    run(rec, f, binding(F32, F32, F16))
    assert rec.kernels() == ["bevconv_f32_to_f16", "bevconv_f32_to_f16", "bevconv_out_f32_to_f16"]
    _, _, depth, feat, out = rec.entries("pool")[0]
    assert (depth, feat, out) == (f._kin["depth"].ptr, f._kin["feat"].ptr, f._kout.ptr)
    epilogue = rec.entries("launch")[-1][3]
    assert epilogue[1] == OUT and epilogue[3] == 0  # into the caller's grid, no scaling


def test_e4m3_at_fp16_carries_its_scales_to_the_epilogue(rec):
    f = frame(rec, "fp16")
    run(rec, f, binding(E4M3, F16, F32, k=(3, 0)))
    scratch = f._scratch.ptr
    # exponents + 4 each: the epilogue's 2^(8 - k0 - k1) becomes 2^-(k_depth + k_feat)
    assert ("fill_u32", "caller", scratch + 12, 3 + 4, 1) in rec.log
    assert ("fill_u32", "caller", scratch + 16, 0 + 4, 1) in rec.log
    assert rec.kernels() == ["bevconv_e4m3_to_f16", "bevconv_check_f16", "bevconv_out_f32_to_f32"]
    assert rec.entries("launch")[-1][3][3] == scratch + 12
    negative = frame(rec, "fp16")
    run(rec, negative, binding(E4M3, E4M3, F32, k=(-6, -2)))
    assert ("fill_u32", "caller", negative._scratch.ptr + 12, (-6 + 4) & 0xFFFFFFFF, 1) in rec.log


def test_unaligned_tensors_are_copied_or_go_through_the_epilogue(rec):
    f = frame(rec, "fp16")
    n = get_workload("small").num_depth
    run(rec, f, binding(depth=DEPTH + 2, out=OUT + 4))
    assert rec.entries("copy") == [("copy", "caller", f._kin["depth"].ptr, DEPTH + 2, n * 2)]
    assert rec.entries("pool")[0][2:] == (f._kin["depth"].ptr, FEAT, f._kout.ptr)
    assert rec.kernels()[-1] == "bevconv_out_f32_to_f32"  # a copy and its check, no scaling
    assert rec.entries("launch")[-1][3][1] == OUT + 4 and rec.entries("launch")[-1][3][3] == 0


@pytest.mark.parametrize("wire", [F16, F32])
def test_fp8_quantises_floats_on_the_device(rec, wire):
    f = frame(rec, "fp8")
    run(rec, f, binding(wire, wire, F32))
    s = {F16: "f16", F32: "f32"}[wire]
    assert rec.kernels() == [f"bevconv_amax_{s}", f"bevconv_{s}_to_e4m3"] * 2 + [
        "bevconv_out_f16_to_f32"
    ]
    assert not [e for e in rec.entries("fill_u32") if e[2] != f._scratch.ptr]  # no raw exponents
    assert rec.entries("launch")[-1][3][3] == f._scratch.ptr + 12


def test_fp8_reads_raw_codes_in_place_with_their_exponents(rec):
    f = frame(rec, "fp8")
    run(rec, f, binding(E4M3, F32, F16, k=(4, 0)))
    scratch = f._scratch.ptr
    assert ("fill_u32", "caller", scratch + 12, 4, 1) in rec.log  # no bias at fp8
    assert rec.kernels() == [
        "bevconv_check_e4m3",
        "bevconv_amax_f32",
        "bevconv_f32_to_e4m3",
        "bevconv_out_f16_to_f16",
    ]
    assert rec.entries("pool")[0][2] == DEPTH


def test_check_finite_off_keeps_only_the_output_check(rec):
    f = frame(rec, "fp16", check_finite=False)
    run(rec, f, binding(F32, F16, F32))
    assert rec.kernels() == ["bevconv_f32_to_f16", "bevconv_check_out_f32"]
    conversion, out_check = rec.entries("launch")
    assert conversion[3][3] == 0 and out_check[3][2] == f._scratch.ptr


def test_a_binding_is_captured_on_its_second_use_and_a_few_are_kept(rec):
    f = frame(rec, "fp16")
    b = binding()
    for _ in range(3):
        run(rec, f, b)
    assert [e[0] for e in rec.log if e[0] in ("capture", "replay")] == [
        "capture",
        "replay",
        "replay",
    ]
    assert (f.eager_frames, f.graph_replays) == (1, 2)
    for i in range(df.GRAPHS_KEPT + 1):  # each seen twice: captured
        other = binding(out=OUT + 256 * (i + 1))
        run(rec, f, other)
        run(rec, f, other)
    assert len(f._graphs) == df.GRAPHS_KEPT and rec.destroyed == 2  # b and the first other went


class Done:
    """A done target: a pinned word's address and an event that logs its records."""

    def __init__(self, rec, host_ptr):
        self.host_ptr = host_ptr
        self.event = SimpleNamespace(
            record=lambda stream, external=False: rec.log.append(("record", stream, external))
        )


def test_a_mapped_flag_word_is_written_by_a_kernel(rec):
    """A done target whose word is mapped into the device (the node's and BevPooler's): the frame's
    work stays kernels only, the flags copied by bevconv_copy_many, no copy-engine transfer."""
    f = frame(rec, "fp16")
    done = Done(rec, 0x1000)
    done.device_ptr = 0x7F00_0000_1000
    f.enqueue(rec.Stream("caller"), binding(), done)
    assert not rec.entries("d2h")
    assert rec.entries("copy")[-1] == ("copy", "caller", 0x7F00_0000_1000, f.flags.ptr, 4)
    assert [e[0] for e in rec.log][-2:] == ["copy", "record"]


def test_the_flag_copy_and_event_are_part_of_the_replayed_graph(rec):
    """The done target's copy and event follow the epilogue, eagerly and in the capture (an
    external record: every replay records it); another target is another graph."""
    f = frame(rec, "fp16")
    b, done = binding(), Done(rec, 0x1000)
    run_done = lambda target: f.enqueue(rec.Stream("caller"), b, target)  # noqa: E731
    run_done(done)
    assert [e[0] for e in rec.log][-3:] == ["launch", "d2h", "record"]
    assert rec.entries("d2h") == [("d2h", "caller", 0x1000, f.flags.ptr, 4)]
    assert rec.entries("record") == [("record", "caller", False)]
    rec.log.clear()
    run_done(done)  # seen before: captured (on the capture stream), then replayed
    assert [e[0] for e in rec.log if e[0] in ("capture", "d2h", "record", "replay")] == [
        "capture", "d2h", "record", "replay"
    ]
    assert rec.entries("record") == [("record", "capture", True)]
    rec.log.clear()
    run_done(done)
    assert rec.log == [("replay", "caller")]  # the whole call: one replay
    rec.log.clear()
    run_done(Done(rec, 0x2000))  # the same binding, another target: its own (eager) frame
    assert rec.entries("d2h")[0][2] == 0x2000 and not rec.entries("replay")
    rec.log.clear()
    run(rec, f, b)  # no target: neither copy nor event
    assert not rec.entries("d2h") and not rec.entries("record")


def test_gathered_cameras_are_copied_first_and_replayed_with_the_frame(rec):
    """Per-camera tensors (hand-off ring slots) gathered into the stacked inputs: the copies run
    before anything reads them, a missing camera is zeroed, and a set of slots seen before is
    one replay with the frame; other slots are another binding (their own eager frame)."""
    f = frame(rec, "fp16")
    b = binding()
    slots_a = ((DEPTH, 0x7300_0000_0000, 64), (DEPTH + 64, None, 64), (FEAT, 0x7400_0000_0000, 32))
    slots_b = ((DEPTH, 0x7300_0000_1000, 64), (DEPTH + 64, None, 64), (FEAT, 0x7400_0000_1000, 32))
    f.enqueue(rec.Stream("caller"), b, gather=slots_a)
    kinds = [e[0] for e in rec.log]
    # one launch: the cameras, then the scratch words' zeros
    assert kinds[:5] == ["copy_many", "copy", "zero", "copy", "zero"] and "pool" in kinds[5:]
    assert rec.entries("copy_many") == [("copy_many", "caller", 4)]
    assert rec.entries("copy") == [("copy", "caller", DEPTH, 0x7300_0000_0000, 64),
                                  ("copy", "caller", FEAT, 0x7400_0000_0000, 32)]
    assert rec.entries("zero") == [("zero", "caller", DEPTH + 64, 64), ("zero", "caller", f._scratch.ptr, 12)]
    rec.log.clear()
    f.enqueue(rec.Stream("caller"), b, gather=slots_a)  # seen before: captured with its copies
    kinds = [e[0] for e in rec.log]
    assert kinds[:5] == ["capture", "copy_many", "copy", "zero", "copy"] and kinds[-1] == "replay"
    assert {e[1] for e in rec.entries("copy")} == {"capture"}
    rec.log.clear()
    f.enqueue(rec.Stream("caller"), b, gather=slots_a)
    assert rec.log == [("replay", "caller")]  # the whole set: one replay
    rec.log.clear()
    f.enqueue(rec.Stream("caller"), b, gather=slots_b)
    assert not rec.entries("replay") and rec.entries("copy")[0][3] == 0x7300_0000_1000
    assert (f.eager_frames, f.graph_replays) == (2, 2)


def test_a_gather_longer_than_one_launch_is_split(rec):
    """More copies than one bevconv_copy_many takes (a rig of many cameras): launches of COPY_MANY,
    every entry once, in order, the scratch words' zeros last."""
    f = frame(rec, "fp16")
    n = kernel_copies.COPY_MANY + 4
    gather = tuple((DEPTH + 64 * i, None if i == 3 else 0x7300_0000_0000 + 64 * i, 64) for i in range(n))
    f.enqueue(rec.Stream("caller"), binding(), gather=gather)
    assert [e[2] for e in rec.entries("copy_many")] == [kernel_copies.COPY_MANY, n + 1 - kernel_copies.COPY_MANY]
    written = [(e[2], e[3] if e[0] == "copy" else None) for e in rec.log if e[0] in ("copy", "zero")]
    assert written == [(d, s) for d, s, _ in gather] + [(f._scratch.ptr, None)]
