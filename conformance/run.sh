#!/usr/bin/env bash
# Every MCP conformance check with real clients, as scripts/test.sh runs them: the official
# @modelcontextprotocol/conformance suite over streamable HTTP, then the Python SDK end to end
# over stdio and HTTP. Builds the debug binary first if it is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
if [ -z "${CAUSEWAY_BIN:-}" ]; then
    cargo build -q -p causeway --locked
fi
bash "$here/run-suite.sh"
bash "$here/run-e2e.sh"
