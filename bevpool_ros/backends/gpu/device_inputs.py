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
from ...device.driver import DeviceBuffer, PinnedBuffer, bind
from ...errors import InputError, NonFiniteInput, NonFiniteOutput, check_out
from ...metric_depth import MetricDepth
from ..staging import E4M3_WIRE
from .device_frame import Binding
from .device_intake import STREAMS, DeviceIntake
from .frame import FLAG_INPUT, FLAG_OUTPUT, DeviceOutput, pow2_exponent


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
        self.intake = DeviceIntake(self.smap, self.rt.device, "the backend runs")
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
        n = self.intake.shapes["depth"][0]
        if len(cameras) != n:
            raise InputError(f"{len(cameras)} cameras for a map of {n}")
        target = out if out is not None else self.frame.own_output(np.float32).array
        # page-locked, as GpuFrame's (the caller's array registered once): a pageable D2H of a
        # 2.6 MB grid is a staged, synchronous copy of about a millisecond
        host = self.frame.host_target(target) if host_copy else None
        bind(self.rt.device.ctx)  # this thread's current context: the backend's device
        per_stream = [self._stream_inputs(cameras, i, s) for i, s in enumerate(STREAMS)]
        self.device.check_finite = self.frame.check_finite
        s = self.rt.stream
        # the producers' writes, ordered on the device
        self.intake.order_after(s.handle, payloads=[obj for cam in cameras for obj in cam if is_device_payload(obj)])
        grid = self._grid(target.dtype)
        nbytes = target.nbytes
        output = DeviceOutput(grid.ptr, nbytes, target.dtype, tuple(self.smap.bev_shape), s.handle,
                              self.rt.device)
        # one submission and one host wait per set: a GPU shared with another process's work is
        # given to this one in time slices, and each separate burst of work waits for a slice
        with self.frame.timed(s):
            (td, gd, k_d), (tf, gf, k_f) = (self.intake.gather(stream, dtype, payloads, s) + (k,)
                                            for (payloads, dtype, k), stream in zip(per_stream, STREAMS))
            # the device copies and the flag word's copy replay with the frame: a ring's slot
            # pattern seen before is one graph launch
            self.device.enqueue(s, Binding(td.ptr, td.dtype, tf.ptr, tf.dtype, grid.ptr, target.dtype, k_d, k_f),
                                self._done, (*gd, *gf))
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
        """([DeviceTensor | host ndarray | None per camera], dtype, k: the E4M3 scale's exponent)."""
        want = self.intake.shapes[stream][1:]
        payloads, device_dtypes, host_dtypes, scales = [], set(), set(), set()
        for n, cam in enumerate(cameras):
            obj, name = cam[i], f"{stream}[{n}]"
            if obj is None:
                payloads.append(None)
            elif is_device_payload(obj):
                t = self.intake.tensor(obj, name, want)
                device_dtypes.add(t.dtype)
                if t.dtype == E4M3_WIRE:
                    scales.add(float(getattr(obj, "scale", 1.0) or 1.0))
                payloads.append(t)
            else:
                a = obj.distribution() if isinstance(obj, MetricDepth) else np.asarray(obj)
                if a.shape != want:
                    raise InputError(f"{name}: shape {a.shape} != expected {want}")
                host_dtypes.add(a.dtype)
                payloads.append(a)
        dtype = self.intake.one_dtype(stream, device_dtypes, host_dtypes)
        if dtype == E4M3_WIRE and not scales:
            scales.add(self.backend.fp8_scales[i])
        if len(scales) > 1:
            raise InputError(f"{stream}: E4M3 cameras with different scales {sorted(scales)} in one set")
        k = pow2_exponent(scales.pop()) if dtype == E4M3_WIRE else 0
        payloads = [np.ascontiguousarray(p, dtype) if isinstance(p, np.ndarray) else p for p in payloads]
        return payloads, dtype, k

    def targets(self, dtype) -> tuple[int, int, int]:
        """(the page-locked flag word's address, the device grid of ``dtype``, its bytes): what this
        run's graphs write, for the hand-off core's launcher (handoff/native/launcher.py)."""
        grid = self._grid(dtype)
        return self._flags.ptr, grid.ptr, int(np.prod(self.smap.bev_shape)) * np.dtype(dtype).itemsize

    def _grid(self, dtype) -> DeviceBuffer:
        dtype = np.dtype(dtype)
        if dtype not in self._grids:
            self._grids[dtype] = DeviceBuffer(int(np.prod(self.smap.bev_shape)) * dtype.itemsize)
        return self._grids[dtype]

    def close(self) -> None:
        self.rt.stream.synchronize()
        self.device.close()
        self.intake.close()
        for buf in self._grids.values():
            buf.free()
        self._flags.free()
        self._grids = {}
