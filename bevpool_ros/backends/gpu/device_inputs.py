"""A GPU backend's camera sets that hold device payloads (hand-off views): read on the device.

GpuFrame starts from host payloads (pinned staging, one H2D per stream). A set in which some
camera's depth or features already live on this GPU (bevpool_node's input hand-off: views of
the producer's ring) takes this path instead, on the backend's stream:

    wait on each payload's producer          (a hand-off view's IPC event: a device-side wait)
    a CameraTensor camera of the same set    H2D of its bytes into its slot
    one graph (device_frame.DeviceFrame)     each device camera gathered into its slot (D2D from
                                             the payload, no host copy; a missing camera: zeros),
                                             checks (NaN/Inf) and conversions on the device, the
                                             pooling step, the epilogue to the published dtype,
                                             the flag word's copy; keyed by the slots read, so a
                                             producer's ring cycling through its slots replays
                                             a few graphs
    frame hooks (output.gpu_handoff)         the grid is copied on into the output ring
    D2H of the grid                          into page-locked memory (skipped with
                                             ``host_copy=False``: hand-off consumers only), then
                                             one host wait, as GpuFrame does

The per-camera tensors sit in separate ring slots, while the kernel reads one stacked
[N, D, H, W] array: the gather is the one device copy this layout needs.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...device.device_payloads import is_device_payload
from ...device.driver import DeviceBuffer, DeviceView, PinnedBuffer, bind
from ...metric_depth import MetricDepth
from ..base import InputError, NonFiniteInput, NonFiniteOutput, check_out
from ..staging import E4M3_WIRE, FLOAT_WIRE
from .device_frame import Binding
from .frame import FLAG_INPUT, FLAG_OUTPUT, DeviceOutput, pow2_exponent

STREAMS = ("depth", "feat")


class FlagWord(NamedTuple):
    """DeviceFrame's ``done`` target without an event: the run waits for its stream itself."""

    host_ptr: int
    device_ptr: int = 0  # its device mapping: a kernel writes the flags (kernel_copies.py)
    event: None = None


class DeviceInputRun:
    """One backend frame (GpuFrame: its kernel step, precision, checks) fed from device payloads."""

    def __init__(self, backend):
        frame = backend.frame
        self.backend, self.frame = backend, frame
        self.rt, self.smap = backend.rt, backend.smap
        self.device = backend.device_frame()
        self.shapes = {"depth": tuple(self.smap.depth_shape), "feat": tuple(self.smap.feat_shape)}
        # stacked inputs, sized for float32 (the widest wire dtype)
        self._stacked = {s: DeviceBuffer(int(np.prod(shape)) * 4) for s, shape in self.shapes.items()}
        self._grids: dict[np.dtype, DeviceBuffer] = {}
        self._flags = PinnedBuffer((1,), np.uint32, mapped=True)
        self._done = FlagWord(self._flags.ptr, self._flags.device_ptr)  # the frame's flag word lands here

    def run(self, cameras, out: np.ndarray | None = None, host_copy: bool = True,
            publish: bool = True) -> np.ndarray | None:
        """``host_copy=False``: the grid stays on the device (frame hooks, ``device_output``) and
        None is returned; the values are still checked (a bad grid raises as it would).
        ``publish=False``: a warm-up (GpuBackend.warm_device_inputs): no frame hooks, and
        ``device_output`` keeps naming the last real grid."""
        if out is not None:
            check_out(self.smap, out)
        if len(cameras) != self.shapes["depth"][0]:
            raise InputError(f"{len(cameras)} cameras for a map of {self.shapes['depth'][0]}")
        target = out if out is not None else self.frame.own_output(np.float32).array
        # page-locked, as GpuFrame's (the caller's array registered once): a pageable D2H of a
        # 2.6 MB grid is a staged, synchronous copy of about a millisecond
        host = self.frame.host_target(target) if host_copy else None
        bind(self.rt.device.ctx)  # this thread's current context: the backend's device
        per_stream = [self._stream_inputs(cameras, i, s) for i, s in enumerate(STREAMS)]
        self.device.check_finite = self.frame.check_finite
        s = self.rt.stream
        for payloads, _, _ in per_stream:
            for p in payloads:
                if p is not None and p[0] == "device" and hasattr(p[2], "wait"):
                    p[2].wait(s.handle)  # the producer's write, ordered on the device
        grid = self._grid(target.dtype)
        (_, d_dtype, k_d), (_, f_dtype, k_f) = per_stream
        nbytes = target.nbytes
        output = DeviceOutput(grid.ptr, nbytes, target.dtype, tuple(self.smap.bev_shape), s.handle,
                              self.rt.device)
        # one submission and one host wait per set: a GPU shared with another process's work is
        # given to this one in time slices, and each separate burst of work waits for a slice
        with self.frame.timed(s):
            gather = []
            for (payloads, dtype, _), stream in zip(per_stream, STREAMS):
                gather += self._gather(s, stream, payloads, dtype)
            # the device copies and the flag word's copy replay with the frame: a ring's slot
            # pattern seen before is one graph launch
            self.device.enqueue(s, Binding(self._stacked["depth"].ptr, d_dtype, self._stacked["feat"].ptr,
                                           f_dtype, grid.ptr, target.dtype, k_d, k_f), self._done, tuple(gather))
            if publish:
                self.frame.last_output = output
                for hook in self.frame.after_frame:
                    hook(output)
            if host is not None:
                s.d2h(host.ptr, grid, nbytes)
        flags = int(self._flags.array[0])
        if flags & FLAG_INPUT:
            raise NonFiniteInput("inputs hold NaN/Inf (or values beyond FP16's range)")
        if flags & FLAG_OUTPUT:
            raise NonFiniteOutput(f"{self.frame.precision} grid holds NaN/Inf (overflow of the "
                                  "published dtype?)")
        if host is None:
            return None
        return out if out is not None else target.copy()

    # --- one stream -------------------------------------------------------------------------------
    def _stream_inputs(self, cameras, i: int, stream: str):
        """([("device", DeviceTensor, obj) | ("host", ndarray) | None per camera], dtype, k)."""
        from ...device.tensors import check_shape, device_tensor

        want = self.shapes[stream][1:]
        payloads, device_dtypes, host_dtypes, scales = [], set(), set(), set()
        for n, cam in enumerate(cameras):
            obj, name = cam[i], f"{stream}[{n}]"
            if obj is None:
                payloads.append(None)
            elif is_device_payload(obj):
                t = device_tensor(obj, name)
                check_shape(t, name, want)
                self._check_device(t, name)
                device_dtypes.add(t.dtype)
                if t.dtype == E4M3_WIRE:
                    scales.add(float(getattr(obj, "scale", 1.0) or 1.0))
                payloads.append(("device", t, obj))
            else:
                a = obj.distribution() if isinstance(obj, MetricDepth) else np.asarray(obj)
                if a.shape != want:
                    raise InputError(f"{name}: shape {a.shape} != expected {want}")
                host_dtypes.add(a.dtype)
                payloads.append(("host", a))
        dtype = self._stream_dtype(stream, device_dtypes, host_dtypes)
        if dtype == E4M3_WIRE and not scales:
            scales.add(self.backend.fp8_scales[i])
        if len(scales) > 1:
            raise InputError(f"{stream}: E4M3 cameras with different scales {sorted(scales)} in one set")
        k = pow2_exponent(scales.pop()) if dtype == E4M3_WIRE else 0
        payloads = [("host", np.ascontiguousarray(p[1], dtype)) if p and p[0] == "host" else p
                    for p in payloads]
        return payloads, dtype, k

    @staticmethod
    def _stream_dtype(stream: str, device_dtypes: set, host_dtypes: set) -> np.dtype:
        """The device payloads' one dtype (CameraTensor cameras of the set are cast to it on the
        host: float32 <-> float16 rounds as the device conversion would); E4M3 codes never mix."""
        allowed = (*FLOAT_WIRE, E4M3_WIRE)
        for d in device_dtypes | host_dtypes:
            if d not in allowed:
                raise InputError(f"{stream}: dtype {d.name} is not float32, float16 or E4M3 codes")
        if len(device_dtypes) > 1:
            raise InputError(f"{stream}: device cameras in {sorted(d.name for d in device_dtypes)} "
                             "mixed in one set")
        dtypes = device_dtypes or host_dtypes or {np.dtype(np.float16)}
        dtype = next(iter(dtypes)) if len(dtypes) == 1 else np.dtype(np.float32)
        if (E4M3_WIRE in device_dtypes | host_dtypes) and len(device_dtypes | host_dtypes) > 1:
            raise InputError(f"{stream}: E4M3 codes and float tensors mixed in one set")
        return dtype

    def _check_device(self, t, name: str) -> None:
        from ...device.driver import pointer_device

        mine = self.rt.device.ordinal
        ordinal = t.device if t.device is not None else pointer_device(t.ptr)
        if ordinal != mine:
            raise InputError(f"{name}: lives on GPU {ordinal}, the backend runs on GPU {mine}")

    def _gather(self, s, stream: str, payloads, dtype: np.dtype) -> list:
        """The device cameras' copies (dst, src or None for zeros, bytes) for the frame's graph;
        a CameraTensor camera in the same set is copied from its host bytes now (an address
        that changes every set: no graph)."""
        buf = self._stacked[stream]
        slot = int(np.prod(self.shapes[stream][1:])) * dtype.itemsize
        gather = []
        for n, p in enumerate(payloads):
            dst = buf.ptr + n * slot
            if p is None:  # a missing camera: zero weights add nothing to the grid
                gather.append((dst, None, slot))
            elif p[0] == "device":
                gather.append((dst, p[1].ptr, slot))
            else:
                s.h2d(DeviceView(dst, slot), p[1].ctypes.data, slot)
        return gather

    def _grid(self, dtype) -> DeviceBuffer:
        dtype = np.dtype(dtype)
        if dtype not in self._grids:
            self._grids[dtype] = DeviceBuffer(int(np.prod(self.smap.bev_shape)) * dtype.itemsize)
        return self._grids[dtype]

    def close(self) -> None:
        self.rt.stream.synchronize()
        self.device.close()
        for buf in (*self._stacked.values(), *self._grids.values()):
            buf.free()
        self._flags.free()
        self._stacked, self._grids = {}, {}
