"""What the BEVPool TensorRT plugin needs to know, as plain Python (no TensorRT import).

The plugin does not compute any launch geometry itself: the kernel, block and scalar arguments
come from ``kernels.table`` (the one launch description) and travel inside the engine as a
serialized plugin field.

Plugin inputs (decision): ``depth``, ``feat`` and the per-calibration arrays the plan binds, in
the plan's order; for V3 these are the schedule arrays ``slots [S,4]``, ``pidx [P,2]``,
``empty_cells [E+1]`` (derived from the five-array scatter map once per calibration, see
kernels/schedule.py). They are engine **inputs** with an optimisation profile bounded by the
rig's shapes (``map_bounds``), not constants: one engine serves every calibration of a rig, and a
calibration change uploads new arrays. So the engine stores a calibration-free *template* plan
(grid.x and the two counts zero); ``bind_plan`` fills them in from the input shapes, once per
shape change (the plugin's on_shape_change), never per frame. ``empty_cells`` carries one
trailing -1 so it is never zero-length (TensorRT rejects zero-volume inputs) and its length
still says how many empty cells there are.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from ...kernels import table as L
from ...kernels.schedule import BlockGrid, V3Schedule, v2do_intervals
from ...regime import OUTPUT_DTYPE
from ...scatter_map import ScatterMap

PLUGIN_NAME = "BEVPoolV3"
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = ""  # the ONNX parser looks plugins up in the default namespace
IO_INPUTS = ("depth", "feat")
OUTPUT = "out"
PRECISIONS = ("fp16", "fp8")
FIELDS = ("precision", "depth_shape", "grid_shape", "channels", "input_names", "input_shapes", "plan")


class PluginConfigError(ValueError):
    """Serialized plugin fields are missing, malformed or inconsistent."""


@dataclass(frozen=True)
class PluginConfig:
    precision: str                        # fp16 | fp8 (input dtype float16 | float8_e4m3)
    depth_shape: tuple[int, int, int, int]
    grid_shape: tuple[int, int, int]
    channels: int
    inputs: tuple[str, ...]               # plugin input order: depth, feat, then map arrays
    input_shapes: tuple[tuple[int, ...], ...]
    plan: L.LaunchPlan

    # --- derived ------------------------------------------------------------------------------
    @property
    def input_dtype(self) -> str:
        return L.PRECISION_DTYPES[self.precision].input_name

    @property
    def output_dtype(self) -> str:
        return OUTPUT_DTYPE[self.input_dtype]

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (*self.grid_shape, self.channels)

    @property
    def feat_shape(self) -> tuple[int, int, int, int]:
        n, _, h, w = self.depth_shape
        return (n, h, w, self.channels)

    @property
    def dynamic(self) -> bool:
        """V3 configs take map inputs of any length up to their bounds; V2 plans fix the lengths."""
        return self.plan.kernel in L.V3_KERNELS

    def profile(self, name: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(min, opt, max) shape of input ``name`` for the engine's optimisation profile."""
        shape = tuple(self.input_shapes[self.inputs.index(name)])
        if not self.dynamic or name in IO_INPUTS:
            return shape, shape, shape
        return (1, *shape[1:]), shape, shape  # opt = max: no tactics depend on it, and it is calibration-free

    def validate(self) -> "PluginConfig":
        if self.precision not in PRECISIONS:
            raise PluginConfigError(f"precision: expected one of {PRECISIONS}, got {self.precision!r}")
        if self.plan.kernel not in L.ALL_KERNELS:
            raise PluginConfigError(f"plan names unknown kernel {self.plan.kernel!r}")
        if self.plan.out_dtype != self.output_dtype:
            raise PluginConfigError(f"plan writes {self.plan.out_dtype}, {self.precision} output is "
                                    f"{self.output_dtype}")
        if self.inputs[:2] != IO_INPUTS or len(self.inputs) != len(self.input_shapes):
            raise PluginConfigError(f"inputs must start with {IO_INPUTS} and have one shape each: "
                                    f"{self.inputs} / {self.input_shapes}")
        if tuple(self.input_shapes[0]) != tuple(self.depth_shape) or \
                tuple(self.input_shapes[1]) != self.feat_shape:
            raise PluginConfigError("depth/feat shapes disagree with depth_shape/channels")
        bound = {v for k, v in self.plan.args if k == "buf"}
        if bound != set(self.inputs) | {OUTPUT}:
            raise PluginConfigError(f"plan binds {sorted(bound)}, plugin has {sorted(self.inputs)} + out")
        if any(b <= 0 for b in self.plan.block) or self.plan.block[0] * self.plan.block[1] * self.plan.block[2] > 1024:
            raise PluginConfigError(f"bad block {self.plan.block}")
        if self.dynamic:
            try:
                V3Launch.of(self.channels, self.plan)
            except (L.UnsupportedShape, IndexError) as e:
                raise PluginConfigError(f"template plan does not fit C = {self.channels}: {e}") from e
        return self

    # --- (de)serialization: field name -> numpy array (int32 or bytes) --------------------------
    def to_fields(self) -> dict[str, np.ndarray]:
        plan = {f.name: getattr(self.plan, f.name) for f in dataclasses.fields(self.plan)}
        plan["args"] = [[k, v] for k, v in self.plan.args]
        text = lambda s: np.frombuffer(s.encode(), dtype=np.int8).copy()  # noqa: E731
        return {
            "precision": text(self.precision),
            "depth_shape": np.asarray(self.depth_shape, np.int32),
            "grid_shape": np.asarray(self.grid_shape, np.int32),
            "channels": np.asarray([self.channels], np.int32),
            "input_names": text(",".join(self.inputs)),
            "input_shapes": text(json.dumps([list(s) for s in self.input_shapes])),
            "plan": text(json.dumps(plan, sort_keys=True)),
        }

    @classmethod
    def from_fields(cls, fields: dict) -> "PluginConfig":
        missing = [f for f in FIELDS if f not in fields]
        if missing:
            raise PluginConfigError(f"missing plugin fields {missing}")
        try:
            text = lambda k: _as_bytes(fields[k]).decode().rstrip("\0")  # noqa: E731
            ints = lambda k: tuple(int(v) for v in np.asarray(fields[k]).reshape(-1))  # noqa: E731
            cfg = cls(text("precision"), ints("depth_shape"), ints("grid_shape"), ints("channels")[0],
                      tuple(text("input_names").split(",")),
                      tuple(tuple(int(v) for v in s) for s in json.loads(text("input_shapes"))),
                      _plan_from_dict(json.loads(text("plan"))))
        except (KeyError, ValueError, TypeError, IndexError, UnicodeDecodeError) as e:
            raise PluginConfigError(f"malformed plugin fields: {e}") from e
        return cfg.validate()


def _plan_from_dict(p: dict) -> L.LaunchPlan:
    """Inverse of to_fields' plan dict, for whatever fields LaunchPlan has (it grows over time)."""
    known = {f.name for f in dataclasses.fields(L.LaunchPlan)}
    extra = set(p) - known
    if extra:  # an engine from a newer launch description: refuse rather than mis-launch
        raise ValueError(f"unknown LaunchPlan fields {sorted(extra)}")
    p = dict(p)
    p["grid"] = tuple(int(v) for v in p["grid"])
    p["block"] = tuple(int(v) for v in p["block"])
    p["args"] = tuple((str(k), _scalar(k, v)) for k, v in p["args"])
    return L.LaunchPlan(**p)


def _as_bytes(v) -> bytes:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    return np.asarray(v).astype(np.int8, copy=False).tobytes()


def _scalar(kind: str, value):
    if kind == "buf":
        return str(value)
    return float(value) if kind == "f32" else int(value)


# --- building a config from a scatter map ---------------------------------------------------
EMPTY_PAD = -1  # the trailing entry of the empty_cells input; the kernel never reads it


@dataclass(frozen=True)
class ScheduleShape(BlockGrid):
    """The sizes of a V3 schedule: all that table.plan_v3 reads from it (never its contents)."""
    block: int
    warp: int
    num_slots: int
    num_empty: int
    depth_pairs: bool = False  # depth-pair entries (their stride depends on the depth shape only)
    pair_stride: int = 0

    @property
    def empty_cells(self) -> np.ndarray:
        return np.broadcast_to(np.int32(0), (self.num_empty,))  # a size without an allocation


def map_bounds(depth_shape, grid_shape, block: int, num_points: int = 0) -> dict[str, tuple[int, ...]]:
    """Largest schedule arrays any calibration of this rig can produce (the profile's max).

    A rig's point is one depth entry, so P <= N*D*H*W for every calibration (a synthetic map
    that repeats depth entries, ``num_points`` above that, is bounded by its own P). A team of t
    slots covers L >= t points and the idle lanes left before it are fewer than t, so slots +
    gaps <= 2P, plus one block of final padding. Empty cells: at most every cell, plus the pad.
    """
    points = max(int(np.prod(depth_shape)), int(num_points))
    slots = -(-(2 * points + block) // block) * block
    return {"slots": (slots, 4), "pidx": (points, 2), "empty_cells": (int(np.prod(grid_shape)) + 1,)}


def map_arrays(smap: ScatterMap, sched: V3Schedule) -> dict[str, np.ndarray]:
    """Every per-calibration array a plan may bind, by the names launch.py uses."""
    empty = np.concatenate([sched.empty_cells.astype(np.int32), np.int32([EMPTY_PAD])])
    return {**smap.arrays(), "intervals3": v2do_intervals(smap), "slots": sched.slots,
            "pidx": sched.pidx, "empty_cells": empty}


def map_inputs(cfg: PluginConfig, smap: ScatterMap, sched: V3Schedule) -> dict[str, np.ndarray]:
    """The map arrays the plugin takes as inputs, for one calibration.

    A zero-length array (e.g. a map with no points) is padded to one row: TensorRT rejects
    zero-volume tensors, and the kernel reads only as many entries as the schedule says.
    """
    arrays = map_arrays(smap, sched)
    out = {}
    for name in cfg.inputs[2:]:
        a = np.ascontiguousarray(arrays[name], dtype=np.int32)
        out[name] = a if a.size else np.zeros((1,) + a.shape[1:], np.int32)
    return out


def config_for_plan(smap: ScatterMap, sched: V3Schedule, plan: L.LaunchPlan, precision: str) -> PluginConfig:
    """Plugin config with the map arrays at this calibration's exact shapes (V2, V2+DO plans)."""
    shapes = [tuple(smap.depth_shape), tuple(smap.feat_shape)]
    bound = [v for k, v in plan.args if k == "buf" and v not in (*IO_INPUTS, OUTPUT)]
    arrays = map_arrays(smap, sched)
    shapes += [tuple(arrays[n].shape) if arrays[n].size else (1,) + tuple(arrays[n].shape[1:]) for n in bound]
    return PluginConfig(precision, tuple(smap.depth_shape), tuple(smap.grid_shape), smap.channels,
                        (*IO_INPUTS, *bound), tuple(shapes), plan).validate()


@dataclass(frozen=True)
class V3Launch:
    """A V3 launch minus the calibration: kernel, geometry, output scale."""
    info: L.KernelInfo
    geom: L.V3Geometry
    out_scale: float
    pair_stride: int = 0

    @classmethod
    def of(cls, channels: int, plan: L.LaunchPlan) -> "V3Launch":
        info = L.V3_KERNELS[plan.kernel]
        scale = [v for k, v in plan.args if k == "f32"]
        ints = [v for k, v in plan.args if k == "i32"]  # plan_v3: n_empty, blocks, C, G, pair_stride
        return cls(info, L.v3_geometry(channels, info, plan.block[0]), float(scale[0]), int(ints[4]))

    def shape(self, num_slots: int, num_empty: int) -> ScheduleShape:
        return ScheduleShape(self.geom.groups_per_block, self.geom.groups_per_warp, num_slots, num_empty,
                             self.info.depth_pairs, self.pair_stride)

    def plan(self, channels: int, shape: ScheduleShape) -> L.LaunchPlan:
        return L.plan_v3(_Channels(channels), shape, self.info, self.geom, self.out_scale)

    def template(self, channels: int) -> L.LaunchPlan:
        """The plan with no calibration in it (grid.x and the counts zero): what the engine stores."""
        return self.plan(channels, self.shape(0, 0))


@dataclass(frozen=True)
class _Channels:  # plan_v3 reads only the channel count from the map
    channels: int


def v3_config(smap: ScatterMap, precision: str, plan: L.LaunchPlan) -> PluginConfig:
    """The calibration-free V3 plugin config for ``plan``'s launch: template plan, map inputs at
    the rig's bounds. Two calibrations of one rig (same launch) give equal configs."""
    launch = V3Launch.of(smap.channels, plan)
    n, _, h, w = smap.depth_shape
    bounds = map_bounds(smap.depth_shape, smap.grid_shape, launch.geom.groups_per_block, smap.num_points)
    names = ("slots", "pidx", "empty_cells")
    return PluginConfig(precision, tuple(smap.depth_shape), tuple(smap.grid_shape), smap.channels,
                        (*IO_INPUTS, *names), (tuple(smap.depth_shape), (n, h, w, smap.channels),
                                               *(bounds[k] for k in names)),
                        launch.template(smap.channels)).validate()


def config_for_v3(smap: ScatterMap, precision: str, regime: str, **launch_options
                  ) -> tuple[PluginConfig, V3Schedule]:
    """The V3 plugin config for this rig and regime, and this calibration's schedule.

    Kernel, geometry and schedule come from planning.plan_for, the cuda backend's one derivation
    (launch_options: choice, kernel, acc, k_min, threads, out_scale)."""
    from ...kernels.planning import plan_for

    sched, plan = plan_for(smap, precision, regime, **launch_options)
    return v3_config(smap, precision, plan), sched


def bind_plan(cfg: PluginConfig, shapes) -> L.LaunchPlan:
    """The launch for map inputs of these shapes (``shapes`` in cfg.inputs order, all inputs).

    Static configs (V2 plans) return their plan when the shapes are the configured ones.
    """
    check_shapes(cfg, shapes)
    if not cfg.dynamic:
        return cfg.plan
    launch = V3Launch.of(cfg.channels, cfg.plan)
    by_name = dict(zip(cfg.inputs, (tuple(int(v) for v in s) for s in shapes)))
    slots, empty = by_name["slots"][0], by_name["empty_cells"][0] - 1
    if slots % launch.geom.groups_per_block:
        raise PluginConfigError(f"slots: {slots} rows is not a multiple of the block ({launch.geom.groups_per_block})")
    return launch.plan(cfg.channels, launch.shape(slots, empty))


def check_shapes(cfg: PluginConfig, shapes, allow_unknown: bool = False) -> None:
    """depth/feat exactly as configured; map inputs within the profile (-1 allowed at build time)."""
    got = [tuple(int(v) for v in s) for s in shapes]
    if len(got) != len(cfg.inputs):
        raise PluginConfigError(f"BEVPool plugin: {len(got)} inputs, configured {len(cfg.inputs)}")
    for name, g, (lo, _, hi) in zip(cfg.inputs, got, (cfg.profile(n) for n in cfg.inputs)):
        ok = len(g) == len(hi) and all(
            (allow_unknown and v == -1) or a <= v <= b for v, a, b in zip(g, lo, hi))
        if not ok:
            raise PluginConfigError(f"BEVPool plugin input {name}: shape {g} outside [{lo}, {hi}]")
