#!/usr/bin/env python3
"""HTA's figures for Kineto traces: Holistic Trace Analysis (PyPI holistictraceanalysis), run as is.

For each trace file: HTA's temporal breakdown (idle / compute / non-compute time of the rank) and
idle time breakdown (host wait / kernel wait / other, per stream), with the time HTA took to load
the trace and to compute each breakdown. Writes one JSON file:

    {"hta_version": "0.5.0", "traces": [{"file", "trace", "rank", "load_s", "temporal_s",
      "idle_s", "temporal": {...us, ...ns, ...pct}, "span": {...}, "idle_breakdown": [...]}]}

HTA wants a directory of rank files, so each file is symlinked alone into a temporary directory.
Times in HTA's frames are microseconds (Kineto's unit); every figure is also given in ns
(us * 1000). Plots are off (visualize=False). See docs/hta.md for what each figure means.

Usage: figures.py OUT.json TRACE.pt.trace.json.gz [TRACE ...]
"""
import json
import logging
import os
import sys
import tempfile
import time


def _quiet_hta() -> None:
    # HTA logs INFO and WARNING lines (parse times, ns rounding) to stdout; the table is ours.
    for name in ("hta", ""):
        logging.getLogger(name).setLevel(logging.ERROR)


def figures_for(path: str) -> dict:
    from hta.trace_analysis import TraceAnalysis

    trace = os.path.basename(path)
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if trace.endswith(suffix):
            trace = trace[: -len(suffix)]
            break
    with tempfile.TemporaryDirectory(prefix="hta-") as d:
        # HTA reads every *.gz / *.json of the directory and takes each one's rank from its
        # distributedInfo; the name only has to end in .json.gz (or .json).
        name = "rank.pt.trace.json.gz" if path.endswith(".gz") else "rank.pt.trace.json"
        os.symlink(os.path.abspath(path), os.path.join(d, name))
        t0 = time.perf_counter()
        analyzer = TraceAnalysis(trace_dir=d)
        t1 = time.perf_counter()
        _quiet_hta()
        temporal = analyzer.get_temporal_breakdown(visualize=False)
        t2 = time.perf_counter()
        ranks = sorted(analyzer.t.traces.keys())
        idle, _ = analyzer.get_idle_time_breakdown(
            ranks=ranks, visualize=False, show_idle_interval_stats=False
        )
        t3 = time.perf_counter()

        meta = analyzer.t.meta_data
        # The events HTA's temporal breakdown counted (stream != -1 after its iteration filter),
        # to report the span it used and how many events it kept.
        spans = {}
        for rank, df in analyzer.t.traces.items():
            dev = df[df["stream"].ne(-1)]
            first = float((dev["ts"]).min())
            last = float((dev["ts"] + dev["dur"]).max())
            base = float(analyzer.t.min_ts)
            spans[rank] = {
                "events": int(len(dev)),
                "streams": sorted(int(s) for s in dev["stream"].unique()),
                # absolute, in the file's clock (us since its epoch), as floats: for reading, not
                # for exact comparison (a double near 1.7e15 us keeps only 0.25 us)
                "first_us": base + first,
                "last_us": base + last,
            }

    out = []
    for _, row in temporal.iterrows():
        rank = int(row["rank"])
        t = {}
        for key in ("idle_time", "compute_time", "non_compute_time", "kernel_time"):
            us = float(row[f"{key}(us)"])
            t[f"{key}_us"] = us
            t[f"{key}_ns"] = round(us * 1000)
        for key in ("idle_time", "compute_time", "non_compute_time"):
            # unrounded, from the us figures (HTA's own *_pctg columns are rounded to 0.01)
            t[f"{key}_pct"] = 100.0 * t[f"{key}_us"] / t["kernel_time_us"]
            t[f"{key}_pctg_hta"] = float(row[f"{key}_pctg"])
        rows = idle[idle["rank"] == rank]
        breakdown = []
        for _, r in rows.iterrows():
            breakdown.append(
                {
                    "stream": int(r["stream"]),
                    "category": str(r["idle_category"]),
                    "idle_time_us": float(r["idle_time"]),
                    "idle_time_ns": round(float(r["idle_time"]) * 1000),
                    # rounded to 0.01 by HTA: compare ratios computed from idle_time_us instead
                    "idle_time_ratio_hta": float(r["idle_time_ratio"]),
                }
            )
        out.append(
            {
                "file": os.path.abspath(path),
                "trace": trace,
                "rank": rank,
                "load_s": t1 - t0,
                "temporal_s": t2 - t1,
                "idle_s": t3 - t2,
                "temporal": t,
                "span": spans.get(rank, {}),
                # the file's time base (newer Kineto: ts are us since baseTimeNanoseconds)
                "base_time_ns": int(meta.get(rank, {}).get("baseTimeNanoseconds", 0) or 0),
                "idle_breakdown": breakdown,
            }
        )
    return out


def main(argv: list) -> int:
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out_path, files = argv[1], argv[2:]
    _quiet_hta()
    from hta.version import __version_tuple__

    _quiet_hta()
    result = {"hta_version": ".".join(str(v) for v in __version_tuple__), "traces": []}
    for f in files:
        if not os.path.isfile(f):
            print(f"hta figures: {f} is missing", file=sys.stderr)
            return 2
        for rec in figures_for(f):
            result["traces"].append(rec)
            t = rec["temporal"]
            print(
                f"hta: {rec['trace']:<26} rank {rec['rank']:>3}  idle {t['idle_time_pct']:6.2f}%  "
                f"compute {t['compute_time_pct']:6.2f}%  non-compute {t['non_compute_time_pct']:6.2f}%  "
                f"load {rec['load_s']:.2f}s  breakdowns {rec['temporal_s'] + rec['idle_s']:.2f}s",
                file=sys.stderr,
            )
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
