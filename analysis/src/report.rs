//! The human incident report of `explain` (and `demo`): ranked chains with severity, root
//! cause, timeline and fixes, the off-CPU attribution, notes, and per-process statistics.
//! Plain text; the CLI adds nothing but the bytes to stdout.

use std::fmt::Write;

use crate::engine::Explain;
use crate::fmt::{dur, thousands};

/// Renders `e` for people.
pub fn render_text(e: &Explain) -> String {
    let mut o = String::new();
    let span = e.window.until_ns - e.window.from_ns;
    let _ = writeln!(
        o,
        "causeway explain: {} analysed on {} node{} ({})",
        dur(span.max(0)),
        e.nodes.len(),
        if e.nodes.len() == 1 { "" } else { "s" },
        e.nodes.join(", ")
    );
    if e.chains.is_empty() {
        let _ = writeln!(
            o,
            "\nNo causal chain: nothing in this window costs the GPU path measurable time."
        );
    } else {
        let total: i64 = e
            .chains
            .iter()
            .map(|c| c.time_lost_ns)
            .fold(0, i64::saturating_add);
        let _ = writeln!(
            o,
            "{} chain{}, {} estimated time lost, worst first.",
            e.chains.len(),
            if e.chains.len() == 1 { "" } else { "s" },
            dur(total)
        );
    }
    for (i, c) in e.chains.iter().enumerate() {
        let _ = writeln!(
            o,
            "\n#{} [{}] {}  ({}, {} lost{})",
            i + 1,
            c.severity.as_str(),
            c.summary,
            c.detector,
            dur(c.time_lost_ns),
            if c.node.is_empty() {
                String::new()
            } else {
                format!(", node {}", c.node)
            }
        );
        let _ = writeln!(o, "   root cause: {}", c.root_cause);
        let _ = writeln!(o, "   why: {}", c.explanation);
        let _ = writeln!(o, "   timeline:");
        for t in &c.timeline {
            let d = if t.duration_ns > 0 {
                format!(" [{}]", dur(t.duration_ns))
            } else {
                String::new()
            };
            let _ = writeln!(o, "     {:<6} {:<22} {}{d}", t.layer, t.op, t.detail);
        }
        let _ = writeln!(o, "   fix:");
        for r in &c.recommendations {
            let _ = writeln!(o, "     - {r}");
        }
        let _ = writeln!(o, "   evidence: {}", c.evidence_sql);
    }
    let feeders: Vec<_> = e.attribution.iter().filter(|a| a.slow_calls > 0).collect();
    if !feeders.is_empty() {
        let _ = writeln!(
            o,
            "\nslow GPU calls (>= 1 ms and >= 10x p50, syncs excluded) and off-CPU time inside them:"
        );
        for a in feeders {
            let _ = writeln!(
                o,
                "  {} pid {} tid {}{}: {} slow, {} with off-CPU inside; {} inside ({} preempted, {} blocked, {} unknown)",
                a.node,
                a.pid,
                a.tid,
                if a.warmup { " (warm-up)" } else { "" },
                thousands(a.slow_calls),
                thousands(a.with_off_cpu),
                dur(a.off_inside_ns),
                dur(a.preempted_ns),
                dur(a.blocked_ns),
                dur(a.unknown_ns)
            );
        }
    }
    let rates: Vec<_> = e
        .rates
        .iter()
        .filter_map(|s| s.change.as_ref().map(|c| (s, c)))
        .collect();
    if !rates.is_empty() {
        let _ = writeln!(
            o,
            "\nlaunch rates (median launches/s around the strongest change point):"
        );
        for (s, c) in rates {
            let why = c.probe_mode.as_ref().map_or(String::new(), |m| {
                format!(" (stored launches only: probe mode {m} here; the calls went on)")
            });
            let _ = writeln!(
                o,
                "  {} pid {} tid {}: {:.0}/s -> {:.0}/s at second {}{why}",
                s.node, s.pid, s.tid, c.before_median, c.after_median, c.at_second
            );
        }
    }
    if let Some(pp) = &e.per_process {
        let _ = writeln!(o, "\nper process (GPU ops, p50 / p99):");
        for p in pp {
            let _ = writeln!(o, "  {} pid {} {}", p.node, p.pid, p.comm);
            for op in &p.ops {
                let _ = writeln!(
                    o,
                    "    {:<24} {:>10}  p50 {:>10}  p99 {:>10}",
                    op.op,
                    thousands(op.count),
                    dur(op.p50_ns),
                    dur(op.p99_ns)
                );
            }
            for w in &p.warnings {
                let _ = writeln!(o, "    ! imbalance: {w}");
            }
        }
    }
    if !e.notes.is_empty() {
        let _ = writeln!(o, "\nnotes:");
        for n in &e.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}
