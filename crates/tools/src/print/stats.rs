//! `stats` and `get_trace_stats`: what a trace holds, per op, for a person (a table) and for an
//! agent (compact lines).

use std::fmt::Write;

use causeway_analysis::TraceStats;

use super::table::{Align, human_duration, micros, table, thousands, timestamp};
use super::{Audience, dur};

/// Renders trace statistics for `aud`.
pub fn stats(s: &TraceStats, aud: Audience) -> String {
    match aud {
        Audience::Person => person(s),
        Audience::Agent => agent(s),
    }
}

/// The person's: a table of ops, then off-CPU time, probe overhead and drops.
fn person(s: &TraceStats) -> String {
    let mut out = String::new();
    if s.events == 0 && s.window.until_ns > s.window.from_ns {
        // A store of counters only (`causeway collect`): say what its span is.
        out.push_str(&format!(
            "0 events; kernel counts from {} to {} ({})",
            timestamp(s.window.from_ns),
            timestamp(s.window.until_ns),
            human_duration(s.window.until_ns - s.window.from_ns)
        ));
    } else {
        let span = s.last_ns.saturating_sub(s.first_ns);
        out.push_str(&format!(
            "{} events from {} to {} ({})",
            thousands(s.events),
            timestamp(s.first_ns),
            timestamp(s.last_ns),
            human_duration(span)
        ));
    }
    if !s.nodes.is_empty() {
        out.push_str(&format!(", node {}", s.nodes.join(", ")));
    }
    if let Some(pid) = s.pid {
        out.push_str(&format!(", pid {pid}"));
    }
    out.push('\n');
    if (s.window.from_ns, s.window.until_ns) != (s.trace_first_ns, s.trace_last_ns) {
        out.push_str(&format!(
            "window {} .. {} of a trace ending {}\n",
            timestamp(s.window.from_ns),
            timestamp(s.window.until_ns),
            timestamp(s.trace_last_ns)
        ));
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = s
        .ops
        .iter()
        .map(|o| {
            let mark = match o.percentiles {
                "exact" => "",
                "stored_only" => " *",
                "none" => " -",
                _ => " ~",
            };
            vec![
                o.source.clone(),
                format!("{}{mark}", o.op),
                format!(
                    "{}{}",
                    if o.calls_estimated { "~" } else { "" },
                    thousands(o.counted_calls.unwrap_or(o.count))
                ),
                thousands(o.count),
                micros(o.p50_ns),
                micros(o.p95_ns),
                micros(o.p99_ns),
                micros(o.max_ns),
                micros(o.mean_ns as i64),
                human_duration(o.total_ns),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            ("SOURCE", Align::Left),
            ("OP", Align::Left),
            ("CALLS", Align::Right),
            ("STORED", Align::Right),
            ("P50 us", Align::Right),
            ("P95 us", Align::Right),
            ("P99 us", Align::Right),
            ("MAX us", Align::Right),
            ("MEAN us", Align::Right),
            ("TOTAL", Align::Right),
        ],
        &rows,
    ));
    if s.ops.iter().any(|o| o.counted_calls.is_some()) {
        out.push_str("CALLS: calls made (the kernel's count); STORED: events stored, which the percentiles and TOTAL describe\n");
    }
    if s.ops.iter().any(|o| o.percentiles == "stored_only") {
        out.push_str("* the kernel counted more calls than were stored; percentiles cover the stored calls\n");
    }
    if s.ops.iter().any(|o| o.percentiles == "histogram_estimate") {
        out.push_str("~ no stored events: percentiles estimated from kernel log2 histograms (bucket upper bounds)\n");
    }
    if s.ops.iter().any(|o| o.percentiles == "none") {
        out.push_str("- counted only (entry-only probe mode): no durations were measured\n");
    }
    if s.ops.iter().any(|o| o.calls_estimated) {
        out.push_str("~N sampled probe mode: the probes were attached part of the time; counts are the calls counted then, scaled up (probe_sampling)\n");
    }
    for o in s
        .ops
        .iter()
        .filter(|o| o.untimed_calls.is_some() || o.probe_modes.is_some())
    {
        let mut line = format!("  {}:", o.op);
        if let Some(m) = &o.probe_modes {
            line.push_str(&format!(" probe modes {}", m.join(" -> ")));
        }
        if let Some(u) = o.untimed_calls {
            let how = if o.calls_estimated {
                "made while the probes were detached (estimated) or"
            } else {
                "counted"
            };
            line.push_str(&format!(
                ", {} calls {how} without a duration",
                thousands(u)
            ));
        }
        out.push_str(&line);
        out.push('\n');
    }
    let c = &s.off_cpu;
    if c.switches > 0 {
        out.push_str(&format!(
            "\noff-CPU: {} context switches, {} total",
            thousands(c.switches),
            human_duration(c.total_ns)
        ));
        if c.preempted_ns.saturating_add(c.blocked_ns) > 0 {
            out.push_str(&format!(
                " ({} preempted while runnable, {} blocked/sleeping",
                human_duration(c.preempted_ns),
                human_duration(c.blocked_ns)
            ));
            if c.unknown_state_ns > 0 {
                out.push_str(&format!(", {} unknown", human_duration(c.unknown_state_ns)));
            }
            out.push(')');
        } else if c.unknown_state_ns > 0 {
            out.push_str(" (run state not recorded)");
        }
        out.push('\n');
    }
    if let Some(oh) = &s.overhead {
        out.push_str(&format!(
            "\noverhead: causeway's probes cost an estimated {:.2}% of the traced processes' CPU time (budget {}%, worst window {:.2}%)\n",
            oh.estimated_pct, oh.budget_pct, oh.peak_pct
        ));
        for m in &oh.in_situ {
            let scaled = if m.factor > 1.0 {
                format!("the controller costs it {:.2}x the calibration", m.factor)
            } else {
                "the calibration holds".into()
            };
            out.push_str(&format!(
                "  {} measured on pid {}: {:.1}% slower while probed (±{:.1}%, {} probed), {} per probe hit against {} calibrated: {}\n",
                m.op,
                m.pid,
                100.0 * m.slowdown,
                100.0 * m.slowdown_se,
                human_duration(m.attached_ns),
                human_duration(m.lost_ns_per_hit.round() as i64),
                human_duration(m.calibrated_ns_per_hit.round() as i64),
                scaled
            ));
        }
        for sw in &oh.switches {
            let at = human_duration(sw.ts_ns.saturating_sub(s.trace_first_ns).max(0));
            out.push_str(&format!(
                "  {} {} -> {} at +{} ({}, {:.2}%)\n",
                sw.op,
                sw.from,
                sw.to,
                at,
                sw.reason.replace('_', " "),
                sw.overhead_pct
            ));
        }
        if oh.switches_total > oh.switches.len() {
            out.push_str(&format!(
                "  ... {} more probe-mode switches\n",
                oh.switches_total - oh.switches.len()
            ));
        }
    }
    let total = s.drops.get("total").copied().unwrap_or(0);
    if total == 0 {
        out.push_str("drops: none\n");
    } else {
        let parts: Vec<String> = s
            .drops
            .iter()
            .filter(|(k, _)| k.as_str() != "total")
            .map(|(k, v)| format!("{k} {}", thousands(*v)))
            .collect();
        out.push_str(&format!(
            "drops: {} ({})\n",
            thousands(total),
            parts.join(", ")
        ));
    }
    out
}

/// The agent's: a few lines per op, names quoted as data.
fn agent(s: &TraceStats) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} events over {} (window {}..{} ns){}",
        s.events,
        dur(s.last_ns - s.first_ns),
        s.window.from_ns,
        s.window.until_ns,
        s.pid.map(|p| format!(", pid {p}")).unwrap_or_default()
    );
    o.push_str("source op: calls (kernel count where known) / stored events, p50 p95 p99 max total (of the stored)\n");
    for op in &s.ops {
        let mut mark = match op.percentiles {
            "exact" => String::new(),
            "stored_only" => " (percentiles over stored calls only)".into(),
            "none" => " (counted only, no durations)".into(),
            _ => " (estimated from histograms)".into(),
        };
        if let Some(m) = &op.probe_modes {
            let _ = write!(mark, " [probe modes {}]", m.join("->"));
        }
        if let Some(u) = op.untimed_calls {
            let _ = write!(mark, " [{u} calls untimed]");
        }
        if op.calls_estimated {
            mark.push_str(" [count estimated: probes attached part of the time]");
        }
        let _ = writeln!(
            o,
            "{} {}: {}{}/{} {} {} {} {} {}{mark}",
            op.source,
            op.op,
            if op.calls_estimated { "~" } else { "" },
            op.counted_calls.unwrap_or(op.count),
            op.count,
            dur(op.p50_ns),
            dur(op.p95_ns),
            dur(op.p99_ns),
            dur(op.max_ns),
            dur(op.total_ns)
        );
    }
    let c = &s.off_cpu;
    if c.switches > 0 {
        let _ = writeln!(
            o,
            "off-CPU: {} switches, {} total ({} preempted, {} blocked, {} unknown state)",
            c.switches,
            dur(c.total_ns),
            dur(c.preempted_ns),
            dur(c.blocked_ns),
            dur(c.unknown_state_ns)
        );
    }
    if let Some(oh) = &s.overhead {
        let _ = writeln!(
            o,
            "probe overhead: ~{:.2}% of traced CPU time (budget {}%, worst window {:.2}%), {} probe-mode switches",
            oh.estimated_pct, oh.budget_pct, oh.peak_pct, oh.switches_total
        );
    }
    if !s.kernels.is_empty() {
        let _ = writeln!(
            o,
            "top kernels by launch call time (host side): launches p50 p99 total"
        );
        for k in &s.kernels {
            let _ = writeln!(
                o,
                "  {} [{}]: {} {} {} {}",
                causeway_store::sanitize::sanitize(&k.signature),
                causeway_store::sanitize::sanitize(&k.module),
                k.launches,
                dur(k.p50_ns),
                dur(k.p99_ns),
                dur(k.total_ns)
            );
        }
    }
    if !s.placed.is_empty() {
        let _ = writeln!(o, "where processes ran (containers and pods):");
        for p in &s.placed {
            let san = causeway_store::sanitize::sanitize;
            let mut line = format!(
                "  {} {} on {}: {}",
                p.pid,
                san(&p.comm),
                san(&p.node),
                san(&p.describe())
            );
            if !p.gpus.is_empty() {
                line.push_str(&format!("; GPUs {}", san(&p.gpus)));
            }
            if !p.note.is_empty() {
                line.push_str(&format!("; note: {}", san(&p.note)));
            }
            let _ = writeln!(o, "{line}");
        }
    }
    let drops: Vec<String> = s.drops.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(o, "drops: {}", drops.join(" "));
    for n in &s.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}
