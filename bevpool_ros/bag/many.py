"""Many bags at once: each evaluation (bevpool_node + replay + scoring) is one Ray task.

Local Ray by default, or an existing cluster with ``address`` (see ``ray_cluster``). Each task
runs in a fresh worker process (``max_calls=1``: rclpy and DDS state never leak between bags) on
its own DDS domain, so evaluations sharing a machine never see each other's topics. Results come
back as plain dicts, each naming the node that ran it.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..demo import domain as domain_ids
from ..node_health import is_drop
from ..progress import progress_bar
from .io import BagError
from .ray_cluster import check_fits, start_ray, where_am_i

# the driver's settings that shape an evaluation; a cluster's workers inherit their raylet's
# environment, not the driver's, so these travel with each task
PASSED_ENV_PREFIXES = ("BEVPOOL_", "RMW_", "FASTDDS_", "FASTRTPS_")
# the ROS 2 domain ids whose Fast DDS ports stay below Linux's ephemeral range (a first choice
# per task: on its machine the task claims it, or the next free one)
DOMAINS = range(1, domain_ids.DOMAINS + 1)


@dataclass(frozen=True)
class TaskResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0


def find_bags(paths) -> list[Path]:
    """Each argument is a rosbag2 directory (holds metadata.yaml) or a folder of them."""
    bags = []
    for p in map(Path, paths):
        if (p / "metadata.yaml").is_file():
            bags.append(p)
        elif p.is_dir():
            bags += sorted(d for d in p.iterdir() if (d / "metadata.yaml").is_file())
        else:
            raise BagError(f"{p}: not a rosbag2 directory or a folder holding them")
    if not bags:
        raise BagError("no rosbag2 directories in " + ", ".join(map(str, paths)))
    names = [b.name for b in bags]
    if len(set(names)) != len(names):
        raise BagError(f"bag names must be unique (outputs are named after them): {names}")
    return bags


def evaluate_one(bag: str, out_bag: str, rig_path: str, node_params: dict, params_file: str | None,
                 rate: float, atol: float | None, domain: int, options: dict | None = None) -> dict:
    """One bag on DDS domain ``domain`` (or the next free one on its machine: demo/domain.py) -> the
    report dict + what the HTML report plots; ``options``: evaluate_bag's keyword options (paced,
    allow_lost, set_timeout_s, keep_grids)."""
    _default_sigint()
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    from ..ros.process import use_large_data_profile
    from .evaluate import evaluate_bag

    use_large_data_profile()
    t0, started_at = time.monotonic(), time.time()  # wall clock: tasks on several machines compare
    try:
        report = evaluate_bag(bag, out_bag, rig_path, node_params, params_file, rate, atol,
                              **(options or {}), domain=domain)
    except Exception as e:  # one broken bag is a failed row in the report, not a failed run
        return {"bag": bag, "ok": False, "error": f"{type(e).__name__}: {e}", "failures": [str(e)],
                "domain": domain, "started_at": started_at, "ended_at": time.time()}
    out = report.to_dict()
    out.update(bag=bag, out_bag=out_bag, ok=report.ok, domain=report.domain, wall_s=time.monotonic() - t0,
               started_at=started_at, ended_at=time.time(),
               frame_errors=report.frame_errors, frame_error_ratios=report.frame_error_ratios,
               e2e_ms_all=report.e2e_ms,
               drops=drops_by_reason(report.diagnostics), bev_energy=last_bev_energy(out_bag))
    return out


def _default_sigint() -> None:
    """Ray workers block SIGINT, and the node they start inherits the signal mask; it could then
    not be stopped cleanly (the session would have to kill it). Unblock it, with the default handler."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: the handler stays as it is
        pass


def drops_by_reason(diagnostics: dict) -> dict[str, int]:
    """Non-zero drop counters of the node's final diagnostics (dropped_*, sync losses): what the
    node's health rule counts as drops (node_health.is_drop)."""
    out = {}
    for k, v in diagnostics.items():
        if is_drop(k):
            try:
                n = int(float(v))
            except ValueError:
                continue
            if n:
                out[k.removeprefix("dropped_")] = n
    return out


def last_bev_energy(out_bag: str) -> dict | None:
    """Per-cell feature norm of the last grid in the output bag, with its geometry (for a picture)."""
    from ..io.tensor_codec import decode_any
    from ..visualize import bev_energy_map
    from .io import read_bag
    from .output import GRIDS_TOPIC

    last = None
    for m in read_bag(Path(out_bag), topics={GRIDS_TOPIC}):
        last = m
    if last is None:
        return None
    msg = last.decode()
    bev = decode_any(msg.tensor).reshape(msg.layers, msg.height, msg.width, msg.channels)
    return {"values": bev_energy_map(bev).astype(np.float32), "x_lower": msg.origin.x, "y_lower": msg.origin.y,
            "x_step": msg.resolution_x, "y_step": msg.resolution_y}


def evaluate_many(bags, out_dir: Path, rig_path: str, node_params: dict | None = None,
                  params_file: str | None = None, rate: float = 1.0, atol: float | None = None,
                  address: str | None = None, resources: TaskResources = TaskResources(),
                  num_cpus: int | None = None, show_progress: bool = True, paced: bool = False,
                  allow_lost=None, set_timeout_s: float = 10.0, keep_grids: bool = False) -> list[dict]:
    """Evaluate every bag as its own Ray task; results in the order of ``bags``.

    Paths are made absolute: a cluster's workers do not run in this folder (on several machines
    the bags, the rig and ``out_dir`` must be on a file system every node mounts at the same path).
    Start-up (Ray starting or being joined: seconds, silent otherwise) is said on stderr.
    """
    from .losses import AllowLost

    where = f"the Ray cluster at {address}" if address else "local Ray"
    def say(text: str) -> None:
        if show_progress:
            print(f"eval-many: {text}", file=sys.stderr, flush=True)

    say(f"starting {where} ..." if address is None else f"joining {where} ...")
    t0 = time.monotonic()
    ray = start_ray(address, num_cpus)
    check_fits(ray, resources.num_cpus, resources.num_gpus, where)
    cpus = sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive"))
    say(f"{where} up in {time.monotonic() - t0:.1f} s ({cpus:g} CPUs); {len(bags)} bag(s), "
        f"{resources.num_cpus:g} CPU + {resources.num_gpus:g} GPU per task, "
        + ("paced" if paced else f"rate x{rate:g}"))
    options = {"paced": paced, "allow_lost": allow_lost or AllowLost(),
               "set_timeout_s": set_timeout_s, "keep_grids": keep_grids}
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV_PREFIXES)}
    task = ray.remote(num_cpus=resources.num_cpus, num_gpus=resources.num_gpus, max_calls=1,
                      runtime_env={"env_vars": env} if env else None)(_evaluate_task)
    out_dir = Path(out_dir).resolve()
    (out_dir / "bags").mkdir(parents=True, exist_ok=True)
    rig_path = str(Path(rig_path).resolve())
    params_file = str(Path(params_file).resolve()) if params_file else None
    base = domain_ids.first_choice() - 1  # consecutive first choices, one per task
    refs = {}
    for i, bag in enumerate(bags):
        domain = DOMAINS[(base + i) % len(DOMAINS)]
        out_bag = out_dir / "bags" / Path(bag).name
        refs[task.remote(str(Path(bag).resolve()), str(out_bag), rig_path, dict(node_params or {}), params_file,
                         rate, atol, domain, options)] = i
    results: list[dict | None] = [None] * len(bags)
    pending = list(refs)
    with progress_bar(total=len(pending), desc="bags", unit="bag", enabled=show_progress) as bar:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = refs[ref]
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayError as e:  # the worker died or could not import us: a failed row
                    results[i] = {"bag": str(bags[i]), "ok": False, "error": f"{type(e).__name__}: {_last_line(e)}"}
                bar.update(1)
    return results


def _evaluate_task(*args) -> dict:
    return {**evaluate_one(*args), **where_am_i()}


def _last_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__
