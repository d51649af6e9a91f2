"""The eval-many report: ``report.json`` (aggregated numbers) and a self-contained ``report.html``.

The HTML names the rig and params file, and carries every plot as an embedded PNG (no network, no
scripts from elsewhere): end-to-end latency CDF per bag (``e2e_ms``, as evaluate.LATENCIES defines
it), error per frame, drops by reason, and one BEV picture per bag (log colour scale, axes in
metres). A few lines of inline JavaScript count the plots the browser decoded into
``<body data-plots-rendered>``, which the headless-browser test reads back.
"""
from __future__ import annotations

import base64
import html
import io
import json
import time
from pathlib import Path

import numpy as np

PLOT_KEYS = ("e2e_ms_all", "frame_errors", "frame_error_ratios", "bev_energy")  # per-bag data that only the plots use


def summarise(results: list[dict]) -> dict:
    ok = [r for r in results if r.get("ok")]
    e2e = np.concatenate([r.get("e2e_ms_all", []) for r in results] or [[]])
    pct = (lambda q: float(np.percentile(e2e, q))) if e2e.size else (lambda q: None)
    drops: dict[str, int] = {}
    lost_by_cause: dict[str, int] = {}
    for r in results:
        for k, v in r.get("drops", {}).items():
            drops[k] = drops.get(k, 0) + v
        for k, v in r.get("lost_by_cause", {}).items():
            lost_by_cause[k] = lost_by_cause.get(k, 0) + v
    return {"bags": len(results), "bags_ok": len(ok), "bags_failed": len(results) - len(ok),
            "complete_sets": sum(r.get("complete_sets", 0) for r in results),
            "published_complete": sum(r.get("published_complete", 0) for r in results),
            "lost": sum(r.get("lost", 0) for r in results), "lost_by_cause": lost_by_cause,
            "published": sum(r.get("published", 0) for r in results),
            "compared": sum(r.get("compared", 0) for r in results),
            "within_tolerance": sum(r.get("within_tolerance", 0) for r in results),
            "max_abs_err": max((r.get("max_abs_err", 0.0) for r in results), default=0.0),
            "e2e_ms": {"p50": pct(50), "p99": pct(99)}, "drops": drops}


def report_dict(results: list[dict], settings: dict) -> dict:
    bags = []
    for r in results:
        row = {k: v for k, v in r.items() if k not in PLOT_KEYS}
        row["frames"] = len(r.get("frame_errors", []))
        bags.append(row)
    return {"created_unix": time.time(), "settings": settings, "summary": summarise(results), "bags": bags}


# --- plots -------------------------------------------------------------------------------------
def _figure(width=6.4, height=3.6):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=100)


def _png(fig) -> str:
    from matplotlib import pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _name(r: dict) -> str:
    return Path(r["bag"]).name


def latency_cdf_png(results) -> str:
    fig, ax = _figure()
    for r in results:
        v = np.sort(np.asarray(r.get("e2e_ms_all", []), float))
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{_name(r)} (n={v.size})")
    ax.set_xlabel("end-to-end latency (ms): last input published -> grid received by DDS")
    ax.set_ylabel("fraction of grids")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a bag without grids has no curve
        ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def frame_error_png(results) -> str:
    fig, ax = _figure()
    for r in results:
        e = np.asarray(r.get("frame_error_ratios", []), float)
        if e.size:
            ax.plot(np.arange(e.size), np.clip(e, 1e-9, 1e9), marker=".", label=_name(r))
    ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="tolerance")
    ax.set_yscale("log")
    ax.set_xlabel("grid (in bag order)")
    ax.set_ylabel("max |BEV - FP64 reference| / tolerance")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def drops_png(results) -> str:
    reasons = sorted({k for r in results for k in r.get("drops", {})})
    fig, ax = _figure()
    if reasons:
        width = 0.8 / max(1, len(results))
        for i, r in enumerate(results):
            ax.bar(np.arange(len(reasons)) + i * width, [r.get("drops", {}).get(k, 0) for k in reasons],
                   width, label=_name(r))
        ax.set_xticks(np.arange(len(reasons)) + 0.4 - width / 2, reasons, rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    else:
        ax.bar([0], [0])
        ax.set_xticks([0], ["(none)"])
    ax.set_ylabel("sets / messages dropped")
    ax.set_title("drops by reason (node diagnostics at the end of each replay)", fontsize=9)
    return _png(fig)


def bev_png(r: dict) -> str | None:
    from ..visualize import plot_bev

    bev = r.get("bev_energy")
    if not bev:
        return None
    fig, ax = _figure(5.2, 4.6)
    plot_bev(ax, np.asarray(bev["values"]), bev["x_lower"], bev["y_lower"], bev["x_step"], bev["y_step"],
             label="feature norm")
    ax.set_title(f"{_name(r)}: last BEV grid", fontsize=9)
    return _png(fig)


# --- HTML ----------------------------------------------------------------------------------------
_STYLE = ("body{font-family:sans-serif;margin:24px;max-width:1400px} table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right} th{background:#eee}"
          ".plots{display:flex;flex-wrap:wrap;gap:12px} .bad{color:#b00} img{border:1px solid #ddd}")
_COUNT_SCRIPT = ("window.addEventListener('load',function(){var n=0;document.querySelectorAll('img.plot')"
                 ".forEach(function(i){if(i.complete&&i.naturalWidth>0)n++;});"
                 "document.body.setAttribute('data-plots-rendered',String(n));});")


def _img(b64: str, alt: str) -> str:
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if isinstance(v, float) else html.escape(str(v))


def _published_of_complete(row: dict) -> str | None:
    if "complete_sets" not in row:
        return None
    return f"{row.get('published_complete', 0)} / {row['complete_sets']}"


def _causes(causes: dict | None) -> str:
    from .losses import describe

    return describe(causes) if causes else "none"


def _ran(row: dict) -> str | None:
    """The backend and precision the node ran (its diagnostics), not the ones asked for."""
    return f"{row['backend']} ({row.get('precision', '?')})" if row.get("backend") else None


def render_html(report: dict, results: list[dict]) -> str:
    s = report["summary"]
    tolerance = report["settings"].get("tolerance", "")
    mode = report["settings"].get("mode", "")
    rows = []
    for row in report["bags"]:
        cls = "" if row.get("ok") else ' class="bad"'
        e2e = row.get("e2e_ms", {})
        why = row.get("failures") or [row.get("error", "failed")]
        result = "ok" if row.get("ok") else "; ".join(why)
        causes = _causes(row.get("lost_by_cause")) if "complete_sets" in row else None
        cells = [_published_of_complete(row), causes, row.get("mode"), _ran(row),
                 row.get("within_tolerance"), row.get("max_abs_err"), e2e.get("p50"),
                 e2e.get("p99"), row.get("wall_s")]
        rows.append(f"<tr{cls}><td style='text-align:left'>{html.escape(Path(row['bag']).name)}</td>"
                    + "".join(f"<td>{_fmt(x)}</td>" for x in cells)
                    + f"<td style='text-align:left'>{html.escape(result)}</td></tr>")
    bevs = [(b, _name(r)) for r in results if (b := bev_png(r))]
    plots = [(latency_cdf_png(results), "end-to-end latency CDF per bag"),
             (frame_error_png(results), "error per frame, relative to the tolerance"),
             (drops_png(results), "drops by reason")]
    return "\n".join([
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>bevpool-bag eval-many</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>bevpool-bag eval-many</h1>",
        f"<p>rig {html.escape(str(report['settings'].get('rig', '?')))}, params file "
        f"{html.escape(str(report['settings'].get('params_file') or 'none'))}.</p>",
        f"<p>{s['bags']} bags ({s['bags_ok']} ok, {s['bags_failed']} failed), {html.escape(mode)}; "
        f"{s['published_complete']} of {s['complete_sets']} complete sets published, "
        f"{s['lost']} lost "
        f"({html.escape(_causes(s['lost_by_cause']))}); {s['published']} grids published, "
        f"{s['within_tolerance']} of {s['compared']} within tolerance of the FP64 reference "
        f"({html.escape(tolerance)}); worst error "
        f"{_fmt(s['max_abs_err'])}; end-to-end latency p50 {_fmt(s['e2e_ms']['p50'])} ms, "
        f"p99 {_fmt(s['e2e_ms']['p99'])} ms.</p>",
        "<table><tr><th>bag</th><th>published / complete sets</th><th>lost by cause</th>"
        "<th>mode</th>"
        "<th>backend (precision)</th><th>within tol.</th><th>max err</th>"
        "<th>e2e p50 ms</th><th>e2e p99 ms</th><th>wall s</th><th>result</th></tr>",
        *rows, "</table>",
        "<h2>Latency, error, drops</h2><div class='plots'>",
        *(_img(b, alt) for b, alt in plots), "</div>",
        "<h2>BEV per bag</h2><div class='plots'>",
        *(_img(b, f"BEV {name}") for b, name in bevs), "</div>",
        f"<script>{_COUNT_SCRIPT}</script></body></html>"])


def write_report(out_dir: Path, results: list[dict], settings: dict) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = report_dict(results, settings)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "report.html").write_text(render_html(report, results))
    return report
