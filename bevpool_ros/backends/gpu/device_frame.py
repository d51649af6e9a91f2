"""One frame whose inputs and output are already on the device: the in-process path.

GpuFrame (frame.py) starts from host payloads; here depth and features are device tensors of
the caller (PyTorch, CuPy, a hand-off view) and the grid goes to a device buffer, all enqueued on
the caller's stream with no host synchronisation:

    one copy kernel                           the gathered cameras (if any), zeros for the
                                              scratch words (flags, amax); the FP8 exponents
    per stream: the kernel input dtype        bound to the caller's memory, only checked (copied
                                              first where it is not 16-byte aligned)
                another dtype                 converted into this frame's buffer (and checked)
    the pooling step                          writes the caller's grid itself (FP16 kernel, float32
                                              grid), else this frame's buffer, then
    the epilogue                              -> the grid dtype, checked, scaled where it must be
    the caller's ``done`` target, if given    the flag word copied to its pinned word, then its
                                              event recorded: a replay is one driver call

E4M3 codes at FP16: the codes convert to FP16 exactly, unscaled; their scales 2^k come back in
the epilogue, which multiplies by 2^(8 - k0 - k1): the exponents stored for it are k + 4, so the
product is 2^-(k_depth + k_feat) (powers of two: exact).

Graphs: a binding (the caller's addresses, dtypes, scales) and ``done`` target seen a second
time is captured as a CUDA graph on a private stream and replayed on the caller's from then on
(the 64 most recent kept); one seen once runs as individual launches, so one-off addresses never
pay a capture. A ``done`` target (its word and event) must outlive this frame's graphs.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, NamedTuple

import numpy as np

from ...device.driver import DeviceBuffer, DeviceView, Graph, Stream, launch_args
from ...kernels.table import CONVERT_KERNELS, PRECISION_DTYPES
from ...scatter_map import ScatterMap
from . import kernel_copies
from .frame import _SUFFIX, _THREADS

E4M3 = np.dtype(np.uint8)
F32 = np.dtype(np.float32)
FP16_EPILOGUE_BIAS = 4  # see the module doc: (k + 4) twice cancels the epilogue's 2^8
VECTOR_ALIGN = 16  # the pooling kernels load and store 16-byte vectors (uint4)
# a consumer holding N grids at a time cycles through N + 1 bindings, a hand-off ring's slots through
# ring_size / tensors-per-set: a binding is captured when seen again among the last BINDINGS_REMEMBERED,
# and as many graphs are kept, so a cycle either fits (replays) or never captures (no capture churn)
GRAPHS_KEPT = BINDINGS_REMEMBERED = 64


class Binding(NamedTuple):
    """Everything a frame's recorded work depends on: a graph per distinct binding."""

    depth: int
    depth_dtype: np.dtype
    feat: int
    feat_dtype: np.dtype
    out: int
    out_dtype: np.dtype
    k_depth: int = 0  # exponents of raw E4M3 inputs' scales (0 for float inputs)
    k_feat: int = 0


class DeviceFrame:
    """Device buffers and graphs of one map at one kernel precision, for device inputs.

    ``enqueue_kernel(stream, bindings)`` is the pooling step GpuFrame takes (bindings 'depth',
    'feat' in the kernel input dtype, 'out' in its output dtype: PRECISION_DTYPES).
    """

    def __init__(
        self,
        rt,
        smap: ScatterMap,
        precision: str,
        enqueue_kernel: Callable,
        *,
        check_finite: bool = True,
    ):
        self.rt, self.smap, self.precision = rt, smap, precision
        self.device = rt.device  # the driver.Device it runs on (its context, ordinal)
        self.enqueue_kernel = enqueue_kernel
        self.check_finite = bool(check_finite)
        self.kin, self.kout = PRECISION_DTYPES[precision].input, PRECISION_DTYPES[precision].output
        self.n = {
            "depth": smap.num_depth,
            "feat": smap.num_feat_rows * smap.channels,
            "out": smap.num_cells * smap.channels,
        }
        self._kin = {s: DeviceBuffer(self.n[s] * self.kin.itemsize) for s in ("depth", "feat")}
        self._kout = DeviceBuffer(self.n["out"] * self.kout.itemsize)
        # flags (u32) | amax depth, feat (u32 bits) | exponents depth, feat (i32)
        self._scratch = DeviceBuffer(32)
        self._capture = Stream()
        self._graphs: OrderedDict[tuple, Graph] = OrderedDict()
        self.last_graph: Graph | None = None  # the graph the last enqueue replayed (None: run eagerly)
        self.last_key: tuple | None = None    # and its key
        self.on_destroy: list = []  # hook(key, graph) before a graph is destroyed (the hand-off core's launcher)
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self.graph_replays = 0
        self.eager_frames = 0
        # resolved now: nothing may resolve a function while a stream is captured
        for kernel in CONVERT_KERNELS:
            rt.module.function(kernel)

    @property
    def flags(self) -> DeviceView:
        """The flag word of the last enqueued frame (frame.FLAG_INPUT | FLAG_OUTPUT)."""
        return self._scratch.view(0, 4)

    def enqueue(self, stream: Stream, binding: Binding, done=None, gather: tuple = ()) -> None:
        """The frame of ``binding`` on ``stream``: a graph replay when it was seen before.
        ``done`` (or None): ``host_ptr``, a pinned word the flag word is copied to, and
        ``event``, recorded after it (an Event, or None: the caller waits for the stream);
        part of the graph, so part of its key.
        ``gather``: (dst, src or None for zeros, bytes) device copies run first (per-camera
        tensors into the stacked inputs), also part of the graph and its key: a set of ring
        slots seen before is one replay, not a launch per camera."""
        key = (binding, done, self.check_finite, gather)
        graph = self._graphs.get(key)
        if graph is None and key in self._seen:
            graph = self._graphs[key] = Graph(
                self._capture, lambda s: self._record(s, binding, done, gather, captured=True)
            )
            while len(self._graphs) > GRAPHS_KEPT:
                self._destroy(*self._graphs.popitem(last=False))
        self.last_graph, self.last_key = graph, key
        if graph is not None:
            self._graphs.move_to_end(key)
            graph.replay(stream)
            self.graph_replays += 1
            return
        self._seen[key] = None
        while len(self._seen) > BINDINGS_REMEMBERED:
            self._seen.popitem(last=False)
        self._record(stream, binding, done, gather)
        self.eager_frames += 1

    # --- the work of one frame ------------------------------------------------------------------
    def _record(self, s: Stream, b: Binding, done, gather=(), captured: bool = False) -> None:
        # copies and fills as kernels: the frame is one run on the SMs (kernel_copies.py); the
        # cameras' copies (a missing camera zeros: zero weights add nothing to the grid) and the
        # scratch words' zeros (flags, amax depth, amax feat) in one launch
        kernel_copies.copy_many(self.rt, s, [*gather, (self._scratch.ptr, None, 12)])
        self._pool(s, b)
        if done is not None:
            device_ptr = getattr(done, "device_ptr", 0)
            if device_ptr:  # the flag word's host memory, mapped: written by a kernel too
                kernel_copies.copy(self.rt, s, device_ptr, self.flags.ptr, 4)
            else:
                s.d2h(done.host_ptr, self.flags, 4)
            if done.event is not None:
                done.event.record(s.handle, external=captured)

    def _pool(self, s: Stream, b: Binding) -> None:
        scratch = self._scratch.ptr
        flags = scratch if self.check_finite else 0
        raw = (b.depth_dtype == E4M3, b.feat_dtype == E4M3)
        fp16_scaled = self.precision == "fp16" and any(raw)
        if self.precision == "fp8" and any(raw) or fp16_scaled:
            bias = FP16_EPILOGUE_BIAS if fp16_scaled else 0
            for i, k in enumerate((b.k_depth, b.k_feat)):  # a quantised stream overwrites its own
                kernel_copies.fill_u32(self.rt, s, scratch + 12 + 4 * i, k + bias, 1)
        kin = [
            self._input(s, stream, i, ptr, np.dtype(dt), flags)
            for i, (stream, ptr, dt) in enumerate(
                (("depth", b.depth, b.depth_dtype), ("feat", b.feat, b.feat_dtype))
            )
        ]
        out_dtype = np.dtype(b.out_dtype)
        out_bytes = self.n["out"] * out_dtype.itemsize
        # the kernel stores 16-byte vectors: it writes the caller's grid only where that is aligned
        direct = (self.precision == "fp16" and out_dtype == F32 and not fp16_scaled
                  and b.out % VECTOR_ALIGN == 0)
        target = DeviceView(b.out, out_bytes) if direct else self._kout
        self.enqueue_kernel(s, {"depth": kin[0], "feat": kin[1], "out": target})
        n = self.n["out"]
        if direct:
            self._elementwise(
                s, "bevconv_check_out_f32", n, ("ptr", b.out), ("i64", n), ("ptr", scratch)
            )
            return
        scaled = self.precision == "fp8" or fp16_scaled
        self._elementwise(
            s,
            f"bevconv_out_{_SUFFIX[self.kout]}_to_{_SUFFIX[out_dtype]}",
            n,
            ("ptr", self._kout.ptr),
            ("ptr", b.out),
            ("i64", n),
            ("ptr", scratch + 12 if scaled else 0),
            ("ptr", scratch),
        )

    def _input(
        self, s: Stream, stream: str, i: int, ptr: int, wire: np.dtype, flags: int
    ) -> DeviceView:
        """What the pooling step reads for one stream: the caller's memory, or its conversion."""
        n = self.n[stream]
        nbytes = n * wire.itemsize
        if wire == self.kin and ptr % VECTOR_ALIGN:  # the kernel's 16-byte loads need a copy
            dst = self._kin[stream]
            kernel_copies.copy(self.rt, s, dst.ptr, ptr, nbytes)
            ptr = dst.ptr
        if wire == self.kin:
            if flags:
                self._elementwise(
                    s, f"bevconv_check_{_SUFFIX[wire]}", n, ("ptr", ptr), ("i64", n), ("ptr", flags)
                )
            return DeviceView(ptr, nbytes)
        dst = self._kin[stream]
        if self.precision == "fp16":
            self._elementwise(
                s,
                f"bevconv_{_SUFFIX[wire]}_to_f16",
                n,
                ("ptr", ptr),
                ("ptr", dst.ptr),
                ("i64", n),
                ("ptr", flags),
            )
        else:  # float -> E4M3 with the scale the device derives from the amax
            amax = self._scratch.ptr + 4 + 4 * i
            self._elementwise(
                s,
                f"bevconv_amax_{_SUFFIX[wire]}",
                n,
                ("ptr", ptr),
                ("i64", n),
                ("ptr", amax),
                ("ptr", flags),
            )
            self._elementwise(
                s,
                f"bevconv_{_SUFFIX[wire]}_to_e4m3",
                n,
                ("ptr", ptr),
                ("ptr", dst.ptr),
                ("i64", n),
                ("ptr", amax),
                ("ptr", self._scratch.ptr + 12 + 4 * i),
            )
        return DeviceView(dst.ptr, dst.nbytes)

    def _elementwise(self, s: Stream, kernel: str, n: int, *args) -> None:
        blocks = max(1, min(-(-n // _THREADS), self.rt.device.sm_count * 8))
        launch_args(self.rt.module, kernel, (blocks, 1, 1), (_THREADS, 1, 1), args, s)

    def _destroy(self, key, graph: Graph) -> None:
        for hook in list(self.on_destroy):  # whoever launches it elsewhere lets it go first
            hook(key, graph)
        graph.destroy()

    def close(self) -> None:
        for key, graph in list(self._graphs.items()):
            self._destroy(key, graph)
        self._graphs.clear()
        for buf in (*self._kin.values(), self._kout, self._scratch):
            buf.free()
