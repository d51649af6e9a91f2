"""The output bag of an evaluation: what the report needs, not every grid unless asked.

A grid is large (the nuScenes rig's is 5.2 MB as float32: 575 MB of output for a 74 MB input
bag), and a score is a few numbers. So during the replay the node's grids go to a spool bag
beside the output; after scoring, the output bag is written with

* ``/eval/grids`` (diagnostic_msgs/DiagnosticStatus, one per grid, logged at its arrival): the
  grid's stamp, the cameras and stamps it pooled, backend, precision, shape, max |error| and
  its ratio to the tolerance (level OK within it, ERROR out of it or not scored). Everything the
  report counts and times is read back from these (``read_grid_records``);
* ``/bev/features`` (bevpool_msgs/BevFeature): the last grid (the eval-many report draws it),
  or every grid with ``keep_grids``, copied raw from the spool.

Then the spool is removed. Any ROS 2 tool reads the output (standard message types only).
"""
from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..io.bev_message import stamp_to_ns
from .io import BagWriter, read_bag

GRIDS_TOPIC = "/bev/features"
RECORDS_TOPIC = "/eval/grids"
RECORD_NAME = "bevpool-bag eval: grid"
BEV_FEATURE = "bevpool_msgs/msg/BevFeature"


@dataclass(frozen=True)
class GridRecord:
    stamp_ns: int
    received_ns: int                   # wall clock when the grid arrived (the bag's log time)
    cameras: tuple[str, ...]
    camera_stamps_ns: tuple[int, ...]
    backend: str
    precision: str
    max_abs_err: float                 # nan: not scored
    error_ratio: float

    @property
    def key(self) -> frozenset:
        """As ``sets.grid_key`` of the grid itself."""
        return frozenset(zip(self.cameras, self.camera_stamps_ns))


def spool_dir(out_bag: Path) -> Path:
    """A folder for the grids during the run, beside the output (same file system, so a full disk
    shows before the run is over, not in /tmp), hidden and removed afterwards."""
    out_bag.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out_bag.name}.grids-", dir=out_bag.parent))


def _record(msg, received_ns: int, score: tuple[float, float] | None):
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

    err, ratio = score if score is not None else (math.nan, math.nan)
    s = DiagnosticStatus()
    s.name = RECORD_NAME
    if score is None:
        s.level, s.message = DiagnosticStatus.ERROR, "not scored: its inputs are not all in the bag"
    elif ratio <= 1.0:
        s.level, s.message = DiagnosticStatus.OK, "within tolerance"
    else:
        s.level, s.message = DiagnosticStatus.ERROR, f"out of tolerance ({ratio:.3g} x the allowed error)"
    values = {
        "stamp_ns": stamp_to_ns(msg.header.stamp), "received_ns": received_ns,
        "cameras": ",".join(msg.cameras),
        "camera_stamps_ns": ",".join(str(stamp_to_ns(t)) for t in msg.camera_stamps),
        "missing_cameras": ",".join(msg.missing_cameras), "backend": msg.backend,
        "precision": msg.precision, "shape": f"{msg.layers},{msg.height},{msg.width},{msg.channels}",
        "max_abs_err": repr(err), "error_ratio": repr(ratio)}
    s.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
    return s


def write_output(out_bag: Path, spool: Path, scores: dict[int, tuple[float, float]],
                 keep_grids: bool) -> int:
    """The output bag from the spool (its grids in order, ``scores[i]`` of grid i); its size in
    bytes. The spool stays (the caller removes it)."""
    grids = list(read_bag(spool, topics={GRIDS_TOPIC}))
    with BagWriter(out_bag) as out:
        for i, m in enumerate(grids):
            out.write(RECORDS_TOPIC, _record(m.decode(), m.t_ns, scores.get(i)), m.t_ns)
            if keep_grids or i == len(grids) - 1:
                out.write_raw(GRIDS_TOPIC, BEV_FEATURE, m.raw, m.t_ns)
    return folder_bytes(out_bag)


def read_grid_records(out_bag: Path) -> list[GridRecord]:
    """The per-grid records of an output bag, in arrival order."""
    out = []
    for m in read_bag(out_bag, topics={RECORDS_TOPIC}):
        v = {kv.key: kv.value for kv in m.decode().values}
        split = lambda text: tuple(x for x in text.split(",") if x)  # noqa: E731
        out.append(GridRecord(int(v["stamp_ns"]), int(v["received_ns"]), split(v["cameras"]),
                              tuple(int(x) for x in split(v["camera_stamps_ns"])), v["backend"],
                              v["precision"], float(v["max_abs_err"]), float(v["error_ratio"])))
    return out


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"

