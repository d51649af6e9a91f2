"""The node's memory ceiling, from its parameters and its rig (docs/ros_interface.md, "Memory").

Above what the process holds once it is active (interpreter, libraries, the DDS participant and
its shared-memory segment, the backend with its device context and kernels), the node's memory
grows only with what it holds for the sets in flight:
- input readers: per tensor topic, ``input.qos_depth`` complete samples plus one sample being
  reassembled per writer on the topic; a payload lives as long as its sample (the shipped
  profile's DYNAMIC readers), and what Fast DDS keeps of a departed writer's unfinished sample goes
  back when the reader is renewed (reader_renewal.py, a few seconds after the writer left);
- the node's own queues: ``sync.max_pending_sets`` sets being completed, ``processing.queue_size``
  complete sets waiting, one being pooled;
- the grid: ``output.qos_depth`` grids kept by the BevFeature writer for slow readers, one being built.
Each tensor is counted at float32, the largest dtype the node takes. What malloc keeps freed for
reuse comes on top (``memory_heap_free_mib``; bevpool_ros/heap.py). An oversized sample is outside:
it costs its own size until it is dropped, then its memory goes back (it is mapped on its own).
"""
from __future__ import annotations

from dataclasses import dataclass

FLOAT32 = 4
MESSAGE_OVERHEAD = 4096  # a tensor message's other fields, CDR alignment, the sample's bookkeeping


@dataclass(frozen=True)
class MemoryCeiling:
    readers: int      # bytes
    queues: int
    outputs: int

    @property
    def total(self) -> int:
        return self.readers + self.queues + self.outputs


def tensor_bytes(rig) -> tuple[int, int]:
    """One camera's (depth, features) message at float32."""
    h, w = rig.feature_height, rig.feature_width
    return (rig.num_depth_bins * h * w * FLOAT32 + MESSAGE_OVERHEAD,
            h * w * rig.channels * FLOAT32 + MESSAGE_OVERHEAD)


def per_writer_bytes(rig) -> int:
    """What one more publisher on every input topic may hold: a camera set being reassembled."""
    depth, feat = tensor_bytes(rig)
    return rig.num_cameras * (depth + feat)


def memory_ceiling(rig, cfg: dict, writers_per_topic: int = 1) -> MemoryCeiling:
    """What the node holds at most for its inputs, queues and grid with ``writers_per_topic``
    publishers on each input topic (``cfg``: the node's parameter values)."""
    depth, feat = tensor_bytes(rig)
    camera_set = rig.num_cameras * (depth + feat)
    z, y, x = rig.grid_shape
    grid = z * y * x * rig.channels * (2 if cfg["output.bev_dtype"] == "float16" else FLOAT32) + MESSAGE_OVERHEAD
    return MemoryCeiling(
        readers=camera_set * (cfg["input.qos_depth"] + max(1, writers_per_topic)),
        queues=camera_set * (cfg["sync.max_pending_sets"] + cfg["processing.queue_size"] + 1),
        outputs=grid * (cfg["output.qos_depth"] + 1))


def memory_status(ceiling: MemoryCeiling, per_writer: int, writers_per_topic: int, at_start: int | None) -> dict:
    """/diagnostics values: the resident memory once active and the ceiling above it, MiB.
    ``ceiling`` (one writer a topic) and ``per_writer`` (what each further writer adds) are worked
    out once per calibration; only the writers matched now change between two statuses."""
    if at_start is None:
        return {}
    total = ceiling.total + per_writer * max(0, writers_per_topic - 1)
    return {"memory_at_start_mib": round(at_start / 2**20, 1),
            "memory_ceiling_mib": round((at_start + total) / 2**20, 1)}
