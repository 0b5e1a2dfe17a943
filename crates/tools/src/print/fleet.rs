//! `fleet` and `query_fleet`, and the chains of `explain --nodes`: answers merged from many
//! nodes, for a person and for an agent.

use std::fmt::Write;

use crate::fleet::FleetOut;

use super::sql::{node_line, render_rows};
use super::table::human_duration;
use super::{Audience, dur, note, q};

/// `explain --nodes`: every node's chains ranked together, each with the node that reported it,
/// then the nodes that did not answer.
pub fn explain_nodes(nodes: usize, chains: &[serde_json::Value], warnings: &[String]) -> String {
    let mut o = format!(
        "causeway explain over {} node(s): {} chains, worst first\n",
        nodes,
        chains.len()
    );
    for (i, c) in chains.iter().enumerate() {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        o.push_str(&format!(
            "\n#{} [{}] {} (from {}; {}, {} lost)\n   root cause: {}\n",
            i + 1,
            s("severity"),
            s("summary"),
            s("reported_by"),
            s("detector"),
            human_duration(c["time_lost_ns"].as_i64().unwrap_or(0)),
            s("root_cause")
        ));
    }
    for w in warnings {
        o.push_str(&format!("warning: node {w}\n"));
    }
    o
}

/// Renders a `query_fleet` result for `aud`.
pub fn fleet(r: &FleetOut, aud: Audience) -> String {
    match aud {
        Audience::Person => person(r),
        Audience::Agent => agent(r),
    }
}

/// The person's: rows in the aligned table `query --nodes` prints, then one line per node, the
/// chains, outliers and warnings.
fn person(r: &FleetOut) -> String {
    let mut o = String::new();
    if !r.columns.is_empty() {
        o.push_str(&render_rows(
            &r.columns,
            &r.rows,
            r.truncated.then_some("rows per node"),
        ));
    }
    for n in &r.nodes {
        // A silent node's reason is among the warnings below.
        if n.ok {
            let clock = n
                .clock_offset_ns
                .map(|off| (off, n.clock_uncertainty_ns.unwrap_or(0)));
            o.push_str(&node_line(&n.node, true, n.ms, clock, None));
        }
    }
    for (i, c) in r.chains.iter().enumerate() {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        o.push_str(&format!(
            "#{} [{}] {} (node {}; {}, {} lost)\n",
            i + 1,
            s("severity"),
            s("summary"),
            s("reported_by"),
            s("detector"),
            human_duration(c["time_lost_ns"].as_i64().unwrap_or(0))
        ));
    }
    for x in &r.outliers {
        o.push_str(&format!("outlier: {x}\n"));
    }
    for w in &r.warnings {
        let (node, why) = w.split_once(": ").unwrap_or((w, ""));
        o.push_str(&node_line(node, false, 0.0, None, Some(why)));
    }
    o
}

/// The agent's: a line per node, rows tab-separated, chains, outliers and warnings.
fn agent(r: &FleetOut) -> String {
    let mut o = String::new();
    let answered = r.nodes.iter().filter(|n| n.ok).count();
    let _ = writeln!(o, "fleet: {answered} of {} nodes answered", r.nodes.len());
    for n in &r.nodes {
        let clock = match (n.clock_offset_ns, n.clock_uncertainty_ns) {
            (Some(off), Some(u)) => format!(
                ", clock {:+.3} ms +- {:.3} ms",
                off as f64 / 1e6,
                u as f64 / 1e6
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "node {}: {}{:.1} ms{clock}",
            q(&n.node),
            if n.ok { "" } else { "NO ANSWER, " },
            n.ms
        );
    }
    if !r.columns.is_empty() {
        let _ = writeln!(o, "{}", r.columns.join("\t"));
        super::sql::rows(&mut o, &r.rows);
        let _ = writeln!(
            o,
            "({} rows{})",
            r.rows.len(),
            if r.truncated { ", truncated" } else { "" }
        );
    }
    for (i, c) in r.chains.iter().enumerate() {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        let _ = writeln!(
            o,
            "#{} [{}] {} (node {}; {}, {} lost)",
            i + 1,
            s("severity"),
            q(&s("summary")),
            q(&s("reported_by")),
            s("detector"),
            dur(c["time_lost_ns"].as_i64().unwrap_or(0))
        );
    }
    for x in &r.outliers {
        let _ = writeln!(o, "outlier: {x}");
    }
    for w in &r.warnings {
        let _ = writeln!(o, "warning: node {w}");
    }
    note(&mut o, Audience::Agent);
    o
}
