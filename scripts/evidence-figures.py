#!/usr/bin/env python3
"""Which figures of each finding's summary its evidence SQL's rows give back (issue #26: every
number in a summary should come from the rows its evidence SQL returns).

For every engine finding of each store: runs `causeway explain --json`, then the finding's
evidence SQL with `causeway query --json`, and looks for each count and duration of the summary
among the rows: a cell, or a column's sum, max, min or row count (durations within 0.6% or half
the last printed digit). Percentages, ratios and rates are derived from those and the span, and are
listed apart. Identifiers (tid, pid, GPU, rank) are not figures.

    CAUSEWAY=target/debug/causeway python3 scripts/evidence-figures.py STORE...
"""

import json
import os
import re
import subprocess
import sys

CW = os.environ.get("CAUSEWAY", "causeway")
UNITS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
FIGURE = re.compile(
    r"(?<![\w+.])(\d[\d,]*(?:\.\d+)?)\s*(ns|us|ms|s|%|x|/s|GiB|GB/s| times a second)?(?![\w.])"
)


def run(args):
    return subprocess.run([CW, *args], capture_output=True, text=True, check=False).stdout


# A count followed by "<words>/s" ("1654 syncs/s") is a rate; "one per 4.4 launches" a ratio.
RATE_AFTER = re.compile(r"\s+[a-z -]{1,20}/s\b")


def figures(summary):
    for m in FIGURE.finditer(summary):
        if summary[max(0, m.start() - 5) : m.start()].endswith(("tid ", "pid ", "GPU ", "rank ")):
            continue
        unit = m.group(2) or ""
        if not unit and (RATE_AFTER.match(summary, m.end()) or summary[: m.start()].endswith("one per ")):
            unit = "/s"
        yield float(m.group(1).replace(",", "")), unit, m.group(0).strip()


def found(value, unit, rows, text=""):
    cols = [[r[i] for r in rows if isinstance(r[i], (int, float))] for i in range(len(rows[0]))] if rows else []
    cand = {v for r in rows for v in r if isinstance(v, (int, float))}
    for c in filter(None, cols):
        cand |= {sum(c), max(c), min(c), len(c)}
    if unit in UNITS:
        ns = value * UNITS[unit]
        # Within 0.6%, or half the last printed digit ("4.9 us" is 4,850-4,950 ns).
        digits = text.split(" ")[0]
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        last = UNITS[unit] * 10 ** -decimals / 2
        return any(abs(c - ns) <= max(abs(ns) * 0.006, last * 1.01) for c in cand)
    if unit == "":
        return any(abs(c - value) < 0.5 for c in cand)
    return None


def main():
    checked = hit = derived = 0
    for store in sys.argv[1:]:
        out = run(["explain", "--db", store, "--json"])
        for chain in json.loads(out).get("chains", []) if out else []:
            q = run(["query", "--db", store, "--json", chain["evidence_sql"]])
            rows = json.loads(q)["rows"] if q else []
            missing = []
            for value, unit, text in figures(chain["summary"]):
                f = found(value, unit, rows, text)
                if f is None:
                    derived += 1
                    continue
                checked += 1
                hit += f
                if not f:
                    missing.append(text)
            state = "ok" if not missing else "not in the rows: " + ", ".join(missing)
            print(f"{store} {chain['detector']}: {state}")
    print(f"figures in summaries: {checked}, in the evidence rows: {hit}, derived (%, x, rates): {derived}")


if __name__ == "__main__":
    main()
