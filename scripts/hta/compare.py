#!/usr/bin/env python3
"""causeway's store against Holistic Trace Analysis (HTA), trace by trace.

For each Kineto trace: imports it with causeway, computes HTA's figures again from the store with
SQL written here (over gpu_activity, correlations, events, steps; not the engine), and prints them
beside HTA's own (figures.py's JSON, same files, same run):

  1. temporal breakdown per rank: idle / compute / non-compute % of HTA's span, HTA vs ours, in pp;
  2. idle time breakdown per rank: host wait / kernel wait / other, % of the rank's summed
     per-stream idle time (every stream is checked on its own too);
  3. the whole trace (no iteration filter): ours, and the engine's `devices` array of
     `causeway explain --json` when it has one (else says that it is absent);
  4. time: HTA's load + breakdowns against causeway's import + explain, same file, as a ratio.

docs/hta.md says how HTA defines each figure. "Ours" is exact (ns); HTA truncates each event of a
trace recorded with ns resolution to whole microseconds, so each figure is also computed the way
HTA rounds ("ours, us-rounded"), which must agree within 0.5 pp everywhere: that is the test that
the SQL reproduces HTA's definitions. A row of "ours" further than 0.5 pp from HTA fails unless
ALLOWED names its trace and figure with the reason, and the reason is in docs/hta.md.

Exit status: 0 when every row agrees or is allowed; 1 otherwise; 2 on a usage or setup error.

Usage: compare.py --figures HTA.json [--causeway BIN] [--work DIR] [--keep] TRACE [TRACE ...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(HERE, "..", "..", "docs", "hta.md")
TOLERANCE_PP = 0.5
ORDER = ["FAIL", "known bug", "allowed", "ok"]
# HTA's default consecutive_kernel_delay: 30, compared with gaps in its frame (microseconds).
KERNEL_WAIT_NS = 30 * 1000

# Rows of "ours" (exact ns, HTA's span) allowed to differ from HTA by more than TOLERANCE_PP:
# (trace, figure) -> the definition difference, a phrase that docs/hta.md must contain. Each is
# also tested: the us-rounded variant (HTA's definition) of the same row must agree within 0.5 pp.
ALLOWED = {
    # v100-rank0-of-1 was recorded with ns resolution and has 6,095 device events (kernels' median
    # 28 us, copies' 1.3 us): rounding each inward to whole microseconds (ceil start, floor end)
    # takes about 1 us of busy time off each, and HTA's idle share grows by 0.95 pp.
    ("v100-rank0-of-1", "idle"): "HTA rounds ns-resolution traces to whole microseconds",
    ("v100-rank0-of-1", "compute"): "HTA rounds ns-resolution traces to whole microseconds",
    ("v100-rank0-of-1", "idle_host_wait"): "HTA rounds ns-resolution traces to whole microseconds",
    ("v100-rank0-of-1", "idle_kernel_wait"): "HTA rounds ns-resolution traces to whole microseconds",
    # a100-rank0-of-2-nccl (ns resolution too): idle -0.54 pp once its launches are imported (below)
    ("a100-rank0-of-2-nccl", "idle"): "HTA rounds ns-resolution traces to whole microseconds",
}

# Traces where causeway's store itself is wrong (not a definition difference): their failing rows
# are reported as "known bug" and do not fail the run, unless --strict. A listed trace whose rows
# all agree fails the run (a stale entry: remove it). The phrase must be in docs/hta.md.
# Differences that are bugs of ours, by trace, with the reason (docs/hta.md must say it too): a
# fixed bug left here fails the run. Empty: cudaLaunchKernelExC now imports as a launch.
KNOWN_BUGS: dict = {}


def q(cw: str, db: str, sql: str) -> list:
    """Rows of one read-only query through `causeway query --json` (list of lists)."""
    r = subprocess.run(
        [cw, "query", "--db", db, "--json", "--limit", "10000", "--timeout", "120", sql],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"causeway query failed ({r.returncode}): {r.stderr.strip()}\nSQL: {sql}")
    out = json.loads(r.stdout)
    if out.get("truncated"):
        raise RuntimeError(f"causeway query truncated its rows: {sql}")
    return out["rows"]


def kept_sql(iteration_filter: bool, round_frame_ns) -> str:
    """CTEs ending in `kept`: the device activity HTA counts, one row per gpu_activity row.

    iteration_filter: HTA's Trace.load_traces default (include_last_profiler_step=False): when the
    trace has two or more ProfilerStep ranges, keep only activity whose launching runtime call
    started before the last ProfilerStep began (activity with no launching call in the trace
    is dropped); with fewer steps keep everything.
    round_frame_ns: None, or HTA's round_down_time_stamps for traces with fractional microseconds,
    done as HTA does it in its frame (the file's ts: microseconds since round_frame_ns, as doubles):
    start (and launch) = ceil(ts), end = floor(ts + dur), back to ns.
    """

    def us(x: str) -> str:
        # the double a JSON parser makes of the file's ts (exact integer part plus the fraction)
        f = round_frame_ns
        return f"(CAST((({x}) - {f}) // 1000 AS DOUBLE) + ((({x}) - {f}) % 1000) / 1000.0)"

    def up(x: str) -> str:
        if round_frame_ns is None:
            return x
        return f"(CAST(ceil({us(x)}) AS BIGINT) * 1000 + {round_frame_ns})"

    def end(s: str, e: str) -> str:
        if round_frame_ns is None:
            return e
        return f"(CAST(floor({us(s)} + (({e}) - ({s})) / 1000.0) AS BIGINT) * 1000 + {round_frame_ns})"

    launch = """
launch AS (
  SELECT c.node, c.pid, c.correlation, min(e.timestamp) AS launch_ns
  FROM correlations c JOIN events e ON e.node = c.node AND e.seq = c.seq
  GROUP BY c.node, c.pid, c.correlation
),
last_step AS (
  SELECT node, pid, count(*) AS steps, max(start_ns) AS last_start_ns
  FROM steps WHERE source = 'profiler' GROUP BY node, pid
),"""
    act = f"""
act AS (
  SELECT g.node, g.pid, g.device, g.stream, g.kind, g.raw_name,
         {up('g.start_ns')} AS s, {end('g.start_ns', 'g.end_ns')} AS e,
         {up('l.launch_ns')} AS launch_ns, {up('st.last_start_ns')} AS last_start_ns,
         coalesce(st.steps, 0) AS steps
  FROM gpu_activity g
  LEFT JOIN launch l ON l.node = g.node AND l.pid = g.pid AND l.correlation = g.correlation
  LEFT JOIN last_step st ON st.node = g.node AND st.pid = g.pid
  WHERE g.kind IN ('kernel', 'memcpy', 'memset')
),"""
    cond = "steps < 2 OR launch_ns < last_start_ns" if iteration_filter else "true"
    return f"WITH {launch}{act}\nkept AS (SELECT * FROM act WHERE {cond})"


# HTA's kernel types (hta/utils/utils.py): COMMUNICATION ^nccl.*Kernel, MEMORY ^(Memcpy|Memset|dma),
# COMPUTATION: not re.match((^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)), else OTHER.
IS_COMPUTE = """NOT (regexp_matches(raw_name, '^nccl.*Kernel') OR regexp_matches(raw_name, '^(Memcpy|Memset|dma)')
    OR regexp_matches(raw_name, 'Memcpy') OR regexp_matches(raw_name, '^Memset') OR regexp_matches(raw_name, 'Sync'))"""


def union_sql(source: str, key: str = "node, pid, device") -> str:
    """Sum of the union of [s, e) per `key` over `source`, merged like HTA's
    merge_kernel_intervals (sorted by start; a new group when start > the running max end)."""
    return f"""
SELECT {key}, sum(ge - gs) AS union_ns, min(gs) AS first_ns, max(ge) AS last_ns, sum(n) AS n
FROM (
  SELECT {key}, grp, min(s) AS gs, max(e) AS ge, count(*) AS n
  FROM (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR s > prev_end THEN 1 ELSE 0 END)
                OVER (PARTITION BY {key} ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp
    FROM (
      SELECT {key}, s, e,
             max(e) OVER (PARTITION BY {key} ORDER BY s, e
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
      FROM {source}
    )
  )
  GROUP BY {key}, grp
)
GROUP BY {key}"""


def streams_sql_rows(cw: str, db: str) -> dict:
    """(node, pid, device) -> {stream: {busy_ns, kernels, copies, memsets}} over the whole trace."""
    base = kept_sql(False, None)
    sql = f"""{base},
u AS ({union_sql('kept', 'node, pid, device, stream')}),
c AS (SELECT node, pid, device, stream, count(*) FILTER (WHERE kind = 'kernel') AS kernels,
             count(*) FILTER (WHERE kind = 'memcpy') AS copies, count(*) FILTER (WHERE kind = 'memset') AS memsets
      FROM kept GROUP BY ALL)
SELECT u.node, u.pid, u.device, u.stream, u.union_ns, c.kernels, c.copies, c.memsets
FROM u JOIN c USING (node, pid, device, stream) ORDER BY ALL"""
    out: dict = {}
    for node, pid, device, stream, busy, k, cp, ms in q(cw, db, sql):
        out.setdefault((node, pid, device), {})[int(stream)] = {
            "busy_ns": busy, "kernels": k, "copies": cp, "memsets": ms}
    return out


def temporal(cw: str, db: str, iteration_filter: bool, round_frame_ns) -> dict:
    """(node, pid, device) -> {span_ns, busy_ns, compute_ns, idle_ns, non_compute_ns, events}"""
    base = kept_sql(iteration_filter, round_frame_ns)
    sql = f"""{base},
allu AS ({union_sql('kept')}),
comp AS ({union_sql(f'(SELECT * FROM kept WHERE {IS_COMPUTE})')})
SELECT a.node, a.pid, a.device, a.first_ns, a.last_ns, a.union_ns, coalesce(c.union_ns, 0), a.n
FROM allu a LEFT JOIN comp c USING (node, pid, device) ORDER BY a.node, a.pid, a.device"""
    out = {}
    for node, pid, device, first, last, busy, comp, n in q(cw, db, sql):
        span = last - first
        out[(node, pid, device)] = {
            "first_ns": first,
            "last_ns": last,
            "span_ns": span,
            "busy_ns": busy,
            "compute_ns": comp,
            "idle_ns": span - busy,
            "non_compute_ns": busy - comp,
            "events": n,
        }
    return out


def idle_breakdown(cw: str, db: str, iteration_filter: bool, round_frame_ns) -> dict:
    """(node, pid, device) -> {stream: {host_wait, kernel_wait, other}} in ns, HTA's per-stream rule:
    gap = start - previous end on the stream (by start); host wait when the launching call began
    after the previous one ended; else kernel wait when the gap < 30 us; else other."""
    base = kept_sql(iteration_filter, round_frame_ns)
    sql = f"""{base},
gaps AS (
  SELECT node, pid, device, stream, s, launch_ns,
         s - lag(e) OVER (PARTITION BY node, pid, device, stream ORDER BY s, e) AS gap,
         lag(e) OVER (PARTITION BY node, pid, device, stream ORDER BY s, e) AS prev_end
  FROM kept
)
SELECT node, pid, device, stream,
       CASE WHEN launch_ns > prev_end THEN 'host_wait'
            WHEN gap < {KERNEL_WAIT_NS} THEN 'kernel_wait' ELSE 'other' END AS category,
       sum(gap)
FROM gaps WHERE prev_end IS NOT NULL
GROUP BY ALL ORDER BY ALL"""
    out: dict = {}
    for node, pid, device, stream, cat, ns in q(cw, db, sql):
        d = out.setdefault((node, pid, device), {}).setdefault(int(stream), {})
        d[cat] = int(ns)
    return out


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def shares(cats: dict) -> dict:
    total = sum(cats.get(k, 0) for k in ("host_wait", "kernel_wait", "other"))
    return {k: pct(cats.get(k, 0), total) for k in ("host_wait", "kernel_wait", "other")}


def rank_totals(streams: dict) -> dict:
    tot = {"host_wait": 0, "kernel_wait": 0, "other": 0}
    for cats in streams.values():
        for k in tot:
            tot[k] += cats.get(k, 0)
    return tot


def ns_resolution(cw: str, db: str) -> bool:
    """Whether HTA rounds this trace: some device timestamp has a fraction of a microsecond."""
    rows = q(cw, db, "SELECT count(*) FROM gpu_activity WHERE start_ns % 1000 <> 0 OR end_ns % 1000 <> 0")
    return rows[0][0] > 0


def timed(cmd: list) -> tuple:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return dt, r.stdout


def find_causeway(arg: str) -> str:
    cands = [arg] if arg else []
    cands += [os.environ.get("CAUSEWAY_BIN", "")]
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/causeway/target"))
    cands += [os.path.join(tgt, "debug", "causeway"), os.path.join(tgt, "release", "causeway")]
    cands += [shutil.which("causeway") or ""]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", required=True, help="figures.py's JSON for the same files")
    ap.add_argument("--causeway", default="", help="the causeway binary (else $CAUSEWAY_BIN, the build)")
    ap.add_argument("--work", default="", help="where to write the stores (default: a temporary dir)")
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--json", default="", help="also write every figure to this JSON file")
    ap.add_argument("--strict", action="store_true", help="KNOWN_BUGS fail the run too")
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args()

    cw = find_causeway(args.causeway)
    if not cw:
        print("hta compare: no causeway binary (build it, or set CAUSEWAY_BIN / --causeway)", file=sys.stderr)
        return 2
    with open(args.figures) as fh:
        hta = json.load(fh)
    hta_by_file = {}
    for rec in hta["traces"]:
        hta_by_file.setdefault(os.path.realpath(rec["file"]), []).append(rec)
    docs = open(DOCS).read() if os.path.exists(DOCS) else ""
    for (trace, fig), reason in list(ALLOWED.items()) + [((t, ""), r) for t, r in KNOWN_BUGS.items()]:
        if reason not in docs:
            print(f"hta compare: ALLOWED[{trace}, {fig}] says {reason!r}, which docs/hta.md lacks", file=sys.stderr)
            return 2

    work = args.work or tempfile.mkdtemp(prefix="causeway-hta-")
    os.makedirs(work, exist_ok=True)
    failures: list = []
    allowed_used: list = []
    known: dict = {}
    compared: list = []
    temporal_rows, idle_rows, whole_rows, engine_rows, time_rows = [], [], [], [], []
    stream_checks = 0
    engine_absent = []
    engine_missing: set = set()
    stream_rows_checked = [0]
    dump: dict = {"hta_version": hta.get("hta_version"), "traces": []}

    def check(label: str, trace: str, fig: str, diff: float, rounded_diff: float) -> str:
        """'ok', 'allowed', 'known bug' or 'FAIL' for a row of ours; the us-rounded variant (HTA's
        definition) must always agree; ours (exact) too, unless ALLOWED says why not."""
        if abs(rounded_diff) > TOLERANCE_PP:
            problem = f"{label}: {fig} us-rounded differs from HTA by {rounded_diff:+.2f} pp"
        elif abs(diff) <= TOLERANCE_PP:
            return "ok"
        elif (trace, fig) in ALLOWED:
            allowed_used.append(f"{label} {fig} {diff:+.2f} pp: {ALLOWED[(trace, fig)]}")
            return "allowed"
        else:
            problem = f"{label}: {fig} differs from HTA by {diff:+.2f} pp"
        if trace in KNOWN_BUGS and not args.strict:
            known.setdefault(trace, []).append(problem)
            return "known bug"
        failures.append(problem)
        return "FAIL"

    for path in args.traces:
        recs = hta_by_file.get(os.path.realpath(path))
        if not recs:
            print(f"hta compare: {path} is not in {args.figures}", file=sys.stderr)
            return 2
        name = recs[0]["trace"]
        compared.append(name)
        db = os.path.join(work, name + ".duckdb")
        import_s, _ = timed([cw, "import", path, "-o", db, "--force"])
        explain_s, explain_out = timed([cw, "explain", "--db", db, "--json"])
        explain = json.loads(explain_out)
        rounds = ns_resolution(cw, db)
        # HTA's frame: the file's ts are microseconds since baseTimeNanoseconds (newer Kineto) or 0
        frame = int(recs[0].get("base_time_ns") or 0) if rounds else None
        t_exact = temporal(cw, db, True, None)
        t_round = temporal(cw, db, True, frame)
        t_whole = temporal(cw, db, False, None)
        i_exact = idle_breakdown(cw, db, True, None)
        i_round = idle_breakdown(cw, db, True, frame)
        i_whole = idle_breakdown(cw, db, False, None)
        streams = streams_sql_rows(cw, db) if "devices" in explain else {}
        ranks = {r[0]: r[1] for r in q(cw, db, "SELECT pid, rank FROM processes")}
        hta_time = sum(r["load_s"] + r["temporal_s"] + r["idle_s"] for r in recs)
        hta_load = sum(r["load_s"] for r in recs)
        time_rows.append((name, hta_load, hta_time - hta_load, import_s, explain_s))
        trace_dump = {"trace": name, "ns_resolution": rounds, "import_s": import_s, "explain_s": explain_s, "ranks": []}

        for rec in recs:
            rank = rec["rank"]
            keys = [k for k in t_exact if ranks.get(k[1]) == rank]
            if len(keys) != 1:
                failures.append(f"{name} rank {rank}: {len(keys)} devices in the store for this rank (HTA merges a rank's devices into one timeline)")
                continue
            key = keys[0]
            label = f"{name} rank {rank}"
            h = rec["temporal"]
            figs = {}
            for fig, ours_key in (("idle", "idle_ns"), ("compute", "compute_ns"), ("non_compute", "non_compute_ns")):
                hp = h[f"{fig}_time_pct"]
                ex = pct(t_exact[key][ours_key], t_exact[key]["span_ns"])
                ro = pct(t_round[key][ours_key], t_round[key]["span_ns"])
                st = check(label, name, fig, ex - hp, ro - hp)
                figs[fig] = (hp, ex, ro, st)
            temporal_rows.append((name, rank, figs, t_exact[key], h))

            # idle breakdown: per rank (summed over streams) in the table, every stream checked
            hta_streams: dict = {}
            for r in rec["idle_breakdown"]:
                hta_streams.setdefault(r["stream"], {})[r["category"]] = r["idle_time_ns"]
            ours_streams = i_exact.get(key, {})
            round_streams = i_round.get(key, {})
            for stream in sorted(set(hta_streams) | set(ours_streams)):
                hs = shares(hta_streams.get(stream, {}))
                es = shares(ours_streams.get(stream, {}))
                rs = shares(round_streams.get(stream, {}))
                for cat in hs:
                    stream_checks += 1
                    check(f"{label} stream {stream}", name, f"idle_{cat}", es[cat] - hs[cat], rs[cat] - hs[cat])
            ht, et, rt = rank_totals(hta_streams), rank_totals(ours_streams), rank_totals(round_streams)
            hs, es, rs = shares(ht), shares(et), shares(rt)
            idle_figs = {}
            for cat in ("host_wait", "kernel_wait", "other"):
                st = check(label, name, f"idle_{cat}", es[cat] - hs[cat], rs[cat] - hs[cat])
                idle_figs[cat] = (hs[cat], es[cat], rs[cat], st)
            idle_rows.append((name, rank, idle_figs, sum(ht.values()), sum(et.values()), sum(rt.values())))

            # the whole trace: what a report over the device's whole activity shows
            w = t_whole[key]
            wt = rank_totals(i_whole.get(key, {}))
            whole_rows.append((name, rank, h, w, shares(wt)))

            # the engine's figures, when explain --json has them
            devs = explain.get("devices")
            eng = None
            if devs is None:
                engine_absent.append(name)
            else:
                match = [d for d in devs if d.get("rank") == rank and d.get("device") == key[2]]
                if len(match) != 1:
                    failures.append(f"{label}: explain --json devices has {len(match)} entries for rank {rank} device {key[2]}")
                else:
                    eng = match[0]
                    # the engine against our SQL over the same (whole) span: two implementations
                    # of one definition, within the tolerance; a field the engine lacks is noted
                    span = eng["last_ns"] - eng["first_ns"]
                    if (eng["first_ns"], eng["last_ns"]) != (w["first_ns"], w["last_ns"]):
                        failures.append(f"{label}: engine span {eng['first_ns']}..{eng['last_ns']} vs our SQL's {w['first_ns']}..{w['last_ns']}")
                    e_idle = eng.get("span_idle_pct")
                    e_comp = pct(eng["compute_ns"], span) if "compute_ns" in eng else None
                    e_non = pct(eng["non_compute_ns"], span) if "non_compute_ns" in eng else None
                    e_busy = pct(eng["busy_ns"], span) if "busy_ns" in eng else None
                    ib = eng.get("idle_breakdown")
                    e_sh = None
                    if ib is not None:
                        e_sh = shares({k: ib.get(f"{k}_ns", 0) for k in ("host_wait", "kernel_wait", "other")})
                    pairs = [
                        ("span_idle_pct", e_idle, pct(w["idle_ns"], w["span_ns"])),
                        ("busy", e_busy, pct(w["busy_ns"], w["span_ns"])),
                        ("compute", e_comp, pct(w["compute_ns"], w["span_ns"])),
                        ("non_compute", e_non, pct(w["non_compute_ns"], w["span_ns"])),
                    ]
                    pairs += [(f"idle_breakdown {c}", e_sh[c] if e_sh else None, shares(wt)[c]) for c in ("host_wait", "kernel_wait", "other")]
                    for fig, ev, ov in pairs:
                        if ev is None:
                            engine_missing.add(fig)
                        elif abs(ev - ov) > TOLERANCE_PP:
                            failures.append(f"{label}: engine {fig} {ev:.2f}% vs our SQL over the whole trace {ov:.2f}%")
                    if "streams" in eng:
                        ours_st = streams.get(key, {})
                        eng_st = {int(x["stream"]): x for x in eng["streams"]}
                        if set(eng_st) != set(ours_st):
                            failures.append(f"{label}: engine streams {sorted(eng_st)} vs our SQL's {sorted(ours_st)}")
                        for sid in set(eng_st) & set(ours_st):
                            for f in ("kernels", "copies", "memsets"):
                                if f in eng_st[sid] and eng_st[sid][f] != ours_st[sid][f]:
                                    failures.append(f"{label}: engine stream {sid} {f} {eng_st[sid][f]} vs our SQL's {ours_st[sid][f]}")
                            if "busy_ns" in eng_st[sid]:
                                d = pct(eng_st[sid]["busy_ns"] - ours_st[sid]["busy_ns"], span)
                                if abs(d) > TOLERANCE_PP:
                                    failures.append(f"{label}: engine stream {sid} busy differs from our SQL's by {d:+.2f} pp of the span")
                        stream_rows_checked[0] += len(set(eng_st) & set(ours_st))
                    else:
                        engine_missing.add("streams")
                    engine_rows.append((name, rank, h, e_idle, e_comp, e_non, e_sh, hs))
            trace_dump["ranks"].append(
                {
                    "rank": rank,
                    "hta": {"temporal": h, "idle_by_stream_ns": hta_streams},
                    "ours": {"temporal": t_exact[key], "idle_by_stream_ns": ours_streams},
                    "ours_us_rounded": {"temporal": t_round[key], "idle_by_stream_ns": round_streams},
                    "ours_whole_trace": {"temporal": w, "idle_by_stream_ns": i_whole.get(key, {})},
                    "engine": eng,
                }
            )
        dump["traces"].append(trace_dump)

    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)

    # ---- tables
    print(f"\nTemporal breakdown (HTA {hta.get('hta_version')}): % of HTA's span (first to last kernel/memcpy/memset of the")
    print("profiled iterations); ours = SQL over causeway's store, exact ns; rnd = ours rounded as HTA rounds; d = ours - HTA, pp")
    hdr = f"{'trace':<24} {'rank':>4} | {'idle HTA':>8} {'ours':>6} {'rnd':>6} {'d':>6} | {'comp HTA':>8} {'ours':>6} {'rnd':>6} {'d':>6} | {'non-c HTA':>9} {'ours':>6} {'rnd':>6} {'d':>6} | status"
    print(hdr)
    print("-" * len(hdr))
    for name, rank, figs, _, _ in temporal_rows:
        cells = []
        for fig in ("idle", "compute", "non_compute"):
            hp, ex, ro, _ = figs[fig]
            w = 9 if fig == "non_compute" else 8
            cells.append(f"{hp:>{w}.2f} {ex:>6.2f} {ro:>6.2f} {ex - hp:>+6.2f}")
        status = sorted({figs[f][3] for f in figs}, key=ORDER.index)[0]
        print(f"{name:<24} {rank:>4} | " + " | ".join(cells) + f" | {status}")

    print("\nIdle time breakdown: % of the rank's idle time summed over its streams (HTA's per-stream gaps); every")
    print(f"stream's shares are checked too ({stream_checks} checks)")
    hdr = f"{'trace':<24} {'rank':>4} | {'host HTA':>8} {'ours':>6} {'d':>6} | {'kern HTA':>8} {'ours':>6} {'d':>6} | {'other HTA':>9} {'ours':>6} {'d':>6} | {'idle HTA ms':>11} {'ours ms':>9} {'rnd ms':>9} | status"
    print(hdr)
    print("-" * len(hdr))
    for name, rank, f, hsum, esum, rsum in idle_rows:
        cells = []
        for cat, w in (("host_wait", 8), ("kernel_wait", 8), ("other", 9)):
            hp, ex, _, _ = f[cat]
            cells.append(f"{hp:>{w}.2f} {ex:>6.2f} {ex - hp:>+6.2f}")
        status = sorted({f[c][3] for c in f}, key=ORDER.index)[0]
        print(f"{name:<24} {rank:>4} | " + " | ".join(cells) + f" | {hsum / 1e6:>11.3f} {esum / 1e6:>9.3f} {rsum / 1e6:>9.3f} | {status}")

    print("\nWhole trace (no iteration filter: every kernel/memcpy/memset, first to last), ours, against HTA's")
    print("profiled-iterations figures: informative, not checked (HTA leaves the last ProfilerStep out)")
    hdr = f"{'trace':<24} {'rank':>4} | {'HTA span ms':>11} {'ours ms':>9} | {'idle HTA':>8} {'whole':>6} | {'comp HTA':>8} {'whole':>6} | {'non-c HTA':>9} {'whole':>6} | host/kern/other whole %"
    print(hdr)
    print("-" * len(hdr))
    for name, rank, h, w, sh in whole_rows:
        print(
            f"{name:<24} {rank:>4} | {h['kernel_time_ns'] / 1e6:>11.3f} {w['span_ns'] / 1e6:>9.3f} | "
            f"{h['idle_time_pct']:>8.2f} {pct(w['idle_ns'], w['span_ns']):>6.2f} | "
            f"{h['compute_time_pct']:>8.2f} {pct(w['compute_ns'], w['span_ns']):>6.2f} | "
            f"{h['non_compute_time_pct']:>9.2f} {pct(w['non_compute_ns'], w['span_ns']):>6.2f} | "
            f"{sh['host_wait']:.1f}/{sh['kernel_wait']:.1f}/{sh['other']:.1f}"
        )

    if engine_absent:
        print(f"\nEngine: `causeway explain --json` has no top-level `devices` array (yet): its figures are not compared ({len(engine_absent)} traces)")
    if engine_rows:
        print("\nEngine (`explain --json` devices) against HTA; the engine is also checked against our SQL over the whole trace")
        hdr = f"{'trace':<24} {'rank':>4} | {'idle HTA':>8} {'eng':>6} {'d':>6} | {'comp HTA':>8} {'eng':>6} {'d':>6} | {'non-c HTA':>9} {'eng':>6} {'d':>6} | host/kern/other HTA vs eng %"
        print(hdr)
        print("-" * len(hdr))
        def cell(hv, ev, w):
            if ev is None:
                return f"{hv:>{w}.2f} {'-':>6} {'-':>6}"
            return f"{hv:>{w}.2f} {ev:>6.2f} {ev - hv:>+6.2f}"

        for name, rank, h, ei, ec, en, esh, hsh in engine_rows:
            eb = f"{esh['host_wait']:.1f}/{esh['kernel_wait']:.1f}/{esh['other']:.1f}" if esh else "-"
            print(
                f"{name:<24} {rank:>4} | {cell(h['idle_time_pct'], ei, 8)} | {cell(h['compute_time_pct'], ec, 8)} | "
                f"{cell(h['non_compute_time_pct'], en, 9)} | "
                f"{hsh['host_wait']:.1f}/{hsh['kernel_wait']:.1f}/{hsh['other']:.1f} vs {eb}"
            )
        print(f"(engine vs HTA: informative, the engine covers the whole trace; engine vs our whole-trace SQL: checked, "
              f"span, busy, compute, non-compute, {stream_rows_checked[0]} streams' busy time and counts)")
        if engine_missing:
            print(f"engine fields absent, not compared: {', '.join(sorted(engine_missing))}")

    print("\nTime, same file, same run: HTA (TraceAnalysis load + temporal + idle breakdown) vs causeway (import + explain --json)")
    hdr = f"{'trace':<24} | {'HTA load s':>10} {'breakdowns s':>12} {'total s':>8} | {'import s':>8} {'explain s':>9} {'total s':>8} | {'HTA/causeway':>12}"
    print(hdr)
    print("-" * len(hdr))
    th = tc = 0.0
    for name, hl, hb, im, ex in time_rows:
        th += hl + hb
        tc += im + ex
        print(f"{name:<24} | {hl:>10.2f} {hb:>12.2f} {hl + hb:>8.2f} | {im:>8.2f} {ex:>9.2f} {im + ex:>8.2f} | {(hl + hb) / (im + ex):>11.1f}x")
    print(f"{'all':<24} | {'':>10} {'':>12} {th:>8.2f} | {'':>8} {'':>9} {tc:>8.2f} | {th / tc:>11.1f}x")

    if allowed_used:
        print("\nAllowed (definition differences, docs/hta.md; each one's us-rounded row agrees):")
        for a in allowed_used:
            print(f"  {a}")
    for trace in KNOWN_BUGS:
        if trace in compared and trace not in known:
            failures.append(f"{trace}: listed in KNOWN_BUGS ({KNOWN_BUGS[trace]}) but agrees with HTA: remove the entry")
    if known:
        print("\nKnown bugs of causeway's store (KNOWN_BUGS, docs/hta.md; --strict fails on them):")
        for trace, problems in known.items():
            print(f"  {trace}: {KNOWN_BUGS[trace]}: {len(problems)} rows, e.g. {problems[0]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dump, fh, indent=1, default=str)
            fh.write("\n")
    if failures:
        print(f"\nhta compare: {len(failures)} checks failed (figures more than {TOLERANCE_PP} pp apart, or a stale entry):", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    tail = f", or a known bug ({sum(len(v) for v in known.values())} rows)" if known else ""
    print(f"\nhta compare: every figure agrees with HTA within {TOLERANCE_PP} pp, or is an allowed definition difference{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
