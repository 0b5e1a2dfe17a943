#!/usr/bin/env bash
# End-to-end tests with the official Python MCP SDK client over stdio and streamable HTTP,
# both protocol revisions, against the imported vLLM trace; and the OTLP files of
# `causeway export --format otlp` decoded with the official opentelemetry-proto package.
# Installs requirements.txt from PyPI into conformance/.venv (ignored) on first use, and
# again when a package the tests import is missing (a venv from before it was added).
source "$(dirname "$0")/common.sh"
venv="$here/.venv"
if [ ! -x "$venv/bin/pytest" ] || ! "$venv/bin/python" -c "import opentelemetry.proto, mcp" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r "$here/requirements.txt"
fi
exec "$venv/bin/python" -m pytest -q "$here/e2e" "$@"
