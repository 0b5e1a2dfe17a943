#!/usr/bin/env python3
"""Writes a large PyTorch profiler (Kineto) trace for the import benchmark (docs/benchmarks.md):
the events of a real trace repeated until the file reaches the size asked for, each copy shifted
past the previous one in time and in correlation id, so that the copies stay distinct.

    python3 scripts/kineto-big-trace.py SRC.pt.trace.json.gz OUT.pt.trace.json SIZE_MB
"""

import gzip
import json
import sys


def main() -> None:
    src, out, target_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    doc = json.load(gzip.open(src) if src.endswith(".gz") else open(src))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    span = end - start + 1000
    size = sum(len(json.dumps(e)) + 2 for e in events)
    copies = max(1, target_mb * 1_000_000 // size)
    with open(out, "w") as f:
        f.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        first = True
        for i in range(copies):
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += i * span
                args = e.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    e["args"] = dict(args, correlation=args["correlation"] + i * 10_000_000)
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write("\n]}\n")
    print(f"{out}: {copies} copies of {len(events)} events", file=sys.stderr)


if __name__ == "__main__":
    main()
