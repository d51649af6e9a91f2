"""DRIVE Thor on paper: each workload's floor and an expected V3 time, projected from the H200 run.

    python3 bench/thor_projection.py bench/results/kernels_h200.json   # prints the markdown table

Figures used (docs/kernels.md names their sources and which are assumptions):
* DRAM: 273 GB/s peak (256-bit LPDDR5X); effective copy bandwidth assumed at the H200's measured
  share of its peak (D2D 4.17 of 4.8 TB/s, 0.87);
* 20 SMs, L2 32 MiB (device query on an AGX Thor devkit), GPU clock ~1.57 GHz (assumed);
* fixed launch cost: the H200's graph-replay empty launch (assumed equal).

Floor = compulsory bytes / effective bandwidth + launch. Expected = max(floor, the H200 kernel
time without its launch x the SM-throughput ratio (132 SMs x 1.98 GHz) / (20 x 1.57 GHz) +
launch): the H200 kernels are on-chip (latency / L1-L2 gather) bound, that part scales with SMs x
clock, and no kernel beats the DRAM floor. The regime is the classifier's on Thor's L2.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bevpool_ros.kernels.table import choose_v3_kernel  # noqa: E402
from bevpool_ros.regime import classify  # noqa: E402

MiB = 1 << 20
THOR = {"dram_peak": 273e9, "sms": 20, "clock_ghz": 1.57, "l2": 32 * MiB}
H200 = {"dram_peak": 4.8e12, "sms": 132, "clock_ghz": 1.98}


def project(rows: list[dict], meta: dict) -> list[dict]:
    eff = meta["d2d_gbps"] * 1e9 / H200["dram_peak"]
    bw = THOR["dram_peak"] * eff
    ratio = (H200["sms"] * H200["clock_ghz"]) / (THOR["sms"] * THOR["clock_ghz"])
    launch = meta["launch_us"]
    out = []
    for r in rows:
        if r["variant"] != "v3" or "median_us" not in r:
            continue
        floor = r["compulsory_bytes"] / bw * 1e6 + launch
        on_chip = (r["median_us"] - launch) * ratio + launch
        regime = classify(r["compulsory_bytes"], THOR["l2"])
        out.append({"workload": r["workload"], "precision": r["precision"], "bytes": r["compulsory_bytes"],
                    "regime": regime, "kernel": choose_v3_kernel(r["channels"], r["precision"], regime).name,
                    "floor_us": floor, "on_chip_us": on_chip, "expected_us": max(floor, on_chip),
                    "bound": "DRAM" if floor >= on_chip else "on-chip", "bw_gbps": bw / 1e9, "ratio": ratio})
    return out


def markdown(proj: list[dict]) -> str:
    lines = ["| workload | precision | compulsory MB | regime on Thor (L2 32 MiB) | classifier's kernel "
             "| floor (us) | on-chip estimate (us) | expected (us) | bound by |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in proj:
        lines.append(f"| {p['workload']} | {p['precision']} | {p['bytes'] / 1e6:.1f} | {p['regime']} | "
                     f"`{p['kernel'].replace('bevpool_v3_', '')}` | {p['floor_us']:.0f} | {p['on_chip_us']:.0f} | "
                     f"{p['expected_us']:.0f} | {p['bound']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    path = Path((argv or sys.argv[1:] or ["bench/results/kernels_h200.json"])[0])
    rows = json.loads(path.read_text())
    meta = json.loads(path.with_name(path.stem + "_meta.json").read_text())["meta"]
    proj = project(rows, meta)
    print(f"effective bandwidth {proj[0]['bw_gbps']:.0f} GB/s, SM-throughput ratio {proj[0]['ratio']:.2f}")
    print(markdown(proj))
    return 0


if __name__ == "__main__":
    sys.exit(main())
