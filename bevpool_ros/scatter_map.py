"""Five-array INT32 scatter map: built once per calibration, validated, cached, saved.

Build: every (camera, depth bin, feature cell) frustum point -> undo the camera's crop/resize
(rig.transform_of: its own, or the rig's scaled to its image size) -> K^-1 ->
camera->ego -> voxel (floor) -> drop points outside the grid -> stable sort by BEV cell ->
``ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths`` (docs/contracts.md).
"""
from __future__ import annotations

import io
import re
import threading
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .rig import Rig

ARRAYS = ("ranks_depth", "ranks_feat", "ranks_bev", "interval_starts", "interval_lengths")
_INT32_MAX = np.iinfo(np.int32).max


class ScatterMapError(ValueError):
    """A scatter map violates an invariant; the message names the array and the index."""


@dataclass(frozen=True, eq=False)
class ScatterMap:
    ranks_depth: np.ndarray
    ranks_feat: np.ndarray
    ranks_bev: np.ndarray
    interval_starts: np.ndarray
    interval_lengths: np.ndarray
    depth_shape: tuple[int, int, int, int]  # (N, D, H, W)
    grid_shape: tuple[int, int, int]        # (Z, Y, X)
    channels: int
    frustum_points: int = 0                 # points before grid culling
    key: str = ""                           # rig digest (or workload name) it was built from
    meta: dict = field(default_factory=dict)

    # sizes ---------------------------------------------------------------------------------
    @property
    def num_points(self) -> int:
        return int(self.ranks_bev.size)

    @property
    def num_intervals(self) -> int:
        return int(self.interval_starts.size)

    @property
    def num_cells(self) -> int:
        z, y, x = self.grid_shape
        return z * y * x

    @property
    def num_depth(self) -> int:
        return int(np.prod(self.depth_shape))

    @property
    def num_feat_rows(self) -> int:
        n, _, h, w = self.depth_shape
        return n * h * w

    @property
    def feat_shape(self) -> tuple[int, int, int, int]:
        n, _, h, w = self.depth_shape
        return (n, h, w, self.channels)

    @property
    def bev_shape(self) -> tuple[int, int, int, int]:
        return (*self.grid_shape, self.channels)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in ARRAYS}

    def with_channels(self, channels: int) -> "ScatterMap":
        from dataclasses import replace

        return replace(self, channels=int(channels))

    # invariants ----------------------------------------------------------------------------
    def validate(self) -> "ScatterMap":
        """Raise ScatterMapError on any violated invariant; return self when all hold."""
        for k in ARRAYS:
            a = getattr(self, k)
            if not isinstance(a, np.ndarray) or a.dtype != np.int32 or a.ndim != 1:
                raise ScatterMapError(f"{k}: expected a 1-D int32 array, got "
                                      f"{getattr(a, 'dtype', type(a))} {getattr(a, 'shape', '')}")
            if not a.flags.c_contiguous:
                raise ScatterMapError(f"{k}: must be C-contiguous")
        if len(self.depth_shape) != 4 or min(self.depth_shape) <= 0:
            raise ScatterMapError(f"depth_shape: expected 4 positive sizes, got {self.depth_shape}")
        if len(self.grid_shape) != 3 or min(self.grid_shape) <= 0:
            raise ScatterMapError(f"grid_shape: expected 3 positive sizes, got {self.grid_shape}")
        if self.channels <= 0:
            raise ScatterMapError(f"channels: must be > 0, got {self.channels}")
        for name, n in (("num_depth", self.num_depth), ("num_cells", self.num_cells),
                        ("feat elements", self.num_feat_rows * self.channels),
                        ("bev elements", self.num_cells * self.channels)):
            if n > _INT32_MAX:
                raise ScatterMapError(f"{name} = {n} overflows INT32 indexing")
        P, I = self.num_points, self.num_intervals
        if not (self.ranks_depth.size == self.ranks_feat.size == P):
            raise ScatterMapError(f"rank arrays differ in length: depth {self.ranks_depth.size}, "
                                  f"feat {self.ranks_feat.size}, bev {P}")
        if self.interval_lengths.size != I:
            raise ScatterMapError(f"interval_lengths has {self.interval_lengths.size} entries, "
                                  f"interval_starts {I}")
        for k, hi in (("ranks_depth", self.num_depth), ("ranks_feat", self.num_feat_rows),
                      ("ranks_bev", self.num_cells)):
            a = getattr(self, k)
            if P and (a.min() < 0 or a.max() >= hi):
                bad = int(np.flatnonzero((a < 0) | (a >= hi))[0])
                raise ScatterMapError(f"{k}[{bad}] = {a[bad]} outside [0, {hi})")
        if P and np.any(np.diff(self.ranks_bev) < 0):
            bad = int(np.flatnonzero(np.diff(self.ranks_bev) < 0)[0])
            raise ScatterMapError(f"ranks_bev not sorted at index {bad}")
        if (P == 0) != (I == 0):
            raise ScatterMapError(f"{P} points but {I} intervals")
        if I:
            if np.any(self.interval_lengths <= 0):
                bad = int(np.flatnonzero(self.interval_lengths <= 0)[0])
                raise ScatterMapError(f"interval_lengths[{bad}] = {self.interval_lengths[bad]} is not > 0")
            ends = self.interval_starts.astype(np.int64) + self.interval_lengths
            if self.interval_starts[0] != 0 or ends[-1] != P or np.any(self.interval_starts[1:] != ends[:-1]):
                raise ScatterMapError("intervals do not tile [0, P) exactly in order")
            first = self.ranks_bev[self.interval_starts]
            last = self.ranks_bev[ends - 1]
            if np.any(first != last):
                bad = int(np.flatnonzero(first != last)[0])
                raise ScatterMapError(f"interval {bad} spans more than one BEV cell")
            if I > 1 and np.any(first[1:] == first[:-1]):
                bad = int(np.flatnonzero(first[1:] == first[:-1])[0])
                raise ScatterMapError(f"intervals {bad} and {bad + 1} hold the same BEV cell")
        return self

    # statistics ----------------------------------------------------------------------------
    def points_per_camera(self) -> np.ndarray:
        """Points each camera contributes (camera n owns depth indices [n*D*H*W, (n+1)*D*H*W));
        a 0 is a camera that sees none of the grid, usually a wrong extrinsic or grid."""
        n, d, h, w = self.depth_shape
        return np.bincount(self.ranks_depth // (d * h * w), minlength=n)

    def stats(self) -> dict:
        from .regime import working_set_bytes

        lengths = self.interval_lengths
        dist = {}
        if lengths.size:
            q = np.percentile(lengths, [50, 90, 99])
            dist = {"mean": float(lengths.mean()), "p50": float(q[0]), "p90": float(q[1]),
                    "p99": float(q[2]), "max": int(lengths.max())}
        return {
            "points": self.num_points,
            "frustum_points": int(self.frustum_points),
            "kept_fraction": self.num_points / self.frustum_points if self.frustum_points else 1.0,
            "intervals": self.num_intervals,
            "max_interval": int(lengths.max()) if lengths.size else 0,
            "interval_lengths": dist,
            "occupied_cells_fraction": self.num_intervals / self.num_cells,
            "points_per_camera": self.points_per_camera().tolist(),
            "depth_shape": list(self.depth_shape),
            "feat_shape": list(self.feat_shape),
            "bev_shape": list(self.bev_shape),
            "channels": self.channels,
            "working_set_bytes": {dt: working_set_bytes(self, dt) for dt in ("float32", "float16", "float8_e4m3")},
        }

    # persistence ---------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """``.npz`` with the five arrays plus depth_shape, grid_shape, channels, frustum_points
        (int64) and key (its UTF-8 bytes as uint8: no unicode arrays, nothing parsed as text)."""
        buf = io.BytesIO()
        np.savez_compressed(buf, **self.arrays(),
                            depth_shape=np.asarray(self.depth_shape, np.int64),
                            grid_shape=np.asarray(self.grid_shape, np.int64),
                            channels=np.int64(self.channels),
                            frustum_points=np.int64(self.frustum_points),
                            key=np.frombuffer(self.key.encode(), np.uint8))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes, source: str = "scatter map", max_bytes: int | None = None) -> "ScatterMap":
        """Parse and validate; anything malformed (empty, truncated, not a zip, bad header,
        wrong keys, broken invariants) raises ScatterMapError, never numpy's or zipfile's errors.
        ``max_bytes``: refuse, before decompressing, members that would expand beyond it."""
        try:
            z = read_npz(blob, max_bytes)
            missing = [k for k in (*ARRAYS, "depth_shape", "grid_shape", "channels") if k not in z]
            if missing:
                raise ScatterMapError(f"{source}: missing keys {missing}")
            smap = cls(**{k: np.ascontiguousarray(z[k]) for k in ARRAYS},
                       depth_shape=tuple(int(v) for v in z["depth_shape"]),
                       grid_shape=tuple(int(v) for v in z["grid_shape"]),
                       channels=int(z["channels"]),
                       frustum_points=int(z["frustum_points"]) if "frustum_points" in z else 0,
                       key=_key_text(z["key"]) if "key" in z else "")
        except ScatterMapError:
            raise
        except Exception as e:  # numpy/zipfile/tokenize raise a dozen types on a damaged file
            raise ScatterMapError(f"{source}: unreadable scatter map ({type(e).__name__}: {e})"[:300]) from None
        return smap.validate()

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.to_bytes())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "ScatterMap":
        try:
            blob = Path(path).read_bytes()
        except OSError as e:
            raise ScatterMapError(f"{path}: unreadable scatter map ({e})") from None
        return cls.from_bytes(blob, str(path))


_NPY_HEADER = re.compile(r"""\{'descr': '([<>|][a-z]\d+)', 'fortran_order': False, 'shape': \(([\d, ]*)\), \}""")


NPZ_MEMBERS_MAX = 16  # a map file holds 10 arrays


def map_bytes_bound(depth_shape) -> int:
    """The most bytes a map of this frustum holds: five int32 arrays of at most one entry per
    frustum point (ranks, intervals), plus the small arrays and the .npy headers."""
    return 5 * 4 * int(np.prod(depth_shape, dtype=np.int64)) + (1 << 16)


def read_npz(blob: bytes, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (as ``np.savez`` writes them: C order, plain dtypes), parsed here.

    numpy's own reader evaluates each header as Python source; numpy 2.5 on Python 3.12 rejected
    valid files that way ("source code cannot contain null bytes"), so the one header layout numpy
    writes is matched instead, and anything else is refused.

    A zip bomb costs nothing: the members' declared sizes are checked against ``max_bytes``
    before anything is decompressed, and zipfile never inflates a member beyond its declared
    size (a member that lies about it fails its CRC).
    """
    out = {}
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        infos = zf.infolist()
        if len(infos) > NPZ_MEMBERS_MAX:
            raise ValueError(f"{len(infos)} members, at most {NPZ_MEMBERS_MAX}")
        declared = sum(i.file_size for i in infos)
        if max_bytes is not None and declared > max_bytes:
            raise ValueError(f"members expand to {declared} bytes, more than the {max_bytes} this map "
                             "can hold: refused before decompressing")
        for info in infos:
            name = info.filename
            data = zf.read(info)
            if not (name.endswith(".npy") and data[:6] == b"\x93NUMPY" and data[6] in (1, 2, 3)):
                raise ValueError(f"{name}: not an .npy member")
            size_bytes = 2 if data[6] == 1 else 4
            n = int.from_bytes(data[8:8 + size_bytes], "little")
            start = 8 + size_bytes
            m = _NPY_HEADER.match(data[start:start + n].decode("latin1"))
            if m is None:
                raise ValueError(f"{name}: unsupported .npy header")
            dtype = np.dtype(m.group(1))
            shape = tuple(int(v) for v in m.group(2).replace(" ", "").split(",") if v)
            count = int(np.prod(shape, dtype=np.int64))
            if len(data) - start - n != count * dtype.itemsize:
                raise ValueError(f"{name}: {len(data) - start - n} data bytes for shape {shape} {dtype}")
            out[name[:-4]] = np.frombuffer(data, dtype, count, offset=start + n).reshape(shape)
    return out


def _key_text(arr: np.ndarray) -> str:
    """Key as written by to_bytes (uint8), or by older files (a unicode scalar)."""
    return arr.tobytes().decode() if arr.dtype == np.uint8 else str(arr)


# --- building from a rig ----------------------------------------------------------------------
def frustum_rays(rig: Rig) -> tuple[np.ndarray, np.ndarray]:
    """Camera origins [N, 3] and per-feature-cell rays [N, H, W, 3] in the ego frame.

    A ray is scaled so that ``origin + d * ray`` lies at camera-z depth ``d`` (the depth bins
    are camera-z depths, as in lift-splat).
    """
    fh, fw = rig.feature_height, rig.feature_width
    if rig.frustum_sampling == "bevdet":
        us = np.linspace(0.0, rig.input_width - 1.0, fw)
        vs = np.linspace(0.0, rig.input_height - 1.0, fh)
    else:  # centre of each feature cell, in input pixels
        s = rig.feature_stride
        us = (np.arange(fw) + 0.5) * s - 0.5
        vs = (np.arange(fh) + 0.5) * s - 0.5
    origins = np.array([cam.translation for cam in rig.cameras], dtype=np.float64)
    rays = []
    for cam, t in zip(rig.cameras, rig.camera_transforms):
        # undo this camera's crop, then its resize: input pixel -> source pixel
        u, v = np.meshgrid((us + t.crop_left) / t.resize, (vs + t.crop_top) / t.resize)
        pix = np.stack([u, v, np.ones_like(u)], axis=-1)  # homogeneous [H, W, 3]
        rays.append(pix @ (np.asarray(cam.rotation) @ np.linalg.inv(np.asarray(cam.K))).T)
    return origins, np.stack(rays)


def frustum_points_ego(rig: Rig) -> np.ndarray:
    """Ego-frame xyz of every frustum point, shape [N, D, H, W, 3], float64."""
    origins, rays = frustum_rays(rig)
    d = rig.depth_values[None, :, None, None, None]
    return origins[:, None, None, None, :] + d * rays[:, None]


def build_scatter_map(rig: Rig) -> ScatterMap:
    """Deterministic scatter map for ``rig``; validated before it is returned."""
    pts = frustum_points_ego(rig).reshape(-1, 3)
    N, D, H, W = rig.depth_shape
    Z, Y, X = rig.grid_shape
    lower = np.array([rig.x.lower, rig.y.lower, rig.z.lower])
    step = np.array([rig.x.step, rig.y.step, rig.z.step])
    vox = np.floor((pts - lower) / step).astype(np.int64)
    keep = ((vox[:, 0] >= 0) & (vox[:, 0] < X) & (vox[:, 1] >= 0) & (vox[:, 1] < Y)
            & (vox[:, 2] >= 0) & (vox[:, 2] < Z))
    ranks_depth = np.flatnonzero(keep)
    vox = vox[keep]
    ranks_bev = (vox[:, 2] * Y + vox[:, 1]) * X + vox[:, 0]
    # depth index ((n*D + d)*H + h)*W + w -> feature row (n*H + h)*W + w
    n_idx = ranks_depth // (D * H * W)
    hw = ranks_depth % (H * W)
    ranks_feat = n_idx * (H * W) + hw
    order = np.argsort(ranks_bev, kind="stable")
    return scatter_map_from_ranks(ranks_depth[order], ranks_feat[order], ranks_bev[order],
                                  depth_shape=(N, D, H, W), grid_shape=(Z, Y, X),
                                  channels=rig.channels, frustum_points=pts.shape[0],
                                  key=rig.digest())


def scatter_map_from_ranks(ranks_depth, ranks_feat, ranks_bev, *, depth_shape, grid_shape,
                           channels, frustum_points=0, key="") -> ScatterMap:
    """Intervals from BEV-sorted rank arrays; the map is validated before it is returned."""
    ranks_bev = np.asarray(ranks_bev)
    P = ranks_bev.size
    if P:
        change = np.flatnonzero(ranks_bev[1:] != ranks_bev[:-1]) + 1
        starts = np.concatenate([[0], change])
        lengths = np.diff(np.concatenate([starts, [P]]))
    else:
        starts = lengths = np.zeros(0, np.int64)
    c = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    return ScatterMap(c(ranks_depth), c(ranks_feat), c(ranks_bev), c(starts), c(lengths),
                      depth_shape=tuple(int(v) for v in depth_shape),
                      grid_shape=tuple(int(v) for v in grid_shape), channels=int(channels),
                      frustum_points=int(frustum_points or P), key=key).validate()


# --- cache ----------------------------------------------------------------------------------
class ScatterMapCache:
    """In-memory LRU keyed by rig digest, optionally backed by ``.npz`` files in a directory."""

    def __init__(self, capacity: int = 8, directory: str | Path | None = None):
        self.capacity = capacity
        self.directory = Path(directory) if directory else None
        self._maps: OrderedDict[str, ScatterMap] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, rig: Rig) -> ScatterMap:
        key = rig.digest()
        with self._lock:
            if key in self._maps:
                self._maps.move_to_end(key)
                self.hits += 1
                return self._maps[key].with_channels(rig.channels)
        smap = self._load_file(key, map_bytes_bound(rig.depth_shape)) or build_scatter_map(rig)
        with self._lock:
            self.misses += 1
            self._maps[key] = smap
            while len(self._maps) > self.capacity:
                self._maps.popitem(last=False)
        if self.directory:
            self._store_file(key, smap)
        return smap.with_channels(rig.channels)

    def _path(self, key: str) -> Path:
        return self.directory / f"scatter_map_{key}.npz"

    def _load_file(self, key: str, max_bytes: int | None = None) -> ScatterMap | None:
        from .private_cache import log, read_trusted

        blob = read_trusted(self._path(key), "scatter-map cache entry") if self.directory else None
        if blob is None:
            return None
        try:
            smap = ScatterMap.from_bytes(blob, str(self._path(key)), max_bytes)
            return smap if smap.key == key else None
        except ScatterMapError as e:  # sealed but invalid (an older format, a bomb): rebuilt, overwritten
            log.warning("scatter-map cache entry refused, rebuilding it: %s", e)
            return None

    def _store_file(self, key: str, smap: ScatterMap) -> None:
        from .private_cache import write_trusted

        write_trusted(self._path(key), smap.to_bytes(), "scatter-map cache entry")


_default_cache = ScatterMapCache()


def scatter_map_for(rig: Rig) -> ScatterMap:
    """Process-wide cached map for ``rig`` (rebuilt only when its geometry digest changes)."""
    return _default_cache.get(rig)
