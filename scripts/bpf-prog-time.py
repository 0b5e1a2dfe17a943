#!/usr/bin/env python3
"""BPF time per run of causeway's call programs while a command runs (root).

Enables kernel BPF statistics, runs the command (typically the probe_cost bench binary with
CAUSEWAY_BENCH_SKIP_SUSTAINED=1), samples `bpftool prog show -j` every 0.2 s (programs are
unloaded when each trace ends, so the last sample of each program id counts), and prints
run_time_ns / run_cnt per program name, summed over ids, and our work above the bare pair:

  sudo CAUSEWAY_BENCH_SKIP_SUSTAINED=1 python3 scripts/bpf-prog-time.py \
      $CARGO_TARGET_DIR/release/deps/probe_cost-HASH --bench
"""

import collections
import json
import subprocess
import sys
import time

names = ("cw_call_entry_multi", "cw_call_exit_multi", "cw_bare_entry_multi", "cw_bare_exit_multi")
if len(sys.argv) < 2:
    sys.exit(__doc__)
open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
last = {}
try:
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None:
        show = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True)
        try:
            progs = json.loads(show.stdout)
        except json.JSONDecodeError:
            progs = []  # a program went away while bpftool listed it: sample again
        for prog in progs:
            if prog.get("name") in names and "run_cnt" in prog:
                last[prog["id"]] = (prog["name"], prog["run_time_ns"], prog["run_cnt"])
        time.sleep(0.2)
finally:
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("0")
agg = collections.defaultdict(lambda: [0, 0])
for name, t, n in last.values():
    agg[name][0] += t; agg[name][1] += n
for name in names:
    t, n = agg[name]
    print(f"{name}: {t/n if n else float('nan'):.1f} ns over {n} runs")
e = agg["cw_call_entry_multi"]; x = agg["cw_call_exit_multi"]; be = agg["cw_bare_entry_multi"]; bx = agg["cw_bare_exit_multi"]
if all(v[1] for v in (e, x, be, bx)):
    print(f"ours above bare pair: {e[0]/e[1] + x[0]/x[1] - be[0]/be[1] - bx[0]/bx[1]:.1f} ns")
