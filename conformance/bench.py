#!/usr/bin/env python3
"""Rerunnable benchmark of `causeway mcp` over stdio with raw JSON-RPC (stdlib only).

Reports: time from process start to the answer of the first request (initialize), and
p50/p99 latency of get_trace_stats and get_causal_chains over N calls each.
Usage: bench.py BIN TRACE.duckdb [N]   (bench.sh imports the vLLM trace and runs this)
"""

import json
import subprocess
import sys
import time


def main() -> int:
    binary, trace = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    started = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "mcp", "--db", trace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    ids = iter(range(1, 1_000_000))

    def request(method, params):
        i = next(ids)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        while True:
            msg = json.loads(proc.stdout.readline())
            if msg.get("id") == i:
                return msg

    init = request(
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
    )
    ready_ms = (time.perf_counter() - started) * 1e3
    assert init["result"]["serverInfo"]["name"] == "causeway", init
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    proc.stdin.flush()
    first = time.perf_counter()
    request("tools/call", {"name": "get_trace_stats", "arguments": {}})
    first_call_ms = (time.perf_counter() - first) * 1e3
    report = {"ready_ms": round(ready_ms, 1), "first_tool_call_ms": round(first_call_ms, 1), "calls": n}
    for tool in ("get_trace_stats", "get_causal_chains"):
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            r = request("tools/call", {"name": tool, "arguments": {}})
            lat.append((time.perf_counter() - t) * 1e3)
            assert not r["result"].get("isError"), r
        lat.sort()
        report[tool] = {
            "p50_ms": round(lat[len(lat) // 2], 2),
            "p99_ms": round(lat[max(0, -(-99 * len(lat) // 100) - 1)], 2),
            "max_ms": round(lat[-1], 2),
        }
    proc.stdin.close()
    proc.wait(timeout=10)
    print(json.dumps(report, indent=2))
    ok = report["ready_ms"] < 200 and all(report[t]["p99_ms"] < 50 for t in ("get_trace_stats", "get_causal_chains"))
    print("targets (ready < 200 ms, p99 < 50 ms):", "met" if ok else "MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
