"""BevPooler: BEV pooling as a call inside the process that runs the networks.

    pooler = BevPooler("rig.yaml", precision="fp16", grid_dtype="float16")
    grid = pooler.pool(depth, feat)          # device tensors in: enqueued on the current stream
    bev = torch.from_dlpack(grid)            # no copy, no host wait

Device inputs (PyTorch, CuPy, hand-off views, any DLPack / ``__cuda_array_interface__``
producer): float32, float16 or E4M3 codes (uint8, or a float8_e4m3fn tensor) with a power-of-two
scale. The kernel reads the caller's memory where its dtype is the kernel's input dtype (FP16
tensors at fp16, E4M3 codes at fp8); any other dtype is converted on the device into the
pooler's buffers. NaN/Inf are checked on the device; ``grid.check()`` (or ``sync=True``)
raises what was found. The grid goes into ``out`` (a device tensor of the grid's shape, float32
or float16) or memory of its own, allocated in stream order. Nothing waits on the host unless
``sync=True`` or the caller asks the grid.

Host inputs (numpy, or a DLPack CPU tensor) go through the node's path (pinned staging, one CUDA
graph, one wait) and come back as numpy. Without a GPU (``backend="cuda"``, ``fallback=True``: the
defaults) the cpu backend pools host inputs in float32, with one warning: the same code runs
everywhere, at CPU speed. Which backend runs is ``create_backend``'s decision, as in the node.

Any thread may call ``pool``: the device's context is made current in the calling thread, and
calls are serialised (they share the pooler's buffers); calls on different streams are ordered
on the device through an event, never through the host.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path

import numpy as np

from ..backends import create_backend, prepared
from ..backends.gpu.device_frame import Binding
from ..backends.gpu.device_intake import E4M3, DeviceIntake
from ..backends.gpu.frame import pow2_exponent
from ..device import streams
from ..device.driver import STREAM_PRIORITIES, Stream, api, bind, check
from ..device.tensors import DeviceTensor, check_shape, device_tensor, host_array, is_device
from ..errors import InputError
from ..rig import Rig
from ..rig_yaml import load_rig
from ..scatter_map import ScatterMap, scatter_map_for
from .grid import CallSlots, DeviceGrid
from .grid_memory import GridBuffers

log = logging.getLogger(__name__)

GRID_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float16)))


def scatter_map_of(source) -> ScatterMap:
    """A ScatterMap as is, a Rig, or a file: a rig YAML or a saved scatter map (.npz)."""
    if isinstance(source, ScatterMap):
        return source.validate()
    if isinstance(source, Rig):
        return scatter_map_for(source)
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.suffix == ".npz":
            return ScatterMap.load(path)
        return scatter_map_for(load_rig(path))
    raise TypeError(f"BevPooler: expected a Rig, a ScatterMap or a rig/scatter-map file, got {type(source).__name__}")


class BevPooler:
    """BEV pooling of one rig (or scatter map) at one precision, for callers in this process.

    ``precision``: fp16 | fp8 | auto (GPU; the cpu backend always computes float32);
    ``grid_dtype``: float16 | float32, the dtype of grids the pooler allocates itself;
    ``backend``: as ``create_backend`` names them: cuda | cpu | tensorrt | best;
    ``fallback``: a backend that cannot run here (no GPU) or cannot run the map hands over to the
    next simpler one (cuda -> cpu) with one warning; False: BackendUnavailable instead;
    ``fp8_scales``: the power-of-two scales of raw E4M3 inputs (depth, feat), per call too;
    ``stream_priority``: highest | normal, the pooler's own stream (calls whose tensors name no
    stream run there); a call on the caller's stream runs at that stream's priority.
    """

    def __init__(self, source, *, precision: str = "fp16", grid_dtype="float16", backend: str = "cuda",
                 fallback: bool = True, device: int = 0, check_finite: bool = True, fp8_scales=(1.0, 1.0),
                 autotune: bool = True, stream_priority: str = "highest"):
        self.smap = scatter_map_of(source)
        # shapes every call checks, as tuples once (the map's properties build them per read)
        self._depth_shape, self._feat_shape = tuple(self.smap.depth_shape), tuple(self.smap.feat_shape)
        self._grid_shape = tuple(self.smap.bev_shape)
        self.grid_dtype = np.dtype(grid_dtype)
        self._grid_cells = math.prod(self.smap.bev_shape)  # elements: per call, no numpy
        if self.grid_dtype not in GRID_DTYPES:
            raise ValueError(f"grid_dtype: expected float32 or float16, got {self.grid_dtype.name}")
        self.fp8_scales = _scales(fp8_scales)
        if stream_priority not in STREAM_PRIORITIES:
            raise ValueError(f"stream_priority: expected one of {STREAM_PRIORITIES}, got {stream_priority!r}")
        self.stream_priority = stream_priority
        if backend == "auto":
            raise ValueError("backend: 'auto' is now 'cuda' (the default: the cpu backend with one "
                             "warning when no GPU is usable; fallback=False refuses instead)")
        options = dict(device=int(device), check_finite=check_finite, autotune=autotune,
                       stream_priority=stream_priority)
        self.backend = prepared(create_backend(backend, precision, fallback, **options), self.smap, fallback,
                                **options)
        self._lock = threading.Lock()
        self._device = None
        self._closed = False
        if self.backend.name != "cpu":
            self._open_device_path()

    def _open_device_path(self) -> None:
        self._device = self.backend.device_frame()  # the backend's pooling step, for device tensors
        dev = self._device.device
        self._ctx, self._ordinal = dev.ctx, dev.ordinal
        self._intake = DeviceIntake(self.smap, dev, "the pooler")
        self._slots = CallSlots(dev.ctx)
        self._last_event = None  # the previous call's grid event, and its stream
        self._last_stream: int | None = None
        self._own_stream = Stream(self.stream_priority)  # for device inputs no framework names a stream for
        self._own_handle = int(self._own_stream.handle)
        self._wrapped: dict[int, Stream] = {}
        cu = api()
        self._pools = bool(check(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev.dev), "attr"))
        self._own_grids = GridBuffers(self._grid_cells * self.grid_dtype.itemsize, dev.ctx, self._pools,
                                      self._own_handle)

    # --- description -----------------------------------------------------------------------------
    @property
    def precision(self) -> str:
        """The precision the pooling runs at (fp32 on the cpu backend; auto resolved)."""
        return self.backend.precision

    @property
    def on_gpu(self) -> bool:
        return self.backend.name != "cpu"

    @property
    def device(self) -> int | None:
        return self._ordinal if self.on_gpu else None

    @property
    def grid_shape(self) -> tuple:
        return self._grid_shape

    def describe(self) -> dict:
        d = dict(self.backend.describe(), grid_dtype=self.grid_dtype.name, grid_shape=list(self.grid_shape))
        if self._device is not None:
            d.update(graph_replays=self._device.graph_replays, eager_frames=self._device.eager_frames)
        return d

    # --- pooling ---------------------------------------------------------------------------------
    def pool(self, depth, feat, *, out=None, stream=None, sync: bool = False, fp8_scales=None):
        """depth [N, D, H, W], feat [N, H, W, C] -> the grid [Z, Y, X, C].

        Device tensors: returns a ``DeviceGrid`` (into ``out`` when given), ordered on ``stream``
        (an int CUstream, a PyTorch or CuPy stream; None: the inputs' framework's current stream,
        else the pooler's own); ``sync=True`` waits and raises NonFiniteInput/NonFiniteOutput.
        Host arrays: returns numpy (into ``out`` when given), synchronously.
        Raises InputError for tensors that do not fit the map (shape, dtype, layout, device).
        """
        if self._closed:
            raise RuntimeError("BevPooler: pool() after close(): the pooler was closed")
        scales = self.fp8_scales if fp8_scales is None else _scales(fp8_scales)
        on_device = is_device(depth), is_device(feat)
        if on_device[0] != on_device[1]:
            raise InputError("depth and feat: one is a device tensor, the other a host array; pass both "
                             "on the device or both on the host")
        if on_device[0]:
            return self._pool_device(depth, feat, out, stream, sync, scales)
        return self._pool_host(depth, feat, out, scales)

    __call__ = pool

    def pool_cameras(self, cameras, *, out=None, stream=None, sync=False, fp8_scales=None):
        """Per-camera tensors, in the rig's camera order: ``[(depth [D, H, W] | None,
        feat [H, W, C] | None), ...]`` (None: a missing camera, pooled as zeros), e.g. hand-off
        views of another process's tensors. Device tensors are gathered on the device into the
        pooler's stacked buffers (one copy each, on the stream), then pooled as ``pool`` does;
        each stream's cameras must share one dtype. Host arrays go the node's staging path."""
        if self._closed:
            raise RuntimeError("BevPooler: pool_cameras() after close(): the pooler was closed")
        scales = self.fp8_scales if fp8_scales is None else _scales(fp8_scales)
        n = self.smap.depth_shape[0]
        if len(cameras) != n or any(len(c) != 2 for c in cameras):
            raise InputError(f"cameras: expected {n} (depth, feat) pairs, the map's cameras")
        present = [t for cam in cameras for t in cam if t is not None]
        on_device = {is_device(t) for t in present}
        if len(on_device) > 1:
            raise InputError("cameras: device tensors and host arrays mixed in one set")
        if on_device == {True}:
            return self._pool_device_cameras(cameras, present[0], out, stream, sync, scales)
        hosts = [tuple(None if t is None else host_array(t, "camera") for t in c) for c in cameras]
        if out is not None and is_device(out):
            raise InputError("out: host inputs pool into a host array (numpy); got a device tensor")
        target = out if out is not None else np.empty(self.grid_shape, self.grid_dtype)
        with self._lock:
            if self.backend.name == "cpu" or (self.precision == "fp16" and scales != (1.0, 1.0)):
                hosts = [tuple(None if a is None else _decode_e4m3(a, sc) for a, sc in zip(c, scales))
                         for c in hosts]
            elif tuple(self.backend.fp8_scales) != scales:
                self.backend.fp8_scales = scales
            return self.backend.pool_cameras(hosts, out=target)

    def _pool_device_cameras(self, cameras, first, out, stream, sync, scales):
        s, dl_stream, keep = self._begin_device(stream, first)
        stacked, gather, sources = [], [], []
        for i, (name, shape) in enumerate(self._intake.shapes.items()):
            per_camera = [None if cam[i] is None else self._intake.tensor(cam[i], f"{name}[{n}]", shape[1:], dl_stream)
                          for n, cam in enumerate(cameras)]
            dtype = self._intake.one_dtype(name, {t.dtype for t in per_camera if t is not None})
            tensor, copies = self._intake.gather(name, dtype, per_camera)
            stacked.append(tensor)
            gather += copies
            sources += [t for t in per_camera if t is not None]
        payloads = [obj for cam in cameras for obj in cam if obj is not None]
        return self._enqueue(s, dl_stream, *stacked, out, sync, scales, gather, sources, payloads, keep=keep)

    def _pool_host(self, depth, feat, out, scales) -> np.ndarray:
        d, f = host_array(depth, "depth"), host_array(feat, "feat")
        if out is not None and is_device(out):
            raise InputError("out: host inputs pool into a host array (numpy); got a device tensor")
        target = out if out is not None else np.empty(self.grid_shape, self.grid_dtype)
        with self._lock:
            # E4M3 codes are decoded here (exact in float32) where the backend cannot scale them:
            # the cpu backend, and the FP16 frame (it takes codes at scale 1 only)
            if self.backend.name == "cpu" or (self.precision == "fp16" and scales != (1.0, 1.0)):
                d, f = (_decode_e4m3(a, sc) for a, sc in ((d, scales[0]), (f, scales[1])))
            elif tuple(self.backend.fp8_scales) != scales:
                self.backend.fp8_scales = scales
            return self.backend.pool(d, f, out=target)

    def _pool_device(self, depth, feat, out, stream, sync, scales):
        s, dl_stream, keep = self._begin_device(stream, depth)
        td = self._intake.tensor(depth, "depth", self._depth_shape, dl_stream)
        tf = self._intake.tensor(feat, "feat", self._feat_shape, dl_stream)
        return self._enqueue(s, dl_stream, td, tf, out, sync, scales, keep=keep)

    def _begin_device(self, stream, tensor) -> tuple[int, int, object]:
        """(CUstream, the same as the array protocols carry it, the stream's owner) of a device call."""
        if not self.on_gpu:
            raise InputError("device tensors need the cuda backend; this pooler runs the cpu backend "
                             "(no GPU): pass numpy arrays")
        bind(self._ctx)  # this thread's current context: the pooler's device
        s, owner = self._stream_for(stream, tensor)
        return s, streams.exported(s), owner

    def _enqueue(self, s, dl_stream, td, tf, out, sync, scales, gather=(), sources=(), payloads=(), keep=None):
        """Enqueue one frame of ``td``, ``tf`` on ``s`` after the ``gather`` copies (dst, src or
        None for zeros, bytes); ``sources``, ``payloads``: further producers' tensors and the
        objects they came from (a hand-off view waits for its producer) to order after."""
        to = None if out is None else self._out_tensor(out, dl_stream)
        out_dtype = to.dtype if to is not None else self.grid_dtype
        k_depth = pow2_exponent(scales[0]) if td.dtype == E4M3 else 0
        k_feat = pow2_exponent(scales[1]) if tf.dtype == E4M3 else 0
        with self._lock:
            if self._device is None:
                raise RuntimeError("BevPooler: the pooler was closed")
            # the previous call (shared buffers) and every producer: device-side waits, no host wait
            if self._last_event is not None and not streams.same_stream(self._last_stream, s):
                self._last_event.wait(s)
            self._intake.order_after(s, (td, tf, to, *sources), payloads)
            memory = self._own_grids.take(s) if to is None else None
            out_ptr = to.ptr if to is not None else memory.ptr
            binding = Binding(td.ptr, td.dtype, tf.ptr, tf.dtype, out_ptr, out_dtype, k_depth, k_feat)
            slot = self._slots.take()
            handle = self._wrap(s)
            try:
                # the cameras' gather copies, the flag word's copy and the grid's event are part
                # of the (replayed) frame
                self._device.enqueue(handle, binding, slot, tuple(gather))
            except Exception:
                self._slots.give_back(slot)
                if memory is not None:
                    memory.give_back(s)
                raise
            self._last_event, self._last_stream = slot.event, s
        grid = DeviceGrid(out_ptr, self.grid_shape, out_dtype, s, self._ordinal, slot, self._slots, owner=memory,
                          out=out, keep=keep)
        return grid.check() if sync else grid

    def _out_tensor(self, out, dl_stream: int) -> DeviceTensor:
        """The caller's grid: a writable float32/float16 device tensor of the grid's shape."""
        if not is_device(out):
            raise InputError("out: device inputs pool into a device tensor; got a host array "
                             "(use grid.numpy() for a host copy)")
        to = device_tensor(out, "out", dl_stream)
        check_shape(to, "out", self.grid_shape)
        if to.dtype not in GRID_DTYPES or to.readonly:
            raise InputError(f"out: expected a writable float32/float16 tensor, got {to.dtype.name}"
                             + (" (read-only)" if to.readonly else ""))
        self._intake.check_device(to, "out")
        return to

    # --- helpers ---------------------------------------------------------------------------------
    def _stream_for(self, stream, tensor) -> tuple[int, object]:
        """(CUstream, the object that owns it): a grid keeps that object, so a framework's stream
        object (a CuPy stream is destroyed with it) outlives the grid, whose memory is given back
        in its order. A bare int names a stream the caller keeps alive as long as the grid."""
        if stream is not None:
            return streams.stream_handle(stream), stream
        current = streams.framework_stream(tensor)
        if current is not None:
            return current
        return self._own_handle, self._own_stream

    def _wrap(self, s: int) -> Stream:
        handle = self._wrapped.get(s)
        if handle is None:
            if len(self._wrapped) > 64:
                self._wrapped.clear()
            handle = self._wrapped[s] = Stream.wrap(s)
        return handle

    # --- teardown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the device buffers once the device is done with every call (grids already
        returned keep their memory until dropped)."""
        with self._lock:
            self._closed = True
            if self._device is not None:
                if self._last_event is not None:  # calls are chained: the last one covers all
                    self._last_event.synchronize()
                self._device.close()
                self._intake.close()
                self._slots.close()
                self._own_grids.close()
                self._device = None
            self.backend.close()

    def __enter__(self) -> "BevPooler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _scales(scales) -> tuple[float, float]:
    """(depth, feat) scales of raw E4M3 inputs: positive powers of two (the kernels apply them
    exactly as exponents)."""
    try:
        d, f = (float(x) for x in scales)
    except (TypeError, ValueError):
        raise InputError(f"fp8_scales: expected two numbers (depth, feat), got {scales!r}") from None
    for x in (d, f):
        if not (x > 0 and math.isfinite(x) and math.frexp(x)[0] == 0.5):
            raise InputError(f"fp8_scales: expected powers of two, got {scales!r}")
    return d, f


def _decode_e4m3(a: np.ndarray, scale: float) -> np.ndarray:
    """E4M3 codes as float32 values (code value / scale) for the cpu backend; floats as they are."""
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8:
        return a
    from ..fp8 import decode

    return decode(a, np.float32) / np.float32(scale)
