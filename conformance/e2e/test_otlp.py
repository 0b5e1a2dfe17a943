"""Independent check of causeway's OTLP export (docs/otlp.md) with the official protobuf
definitions from PyPI (`opentelemetry-proto`): the files `causeway export --format otlp -o`
writes for the imported vLLM trace decode as ExportMetricsServiceRequest and
ExportLogsServiceRequest, with the contract's names, types, units, bucket layout,
attributes and severities, and numbers that agree with the trace (`causeway query`).
Environment: CAUSEWAY_BIN (the binary), CAUSEWAY_TRACE (an imported .duckdb). See run-e2e.sh.
"""

import json
import os
import subprocess

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import SEVERITY_NUMBER_ERROR, SEVERITY_NUMBER_INFO, SEVERITY_NUMBER_WARN
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE

BIN = os.environ["CAUSEWAY_BIN"]
TRACE = os.environ["CAUSEWAY_TRACE"]

UNITS = {
    "causeway.op.duration": ("histogram", "ns"),
    "causeway.op.calls": ("sum", "{call}"),
    "causeway.op.bytes": ("sum", "By"),
    "causeway.offcpu.time": ("sum", "ns"),
    "causeway.drops": ("sum", "{event}"),
}
SEVERITY = {"HIGH": SEVERITY_NUMBER_ERROR, "MEDIUM": SEVERITY_NUMBER_WARN, "LOW": SEVERITY_NUMBER_INFO}


def attrs(kvs):
    out = {}
    for kv in kvs:
        kind = kv.value.WhichOneof("value")
        v = getattr(kv.value, kind)
        if kind == "array_value":
            v = [x.string_value for x in v.values]
        out[kv.key] = (kind, v)
    return out


def query(sql):
    out = subprocess.run([BIN, "query", "--db", TRACE, "--json", sql], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["rows"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("otlp")
    out = d / "otlp.pb"
    subprocess.run([BIN, "export", "--db", TRACE, "--format", "otlp", "-o", str(out)], check=True, capture_output=True)
    metrics = ExportMetricsServiceRequest()
    metrics.ParseFromString(out.read_bytes())
    logs = ExportLogsServiceRequest()
    logs.ParseFromString((d / "otlp.logs.pb").read_bytes())
    return metrics, logs


def test_metrics_follow_the_contract(exported):
    metrics, _ = exported
    assert metrics.resource_metrics, "at least one resource"
    bounds = [float(2 ** (k + 1)) for k in range(40)]
    seen = set()
    histogram_total = 0
    for rm in metrics.resource_metrics:
        res = attrs(rm.resource.attributes)
        assert res["service.name"] == ("string_value", "causeway")
        assert res["causeway.node"][0] == "string_value"
        assert res["host.name"][0] == "string_value"
        if "process.pid" in res:
            assert res["process.pid"][0] == "int_value"
        for key in ("causeway.rank", "causeway.local_rank", "causeway.world_size"):
            assert res.get(key, ("int_value",))[0] == "int_value"
        for sm in rm.scope_metrics:
            assert sm.scope.name == "causeway" and sm.scope.version
            calls = {}
            counts = {}
            for m in sm.metrics:
                kind, unit = UNITS[m.name]
                seen.add(m.name)
                assert m.WhichOneof("data") == kind, m.name
                assert m.unit == unit, m.name
                data = getattr(m, kind)
                assert data.aggregation_temporality == AGGREGATION_TEMPORALITY_CUMULATIVE
                if kind == "sum":
                    assert data.is_monotonic
                for p in data.data_points:
                    a = attrs(p.attributes)
                    assert 0 < p.start_time_unix_nano <= p.time_unix_nano
                    if m.name == "causeway.drops":
                        assert "process.pid" not in res and "kind" in a
                    elif m.name == "causeway.offcpu.time":
                        assert a["state"][1] in ("preempted", "blocked", "other")
                    else:
                        assert set(a) == {"op", "source"}, a
                    if kind == "sum":
                        assert p.WhichOneof("value") == "as_int" and p.as_int >= 0
                        if m.name == "causeway.op.calls":
                            calls[a["op"][1]] = p.as_int
                    else:
                        assert list(p.explicit_bounds) == bounds
                        assert len(p.bucket_counts) == 41
                        assert sum(p.bucket_counts) == p.count > 0
                        assert p.HasField("sum") and p.sum >= 0
                        if p.HasField("min"):
                            assert p.min <= p.max
                        counts[a["op"][1]] = p.count
                        histogram_total += p.count
            for op, n in counts.items():
                assert calls[op] == n, (op, calls[op], n)
    assert {"causeway.op.duration", "causeway.op.calls", "causeway.offcpu.time"} <= seen
    # The imported trace has no kernel histograms: the counts are its stored calls.
    [[stored]] = query("SELECT count(*) FROM events WHERE op <> 'sched_switch'")
    assert histogram_total == stored


def test_chains_are_log_records(exported):
    """The exported chains are causeway's findings: those `causeway explain --json` prints."""
    _, logs = exported
    records = [(attrs(rl.resource.attributes), r) for rl in logs.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    out = subprocess.run([BIN, "explain", "--db", TRACE, "--json"], check=True, capture_output=True, text=True)
    found = {c["id"]: c for c in json.loads(out.stdout)["chains"]}
    assert len(records) == len(found) > 0
    for res, r in records:
        a = attrs(r.attributes)
        assert r.event_name == "causeway.chain"
        c = found[a["causeway.chain.id"][1]]
        text = c["severity"].upper()
        assert r.severity_text == text and r.severity_number == SEVERITY[text]
        assert r.body.string_value == c["summary"]
        assert a["causeway.chain.time_lost_ns"] == ("int_value", c["time_lost_ns"])
        assert a["causeway.chain.origin"] == ("string_value", "engine")
        assert a["causeway.chain.recommendations"][0] == "array_value"
        json.loads(a["causeway.chain.timeline"][1])
        for key in ("detector", "root_cause", "explanation", "evidence_sql"):
            assert a[f"causeway.chain.{key}"][0] == "string_value"
        assert r.time_unix_nano > 0 and r.observed_time_unix_nano >= r.time_unix_nano
        assert res["service.name"] == ("string_value", "causeway")


def test_stored_chains_only_on_request_and_labelled(tmp_path):
    out = tmp_path / "otlp.pb"
    subprocess.run([BIN, "export", "--db", TRACE, "--format", "otlp", "--stored-chains", "-o", str(out)],
                   check=True, capture_output=True)
    logs = ExportLogsServiceRequest()
    logs.ParseFromString((tmp_path / "otlp.logs.pb").read_bytes())
    records = [attrs(r.attributes) for rl in logs.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    [[n]] = query("SELECT count(*) FROM chains")
    engine = [a for a in records if a["causeway.chain.origin"] == ("string_value", "engine")]
    other = [a for a in records if a["causeway.chain.origin"] != ("string_value", "engine")]
    assert engine and len(other) == n > 0
    for a in other:
        assert a["causeway.chain.tail_ratio"][0] == "double_value"
        assert a["causeway.chain.cuda_op"][0] == "string_value"
