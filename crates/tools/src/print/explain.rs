//! `explain` and `get_causal_chains`: the engine's findings, for a person (the incident report:
//! ranked chains with root cause, timeline and fixes, time budgets, GPU time, attribution,
//! launch rates, per-process statistics, notes) and for an agent (bounded lines, strings quoted
//! as data).

use std::fmt::Write;

use causeway_analysis::budget::{Budget, CallClass};
use causeway_analysis::fmt::{dur, thousands};
use causeway_analysis::{Chain, Explain, Findings};

use super::{Audience, dur as agent_dur, more, note, q};
use crate::stats::ChainsResult;

/// `causeway explain`: the report, the chains stored in the file when asked for, and the
/// next page's cursor.
pub fn findings(f: &Findings, next_cursor: Option<&str>, with_sql: bool) -> String {
    let mut text = report(&f.explain, with_sql);
    if let Some(s) = &f.stored_chains {
        text.push_str(&stored(s));
    }
    if let Some(n) = next_cursor {
        text.push_str(&format!("\nmore: run again with --cursor {n}\n"));
    }
    text
}

/// Renders `e` for people: each finding's evidence as a pointer to
/// `causeway explain --evidence N`, or, `with_sql`, the SQL itself.
pub fn report(e: &Explain, with_sql: bool) -> String {
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
        finding(&mut o, i, c, with_sql);
    }
    if !e.budgets.is_empty() {
        let _ = writeln!(o, "\n{}", budgets(&e.budgets, e.window.from_ns));
    }
    if e.devices.iter().any(|d| d.device.is_some()) {
        o.push_str(&devices(&e.devices));
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

/// One finding for people: rank, severity, summary, root cause, why, cost, timeline, fixes,
/// its evidence (a pointer to `explain --evidence N`, or with `with_sql` the SQL) and call sites.
fn finding(o: &mut String, i: usize, c: &Chain, with_sql: bool) {
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
    if let Some(k) = &c.cost {
        let _ = writeln!(o, "   cost: {}", causeway_analysis::cost::line(k));
    }
    if let Some(p) = &c.per_step {
        let _ = writeln!(o, "   per step: {}", causeway_analysis::step_cost::line(p));
    }
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
    let rank = c.id.rsplit('-').next().unwrap_or_default();
    if with_sql {
        let _ = writeln!(o, "   evidence: {}", c.evidence_sql);
    } else if !c.evidence_sql.is_empty() {
        let _ = writeln!(
            o,
            "   evidence: causeway explain --evidence {rank} (its SQL; -v prints every finding's)"
        );
    }
    if let Some(cs) = &c.call_sites {
        let _ = writeln!(
            o,
            "   call sites ({} of {} calls with a stack):",
            cs.calls_with_stack, cs.calls
        );
        for s in &cs.sites {
            let _ = writeln!(o, "     {:>8}  {}", s.calls, s.words());
        }
        if with_sql {
            let _ = writeln!(o, "   call-site evidence: {}", cs.evidence_sql);
        }
    }
}

fn share(part: i64, whole: i64) -> String {
    format!("{:.1}%", part as f64 * 100.0 / whole.max(1) as f64)
}

/// Bytes per second for people: "6.7 GB/s".
fn rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.1} GB/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} MB/s", bps / 1e6)
    } else {
        format!("{:.0} kB/s", bps / 1e3)
    }
}

fn class_name(c: Option<CallClass>) -> &'static str {
    match c {
        Some(CallClass::Launch) => "launch",
        Some(CallClass::CopyH2d) => "copy H2D",
        Some(CallClass::CopyD2h) => "copy D2H",
        Some(CallClass::CopyD2d) => "copy D2D",
        Some(CallClass::CopyOther) => "copy/memset",
        Some(CallClass::Sync) => "sync",
        Some(CallClass::Alloc) => "alloc",
        Some(CallClass::Free) => "free",
        Some(CallClass::Collective) => "collective",
        Some(CallClass::Other) | None => "other",
    }
}

/// One budget: where a process's or thread's time went, in lines for people. `t0` is the
/// window start (stalls are placed relative to it).
fn budget(b: &Budget, t0: i64) -> String {
    let mut o = String::new();
    let who = match b.tid {
        Some(t) => format!("{} pid {} tid {}", b.comm, b.pid, t),
        None => format!("{} pid {} (all its GPU-calling threads)", b.comm, b.pid),
    };
    let who = if b.place.is_empty() {
        who
    } else {
        format!("{who}, {}", b.place)
    };
    let _ = writeln!(
        o,
        "  {who} on {}: seen {} of the window's {}",
        b.node,
        dur(b.span_ns),
        dur(b.window_ns)
    );
    let span = b.span_ns;
    let inside = b.inside_ns();
    let _ = writeln!(
        o,
        "    inside GPU calls  {:>10} {:>6}",
        dur(inside),
        share(inside, span)
    );
    for i in &b.inside {
        let mut extra = String::new();
        if let Some(bytes) = i.bytes {
            extra = format!(", {} MB", bytes / 1_000_000);
            if let Some(r) = i.bytes_per_s {
                extra.push_str(&format!(" at {}", rate(r)));
            }
        }
        let _ = writeln!(
            o,
            "      {:<12} {:>10} {:>6}  {} calls{extra}; on-CPU {}, preempted {}, blocked {}, unknown {}",
            class_name(i.class),
            dur(i.total_ns),
            share(i.total_ns, span),
            thousands(i.calls),
            dur(i.on_cpu_ns),
            dur(i.preempted_ns),
            dur(i.blocked_ns),
            dur(i.unknown_ns)
        );
    }
    let x = &b.outside;
    let outside = span - inside;
    let _ = writeln!(
        o,
        "    outside calls     {:>10} {:>6}",
        dur(outside),
        share(outside, span)
    );
    for (name, ns) in [
        ("on-CPU (host work)", x.on_cpu_ns),
        ("preempted", x.preempted_ns),
        ("blocked on sockets", x.blocked_net_ns),
        ("blocked on I/O", x.blocked_io_ns),
        ("blocked, other", x.blocked_other_ns),
        ("off-CPU, unknown", x.unknown_ns),
    ] {
        if ns > 0 {
            let _ = writeln!(o, "      {name:<20} {:>10} {:>6}", dur(ns), share(ns, span));
        }
    }
    if !b.preemptors.is_empty() {
        let who: Vec<String> = b
            .preemptors
            .iter()
            .map(|p| format!("{} (tid {}) {}", p.name, p.tid, dur(p.ns)))
            .collect();
        let _ = writeln!(o, "    preempted by: {}", who.join(", "));
    }
    let long = if b.gpu_idle_long_ns > 0 {
        format!(
            "; {} of it in stretches of a second or more",
            dur(b.gpu_idle_long_ns)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "    GPU idle, estimated from the host: at least {} (from a call that drained the GPU to the next work{long})",
        dur(b.gpu_idle_estimate_ns)
    );
    for s in &b.stalls {
        let _ = writeln!(
            o,
            "    stall at +{}: {} without a GPU call; on-CPU {}, preempted {}, blocked {}, unknown {}",
            dur(s.start_ns - t0),
            dur(s.duration_ns),
            dur(s.on_cpu_ns),
            dur(s.preempted_ns),
            dur(s.blocked_ns),
            dur(s.unknown_ns)
        );
    }
    for c in &b.coverage {
        let _ = writeln!(o, "    coverage: {c}");
    }
    o
}

/// Every budget, processes whose one thread has its own budget shown once (as the thread).
pub fn budgets(budgets: &[Budget], t0: i64) -> String {
    let mut o =
        String::from("where the time went (each budget's buckets sum to the time it was seen):\n");
    for b in budgets {
        let threads = budgets
            .iter()
            .filter(|t| t.tid.is_some() && t.pid == b.pid && t.node == b.node)
            .count();
        if b.tid.is_none() && threads == 1 {
            continue;
        }
        o.push_str(&budget(b, t0));
    }
    o
}

/// GPU time per device: measured busy and idle (with the reasons for the idle) where the trace
/// has a device timeline, beside the host-side estimate.
pub fn devices(devices: &[causeway_analysis::device::DeviceTime]) -> String {
    let mut o = String::from(
        "\nGPU time (measured on the device's own timeline where the trace has one):\n",
    );
    for d in devices {
        let who = match (d.device, d.rank) {
            (Some(dev), Some(rank)) => format!("device {dev} of pid {} (rank {rank})", d.pid),
            (Some(dev), None) => format!("device {dev} of pid {}", d.pid),
            (None, _) => format!("pid {}", d.pid),
        };
        let estimate = if d.estimate_known {
            format!(
                "host-side estimate {:.1}% (at most {:.1}%)",
                d.gpu_idle_estimated_pct, d.gpu_idle_estimated_max_pct
            )
        } else {
            format!(
                "host-side estimate between {:.1}% and {:.1}%: the host cannot tell more, too few of its calls waited for the device",
                d.gpu_idle_estimated_pct, d.gpu_idle_estimated_max_pct
            )
        };
        let (Some(measured), Some(idle)) = (d.gpu_idle_measured_pct, d.idle_ns()) else {
            let _ = writeln!(o, "  {who}: no device timeline; GPU idle {estimate}");
            continue;
        };
        let _ = writeln!(
            o,
            "  {who}: busy {} of {} ({} activities: compute {}, communication {}, memory {}); idle {} = {measured:.1}% measured; {estimate}",
            dur(d.busy_ns),
            dur(d.window_ns),
            thousands(d.activities.max(0) as u64),
            dur(d.compute_ns),
            dur(d.communication_ns),
            dur(d.memory_ns),
            dur(idle),
        );
        for r in d.idle.iter().take(6) {
            let what = match (r.waiting_for.as_str(), r.detail.is_empty()) {
                ("host", false) => format!("waiting for the host: {} ({})", r.reason, r.detail),
                ("host", true) => format!("waiting for the host: {}", r.reason),
                _ => r.reason.clone(),
            };
            let _ = writeln!(
                o,
                "    idle {:>10} {:>6} in {:>6} stretches  {what}",
                dur(r.ns),
                share(r.ns, d.window_ns),
                thousands(r.gaps.max(0) as u64),
            );
        }
        if d.idle.len() > 6 {
            let rest: i64 = d.idle.iter().skip(6).map(|r| r.ns).sum();
            let _ = writeln!(
                o,
                "    idle {:>10} {:>6} for {} other reasons",
                dur(rest),
                share(rest, d.window_ns),
                d.idle.len() - 6
            );
        }
    }
    o
}

/// Chains stored in the file, shown apart from the findings and labelled by origin.
pub fn stored(chains: &[Chain]) -> String {
    let mut o = format!(
        "\n{} chain(s) stored in the file: claims of another tool or node, not causeway's findings on these events\n",
        chains.len()
    );
    for c in chains {
        let _ = writeln!(
            o,
            "\n  [{}] {}  ({}, from {}{})",
            c.severity.as_str(),
            c.summary,
            c.detector,
            c.origin,
            if c.node.is_empty() {
                String::new()
            } else {
                format!(", node {}", c.node)
            }
        );
        let _ = writeln!(o, "     root cause: {}", c.root_cause);
        for r in &c.recommendations {
            let _ = writeln!(o, "     their advice: {r}");
        }
        if !c.evidence_sql.is_empty() {
            let _ = writeln!(o, "     evidence: {}", c.evidence_sql);
        }
    }
    o
}

/// `get_causal_chains`: a page of the findings, their budgets, GPU time and the stored chains
/// when asked for (an agent's chains are bounded lines; a person's are the report's blocks).
pub fn chains(r: &ChainsResult, aud: Audience) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} of {} findings, ranked by time lost",
        r.chains.len(),
        r.total
    );
    chain_list(&mut o, &r.chains, aud);
    more(&mut o, &r.next_cursor, aud);
    if !r.budgets.is_empty() {
        let t0 = r
            .budgets
            .iter()
            .flat_map(|b| b.stalls.iter().map(|s| s.start_ns))
            .min()
            .unwrap_or(0);
        let _ = writeln!(o, "\n{}", budgets(&r.budgets, t0));
    }
    if r.devices.iter().any(|d| d.device.is_some()) {
        o.push_str(&devices(&r.devices));
    }
    match (&r.stored_chains, aud) {
        (Some(s), Audience::Agent) => {
            let _ = writeln!(
                o,
                "\n{} chain(s) stored in the file (claims of another tool or node, not causeway's findings):",
                s.len()
            );
            chain_lines(&mut o, s);
        }
        (Some(s), Audience::Person) => o.push_str(&stored(s)),
        (None, _) => {}
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    note(&mut o, aud);
    o
}

/// The chains of `get_causal_chains` and `run_demo`: a person's report blocks, or an agent's
/// lines.
pub(super) fn chain_list(o: &mut String, chains: &[Chain], aud: Audience) {
    match aud {
        Audience::Agent => chain_lines(o, chains),
        Audience::Person => {
            for (i, c) in chains.iter().enumerate() {
                finding(o, i, c, false);
            }
        }
    }
}

/// An agent's chains, one block each.
fn chain_lines(o: &mut String, chains: &[Chain]) {
    for c in chains {
        let _ = writeln!(
            o,
            "\n[{}] {} {} lost {}: {}",
            c.severity.as_str(),
            q(&c.id),
            q(&c.detector),
            agent_dur(c.time_lost_ns),
            q(&c.summary)
        );
        let _ = writeln!(o, "root cause: {}", q(&c.root_cause));
        let _ = writeln!(o, "explanation: {}", q(&c.explanation));
        if let Some(k) = &c.cost {
            let _ = writeln!(o, "cost: {}", q(&causeway_analysis::cost::line(k)));
        }
        if let Some(p) = &c.per_step {
            let _ = writeln!(o, "per step: {}", q(&causeway_analysis::step_cost::line(p)));
        }
        for t in &c.timeline {
            let _ = writeln!(
                o,
                "  {} {} {} {}",
                q(&t.layer),
                q(&t.op),
                agent_dur(t.duration_ns),
                q(&t.detail)
            );
        }
        for rec in &c.recommendations {
            let _ = writeln!(o, "  fix: {}", q(rec));
        }
        if !c.evidence_sql.is_empty() {
            let _ = writeln!(o, "evidence_sql: {}", q(&c.evidence_sql));
        }
        if let Some(cs) = &c.call_sites {
            for s in &cs.sites {
                let _ = writeln!(
                    o,
                    "  site: {} of {} calls {} {}",
                    s.calls,
                    cs.calls,
                    q(&s.kind),
                    q(&s.words())
                );
            }
            let _ = writeln!(o, "call_sites_sql: {}", q(&cs.evidence_sql));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_analysis::Window;
    use causeway_analysis::rates::{ChangePoint, RateSeries};

    fn explain(rates: Vec<RateSeries>) -> Explain {
        Explain {
            chains: Vec::new(),
            window: Window {
                from_ns: 0,
                until_ns: 10_000_000_000,
            },
            nodes: vec!["n".into()],
            budgets: Vec::new(),
            devices: Vec::new(),
            off_cpu: Default::default(),
            attribution: Vec::new(),
            rates,
            per_process: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_rate_that_fell_with_the_probe_mode_says_the_calls_went_on() {
        let series = RateSeries {
            node: "n".into(),
            pid: 7,
            tid: 8,
            start_ns: 0,
            per_second: vec![1000; 10],
            change: Some(ChangePoint {
                at_second: 5,
                before_median: 1000.0,
                before_low: 990.0,
                after_median: 40.0,
                probe_mode: Some("cudaLaunchKernel full -> entry_only".into()),
            }),
        };
        let text = report(&explain(vec![series]), true);
        assert!(
            text.contains("  n pid 7 tid 8: 1000/s -> 40/s at second 5 (stored launches only: probe mode cudaLaunchKernel full -> entry_only here; the calls went on)"),
            "{text}"
        );
        assert!(text.contains("No causal chain"), "{text}");
    }
}
