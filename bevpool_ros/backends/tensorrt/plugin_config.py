"""What the BEVPool TensorRT plugin needs to know, as plain Python (no TensorRT import).

The plugin does not compute any launch geometry itself: the kernel, grid, block and scalar
arguments come from ``backends.cuda.launch`` (the one launch description) at network-build
time and travel inside the engine as a serialized plugin field. At run time enqueue only binds
the symbolic buffers of that plan to TensorRT's device pointers.

Plugin inputs (decision): ``depth``, ``feat`` and the per-calibration arrays the chosen plan
binds, in the plan's order; for V3 these are the schedule arrays ``slots [S,4]``,
``pidx [P,2]``, ``empty_cells [E]`` (derived from the five-array scatter map once per
calibration, see backends/cuda/schedule.py), not the five arrays themselves: the V3 kernel
reads the schedule, and deriving it needs host work that enqueue may not do. The map arrays
are engine constants (ONNX initializers), so the engine's only run-time inputs are depth and
feat and its output is the BEV tensor [Z, Y, X, C].
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from ...regime import OUTPUT_DTYPE
from ...scatter_map import ScatterMap
from ..cuda import launch as L
from ..cuda.schedule import DEFAULT_K_MIN, V3Schedule, v2do_intervals

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
        return L.PRECISION_INPUT[self.precision]

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
def map_arrays(smap: ScatterMap, sched: V3Schedule) -> dict[str, np.ndarray]:
    """Every per-calibration array a plan may bind, by the names launch.py uses."""
    return {**smap.arrays(), "intervals3": v2do_intervals(smap), "slots": sched.slots,
            "pidx": sched.pidx, "empty_cells": sched.empty_cells}


def constant_arrays(cfg: PluginConfig, smap: ScatterMap, sched: V3Schedule) -> dict[str, np.ndarray]:
    """The map arrays the plugin takes as inputs, as engine constants.

    A zero-length array (e.g. no empty cells) is padded to one element: TensorRT rejects
    zero-volume constants, and the kernel reads only as many entries as its count argument says.
    """
    arrays = map_arrays(smap, sched)
    out = {}
    for name in cfg.inputs[2:]:
        a = np.ascontiguousarray(arrays[name], dtype=np.int32)
        out[name] = a if a.size else np.zeros((1,) + a.shape[1:], np.int32)
    return out


def config_for_plan(smap: ScatterMap, sched: V3Schedule, plan: L.LaunchPlan, precision: str) -> PluginConfig:
    """Plugin config for a plan made by launch.py (plan_v3, plan_v2, plan_v2do)."""
    arrays = map_arrays(smap, sched)
    bound = [v for k, v in plan.args if k == "buf" and v not in (*IO_INPUTS, OUTPUT)]
    shapes = [tuple(smap.depth_shape), tuple(smap.feat_shape)]
    for name in bound:
        a = arrays[name]
        shapes.append(tuple(a.shape) if a.size else (1,) + tuple(a.shape[1:]))
    return PluginConfig(precision, tuple(smap.depth_shape), tuple(smap.grid_shape), smap.channels,
                        (*IO_INPUTS, *bound), tuple(shapes), plan).validate()


def v3_launch(smap: ScatterMap, precision: str, regime: str, *, acc: str | None = None, out_scale: float = 1.0,
              kernel: str | None = None, k_min: int = DEFAULT_K_MIN, threads: int | None = None
              ) -> tuple[V3Schedule, L.LaunchPlan]:
    """Kernel, geometry, schedule and plan exactly as the cuda backend derives them (planning.plan_for)."""
    from ..planning import plan_for

    return plan_for(smap, precision, regime, kernel=kernel, acc=acc, k_min=k_min, threads=threads,
                    out_scale=out_scale)


def config_for_v3(smap: ScatterMap, precision: str, regime: str, **launch_options
                  ) -> tuple[PluginConfig, V3Schedule]:
    """The V3 plugin config (and the schedule its constants come from) for this map and regime."""
    sched, plan = v3_launch(smap, precision, regime, **launch_options)
    return config_for_plan(smap, sched, plan, precision), sched
