"""Replay evaluation: play a camera bag into a real bevpool_node over DDS, record and score its
output.

1. the bag is checked against the node's parameters (its topics, depth modes) before anything
   starts;
2. the node runs in its own process with the given parameters, on a DDS domain claimed to this
   evaluation (demo/domain.py: never the caller's ROS_DOMAIN_ID, where a live graph may run), and
   no other node may publish grids there (replay.py);
3. the bag's messages are published raw (CDR as recorded), at the recorded pace x ``rate`` or paced
   (one set at a time, each after the previous grid came back): ``replay``;
4. every BevFeature the node publishes is kept (a spool beside the output) with its arrival time;
5. each published grid is recomputed from the exact input messages it names
   (``BevFeature.cameras`` / ``camera_stamps``) with the FP64 reference, on the calibration the
   node had (the rig file, intrinsics from the bag's CameraInfo), and compared; a depth camera's
   Image becomes its distribution by the node's rule (``input.depth_image_*`` as the node got them).
The report counts the sets in the bag (complete ones apart: ``sets``), grids published, every
complete set lost with its cause (``losses``), grids matching the reference within the tolerance of
the precision each grid says it was computed at (bevpool_ros/tolerance.py; a fixed ``atol``
instead when given), and latency (LATENCIES: from the last input of a set being published to DDS
receiving its grid in this process, beside the node's own and this process's wait). It names the
rig, the params file and every parameter the node was given, in either mode.
A run passes when every grid matches and no more complete sets were lost than allowed. The output
bag holds a score per grid and the last grid, or every grid when asked (output.py); the report's
per-grid counts and times are read back from it.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from ..cameras.calibration import LiveCalibration
from ..demo.session import last_lines
from ..io.bev_message import stamp_to_ns
from ..io.depth_image import DepthImageConverter
from ..io.tensor_codec import decode_any
from ..progress import progress_bar
from ..reference import pool_reference
from ..rig import Rig
from ..scatter_map import scatter_map_for
from ..tolerance import error_ratio
from . import losses
from .io import BagError, BagWriter, bag_summary, camera_stream, read_bag
from .losses import AllowLost
from .output import folder_bytes, read_grid_records, spool_dir, write_output
from .sets import BagSets

LOST_STAMPS_SHOWN = 20
PLOTTED = ("frame_errors", "frame_error_ratios", "e2e_ms", "evaluator_wait_ms")  # per-grid lists: the report plots them
PACED_CAMERA_TIMEOUT_S = 5.0
# what each latency of the report measures (the report carries these lines)
LATENCIES = {
    "e2e_ms": "end to end: the last input message of a set published by the evaluation's player -> its grid "
              "received by DDS in the evaluation's process (system clock, MessageInfo.received_timestamp): "
              "input transport, the node's input queue and work, output transport",
    "node_latency_ms": "the node's own (its /diagnostics latency_p50_ms, latency_p99_ms over its last "
                       "diagnostics.latency_window sets): its callback took the set's last input -> grid published",
    "evaluator_wait_ms": "the grid received by DDS -> the evaluation's callback ran: the evaluation's own "
                         "backlog, in none of the above",
}


@dataclass
class EvalReport:
    mode: str = ""                         # "rate x1" or "paced"
    bag_sets: int = 0                      # sets in the bag (complete + incomplete)
    complete_sets: int = 0                 # every camera the node subscribes, within its slop
    published: int = 0                     # grids the node published (partial ones too)
    published_complete: int = 0            # complete sets of the bag that came back whole
    lost: int = 0                          # complete sets that did not
    lost_by_cause: dict = field(default_factory=dict)
    lost_stamps: list[int] = field(default_factory=list)
    allowed_lost: int = 0
    allow_lost: str = "0"
    resent: int = 0                        # sets sent again: the node had received none of them
    rig: str = ""                          # the rig file the node and the scorer pooled on
    rig_name: str = ""
    params_file: str | None = None         # --params-file, as given
    node_parameters: dict = field(default_factory=dict)  # all it got: the params file's, -p, the mode's
    backend: str = ""                      # what the node ran (its diagnostics)
    precision: str = ""
    compared: int = 0
    within_tolerance: int = 0
    max_abs_err: float = 0.0
    frame_errors: list[float] = field(default_factory=list)  # max |error| per grid, bag order
    frame_error_ratios: list[float] = field(default_factory=list)  # max |error| / allowed: <= 1
    e2e_ms: list[float] = field(default_factory=list)          # per grid (LATENCIES)
    evaluator_wait_ms: list[float] = field(default_factory=list)
    diagnostics: dict = field(default_factory=dict)
    node_rc: int | None = None
    node_last_words: str = ""              # the node's last log lines when it exited with an error
    node_log: str | None = None            # then its whole log, kept beside the output bag
    atol: float | None = None              # None: the tolerance of each grid's precision
    domain: int = 0                        # the DDS domain the replay ran on
    domain_held: tuple[float, float] = (0.0, 0.0)  # wall clock (s) from its claim to its release
    out_bag_bytes: int = 0                 # the output bag as written (output.py)
    grids_kept: int = 0                    # grids in it: the last one, or all with keep_grids
    grids_bytes: int = 0                   # what every grid took on disk during the run

    def to_dict(self) -> dict:
        out = {"ok": self.ok, "failures": self.failures()}
        out.update((f.name, getattr(self, f.name)) for f in fields(self) if f.name not in PLOTTED)
        node = {q: _number(self.diagnostics.get(f"latency_{q}_ms")) for q in ("p50", "p99")}
        out.update(tolerance=tolerance_text(self.atol), e2e_ms=_percentiles(self.e2e_ms),
                   node_latency_ms=node, evaluator_wait_ms=_percentiles(self.evaluator_wait_ms),
                   latency_definitions=LATENCIES)
        return out

    def failures(self) -> list[str]:
        """Why the run fails, one line each (empty: it passes)."""
        out = []
        if self.lost > self.allowed_lost:
            out.append(f"{self.lost} of {self.complete_sets} complete sets lost "
                       f"({losses.describe(self.lost_by_cause)}), {self.allowed_lost} allowed "
                       f"(--allow-lost {self.allow_lost}; --paced loses none to a slow machine)")
        if self.within_tolerance < self.compared:
            out.append(f"{self.compared - self.within_tolerance} of {self.compared} grids out of "
                       f"tolerance (worst |error| {self.max_abs_err:.3g})")
        if self.compared == 0:
            out.append("no grid to compare: the node published nothing from this bag")
        if self.node_rc not in (0, None):
            words = f" (log: {self.node_log})" if self.node_log else ""
            words += f": {self.node_last_words}" if self.node_last_words else ""
            out.append(f"bevpool_node exited with code {self.node_rc}{words}")
        return out

    @property
    def ok(self) -> bool:
        return not self.failures()

    def output_line(self, out_bag) -> str:
        """One line on the output bag: its size and what it holds."""
        from .output import size_text

        n = self.published
        if not n:
            held = "no grid: the node published none"
        elif self.grids_kept == n:
            held = f"the score and the grid of all {n} grid(s)"
        else:
            held = (f"the scores of {n} grids and the last grid; --keep-grids keeps every grid, "
                    f"{size_text(self.grids_bytes)} of them")
        return f"wrote {out_bag}: {size_text(self.out_bag_bytes)} ({held})"

    def summary(self) -> str:
        """One line: mode, what ran on which rig, sets and grids, and the verdict with its reasons."""
        verdict = "ok" if self.ok else "FAILED: " + "; ".join(self.failures())
        return (f"({self.mode}, {self.backend} {self.precision}, rig {self.rig_name}): {self.published_complete} of "
                f"{self.complete_sets} complete sets published, {self.within_tolerance} of "
                f"{self.compared} grids within tolerance: {verdict}")


def _percentiles(values: list[float]) -> dict:
    return {f"p{q}": float(np.percentile(values, q)) if values else None for q in (50, 99)}


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def given_parameters(rig_path: str, node_params: dict, params_file: str | None) -> dict:
    """Every parameter the node is given, as it reads them: its params file's sections for it,
    then -p (and the mode's), then the rig_file the evaluation passes."""
    from ..params.check import NODE_FQN
    from ..params.files import parameters_for

    return {**(parameters_for(params_file, NODE_FQN) if params_file else {}), **node_params,
            "rig_file": rig_path}


def tolerance_text(atol: float | None) -> str:
    return f"|error| <= {atol:g}" if atol is not None else "by each grid's precision (bevpool_ros/tolerance.py)"


def node_parameter(name: str, node_params: dict | None, params_file: str | None):
    """``name`` as the node sees it: -p override, else the params file (the sections for
    bevpool_node, nested keys joined by dots), else the declared default."""
    from ..params.check import NODE_FQN
    from ..params.files import parameters_for
    from ..params.table import BY_NAME

    if node_params and name in node_params:
        return node_params[name]
    if params_file:
        value = parameters_for(params_file, NODE_FQN).get(name)  # the sections rcl gives the node
        if value is not None:
            return value
    return BY_NAME[name].default


def rig_path(rig: str | None, node_params: dict | None, params_file: str | None) -> str:
    """The rig an evaluation runs: ``rig`` (--rig), else the node's ``rig_file`` (-p, then the
    params file), else the default rig. The node and the scorer must pool on the same one."""
    from ..paths import rig_path as shipped_or_path  # as the node resolves it: a bare name is a shipped rig

    named = (node_params or {}).get("rig_file")
    if rig and named and named != rig:
        raise BagError(f"--rig {rig} and -p rig_file:={named} name different rigs: give one")
    return rig or str(shipped_or_path(node_parameter("rig_file", node_params, params_file) or ""))


def score(bag: Path, out_bag: Path, rig: Rig, report: EvalReport,
          depth_image: DepthImageConverter | None = None,
          show_progress: bool = False) -> dict[int, tuple[float, float]]:
    """Recompute each published grid from the inputs it names; stream the input bag once.
    ``depth_image``: how depth Images become distributions (default: the node's defaults).
    {index of the grid in ``out_bag``: (max |error|, error / tolerance)}."""
    scores: dict[int, tuple[float, float]] = {}
    with progress_bar(total=sum(1 for _ in read_bag(out_bag)), desc="score", unit="grid",
                      enabled=show_progress) as bar:
        _score(bag, out_bag, rig, report, depth_image, bar, scores)
        bar.set_postfix_str(f"{report.within_tolerance} within tolerance")  # as the summary says
    return scores


def _score(bag, out_bag, rig, report, depth_image, bar, scores) -> None:
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
                scores[idx] = _compare(outputs[idx], inputs, calib.rig, report)
                done.add(idx)
                bar.update(1)


def _complete(provenance: dict, inputs: dict) -> bool:
    return all(len(inputs.get(key, {})) == 2 for key in provenance.items())


def _compare(output, inputs, rig: Rig, report: EvalReport) -> tuple[float, float]:
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
    return err, ratio


def paced_parameters(node_params: dict | None, params_file: str | None) -> dict:
    """The node's parameters for a paced replay, unless given with -p: ``sync.camera_timeout_s``
    at least PACED_CAMERA_TIMEOUT_S and reliable input QoS. A set is sent whole, so only a slow
    machine could spread its messages past a timeout made for live cameras, or drop one of them
    in transport (the sensor-data QoS is best effort); its slowness must not cost an accuracy
    run a set."""
    params = dict(node_params or {})
    name = "sync.camera_timeout_s"
    if name not in params:
        params[name] = max(float(node_parameter(name, None, params_file)), PACED_CAMERA_TIMEOUT_S)
    params.setdefault("input.qos_reliability", "reliable")
    return params


def node_view(bag, rig: Rig, node_params: dict | None, params_file: str | None):
    """The node's view of ``bag`` (preflight.NodeView), checked to fit it: BagError if not."""
    from .preflight import NodeView, check_bag_fits

    view = NodeView.of(rig, lambda name: node_parameter(name, node_params, params_file))
    check_bag_fits(bag, bag_summary(bag)["topics"], view)
    return view


def evaluate_bag(bag: str | Path, out_bag: str | Path, rig_path: str, node_params: dict | None = None,
                 params_file: str | None = None, rate: float = 1.0, atol: float | None = None,
                 drain_s: float = 2.0, paced: bool = False, allow_lost: AllowLost = AllowLost(),
                 set_timeout_s: float = 10.0, show_progress: bool = False,
                 domain: int | None = None, keep_grids: bool = False) -> EvalReport:
    """Evaluate one bag; ``paced``: one set at a time (``rate`` unused); ``domain``: the DDS domain
    to try first (the one claimed is ``report.domain``); ``keep_grids``: every grid in the output
    bag, not only the scores and the last grid (output.py). On any failure the output bag is removed
    again (a rerun finds ``out_bag`` free)."""
    from ..rig_yaml import load_rig

    bag, out_bag = Path(bag), Path(out_bag)
    rig = load_rig(rig_path)
    view = node_view(bag, rig, node_params, params_file)  # before a node starts, a file is written
    node_params = paced_parameters(node_params, params_file) if paced else dict(node_params or {})
    report = EvalReport(atol=atol, allow_lost=str(allow_lost), rig=rig_path, rig_name=rig.name,
                        params_file=params_file,
                        node_parameters=given_parameters(rig_path, node_params, params_file))
    rule = {k: node_parameter(f"input.depth_image_{k}", node_params, params_file)
            for k in ("distribution", "sigma_m")}
    spool = spool_dir(out_bag)
    try:
        grids = spool / "grids"
        sets, result, (report.node_rc, log), report.domain, report.domain_held = _replay(
            bag, grids, rig_path, node_params, params_file, view, None if paced else rate,
            dict(drain_s=drain_s, set_timeout_s=set_timeout_s, show_progress=show_progress, domain=domain))
        if report.node_rc not in (0, None):  # why it exited: its last lines here, all of it on disk
            report.node_last_words = last_lines(log, 3)
            node_log = out_bag.parent / f"{out_bag.name}.node.log"
            node_log.parent.mkdir(parents=True, exist_ok=True)
            node_log.write_text(log)
            report.node_log = str(node_log)
        converter = DepthImageConverter(rig, rule["distribution"], float(rule["sigma_m"]))
        scores = score(bag, grids, rig, report, converter, show_progress)
        report.grids_bytes = folder_bytes(grids)
        report.out_bag_bytes = write_output(out_bag, grids, scores, keep_grids)
        report.grids_kept = report.published if keep_grids else min(report.published, 1)
    except BaseException:
        shutil.rmtree(out_bag, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    report.diagnostics = result.diagnostics_end
    account(report, sets, result, grid_keys(out_bag), allow_lost)
    last_played = _last_played_per_set(result.played, out_bag)
    report.e2e_ms = [(result.arrivals[s] - t) / 1e6 for s, t in last_played.items()
                     if s in result.arrivals]
    report.evaluator_wait_ms = [(result.handled[s] - result.arrivals[s]) / 1e6 for s in result.handled]
    return report


def _replay(bag, out_bag, rig_path, node_params, params_file, view, rate, options: dict):
    """Start the node on a domain of its own, play the bag into it (``rate`` None: paced), record
    its grids in ``out_bag``; (the bag's sets, ReplayResult, (the node's exit code, its log), the
    domain, the wall-clock times it was claimed and released)."""
    from ..demo.domain import claim_domain, release_domain
    from ..demo.session import PipelineSession
    from .play import BagPlayer
    from .replay import Replay
    from .sets import find_sets

    domain, caller_domain = claim_domain(options["domain"]), os.environ.get("ROS_DOMAIN_ID")
    claimed_at = time.time()
    session = player = None
    node_exit: tuple = (None, "")
    try:
        session = PipelineSession(rig_path=rig_path, node_params=node_params, params_file=params_file,
                                  publisher=False, domain=domain)
        player = BagPlayer(bag, context=session.context)
        session.executor.add_node(player)
        sets = find_sets(player.entries, view.cameras, view.slop_s)
        replay = Replay(session, player, sets, options["set_timeout_s"], options["show_progress"])
        with BagWriter(out_bag) as writer:
            record = lambda r: writer.write("/bev/features", r.msg, time.time_ns())  # noqa: E731
            result = replay.run(record, rate, options["drain_s"])
    finally:
        if player is not None:
            session.executor.remove_node(player)
            player.destroy_node()
        if session is not None:
            node_exit = session.close()
        release_domain(domain)
        released_at = time.time()
        if caller_domain is None:  # the caller's environment as it was
            os.environ.pop("ROS_DOMAIN_ID", None)
        else:
            os.environ["ROS_DOMAIN_ID"] = caller_domain
    return sets, result, node_exit, domain, (claimed_at, released_at)


def grid_keys(out_bag: Path) -> list:
    """The keys of the grids the node published, from the output bag's records."""
    return [r.key for r in read_grid_records(out_bag)]


def account(report: EvalReport, sets: BagSets, result, keys: list, allow_lost: AllowLost) -> None:
    """Complete sets of the bag against the grids that came back: lost ones, and why."""
    got = set(keys)
    d, d0 = result.diagnostics_end, result.diagnostics_start
    report.mode, report.resent = result.mode, result.resent
    report.backend, report.precision = d.get("backend", ""), d.get("precision", "")
    report.bag_sets, report.complete_sets = sets.total, len(sets.complete)
    lost = [s for s in sets.complete if s.key not in got]
    partial = [s for s in lost if any(k < s.key for k in got)]  # came back with cameras zero-filled
    report.published_complete = len(sets.complete) - len(lost)
    report.lost = len(lost)
    report.lost_stamps = [s.stamp_ns for s in lost[:LOST_STAMPS_SHOWN]]
    report.allowed_lost = allow_lost.of(len(sets.complete))
    if result.mode == "paced":
        causes: dict[str, int] = {}
        in_transit = result.in_transit
        for s in lost:
            cause = losses.PARTIAL if s in partial else result.causes.get(s.key, losses.UNEXPLAINED)
            if cause == losses.UNEXPLAINED and in_transit > 0:
                cause, in_transit = losses.IN_TRANSIT, in_transit - 1
            causes[cause] = causes.get(cause, 0) + 1
        report.lost_by_cause = causes
        return
    counts = losses.growth(losses.set_level_counts(d), losses.set_level_counts(d0))
    # zero-filled grids of the bag's own incomplete sets: those sets were not dropped
    whole = len(got & {s.key for s in sets.complete})
    partial_of_incomplete = max(0, len(keys) - whole - len(partial))
    accepted = "sync_accepted_messages"
    short = result.messages_sent - (losses.counter(d, accepted) - losses.counter(d0, accepted))
    report.lost_by_cause = losses.rate_mode_causes(
        len(lost), len(partial), counts, max(0, sets.incomplete - partial_of_incomplete), short,
        result.in_transit)


def _last_played_per_set(played: dict, out_bag: Path) -> dict[int, float]:
    """{grid stamp: time.time_ns() when the last of its inputs was played}, from the output bag."""
    out = {}
    for r in read_grid_records(out_bag):
        times = [played[k] for k in zip(r.cameras, r.camera_stamps_ns) if k in played]
        if times:
            out[r.stamp_ns] = max(times)
    return out


