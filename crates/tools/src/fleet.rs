//! `query_fleet`: one question to every serving node at once (guarded SQL, stats, chains or an
//! overview) with the answers merged under a `node` column, per-node clock offsets and
//! warnings for nodes that did not answer. The network fan-out itself lives in the binary
//! (hyper + rustls) and is handed in through the tool [`Context`] as a [`FanOut`], so this crate
//! stays free of any HTTP stack; `causeway query --nodes`, `explain --nodes` and `fleet` merge
//! with these same functions.
//!
//! [`Context`]: crate::Context

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::ToolError;

/// One node's answer to one fan-out request.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct NodeAnswer {
    /// The node's address as configured.
    pub node: String,
    /// Whether it answered.
    pub ok: bool,
    /// Round trip, ms.
    pub ms: f64,
    /// Its clock minus ours, ns (best of several NTP-style samples).
    pub clock_offset_ns: Option<i64>,
    /// Half the round trip of that sample: the offset's uncertainty, ns.
    pub clock_uncertainty_ns: Option<i64>,
    /// The tool's structured result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it did not answer (an unreachable node is itself a finding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// When the node answered and refused the request (400: its arguments, 422: a query it
    /// could not run): the refusal's message and hint, as the node sent them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
}

/// A node's refusal of a request it received.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// What it refused.
    pub message: String,
    /// What to do about it.
    pub hint: String,
}

/// Sends one tool call (name, arguments) to every node; answers in node order.
pub type FanOut = Arc<dyn Fn(&str, &Value) -> Vec<NodeAnswer> + Send + Sync>;

/// The fleet a server fans out to: the node list (for display) and the fan-out.
#[derive(Clone)]
pub struct FleetHandle {
    /// Node addresses.
    pub nodes: Vec<String>,
    /// Sends a request to all of them.
    pub fan_out: FanOut,
}

impl std::fmt::Debug for FleetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetHandle")
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// What `query_fleet` asks every node: `sql` (run_sql on each), `stats` (get_trace_stats per
/// node, with per-op outliers), `chains` (every node's chains ranked together), `overview`
/// (per-node events, span, drops, chains, worst finding). Variants carry no doc comments so
/// the schema is a plain enum (tools/list has a token budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum FleetAction {
    Sql,
    Stats,
    Chains,
    Overview,
}

/// Arguments of `query_fleet`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetParams {
    /// What to ask each node.
    pub action: FleetAction,
    /// Query for sql.
    #[schemars(length(min = 1, max = 16384))]
    pub sql: Option<String>,
    /// Rows per node (sql), or chains.
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// Last DURATION of each trace.
    pub since: Option<String>,
}

/// How one node fared.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NodeStatus {
    /// Address.
    pub node: String,
    /// Answered.
    pub ok: bool,
    /// Round trip, ms.
    pub ms: f64,
    /// Clock offset, ns.
    pub clock_offset_ns: Option<i64>,
    /// Its uncertainty, ns.
    pub clock_uncertainty_ns: Option<i64>,
}

/// Result of `query_fleet`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FleetOut {
    /// Every node.
    pub nodes: Vec<NodeStatus>,
    /// Column names of rows (the first is node).
    pub columns: Vec<String>,
    /// Merged rows (sql, stats, overview).
    #[schemars(with = "Vec<Value>")]
    pub rows: Vec<Vec<Value>>,
    /// A node cut its rows.
    pub truncated: bool,
    /// Chains, worst first, each with reported_by.
    pub chains: Vec<Value>,
    /// Nodes far from the fleet median.
    pub outliers: Vec<String>,
    /// Nodes that did not answer, with why.
    pub warnings: Vec<String>,
}

/// `node: reason` for every node that did not answer.
pub fn warnings(answers: &[NodeAnswer]) -> Vec<String> {
    answers
        .iter()
        .filter_map(|a| a.warning.as_ref().map(|w| format!("{}: {w}", a.node)))
        .collect()
}

fn statuses(answers: &[NodeAnswer]) -> Vec<NodeStatus> {
    answers
        .iter()
        .map(|a| NodeStatus {
            node: a.node.clone(),
            ok: a.ok,
            ms: a.ms,
            clock_offset_ns: a.clock_offset_ns,
            clock_uncertainty_ns: a.clock_uncertainty_ns,
        })
        .collect()
}

/// Rows of every node's `run_sql` answer under one header, a `node` column first.
/// Returns (columns, rows, truncated); columns are those of the first node that answered.
/// When the rows have a `timestamp` column (ns on the node's clock), a `timestamp_local`
/// column is added: the same moment on this machine's clock (the node's estimated offset
/// removed; its uncertainty is in the node's answer), so timelines of several nodes line up.
pub fn merge_sql(answers: &[NodeAnswer]) -> (Vec<Value>, Vec<Vec<Value>>, bool) {
    let mut columns: Vec<Value> = Vec::new();
    let mut rows = Vec::new();
    let mut truncated = false;
    let mut ts_col: Option<usize> = None;
    for a in answers.iter().filter(|a| a.ok) {
        let Some(r) = &a.result else { continue };
        if columns.is_empty() {
            columns.push(json!({"name": "node", "type": "Utf8"}));
            let theirs = r["columns"].as_array().cloned().unwrap_or_default();
            ts_col = theirs.iter().position(|c| c["name"] == "timestamp");
            columns.extend(theirs);
            if ts_col.is_some() {
                columns.push(json!({"name": "timestamp_local", "type": "Int64"}));
            }
        }
        truncated |= r["truncated"].as_bool().unwrap_or(false);
        for row in r["rows"].as_array().into_iter().flatten() {
            let cells = row.as_array().cloned().unwrap_or_default();
            let local =
                ts_col.map(
                    |i| match (cells.get(i).and_then(Value::as_i64), a.clock_offset_ns) {
                        (Some(t), Some(off)) => json!(t - off),
                        (Some(t), None) => json!(t),
                        _ => Value::Null,
                    },
                );
            let mut out = vec![Value::String(a.node.clone())];
            out.extend(cells);
            out.extend(local);
            rows.push(out);
        }
    }
    (columns, rows, truncated)
}

/// What a chain costs for ranking across nodes: its money where every chain has a price in one
/// currency (`all_priced`), else its GPU-hours (a chain without a cost, e.g. from an older node,
/// counts one GPU).
fn cost_key(c: &Value, all_priced: bool) -> f64 {
    let k = &c["cost"];
    if all_priced {
        return k["amount"].as_f64().unwrap_or(0.0);
    }
    k["gpu_hours"]
        .as_f64()
        .unwrap_or_else(|| c["time_lost_ns"].as_f64().unwrap_or(0.0) / 3.6e12)
}

/// Every node's chains ranked together by what they cost (money where all are priced in one
/// currency, else GPU-hours: time lost x the GPUs held), then time lost (ties keep node order),
/// each tagged with `reported_by`; at most `top` when given.
pub fn merge_chains(answers: &[NodeAnswer], top: Option<usize>) -> Vec<Value> {
    let mut chains: Vec<Value> = Vec::new();
    for a in answers.iter().filter(|a| a.ok) {
        for c in a
            .result
            .as_ref()
            .and_then(|r| r["chains"].as_array())
            .into_iter()
            .flatten()
        {
            let mut c = c.clone();
            c["reported_by"] = json!(a.node);
            chains.push(c);
        }
    }
    let currencies: std::collections::BTreeSet<&str> = chains
        .iter()
        .map(|c| c["cost"]["currency"].as_str().unwrap_or(""))
        .collect();
    let all_priced = currencies.len() == 1
        && chains
            .iter()
            .all(|c| c["cost"]["amount"].as_f64().is_some());
    let keyed: Vec<(f64, i64)> = chains
        .iter()
        .map(|c| {
            (
                cost_key(c, all_priced),
                c["time_lost_ns"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let mut order: Vec<usize> = (0..chains.len()).collect();
    order.sort_by(|&a, &b| {
        keyed[b]
            .0
            .total_cmp(&keyed[a].0)
            .then(keyed[b].1.cmp(&keyed[a].1))
    });
    let mut chains: Vec<Value> = order.into_iter().map(|i| chains[i].take()).collect();
    if let Some(n) = top {
        chains.truncate(n);
    }
    chains
}

/// With two nodes, one whose p50 of an op is at least this many times the other's is an
/// outlier; with three or more, the straggler detector's median-absolute-deviation rule decides.
const OUTLIER_RATIO: f64 = 2.0;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per-(node, op) rows of every node's `get_trace_stats`, and the nodes whose p50 of an op is
/// far above the others' (the first thing to look at for a straggler): robust z-score by median
/// absolute deviation with 3+ nodes (as the straggler detector), a 2x ratio with two.
fn merge_stats(answers: &[NodeAnswer]) -> (Vec<Vec<Value>>, Vec<String>) {
    let mut rows = Vec::new();
    // (source, op) -> [(node, p50, count)]
    type PerNode = Vec<(String, f64, u64)>;
    let mut per_op: std::collections::BTreeMap<(String, String), PerNode> = Default::default();
    for a in answers.iter().filter(|a| a.ok) {
        for o in a
            .result
            .as_ref()
            .and_then(|r| r["ops"].as_array())
            .into_iter()
            .flatten()
        {
            let op = o["op"].as_str().unwrap_or("").to_string();
            let count = o["count"].as_u64().unwrap_or(0);
            let p50 = o["p50_ns"].as_i64().unwrap_or(0);
            rows.push(vec![
                json!(a.node),
                o["source"].clone(),
                json!(op),
                json!(count),
                json!(p50),
                o["p99_ns"].clone(),
                o["total_ns"].clone(),
            ]);
            if count > 0 && p50 > 0 {
                let source = o["source"].as_str().unwrap_or("").to_string();
                per_op
                    .entry((source, op))
                    .or_default()
                    .push((a.node.clone(), p50 as f64, count));
            }
        }
    }
    let mut outliers = Vec::new();
    for ((source, op), nodes) in &per_op {
        let xs: Vec<f64> = nodes.iter().map(|n| n.1).collect();
        // A GPU call slower than the fleet's is the straggler's mark. A host op that differs
        // either way is worth a look too: sched_switch p50 of 0.76 ms on one node against 50 ms
        // on the others means its threads are switched out constantly, or the others sleep.
        let host = !matches!(source.as_str(), "CUDA" | "DRIVER" | "NCCL");
        let outlier = causeway_analysis::detectors::straggler::outlier;
        let (who, rule) = match nodes.len() {
            0 | 1 => continue,
            2 => {
                let (lo, hi) = if xs[0] <= xs[1] { (0, 1) } else { (1, 0) };
                if xs[hi] < OUTLIER_RATIO * xs[lo] {
                    continue;
                }
                (hi, "the other node")
            }
            _ => match outlier(&xs, true).or_else(|| outlier(&xs, false).filter(|_| host)) {
                Some(i) => (i, "the fleet median, a MAD outlier"),
                None => continue,
            },
        };
        let mut others: Vec<f64> = xs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != who)
            .map(|(_, x)| *x)
            .collect();
        let m = median(&mut others);
        let (node, p50, count) = &nodes[who];
        let ratio = if *p50 >= m {
            format!("{:.1}x", p50 / m)
        } else {
            format!("1/{:.0} of", m / p50)
        };
        outliers.push(format!("{node}: {op} p50 {ratio} {rule} ({count} calls)"));
    }
    (rows, outliers)
}

fn window_args(p: &FleetParams) -> Value {
    match &p.since {
        Some(s) => json!({ "since": s }),
        None => json!({}),
    }
}

fn names(cols: &[Value]) -> Vec<String> {
    cols.iter()
        .map(|c| c["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Runs `query_fleet` over the fleet in `ctx`.
pub fn query_fleet(ctx: &Context, p: &FleetParams) -> Result<FleetOut, ToolError> {
    let Some(fleet) = ctx.fleet() else {
        return Err(ToolError::failed(
            "this server has no fleet configured",
            "start it with --nodes host:port,... (nodes running `causeway serve` or `trace --listen`)",
        ));
    };
    let mut out = FleetOut {
        nodes: Vec::new(),
        columns: Vec::new(),
        rows: Vec::new(),
        truncated: false,
        chains: Vec::new(),
        outliers: Vec::new(),
        warnings: Vec::new(),
    };
    let answers = match p.action {
        FleetAction::Sql => {
            let Some(sql) = p.sql.as_deref().filter(|s| !s.trim().is_empty()) else {
                return Err(ToolError::InvalidArgument {
                    field: "/sql".into(),
                    rule: "action sql needs a query".into(),
                    hint: "pass sql, e.g. SELECT op, count(*) FROM events GROUP BY op".into(),
                });
            };
            let answers = (fleet.fan_out)(
                "run_sql",
                &json!({"sql": sql, "limit": p.limit.unwrap_or(100)}),
            );
            let (cols, rows, truncated) = merge_sql(&answers);
            (out.columns, out.rows, out.truncated) = (names(&cols), rows, truncated);
            answers
        }
        FleetAction::Stats => {
            let answers = (fleet.fan_out)("get_trace_stats", &window_args(p));
            let (rows, outliers) = merge_stats(&answers);
            out.columns = [
                "node", "source", "op", "count", "p50_ns", "p99_ns", "total_ns",
            ]
            .map(String::from)
            .to_vec();
            (out.rows, out.outliers) = (rows, outliers);
            answers
        }
        FleetAction::Chains => {
            let mut args = window_args(p);
            // `top_n`, not `limit`: nodes running a causeway from before `limit` still answer.
            args["top_n"] = json!(20);
            let answers = (fleet.fan_out)("get_causal_chains", &args);
            out.chains = merge_chains(&answers, Some(p.limit.unwrap_or(5) as usize));
            answers
        }
        FleetAction::Overview => {
            let described = (fleet.fan_out)("describe_trace", &json!({}));
            let chains = (fleet.fan_out)("get_causal_chains", &json!({"top_n": 1}));
            out.columns = [
                "node",
                "events",
                "span_s",
                "drops",
                "chains",
                "worst_finding",
            ]
            .map(String::from)
            .to_vec();
            for (d, c) in described.iter().zip(&chains) {
                let Some(r) = d.result.as_ref().filter(|_| d.ok) else {
                    continue;
                };
                let worst = c
                    .result
                    .as_ref()
                    .and_then(|r| r["chains"].get(0))
                    .map(|c| {
                        format!(
                            "[{}] {}",
                            c["severity"].as_str().unwrap_or(""),
                            c["summary"].as_str().unwrap_or("")
                        )
                    })
                    .unwrap_or_default();
                let span = (r["last_ns"].as_i64().unwrap_or(0)
                    - r["first_ns"].as_i64().unwrap_or(0)) as f64
                    / 1e9;
                out.rows.push(vec![
                    json!(d.node),
                    r["events"].clone(),
                    json!((span * 1e3).round() / 1e3),
                    r["drops"]["total"].clone(),
                    c.result
                        .as_ref()
                        .map(|r| r["total"].clone())
                        .unwrap_or(Value::Null),
                    json!(worst),
                ]);
            }
            out.chains = merge_chains(&chains, Some(5));
            described
        }
    };
    out.warnings = warnings(&answers);
    out.nodes = statuses(&answers);
    if answers.iter().all(|a| !a.ok) {
        return Err(none_answered(&answers));
    }
    Ok(out)
}

/// Why no node answered. A request every node refused for its arguments (400) or could not
/// answer (422: bad SQL, an unknown pid) is the request's fault: say so, with the node's hint,
/// rather than blame the network, the token or TLS.
pub fn none_answered(answers: &[NodeAnswer]) -> ToolError {
    let warnings = warnings(answers);
    let first = warnings.first().cloned().unwrap_or_default();
    let refused = |a: &NodeAnswer| {
        a.refusal
            .as_ref()
            .is_some_and(|r| matches!(r.status, 400 | 422))
    };
    if !answers.is_empty() && answers.iter().all(refused) {
        let r = answers[0].refusal.as_ref().expect("every node refused");
        return ToolError::failed(
            format!(
                "every node ({}) refused the request; {}: {}",
                answers.len(),
                answers[0].node,
                r.message
            ),
            if r.hint.is_empty() {
                "fix the request's arguments"
            } else {
                r.hint.as_str()
            },
        );
    }
    ToolError::failed(
        format!("no node of {} answered: {first}", answers.len()),
        "check that the nodes run `causeway serve` / `trace --listen`, the token and the TLS settings",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_hint::Hint as _;

    fn answer(node: &str, result: Value) -> NodeAnswer {
        NodeAnswer {
            node: node.into(),
            ok: true,
            ms: 1.0,
            clock_offset_ns: Some(0),
            clock_uncertainty_ns: Some(10),
            result: Some(result),
            warning: None,
            refusal: None,
        }
    }

    #[test]
    fn stats_outliers_name_the_slow_node() {
        let stats = |p50: i64| {
            json!({"ops": [{"source": "CUDA", "op": "cudaLaunchKernel", "count": 100,
                "p50_ns": p50, "p99_ns": p50 * 2, "total_ns": p50 * 100}]})
        };
        let answers = vec![
            answer("a", stats(1000)),
            answer("b", stats(1100)),
            answer("c", stats(5000)),
        ];
        let (rows, outliers) = merge_stats(&answers);
        assert_eq!(rows.len(), 3);
        assert_eq!(outliers.len(), 1, "{outliers:?}");
        assert!(
            outliers[0].starts_with("c: cudaLaunchKernel p50 4.8x"),
            "{outliers:?}"
        );
    }

    #[test]
    fn host_ops_are_flagged_in_either_direction() {
        // The sample cluster: sched_switch p50 0.76 ms on one node, ~50 ms on the other two.
        let stats = |source: &str, op: &str, p50: i64| {
            json!({"ops": [{"source": source, "op": op, "count": 400,
                "p50_ns": p50, "p99_ns": p50 * 2, "total_ns": p50 * 400}]})
        };
        let answers = vec![
            answer("gpu-node-01", stats("HOST", "sched_switch", 760_000)),
            answer("gpu-node-02", stats("HOST", "sched_switch", 50_000_000)),
            answer("gpu-node-03", stats("HOST", "sched_switch", 49_000_000)),
        ];
        let (_, outliers) = merge_stats(&answers);
        assert_eq!(outliers.len(), 1, "{outliers:?}");
        assert!(
            outliers[0].starts_with("gpu-node-01: sched_switch p50 1/65 of the fleet median"),
            "{outliers:?}"
        );
        // A GPU call that is faster on one node is no straggler.
        let answers = vec![
            answer("a", stats("CUDA", "cudaLaunchKernel", 1_000)),
            answer("b", stats("CUDA", "cudaLaunchKernel", 50_000)),
            answer("c", stats("CUDA", "cudaLaunchKernel", 49_000)),
        ];
        assert!(merge_stats(&answers).1.is_empty());
    }

    #[test]
    fn a_request_every_node_refuses_is_blamed_on_the_request() {
        let refused = |node: &str| NodeAnswer {
            ok: false,
            result: None,
            warning: Some("422: process 4242 is not in this trace".into()),
            refusal: Some(Refusal {
                status: 422,
                message: "process 4242 is not in this trace".into(),
                hint: "list its processes with: SELECT DISTINCT pid, comm FROM events".into(),
            }),
            ..answer(node, Value::Null)
        };
        let e = none_answered(&[refused("a:1"), refused("b:1")]);
        assert_eq!(
            e.message(),
            "every node (2) refused the request; a:1: process 4242 is not in this trace"
        );
        assert!(
            e.hint()
                .unwrap_or_default()
                .starts_with("list its processes"),
            "{e}"
        );
        let mut down = refused("b:1");
        down.warning = Some("unreachable: connection refused".into());
        down.refusal = None;
        let e = none_answered(&[refused("a:1"), down]);
        assert!(e.message().starts_with("no node of 2 answered"), "{e}");
        assert!(e.hint().unwrap_or_default().contains("token"), "{e}");
    }

    #[test]
    fn timestamps_are_put_on_our_clock() {
        let r = json!({"columns": [{"name": "timestamp", "type": "Int64"}], "rows": [[1_000]]});
        let mut a = answer("a", r.clone());
        a.clock_offset_ns = Some(300);
        let mut b = answer("b", r);
        b.clock_offset_ns = Some(-50);
        let (cols, rows, _) = merge_sql(&[a, b]);
        assert_eq!(cols.len(), 3);
        assert_eq!(cols[2]["name"], "timestamp_local");
        assert_eq!(rows[0], vec![json!("a"), json!(1_000), json!(700)]);
        assert_eq!(rows[1], vec![json!("b"), json!(1_000), json!(1_050)]);
    }

    #[test]
    fn chains_rank_by_cost_across_nodes() {
        // b's finding lost less time but on 8 GPUs: it costs more.
        let a = json!({"id": "1", "time_lost_ns": 5_000_000_000i64,
            "cost": {"gpus": 1, "gpu_hours": 5.0 / 3600.0, "currency": "USD", "amount": 0.01}});
        let b = json!({"id": "2", "time_lost_ns": 2_000_000_000i64,
            "cost": {"gpus": 8, "gpu_hours": 16.0 / 3600.0, "currency": "USD", "amount": 0.02}});
        let old = json!({"id": "3", "time_lost_ns": 9_000_000_000i64});
        let m = merge_chains(
            &[
                answer("a", json!({"chains": [a.clone()]})),
                answer("b", json!({"chains": [b.clone()]})),
            ],
            None,
        );
        let ids: Vec<&str> = m.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["2", "1"], "by money");
        // A node without costs: GPU-hours (9 s on one GPU = 2.5e-3 h < 16 s of GPU).
        let m = merge_chains(
            &[
                answer("a", json!({"chains": [a, old]})),
                answer("b", json!({"chains": [b]})),
            ],
            None,
        );
        let ids: Vec<&str> = m.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["2", "3", "1"], "by GPU-hours");
    }

    #[test]
    fn chains_rank_across_nodes() {
        let answers = vec![
            answer("a", json!({"chains": [{"id": "1", "time_lost_ns": 5}]})),
            answer("b", json!({"chains": [{"id": "2", "time_lost_ns": 9}]})),
        ];
        let c = merge_chains(&answers, Some(1));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["reported_by"], "b");
    }
}
