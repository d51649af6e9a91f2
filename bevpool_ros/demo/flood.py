"""A burst at full rate: several producers sending complete camera sets as fast as they can, then
valid sets that must all come back as grids (robot conditions; docs/ros_interface.md, "What the
node promises").

The producers run in processes of their own and without the node's large-data DDS profile, as a
camera driver of another package would: Fast DDS's default transports then split every
multi-megabyte tensor into fragments, which a busy best-effort reader loses. That is what once
hung the node for good (reporting.subscription_events). Used by ``bench/flood.py`` and
``test/test_node_liveness.py``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from .session import resident_mib

PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")


@dataclass
class FloodResult:
    seconds: float
    publishers: int
    flood_sets: int = 0                  # complete sets the producers sent
    grids_during: int = 0                # grids received while they sent
    valid_sets: int = 0                  # valid sets sent after the flood (one stamp each)
    answered: int = 0                    # of those, with their grid back
    resends: int = 0                     # sends beyond the first (best-effort samples lost)
    first_grid_after_s: float | None = None  # flood over -> first valid set's grid
    diagnostics_max_gap_s: float | None = None  # longest gap between the node's /diagnostics
    diagnostics_during: int = 0          # statuses the node published during the flood
    node_rss_mib: float | None = None    # the node's resident memory after the valid sets
    node_heap_in_use_mib: float | None = None  # what malloc holds for it then (its /diagnostics)
    stream_sent: int = 0                 # recovery: sets streamed at a steady rate, no resends,
    stream_published: int = 0            # starting ``settle_s`` after the flood's end
    stream_p50_ms: float | None = None   # their latency: last input published -> grid received
    stream_p99_ms: float | None = None
    node_alive: bool = True
    failure: str = ""                    # why the node did not answer, in one line

    @property
    def ok(self) -> bool:
        return self.node_alive and self.answered == self.valid_sets and not self.failure

    def as_dict(self) -> dict:
        return dict(asdict(self), ok=self.ok)


def producer_environment() -> dict:
    """This environment without any Fast DDS profile (the producers fragment their tensors)."""
    env = {k: v for k, v in os.environ.items() if k not in PROFILE_VARS}
    env["BEVPOOL_DDS_PROFILE"] = "0"
    return env


def start_producers(rig_path: str, publishers: int, seconds: float) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-m", "bevpool_ros.demo.flood", rig_path, str(seconds),
                              str(seed)], env=producer_environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for seed in range(1, publishers + 1)]


def _stamp_s(arr) -> float:
    return arr.header.stamp.sec + arr.header.stamp.nanosec * 1e-9


def stream_sets(session, sets: int, rate_hz: float) -> tuple[int, int, list[float]]:
    """``sets`` valid sets at ``rate_hz``, none resent: (sent, published, latencies in ms)."""
    r = session.run(sets, rate_hz, drain_s=2.0)
    return r.sent, len(r.e2e_ms), r.e2e_ms


def run_flood(session, rig_path: str, publishers: int = 3, seconds: float = 20.0,
              valid_sets: int = 20, answer_s: float = 10.0, resend_s: float = 1.0,
              stream: int = 0, stream_hz: float = 20.0, settle_s: float = 1.0) -> FloodResult:
    """Flood the node of ``session`` (a demo.session.PipelineSession whose publisher is ours)
    for ``seconds``, then send ``valid_sets`` sets, each resent with a fresh stamp every
    ``resend_s`` until its grid comes back (``answer_s`` at most). ``stream`` > 0: recovery,
    measured instead: ``settle_s`` after the flood's end, ``stream`` sets at ``stream_hz``, none
    resent (what a camera rig sends), counted and timed; the resent sets follow them."""
    result = FloodResult(seconds=seconds, publishers=publishers)
    con, pub = session.con, session.pub
    statuses: list[float] = []  # the node's /diagnostics header stamps

    def on_diagnostics(arr):
        if arr.status and "bev pooling" in arr.status[0].name:
            statuses.append(_stamp_s(arr))
    previous = con.diag_sub.callback
    con.diag_sub.callback = lambda arr: (previous(arr), on_diagnostics(arr))
    try:
        before = con.count
        procs = start_producers(rig_path, publishers, seconds)
        # + discovery and teardown on a loaded machine
        session.spin_until(lambda: all(p.poll() is not None for p in procs), seconds + 60.0)
        for p in procs:
            if p.poll() is None:
                p.kill()
            out, _ = p.communicate(timeout=10)
            sent = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            result.flood_sets += sum(s.get("sets", 0) for s in sent)
        flood_end = time.monotonic()
        result.grids_during = con.count - before
        during = list(statuses)
        result.diagnostics_during = len(during)
        if len(during) > 1:
            result.diagnostics_max_gap_s = max(b - a for a, b in zip(during, during[1:]))
        if stream:
            session.spin_until(lambda: False, max(0.0, flood_end + settle_s - time.monotonic()))
            result.stream_sent, result.stream_published, ms = stream_sets(session, stream, stream_hz)
            if ms:
                result.stream_p50_ms, result.stream_p99_ms = (float(v) for v in np.percentile(ms, (50, 99)))
        stamp = time.time_ns()
        for i in range(valid_sets):
            sent: list[int] = []
            give_up = time.monotonic() + answer_s
            while time.monotonic() < give_up and session.node.alive():
                stamp = max(stamp + 10_000_000, time.time_ns())
                pub.publish_frame(i, stamp)
                sent.append(stamp)
                if session.spin_until(lambda: any(s in con.by_stamp() for s in sent), resend_s):
                    break
            result.resends += max(0, len(sent) - 1)
            if not any(s in con.by_stamp() for s in sent):
                result.failure = (f"valid set {i + 1} of {valid_sets} got no grid within {answer_s:.0f} s "
                                  f"({len(sent)} sends)")
                break
            result.answered += 1
            if result.first_grid_after_s is None:
                result.first_grid_after_s = time.monotonic() - flood_end
        result.valid_sets = valid_sets
    finally:
        con.diag_sub.callback = previous
    result.node_alive = session.node.alive()
    result.node_rss_mib = resident_mib(session.node.proc.pid)
    in_use = (con.latest_diagnostics() or {}).get("memory_heap_in_use_mib")
    result.node_heap_in_use_mib = float(in_use) if in_use is not None else None
    if not result.node_alive and not result.failure:
        result.failure = f"the node exited (code {session.node.proc.returncode})"
    return result


def produce(rig_path: str, seconds: float, seed: int) -> int:
    """One producer: complete sets of the rig as fast as Python publishes them, best effort with
    a history of one, from the moment every tensor topic has a subscriber; prints
    ``{"sets": N}``."""
    import rclpy

    from ..rig_yaml import load_rig
    from .synthetic_publisher import SyntheticRigPublisher

    rclpy.init(args=[sys.argv[0]])
    pub = SyntheticRigPublisher(load_rig(rig_path), seed=seed, reliability="best_effort", depth=1,
                                node_name=f"bevpool_flood_{seed}", cycle=2)
    sets = 0
    try:
        pub.wait_for_subscribers(20.0)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pub.publish_frame(sets)
            sets += 1
    finally:
        print(json.dumps({"sets": sets}), flush=True)
        pub.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(produce(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
