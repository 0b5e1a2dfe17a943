//! Causal chains: the shape every finding takes (what `explain`, `get_causal_chains` and
//! `run_demo` return), and reading chains stored in a trace (imported from reference traces).

use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};
use serde::{Deserialize, Serialize};

pub use crate::base::query::ChainQuery;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    /// Minor.
    Low,
    /// Worth fixing.
    Medium,
    /// Costs the workload a lot of time.
    High,
}

impl Severity {
    /// Parses HIGH/MEDIUM/LOW (any case); unknown text is LOW.
    pub fn parse(s: &str) -> Severity {
        match s.to_ascii_uppercase().as_str() {
            "HIGH" | "CRITICAL" => Severity::High,
            "MEDIUM" => Severity::Medium,
            _ => Severity::Low,
        }
    }

    /// HIGH, MEDIUM or LOW.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::High => "HIGH",
            Severity::Medium => "MEDIUM",
            Severity::Low => "LOW",
        }
    }
}

/// One step of a chain's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineItem {
    /// Layer: CUDA, DRIVER, HOST, IO, NET, NCCL, NODE.
    pub layer: String,
    /// Op involved.
    pub op: String,
    /// What happened.
    pub detail: String,
    /// How long (ns).
    pub duration_ns: i64,
}

/// A causal chain: a finding with its cause, evidence and fix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    /// Stable id within the trace.
    pub id: String,
    /// snake_case name of the detector that fired (cpu_contention, sync_storm, ...).
    pub detector: String,
    /// HIGH, MEDIUM or LOW.
    pub severity: Severity,
    /// One line.
    pub summary: String,
    /// The cause, in a sentence.
    pub root_cause: String,
    /// A paragraph connecting cause and effect with numbers from the trace.
    pub explanation: String,
    /// Steps from cause to effect.
    pub timeline: Vec<TimelineItem>,
    /// What to do.
    pub recommendations: Vec<String>,
    /// SQL that shows the rows behind the chain.
    pub evidence_sql: String,
    /// Estimated time the workload lost (ns): the ranking key.
    pub time_lost_ns: i64,
    /// Node the finding is about ('' when trace-wide).
    pub node: String,
    /// Where the chain came from: `engine` or `imported:<file>`.
    pub origin: String,
    /// When a stored chain was detected (ns since the epoch; 0 for the engine's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub detected_ns: i64,
    /// Where in the program the finding's calls come from, where the trace has stacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_sites: Option<crate::sites::CallSites>,
    /// The calls the finding is about, for its call sites (the engine's own; not serialised).
    #[serde(skip)]
    pub scope: Option<crate::sites::Scope>,
    /// What the time lost costs in GPU-hours (and money, where a price is configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::Cost>,
    /// The time lost per training step, where the process recorded its steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_step: Option<crate::step_cost::PerStep>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl Chain {
    /// The chain, naming the calls it is about (the engine cites their call sites).
    pub fn at(mut self, scope: crate::sites::Scope) -> Chain {
        self.scope = Some(scope);
        self
    }

    /// The chain with its text through the sanitiser and capped (a stored chain's text comes
    /// from another tool or machine).
    pub fn sanitized(mut self) -> Chain {
        use causeway_store::sanitize::sanitize_with as s;
        self.id = s(&self.id, 80);
        self.detector = s(&self.detector, 80);
        self.summary = s(&self.summary, 400);
        self.root_cause = s(&self.root_cause, 600);
        // Room for the call-site sentence the engine appends (sites.rs).
        self.explanation = s(&self.explanation, 3000);
        // Room for the engine's longest (interval arithmetic of the input wait, the GPU idle
        // estimate with sampled stretches as literals, the coverage CTE of a scaled thread,
        // twice in sync_storm's): a cut query does not parse.
        self.evidence_sql = s(&self.evidence_sql, 12_000);
        self.node = s(&self.node, 120);
        self.origin = s(&self.origin, 200);
        self.recommendations = self
            .recommendations
            .iter()
            .take(8)
            .map(|r| s(r, 400))
            .collect();
        if let Some(cs) = &mut self.call_sites {
            cs.evidence_sql = s(&cs.evidence_sql, 4000);
            cs.sites.truncate(crate::sites::MAX_SITES);
            for x in &mut cs.sites {
                x.kind = s(&x.kind, 20);
                x.site = s(&x.site, 200);
                x.detail = s(&x.detail, 160);
            }
        }
        self.timeline.truncate(12);
        for t in &mut self.timeline {
            t.layer = s(&t.layer, 40);
            t.op = s(&t.op, 80);
            t.detail = s(&t.detail, 300);
        }
        self
    }
}

const STORED_SQL: &str = "
SELECT chain_id, detector, severity, summary, root_cause, explanation, timeline,
       recommendations, evidence_sql, time_lost_ns, node, origin, detected_ns
FROM chains
WHERE (?::VARCHAR = '' OR node = ?::VARCHAR)
ORDER BY time_lost_ns DESC,
         CASE severity WHEN 'HIGH' THEN 0 WHEN 'MEDIUM' THEN 1 ELSE 2 END,
         detected_ns, chain_id";

/// Chains stored in the trace file (e.g. imported from a reference trace), ranked.
pub fn stored_chains(r: &Reader, q: &ChainQuery) -> Result<Vec<Chain>, StoreError> {
    let node = q.node.clone().unwrap_or_default();
    let mut st = r.prepare_trusted(STORED_SQL)?;
    let rows = st
        .query_map(duckdb::params![node, node], |row| {
            let timeline: String = row.get(6)?;
            let recs: String = row.get(7)?;
            Ok(Chain {
                id: row.get(0)?,
                detector: row.get(1)?,
                severity: Severity::parse(&row.get::<_, String>(2)?),
                summary: row.get(3)?,
                root_cause: row.get(4)?,
                explanation: row.get(5)?,
                timeline: serde_json::from_str(&timeline).unwrap_or_default(),
                recommendations: serde_json::from_str(&recs).unwrap_or_default(),
                evidence_sql: row.get(8)?,
                time_lost_ns: row.get(9)?,
                node: row.get(10)?,
                origin: row.get(11)?,
                detected_ns: row.get(12)?,
                call_sites: None,
                scope: None,
                cost: None,
                per_step: None,
            })
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|source| StoreError::Duck {
            path: r.path().to_path_buf(),
            action: "reading stored chains",
            source,
        })?;
    let mut rows = rows;
    if let Some(n) = q.top_n {
        rows.truncate(n);
    }
    Ok(rows)
}
