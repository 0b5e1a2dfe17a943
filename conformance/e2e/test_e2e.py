"""End-to-end tests of `causeway mcp` with the official Python MCP SDK client (PyPI `mcp`).

Runs over stdio and streamable HTTP, in both protocol revisions the server speaks
(2026-07-28 via mode="auto", 2025-11-25 via mode="legacy"), against the imported vLLM trace.
Environment: CAUSEWAY_BIN (the binary), CAUSEWAY_TRACE (an imported .duckdb). See run-e2e.sh.
"""

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import time

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

BIN = os.environ["CAUSEWAY_BIN"]
TRACE = os.environ["CAUSEWAY_TRACE"]
TRACE_NAME = os.path.splitext(os.path.basename(TRACE))[0]
TOOLS = [
    "get_trace_stats",
    "get_causal_chains",
    "get_stacks",
    "get_steps",
    "compare_traces",
    "run_sql",
    "describe_trace",
    "list_traces",
    "get_check",
    "run_demo",
    "get_test_report",
]
MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server():
    port = free_port()
    proc = subprocess.Popen(
        [BIN, "mcp", "--db", TRACE, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 20
        line = ""
        while time.time() < deadline and "listening on" not in line:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError("causeway mcp --listen exited early")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def target(transport: str):
    if transport == "stdio":
        yield StdioServerParameters(command=BIN, args=["mcp", "--db", TRACE])
    else:
        with http_server() as url:
            yield url


def structured(result):
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0].text
    assert text.strip(), "a text rendering accompanies the structured result"
    return result.structured_content


async def session_checks(server, mode: str):
    async with Client(server, mode=mode) as client:
        assert client.protocol_version == MODES[mode]
        assert client.server_info is None or client.server_info.name == "causeway"

        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        assert names == TOOLS, names
        for t in listed.tools:
            assert t.output_schema is not None, t.name
            assert t.annotations.read_only_hint is True, t.name
            assert t.annotations.open_world_hint is False, t.name
            assert t.input_schema["type"] == "object"

        stats = structured(await client.call_tool("get_trace_stats", {}))
        assert stats["events"] == 10869
        assert any(o["op"] == "cudaLaunchKernel" for o in stats["ops"])
        assert "total" in stats["drops"]

        chains = structured(await client.call_tool("get_causal_chains", {"top_n": 1}))
        assert len(chains["chains"]) == 1 and chains["total"] >= 2
        assert chains["chains"][0]["severity"] in ("HIGH", "MEDIUM", "LOW")
        assert chains["chains"][0]["detector"] == "feeding_stall"
        assert chains["budgets"], "each GPU thread's time budget"
        assert chains["next_cursor"] == "1"
        more = structured(await client.call_tool("get_causal_chains", {"top_n": 1, "cursor": "1"}))
        assert more["chains"][0]["id"] != chains["chains"][0]["id"]
        # The reference tool's chains stored in the file: only on request, labelled.
        assert "stored_chains" not in chains
        stored = structured(await client.call_tool("get_causal_chains", {"stored": True}))
        assert stored["stored_chains"] and all(c["origin"] != "engine" for c in stored["stored_chains"])

        stacks = structured(await client.call_tool("get_stacks", {"op": "cudaLaunchKernel", "limit": 3}))
        assert 1 <= len(stacks["stacks"]) <= 3
        assert stacks["stacks"][0]["frames"], "frames are resolved"
        assert all("cudaLaunchKernel" in s["ops"] for s in stacks["stacks"])

        sql = structured(
            await client.call_tool(
                "run_sql", {"sql": "SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY n DESC, op LIMIT 3"}
            )
        )
        assert [c["name"] for c in sql["columns"]] == ["op", "n"]
        assert len(sql["rows"]) == 3

        desc = structured(await client.call_tool("describe_trace", {}))
        assert desc["events"] == 10869 and desc["nodes"] and desc["processes"]

        traces = structured(await client.call_tool("list_traces", {}))
        assert traces["traces"][0]["default"] is True
        assert traces["traces"][0]["name"] == TRACE_NAME

        check = structured(await client.call_tool("get_check", {}))
        assert check["kernel"] and any(i["name"] == "btf" for i in check["items"])

        demo = structured(await client.call_tool("run_demo", {"scenario": "sync-storm"}))
        assert demo["chains"][0]["detector"] == "sync_storm" and demo["events"] > 1000

        report = structured(await client.call_tool("get_test_report", {}))
        assert isinstance(report["found"], bool)

        # Arguments are validated against the schema: the failing field and rule come back.
        bad = await client.call_tool("get_causal_chains", {"top_n": 0})
        assert bad.is_error
        assert "/top_n" in bad.content[0].text and "hint:" in bad.content[0].text
        typo = await client.call_tool("get_trace_stats", {"pidd": 1})
        assert typo.is_error and "pidd" in typo.content[0].text

        # The SQL guard answers with a tool error and a hint, not a protocol error.
        refused = await client.call_tool("run_sql", {"sql": "DROP TABLE event_data"})
        assert refused.is_error and "hint:" in refused.content[0].text

        prompts = await client.list_prompts()
        assert [p.name for p in prompts.prompts] == ["investigate", "compare_windows", "straggler_hunt"]
        prompt = await client.get_prompt("investigate", {"symptom": "slow decode"})
        text = prompt.messages[0].content.text
        assert re.search(r"get_trace_stats.*get_causal_chains.*get_stacks.*run_sql", text, re.S)
        assert "slow decode" in text

        resources = await client.list_resources()
        uris = [str(r.uri) for r in resources.resources]
        assert uris == ["causeway://schema", "causeway://ops", "causeway://traces"]
        schema = await client.read_resource("causeway://schema")
        assert "## events" in schema.contents[0].text and "ns since Unix epoch" in schema.contents[0].text
        ops = await client.read_resource("causeway://ops")
        assert "cudaLaunchKernel" in ops.contents[0].text
        templates = await client.list_resource_templates()
        assert templates.resource_templates[0].uri_template == "causeway://trace/{name}"
        one = await client.read_resource(f"causeway://trace/{TRACE_NAME}")
        assert '"events": 10869' in one.contents[0].text


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_session(transport, mode):
    with target(transport) as server:
        asyncio.run(session_checks(server, mode))
