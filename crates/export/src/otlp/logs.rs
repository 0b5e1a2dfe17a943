//! The OTLP logs of a trace: one log record per causal chain, in its node's resource
//! (docs/otlp.md), from the `chains` table or, when it is empty, the analysis engine.

use std::collections::BTreeMap;

use causeway_store::{Reader, StoreError};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};

use super::{CHAIN_EVENT, Resources, i, kv, ns, s, scope};
use crate::duck;

/// What the logs export reads besides the trace.
#[derive(Debug, Clone)]
pub struct LogsOptions {
    /// `observed_time_unix_nano` of every record: the export time.
    pub observed_ns: i64,
    /// Export causeway's findings on the trace (the chains `explain` prints).
    pub engine: bool,
    /// Also export the chains stored in the file (imported from another tool, or received
    /// from nodes), labelled by their origin.
    pub stored: bool,
    /// Prices per GPU-hour the engine's findings are priced at (`causeway.chain.cost.*`).
    pub prices: causeway_analysis::cost::Prices,
}

impl Default for LogsOptions {
    fn default() -> Self {
        LogsOptions {
            observed_ns: causeway_store::now_ns(),
            engine: true,
            stored: false,
            prices: causeway_analysis::cost::Prices::default(),
        }
    }
}

/// One chain as exported: the `chains` table's columns (unknown ones None for engine chains).
#[derive(Debug, Clone, Default)]
struct ChainRow {
    id: String,
    node: String,
    detector: String,
    detected_ns: i64,
    severity: String,
    summary: String,
    root_cause: String,
    explanation: String,
    recommendations: Vec<String>,
    timeline: String,
    evidence_sql: String,
    time_lost_ns: i64,
    cuda_op: Option<String>,
    p50_ns: Option<i64>,
    p99_ns: Option<i64>,
    tail_ratio: Option<f64>,
    /// `engine` (causeway's finding) or where a stored chain came from.
    origin: String,
    /// What the engine's finding costs.
    cost: Option<causeway_analysis::cost::Cost>,
    /// What it costs per step, where the process recorded steps.
    per_step: Option<causeway_analysis::step_cost::PerStep>,
}

const CHAINS_SQL: &str = "SELECT chain_id, node, detector, detected_ns, severity, summary,
    root_cause, explanation, recommendations, timeline, evidence_sql, time_lost_ns, cuda_op,
    p50_ns, p99_ns, tail_ratio, origin
  FROM chains ORDER BY node, time_lost_ns DESC, chain_id";

/// A stored JSON array of strings; text that is not one is kept as a single entry.
fn recommendations(raw: &str) -> Vec<String> {
    serde_json::from_str(raw).unwrap_or_else(|_| {
        if raw.trim().is_empty() {
            Vec::new()
        } else {
            vec![raw.to_string()]
        }
    })
}

fn stored_chains(r: &Reader) -> Result<Vec<ChainRow>, StoreError> {
    r.prepare_trusted(CHAINS_SQL)?
        .query_map([], |row| {
            Ok(ChainRow {
                id: row.get(0)?,
                node: row.get(1)?,
                detector: row.get(2)?,
                detected_ns: row.get(3)?,
                severity: row.get(4)?,
                summary: row.get(5)?,
                root_cause: row.get(6)?,
                explanation: row.get(7)?,
                recommendations: recommendations(&row.get::<_, String>(8)?),
                timeline: row.get(9)?,
                evidence_sql: row.get(10)?,
                time_lost_ns: row.get(11)?,
                cuda_op: Some(row.get(12)?),
                p50_ns: Some(row.get(13)?),
                p99_ns: Some(row.get(14)?),
                tail_ratio: Some(row.get(15)?),
                origin: row.get(16)?,
                cost: None,
                per_step: None,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the chains"))
}

/// Causeway's findings (what `explain` prints), stamped with the end of the trace.
fn engine_chains(
    r: &Reader,
    detected_ns: i64,
    prices: &causeway_analysis::cost::Prices,
) -> Result<Vec<ChainRow>, StoreError> {
    let q = causeway_analysis::FindingsQuery {
        chains: causeway_analysis::ChainQuery {
            prices: prices.clone(),
            ..causeway_analysis::ChainQuery::default()
        },
        ..causeway_analysis::FindingsQuery::default()
    };
    let found = causeway_analysis::findings(r, &q)?;
    Ok(found
        .explain
        .chains
        .into_iter()
        .map(|c| ChainRow {
            timeline: serde_json::to_string(&c.timeline).unwrap_or_else(|_| "[]".into()),
            id: c.id,
            node: c.node,
            detector: c.detector,
            detected_ns,
            severity: c.severity.as_str().into(),
            summary: c.summary,
            root_cause: c.root_cause,
            explanation: c.explanation,
            recommendations: c.recommendations,
            evidence_sql: c.evidence_sql,
            time_lost_ns: c.time_lost_ns,
            origin: c.origin,
            cost: c.cost,
            per_step: c.per_step,
            ..ChainRow::default()
        })
        .collect())
}

/// (severity_number, severity_text) of a stored severity: HIGH ERROR, MEDIUM WARN, LOW INFO.
pub fn severity(stored: &str) -> (SeverityNumber, &'static str) {
    match causeway_analysis::Severity::parse(stored) {
        causeway_analysis::Severity::High => (SeverityNumber::Error, "HIGH"),
        causeway_analysis::Severity::Medium => (SeverityNumber::Warn, "MEDIUM"),
        causeway_analysis::Severity::Low => (SeverityNumber::Info, "LOW"),
    }
}

fn record(c: ChainRow, observed_ns: i64) -> LogRecord {
    let (number, text) = severity(&c.severity);
    let p = |k: &str| format!("causeway.chain.{k}");
    let mut a = vec![
        s(&p("id"), &c.id),
        s(&p("detector"), &c.detector),
        s(&p("root_cause"), &c.root_cause),
        s(&p("explanation"), &c.explanation),
        i(&p("time_lost_ns"), c.time_lost_ns),
        s(&p("origin"), &c.origin),
    ];
    if let Some(op) = &c.cuda_op {
        a.push(s(&p("cuda_op"), op));
    }
    if let Some(v) = c.p50_ns {
        a.push(i(&p("p50_ns"), v));
    }
    if let Some(v) = c.p99_ns {
        a.push(i(&p("p99_ns"), v));
    }
    if let Some(v) = c.tail_ratio {
        a.push(kv(&p("tail_ratio"), Value::DoubleValue(v)));
    }
    a.push(kv(
        &p("recommendations"),
        Value::ArrayValue(ArrayValue {
            values: c
                .recommendations
                .into_iter()
                .map(|r| AnyValue {
                    value: Some(Value::StringValue(causeway_store::sanitize::sanitize_text(
                        &r,
                    ))),
                })
                .collect(),
        }),
    ));
    if let Some(k) = &c.cost {
        // GPU-hours always; money where a price applies (`causeway.chain.cost`, in the
        // currency beside it).
        a.push(i(&p("cost.gpus"), i64::from(k.gpus)));
        a.push(kv(&p("cost.gpu_hours"), Value::DoubleValue(k.gpu_hours)));
        a.push(kv(
            &p("cost.gpu_hours_per_day_estimate"),
            Value::DoubleValue(k.gpu_hours_per_day),
        ));
        if let Some(amount) = k.amount {
            a.push(kv(&p("cost"), Value::DoubleValue(amount)));
            a.push(s(&p("cost.currency"), &k.currency));
        }
    }
    if let Some(k) = &c.per_step {
        // The finding's time per step of the process (docs/cli.md, Per step).
        a.push(i(&p("per_step.lost_per_step_ns"), k.lost_per_step_ns));
        a.push(i(
            &p("per_step.steps"),
            i64::try_from(k.steps).unwrap_or(i64::MAX),
        ));
        a.push(s(&p("per_step.source"), &k.source));
        a.push(i(&p("per_step.step_ns"), k.step_ns));
        a.push(i(&p("per_step.median_step_ns"), k.median_step_ns));
        a.push(i(&p("per_step.in_window_ns"), k.in_window_ns));
    }
    a.push(s(&p("timeline"), &c.timeline));
    a.push(s(&p("evidence_sql"), &c.evidence_sql));
    LogRecord {
        time_unix_nano: ns(c.detected_ns),
        observed_time_unix_nano: ns(observed_ns),
        severity_number: number as i32,
        severity_text: text.into(),
        body: Some(AnyValue {
            value: Some(Value::StringValue(causeway_store::sanitize::sanitize_text(
                &c.summary,
            ))),
        }),
        attributes: a,
        event_name: CHAIN_EVENT.into(),
        ..LogRecord::default()
    }
}

/// The causal chains of the trace as log records, one resource per node (chains about the
/// whole trace, with no node, under a resource without node attributes).
pub fn logs_request(
    r: &Reader,
    opts: &LogsOptions,
) -> Result<ExportLogsServiceRequest, StoreError> {
    let facts_nodes = crate::gather::nodes_and_span(r)?;
    let mut chains = Vec::new();
    if opts.engine {
        let end = facts_nodes.span.map_or(opts.observed_ns, |s| s.1);
        chains = engine_chains(r, end, &opts.prices)?;
    }
    if opts.stored {
        chains.extend(stored_chains(r)?);
    }
    let res = Resources::new(&facts_nodes);
    let mut by_node: BTreeMap<String, Vec<LogRecord>> = BTreeMap::new();
    for c in chains {
        by_node
            .entry(c.node.clone())
            .or_default()
            .push(record(c, opts.observed_ns));
    }
    Ok(ExportLogsServiceRequest {
        resource_logs: by_node
            .into_iter()
            .map(|(node, records)| ResourceLogs {
                resource: Some(res.node(&node)),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope()),
                    log_records: records,
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            })
            .collect(),
    })
}
