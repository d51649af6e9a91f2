"""Memory-regime classifier: working set vs L2 decides which kernel family fits.

Working set = features + depth + the five index arrays + the dense BEV output, each counted
once at its dtype. Rule: ``L2-resident`` when the working set is at most ``L2_FRACTION`` of the
L2 (the rest is headroom for the other tenants of L2 and set conflicts), else ``DRAM-bound``.
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
L2_FRACTION = 0.75

# element bytes of depth/feat, and the dtype the backends write the BEV tensor in
INPUT_BYTES = {"float32": 4, "float16": 2, "float8_e4m3": 1}
OUTPUT_DTYPE = {"float32": "float32", "float16": "float32", "float8_e4m3": "float16"}
OUTPUT_BYTES = {"float32": 4, "float16": 2}


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str
    l2_bytes: int
    fp8: bool  # native FP8 conversion/ALU support worth specialising for


KNOWN_GPUS = (
    Gpu("RTX A6000", "sm_86", 6 * MiB, False),
    Gpu("RTX 4090", "sm_89", 72 * MiB, True),
    Gpu("H200", "sm_90", 60 * MiB, True),  # as the device reports it
    Gpu("DRIVE AGX Thor", "sm_110", 32 * MiB, True),  # 32 MiB as the driver reports on AGX Thor
    Gpu("RTX PRO 6000 Blackwell", "sm_120", 128 * MiB, True),
)


def working_set_parts(smap, dtype: str) -> dict[str, int]:
    """Bytes of each part of a scatter map's working set (``smap``: a ScatterMap, read by its
    counts only, so this module needs none)."""
    if dtype not in INPUT_BYTES:
        raise ValueError(f"dtype: expected one of {sorted(INPUT_BYTES)}, got {dtype!r}")
    eb = INPUT_BYTES[dtype]
    return {
        "feat": smap.num_feat_rows * smap.channels * eb,
        "depth": smap.num_depth * eb,
        "indices": 4 * (3 * smap.num_points + 2 * smap.num_intervals),
        "output": smap.num_cells * smap.channels * OUTPUT_BYTES[OUTPUT_DTYPE[dtype]],
    }


def working_set_bytes(smap, dtype: str) -> int:
    return sum(working_set_parts(smap, dtype).values())


def classify(working_set: int, l2_bytes: int) -> str:
    return "L2-resident" if working_set <= L2_FRACTION * l2_bytes else "DRAM-bound"


def regime_table(smap, dtypes=("float16", "float8_e4m3")) -> list[dict]:
    rows = []
    for gpu in KNOWN_GPUS:
        row = {"gpu": gpu.name, "arch": gpu.arch, "l2_mib": gpu.l2_bytes / MiB}
        for dt in dtypes:
            row[dt] = classify(working_set_bytes(smap, dt), gpu.l2_bytes)
        rows.append(row)
    return rows
