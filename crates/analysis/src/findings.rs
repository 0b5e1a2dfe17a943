//! The one answer: what `explain`, `get_causal_chains`, the query API, fleet chains, the
//! Perfetto findings track and OTLP chain logs all return, from one function with one query
//! type. The engine's findings are causeway's answer. Chains stored in an imported or
//! collected file are other tools' (or other nodes') claims: never mixed into the findings,
//! returned only on request, labelled with their origin, deduplicated, filtered by the same
//! window and node, with evidence SQL that runs on this store or none.

use causeway_store::duckdb;
use causeway_store::sanitize::sanitize_with;
use causeway_store::{QueryLimits, Reader, StoreError};
use serde::Serialize;

use crate::chains::{Chain, ChainQuery, stored_chains};
use crate::engine::{Explain, ExplainOptions, explain_with};
use crate::fmt::dur;
use crate::window::Window;

/// What to answer.
#[derive(Debug, Clone, Default)]
pub struct FindingsQuery {
    /// Window, process, node and how many chains.
    pub chains: ChainQuery,
    /// Also return the chains stored in the file (on request only).
    pub stored: bool,
    /// Add per-process statistics with imbalances.
    pub per_process: bool,
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Findings {
    /// The engine's findings, budgets and notes.
    #[serde(flatten)]
    pub explain: Explain,
    /// Chains stored in the file (imported from another tool, or sent by nodes), available
    /// with `stored`.
    pub stored_available: usize,
    /// Those chains, when asked for: labelled by `origin`, never ranked with the findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_chains: Option<Vec<Chain>>,
}

const PID_SQL: &str = "SELECT (EXISTS (SELECT 1 FROM event_rows WHERE pid = ?) OR EXISTS (SELECT 1 FROM processes WHERE pid = ?) OR EXISTS (SELECT 1 FROM op_counts WHERE pid = ?))::BIGINT";
const NODE_SQL: &str = "SELECT count(*)::BIGINT FROM nodes WHERE node = ?";

fn invalid(message: String, hint: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        message,
        hint: hint.into(),
    }
}

fn timestamp(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Refuses a query that cannot be answered as asked: no chain asked for, a window outside the
/// trace, a process or node the trace does not have.
fn validate(r: &Reader, q: &FindingsQuery) -> Result<(), StoreError> {
    if q.chains.top_n == Some(0) {
        return Err(invalid(
            "asked for 0 chains".into(),
            "ask for 1 or more (--limit N / limit), or leave it out for every chain",
        ));
    }
    check_filter(r, q.chains.window, q.chains.pid, q.chains.node.as_deref())
}

/// Refuses a window outside the trace, and a process or node the trace does not have: every
/// command and tool that takes them (stats, explain, stacks) answers these with an error, not
/// with an empty table.
pub fn check_filter(
    r: &Reader,
    window: crate::WindowSpec,
    pid: Option<u32>,
    node: Option<&str>,
) -> Result<(), StoreError> {
    let (events, first, last) = crate::window::trace_span(r)?;
    if events > 0 {
        let w = window.resolve(first, last);
        if w.until_ns < first || w.from_ns > last || w.until_ns < w.from_ns {
            return Err(invalid(
                format!(
                    "the window {} .. {} is outside the trace, which spans {} .. {} ({})",
                    timestamp(w.from_ns),
                    timestamp(w.until_ns),
                    timestamp(first),
                    timestamp(last),
                    dur(last - first)
                ),
                "--since 5m and --from -5m count back from the trace's end, --from +30s forward from its start",
            ));
        }
    }
    if let Some(pid) = pid {
        let p = i64::from(pid);
        let known: i64 = r
            .prepare_trusted(PID_SQL)?
            .query_row(duckdb::params![p, p, p], |row| row.get(0))
            .map_err(crate::base::errors::duck(r, "looking up the process"))?;
        if known == 0 {
            return Err(invalid(
                format!("process {pid} is not in this trace"),
                "list its processes with: SELECT DISTINCT pid, comm FROM events",
            ));
        }
    }
    if let Some(node) = node.filter(|n| !n.is_empty()) {
        let known: i64 = r
            .prepare_trusted(NODE_SQL)?
            .query_row([node], |row| row.get(0))
            .map_err(crate::base::errors::duck(r, "looking up the node"))?;
        if known == 0 {
            return Err(invalid(
                format!("node '{}' is not in this trace", sanitize_with(node, 80)),
                "list its nodes with: SELECT node FROM nodes",
            ));
        }
    }
    Ok(())
}

/// The answer to `q`: the engine's findings on the window, process and node, and the stored
/// chains when asked for.
pub fn findings(r: &Reader, q: &FindingsQuery) -> Result<Findings, StoreError> {
    validate(r, q)?;
    let mut explain = explain_with(
        r,
        &q.chains,
        ExplainOptions {
            per_process: q.per_process,
        },
    )?;
    explain.chains = explain.chains.into_iter().map(Chain::sanitized).collect();
    let all_stored = stored_chains(
        r,
        &ChainQuery {
            top_n: None,
            ..q.chains.clone()
        },
    )?;
    let stored_available = all_stored.len();
    let stored_chains = if q.stored {
        if q.chains.pid.is_some() && stored_available > 0 {
            return Err(invalid(
                "stored chains carry no process id, so they cannot be filtered by process".into(),
                "ask for the stored chains without --pid / pid",
            ));
        }
        let windowed = !matches!(q.chains.window, crate::window::WindowSpec::All);
        Some(prepare_stored(
            r,
            all_stored,
            windowed.then_some(&explain.window),
            q.chains.top_n,
        ))
    } else {
        None
    };
    if stored_available > 0 && !q.stored {
        explain.notes.push(format!(
            "{stored_available} chain(s) stored in the file (imported from another tool or sent by nodes) are not causeway's findings on these events: see them with --stored (stored: true)"
        ));
    }
    Ok(Findings {
        explain,
        stored_available,
        stored_chains,
    })
}

/// Stored chains in the window, deduplicated, sanitised, with evidence that runs or none.
/// `window`: the one asked for (the whole trace keeps every stored chain, even one whose
/// detection time lies past the events, as a collector's chain may).
fn prepare_stored(
    r: &Reader,
    chains: Vec<Chain>,
    window: Option<&Window>,
    top_n: Option<usize>,
) -> Vec<Chain> {
    let mut out: Vec<Chain> = Vec::new();
    for c in chains {
        if let Some(w) = window
            && c.detected_ns != 0
            && (c.detected_ns < w.from_ns || c.detected_ns > w.until_ns)
        {
            continue;
        }
        if out
            .iter()
            .any(|o| o.node == c.node && o.detector == c.detector && o.summary == c.summary)
        {
            continue;
        }
        let mut c = c.sanitized();
        if !c.evidence_sql.is_empty() && !evidence_runs(r, &c.evidence_sql) {
            c.explanation.push_str(
                " [its evidence query returns no rows on this store, so it was left out]",
            );
            c.evidence_sql.clear();
        }
        out.push(c);
        if top_n.is_some_and(|n| out.len() >= n) {
            break;
        }
    }
    out
}

/// Whether `sql` passes the guard and returns at least one row here.
fn evidence_runs(r: &Reader, sql: &str) -> bool {
    let Ok(g) = causeway_sqlguard::guard(sql, r.policy(), Some(1)) else {
        return false;
    };
    let limits = QueryLimits {
        timeout: std::time::Duration::from_secs(5),
        ..QueryLimits::default()
    };
    r.query(&g, &limits).is_ok_and(|res| !res.rows.is_empty())
}
