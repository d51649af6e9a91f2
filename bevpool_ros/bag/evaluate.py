"""Replay evaluation: play a camera bag into a real bevpool_node over DDS, record and score its output.

1. the node runs in its own process with the given parameters (isolated DDS domain);
2. the bag's messages are published raw (CDR as recorded) at the recorded pace x ``rate``;
3. every BevFeature the node publishes is written to the output bag with its arrival time;
4. each published grid is recomputed from the exact input messages it names
   (``BevFeature.cameras`` / ``camera_stamps``) with the FP64 reference, on the calibration the
   node had (the rig file, intrinsics from the bag's CameraInfo), and compared; a depth camera's
   Image becomes its distribution by the node's rule (``input.depth_image_*`` as the node got them).
The report counts sets in the bag, grids published, grids matching the reference within the
tolerance of the precision each grid says it was computed at (bevpool_ros/tolerance.py; a fixed
``atol`` instead when given), and latency from the last input of a set being played to its grid
arriving.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io.depth_image import DepthImageConverter
from ..node.calibration import LiveCalibration
from ..io.bev_message import stamp_to_ns
from ..io.tensor_codec import decode_any
from ..reference import pool_reference
from ..rig import Rig
from ..scatter_map import scatter_map_for
from ..tolerance import error_ratio
from .io import BagWriter, camera_stream, read_bag


@dataclass
class EvalReport:
    bag_sets: int = 0                      # distinct (depth) stamps of the first camera
    published: int = 0
    compared: int = 0
    within_tolerance: int = 0
    max_abs_err: float = 0.0
    frame_errors: list[float] = field(default_factory=list)  # max |error| per compared grid, in bag order
    frame_error_ratios: list[float] = field(default_factory=list)  # max |error| / allowed: <= 1 passes
    e2e_ms: list[float] = field(default_factory=list)
    diagnostics: dict = field(default_factory=dict)
    node_rc: int | None = None
    atol: float | None = None              # None: the tolerance of each grid's precision

    def to_dict(self) -> dict:
        pct = (lambda q: float(np.percentile(self.e2e_ms, q))) if self.e2e_ms else (lambda q: None)
        return {"bag_sets": self.bag_sets, "published": self.published, "compared": self.compared,
                "within_tolerance": self.within_tolerance, "max_abs_err": self.max_abs_err,
                "atol": self.atol, "tolerance": tolerance_text(self.atol), "e2e_ms": {"p50": pct(50), "p99": pct(99)},
                "diagnostics": self.diagnostics, "node_rc": self.node_rc}

    @property
    def ok(self) -> bool:
        return self.compared > 0 and self.within_tolerance == self.compared


def play_and_record(bag: Path, out_bag: Path, session, rate: float, drain_s: float) -> tuple[dict, dict, dict]:
    """Publish the bag into the node; returns (play times, grid arrival times, last diagnostics)."""
    from .play import BagPlayer

    player = BagPlayer(bag, context=session.context)
    session.executor.add_node(player)
    played: dict[tuple[str, int], float] = {}     # (camera, header stamp) -> perf_counter, last stream
    arrivals: dict[int, float] = {}
    with BagWriter(out_bag) as writer:
        def on_bev(r):
            arrivals[r.stamp_ns] = r.received
            writer.write("/bev/features", r.msg, time.time_ns())

        session.con.on_bev = on_bev
        if not session.spin_until(lambda: player.subscribers_ready() and
                                  session.con.bev_sub.get_publisher_count() > 0, 30.0):
            raise RuntimeError("node did not subscribe to the bag's topics within 30 s")
        player.start(rate, on_sent=lambda key, t: played.__setitem__(key, t))
        session.spin_until(lambda: player.done, player.duration_s / rate + 30.0)
        session.spin_until(lambda: False, drain_s)
        session.con.diagnostics.clear()
        session.spin_until(lambda: session.con.latest_diagnostics() is not None, 5.0)
    session.executor.remove_node(player)
    player.destroy_node()
    return played, arrivals, session.con.latest_diagnostics() or {}


def tolerance_text(atol: float | None) -> str:
    return f"|error| <= {atol:g}" if atol is not None else "by each grid's precision (bevpool_ros/tolerance.py)"


def node_parameter(name: str, node_params: dict | None, params_file: str | None):
    """``name`` as the node sees it: -p override, else the params file (any node's
    ros__parameters, nested keys joined by dots), else the declared default."""
    import yaml

    from ..node.params import BY_NAME

    if node_params and name in node_params:
        return node_params[name]
    if params_file:
        for section in (yaml.safe_load(Path(params_file).read_text()) or {}).values():
            value = (section or {}).get("ros__parameters", {})
            for part in name.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                return value
    return BY_NAME[name].default


def score(bag: Path, out_bag: Path, rig: Rig, report: EvalReport, depth_image: DepthImageConverter | None = None
          ) -> None:
    """Recompute each published grid from the inputs it names; stream the input bag once.
    ``depth_image``: how depth Images become distributions (default: the node's defaults)."""
    depth_image = depth_image or DepthImageConverter(rig)
    wanted: dict[tuple[str, int], list[int]] = {}
    outputs = []
    for m in read_bag(out_bag):
        msg = m.decode()
        names, stamps = list(msg.cameras), [stamp_to_ns(s) for s in msg.camera_stamps]
        outputs.append((msg, dict(zip(names, stamps))))
        for key in zip(names, stamps):
            wanted.setdefault(key, []).append(len(outputs) - 1)
    report.published = len(outputs)
    calib = LiveCalibration(rig)
    inputs: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    first_cam = rig.cameras[0].name
    seen_sets = set()
    done = set()
    for m in read_bag(bag):
        where = camera_stream(m.topic)
        if where is None:
            continue
        cam, stream = where
        msg = m.decode()
        st = stamp_to_ns(msg.header.stamp)
        if stream == "camera_info":
            calib.update_intrinsics(cam, list(msg.k), msg.width, msg.height)
            continue
        if cam == first_cam and stream == "depth":
            seen_sets.add(st)
        if (cam, st) not in wanted:
            continue
        if m.msgtype == "sensor_msgs/msg/Image":  # a depth camera (input.depth_mode: image)
            arr = depth_image(msg).distribution()
        else:
            arr = decode_any(msg)
        if stream == "feat" and msg.layout == "CHW":
            arr = arr.transpose(1, 2, 0)
        inputs.setdefault((cam, st), {})[stream] = arr
        for idx in wanted[(cam, st)]:
            if idx not in done and _complete(outputs[idx][1], inputs):
                _compare(outputs[idx], inputs, calib.rig, report)
                done.add(idx)
    report.bag_sets = len(seen_sets)


def _complete(provenance: dict, inputs: dict) -> bool:
    return all(len(inputs.get(key, {})) == 2 for key in provenance.items())


def _compare(output, inputs, rig: Rig, report: EvalReport) -> None:
    msg, provenance = output
    N, D, H, W = rig.depth_shape
    depth = np.zeros((N, D, H, W), np.float64)
    feat = np.zeros((N, H, W, rig.channels), np.float64)
    for n, cam in enumerate(rig.cameras):
        if cam.name in provenance:  # a camera the node zero-filled stays zero here too
            streams = inputs[(cam.name, provenance[cam.name])]
            depth[n], feat[n] = streams["depth"], streams["feat"]
    ref = pool_reference(depth, feat, scatter_map_for(rig))
    got = decode_any(msg.tensor).reshape(ref.shape).astype(np.float64)
    err = float(np.abs(got - ref).max())
    ratio = error_ratio(got, ref, msg.precision, report.atol)
    report.compared += 1
    report.frame_errors.append(err)
    report.frame_error_ratios.append(ratio)
    report.max_abs_err = max(report.max_abs_err, err)
    report.within_tolerance += ratio <= 1.0


def evaluate_bag(bag: str | Path, out_bag: str | Path, rig_path: str, node_params: dict | None = None,
                 params_file: str | None = None, rate: float = 1.0, atol: float | None = None,
                 drain_s: float = 2.0) -> EvalReport:
    from ..demo.session import PipelineSession
    from ..rig_yaml import load_rig

    bag, out_bag = Path(bag), Path(out_bag)
    report = EvalReport(atol=atol)
    session = PipelineSession(rig_path=rig_path, node_params=node_params, params_file=params_file,
                              publisher=False)
    try:
        played, arrivals, report.diagnostics = play_and_record(bag, out_bag, session, rate, drain_s)
    finally:
        report.node_rc, _ = session.close()
    rig = load_rig(rig_path)
    rule = {k: node_parameter(f"input.depth_image_{k}", node_params, params_file) for k in ("distribution", "sigma_m")}
    score(bag, out_bag, rig, report, DepthImageConverter(rig, rule["distribution"], float(rule["sigma_m"])))
    report.e2e_ms = [(arrivals[s] - t) * 1e3 for s, t in _last_played_per_set(played, out_bag).items()
                     if s in arrivals]
    return report


def _last_played_per_set(played: dict, out_bag: Path) -> dict[int, float]:
    """{grid stamp: perf_counter when the last of its inputs was played}."""
    out = {}
    for m in read_bag(out_bag):
        msg = m.decode()
        keys = zip(msg.cameras, (stamp_to_ns(s) for s in msg.camera_stamps))
        times = [played[k] for k in keys if k in played]
        if times:
            out[stamp_to_ns(msg.header.stamp)] = max(times)
    return out


