"""Device tensors into a DeviceFrame: the one intake of BevPooler and of the node's hand-off sets
(device_inputs.DeviceInputRun).

    tensor()             a device tensor read without a copy (device/tensors.py), refused unless it
                         has the map's shape, a dtype the frame takes (float32, float16, E4M3 codes),
                         an address aligned to its elements and the frame's GPU
    one_dtype()          the one dtype of a stream's cameras (E4M3 codes never mix with floats)
    gather()             per-camera tensors into this intake's stacked [N, ...] buffer: the frame's
                         gather list (D2D copies in its graph, zeros for a missing camera)
    order_after()        the frame's stream waits for each producer on the device (the stream a
                         tensor names, a hand-off view's IPC event), never on the host
"""
from __future__ import annotations

import math

import numpy as np

from ...device import streams
from ...device.driver import DeviceBuffer, DeviceView, Event, pointer_device
from ...device.tensors import DeviceTensor, check_shape, device_tensor
from ...errors import InputError
from ...scatter_map import ScatterMap

E4M3 = np.dtype(np.uint8)  # E4M3 codes travel as uint8
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
INPUT_DTYPES = (F32, F16, E4M3)
STREAMS = ("depth", "feat")


class DeviceIntake:
    """Device inputs of one map on one GPU; ``owner`` names who pools them in refusals."""

    def __init__(self, smap: ScatterMap, device, owner: str):
        self.shapes = {"depth": tuple(smap.depth_shape), "feat": tuple(smap.feat_shape)}
        self.ordinal, self.owner = device.ordinal, owner
        # stacked inputs of per-camera tensors, sized for float32 (the widest input dtype)
        self._stacked = {s: DeviceBuffer(math.prod(shape) * F32.itemsize) for s, shape in self.shapes.items()}
        self._producer_sync = Event(device.ctx)

    # --- one tensor ------------------------------------------------------------------------------
    def tensor(self, obj, name: str, shape, dl_stream: int | None = None) -> DeviceTensor:
        t = device_tensor(obj, name, dl_stream)
        check_shape(t, name, shape)
        if t.dtype not in INPUT_DTYPES:
            raise InputError(f"{name}: dtype {t.dtype.name} is not float32, float16 or E4M3 codes (uint8)")
        self.check_device(t, name)
        return t

    def check_device(self, t: DeviceTensor, name: str) -> None:
        """Aligned to its elements (DLPack's byte_offset can say otherwise; no kernel may read it)
        and on this intake's GPU."""
        if t.ptr % t.dtype.itemsize:
            raise InputError(f"{name}: address {t.ptr:#x} is not aligned to its {t.dtype.name} elements")
        ordinal = t.device if t.device is not None else pointer_device(t.ptr)
        if ordinal is None:
            raise InputError(f"{name}: address {t.ptr:#x} is not memory of a CUDA device")
        if ordinal != self.ordinal:
            raise InputError(f"{name}: lives on GPU {ordinal}, {self.owner} on GPU {self.ordinal}")

    # --- one stream of per-camera tensors --------------------------------------------------------
    @staticmethod
    def one_dtype(stream: str, device_dtypes: set, host_dtypes: set = frozenset()) -> np.dtype:
        """The device cameras' one dtype (host cameras of the set are cast to it on the host:
        float32 <-> float16 rounds as the device conversion would); float16 for none at all."""
        for d in device_dtypes | host_dtypes:
            if d not in INPUT_DTYPES:
                raise InputError(f"{stream}: dtype {d.name} is not float32, float16 or E4M3 codes")
        if len(device_dtypes) > 1:
            raise InputError(f"{stream}: device cameras in {sorted(d.name for d in device_dtypes)} mixed in one set")
        if E4M3 in device_dtypes | host_dtypes and len(device_dtypes | host_dtypes) > 1:
            raise InputError(f"{stream}: E4M3 codes and float tensors mixed in one set")
        dtypes = device_dtypes or host_dtypes or {F16}
        return next(iter(dtypes)) if len(dtypes) == 1 else F32

    def gather(self, stream: str, dtype: np.dtype, cameras, s=None) -> tuple[DeviceTensor, list]:
        """(the stacked tensor, its gather list: (dst, src or None for zeros, bytes) per device or
        missing camera). ``cameras``: a DeviceTensor, None or a host array each; a host array is
        copied into its slot now, on ``s`` (an address that changes every set: no graph)."""
        buf, shape = self._stacked[stream], self.shapes[stream]
        slot = math.prod(shape[1:]) * dtype.itemsize
        gather = []
        for n, t in enumerate(cameras):
            dst = buf.ptr + n * slot
            if isinstance(t, np.ndarray):
                s.h2d(DeviceView(dst, slot), t.ctypes.data, slot)
            else:  # a missing camera: zero weights add nothing to the grid
                gather.append((dst, None if t is None else t.ptr, slot))
        return DeviceTensor(buf.ptr, dtype, shape, self.ordinal), gather

    # --- producers --------------------------------------------------------------------------------
    def order_after(self, s, tensors=(), payloads=()) -> None:
        """``s`` (a CUstream) waits for every stream a tensor's producer named
        (``__cuda_array_interface__`` v3) and for every payload with a ``wait`` (a hand-off
        view's IPC event): device-side waits, no host wait."""
        waited = set()
        for t in tensors:
            if t is None or t.stream is None or t.stream in waited:
                continue
            waited.add(t.stream)
            if not streams.same_stream(t.stream, int(s)):
                self._producer_sync.record(t.stream)
                self._producer_sync.wait(s)
        for p in payloads:
            wait = getattr(p, "wait", None)
            if wait is not None:
                wait(s)

    def close(self) -> None:
        for buf in self._stacked.values():
            buf.free()
        self._stacked = {}
        self._producer_sync.destroy()
