#!/usr/bin/env bash
# End-to-end tests with the official Python MCP SDK client over stdio and streamable HTTP,
# both protocol revisions, against the imported vLLM trace. Installs `mcp` + pytest from PyPI
# into conformance/.venv (ignored) on first use.
source "$(dirname "$0")/common.sh"
venv="$here/.venv"
if [ ! -x "$venv/bin/pytest" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "$here/requirements.txt"
fi
exec "$venv/bin/pytest" -q "$here/e2e" "$@"
