//! Where every answer is rendered: one function per answer, for a person (what the CLI prints)
//! and for an agent (the `text` content next to a tool's structured result), from the same typed
//! answer the handler returned; JSON is the answer itself. In an agent's text, strings recorded
//! on a traced machine are JSON-quoted (so they cannot break lines or pose as our own text) and
//! every rendering that shows them ends with [`crate::DATA_NOTE`].

use std::fmt::Write;

use causeway_analysis::diff::Diff;
use causeway_analysis::steps::{Series, StepBudget, Steps, bucket_meaning};

use crate::check::CheckReport;
use crate::demo::DemoResult;
use crate::report::TestReportResult;
use crate::stacks::StacksResult;
use crate::traces::{TraceDescription, TracesResult};

pub mod explain;
pub mod fleet;
pub mod sql;
pub mod stats;
pub mod table;

pub use explain::chains;
pub use fleet::fleet;
pub use sql::sql;
pub use stats::stats;

/// Quotes a string that came from the traced machine.
pub fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// ns -> "812ns", "20.3us", "5.08ms", "8.94s".
pub fn dur(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if a < 1e3 {
        format!("{sign}{a}ns")
    } else if a < 1e6 {
        format!("{sign}{:.1}us", a / 1e3)
    } else if a < 1e9 {
        format!("{sign}{:.2}ms", a / 1e6)
    } else {
        format!("{sign}{:.2}s", a / 1e9)
    }
}

/// Who reads a rendering. Agents are told that quoted strings are data and how to page with
/// a tool argument; people get the CLI's flag and no advice meant for a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// A person at a terminal (the CLI).
    Person,
    /// A model reading a tool result.
    Agent,
}

pub(crate) fn note(out: &mut String, aud: Audience) {
    if aud == Audience::Agent {
        out.push_str(crate::DATA_NOTE);
        out.push('\n');
    }
}

/// The line that says how to get the next page.
pub(crate) fn more(out: &mut String, next_cursor: &Option<String>, aud: Audience) {
    if let Some(n) = next_cursor {
        let _ = match aud {
            Audience::Agent => writeln!(out, "more: call again with cursor {n}"),
            Audience::Person => writeln!(out, "more: run again with --cursor {n}"),
        };
    }
}

/// `run_demo`.
pub fn demo(r: &DemoResult, aud: Audience) -> String {
    let mut o = format!(
        "demo scenario {}{}: {} events on {} node(s); expected finding: {}\n",
        r.scenario,
        if r.healthy { " (healthy baseline)" } else { "" },
        r.events,
        r.nodes,
        r.expected_detector.unwrap_or("none")
    );
    o.push_str(&stats(&r.stats, aud));
    let _ = writeln!(
        o,
        "\n{} of {} chains (engine), ranked by time lost",
        r.chains.len(),
        r.total_chains
    );
    explain::chain_list(&mut o, &r.chains, aud);
    note(&mut o, aud);
    o
}

/// `get_stacks`.
pub fn stacks(r: &StacksResult, aud: Audience) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} of {} stacks by total time; {} matching calls had no stack",
        r.stacks.len(),
        r.total_stacks,
        r.calls_without_stack
    );
    for s in &r.stacks {
        let _ = writeln!(
            o,
            "\nstack {} ops {}: {} calls, total {}, p50 {}, max {}",
            s.stack_hash,
            s.ops.join(","),
            s.calls,
            dur(s.total_ns),
            dur(s.p50_ns),
            dur(s.max_ns)
        );
        for f in &s.frames {
            let _ = writeln!(o, "  {} in {}", q(&f.symbol), q(&f.module));
        }
        if s.more_frames > 0 {
            let _ = writeln!(o, "  ... {} more frames (max_frames)", s.more_frames);
        }
    }
    more(&mut o, &r.next_cursor, aud);
    note(&mut o, aud);
    o
}

/// `describe_trace`.
pub fn describe(d: &TraceDescription, aud: Audience) -> String {
    let mut o = String::new();
    // A store of collected counters (`causeway collect`) has no event rows: its span is the
    // counters' windows.
    let events = if d.events == 0 && d.last_ns > d.first_ns {
        "0 events (kernel counters only)".to_string()
    } else {
        format!("{} events", d.events)
    };
    let _ = writeln!(
        o,
        "trace {}: {} over {} ({}..{} ns); {} chains, {} stacks, {} sessions",
        q(&d.name),
        events,
        dur(d.last_ns - d.first_ns),
        d.first_ns,
        d.last_ns,
        d.chains,
        d.stacks,
        d.sessions
    );
    for n in &d.nodes {
        let _ = writeln!(o, "node {} ({})", q(&n.node), q(&n.origin));
    }
    let src: Vec<String> = d.sources.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(o, "events per source: {}", src.join(" "));
    let _ = writeln!(
        o,
        "processes ({} in all, busiest first):",
        d.processes_total
    );
    for p in &d.processes {
        let _ = writeln!(
            o,
            "  {} pid {} {}: {} events",
            q(&p.node),
            p.pid,
            q(&p.comm),
            p.events
        );
    }
    let drops: Vec<String> = d.drops.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(o, "drops: {}", drops.join(" "));
    note(&mut o, aud);
    o
}

/// `list_traces`.
pub fn traces(r: &TracesResult, aud: Audience) -> String {
    let mut o = String::new();
    for t in &r.traces {
        let _ = writeln!(
            o,
            "{}{} ({} bytes) {}",
            q(&t.name),
            if t.default { " [default]" } else { "" },
            t.size_bytes,
            q(&t.path)
        );
    }
    more(&mut o, &r.next_cursor, aud);
    o
}

/// `get_check` and `causeway check`: one line per requirement (with the fix when failing), then
/// the NVIDIA driver, libraries and CUDA processes.
pub fn check(c: &CheckReport, _aud: Audience) -> String {
    let mut o = String::new();
    for i in &c.items {
        let _ = writeln!(
            o,
            "{} {:<11} {}",
            if i.ok { "ok  " } else { "FAIL" },
            i.name,
            i.detail
        );
        if !i.ok {
            let _ = writeln!(o, "     hint: {}", i.hint);
        }
    }
    match &c.nvidia_driver {
        None => {
            let _ = writeln!(
                o,
                "info nvidia      no NVIDIA driver (/proc/driver/nvidia missing): no GPU to trace on this machine"
            );
        }
        Some(d) => {
            let _ = writeln!(
                o,
                "ok   nvidia      driver {d}, {} GPU(s): {}",
                c.gpus.len(),
                c.gpus.iter().map(|g| q(g)).collect::<Vec<_>>().join(", ")
            );
        }
    }
    if c.libraries.is_empty() && c.cuda_processes.is_empty() {
        let _ = writeln!(
            o,
            "info libraries   no libcudart/libcuda found in standard locations or running processes"
        );
        let _ = writeln!(
            o,
            "     hint: causeway finds the libraries of the processes it traces; use `causeway trace -- COMMAND` or --pid"
        );
    }
    for l in &c.libraries {
        let _ = writeln!(o, "ok   library     {} {}", l.kind, q(&l.path));
    }
    for p in &c.cuda_processes {
        let _ = writeln!(
            o,
            "ok   process     {} {} maps {}",
            p.pid,
            q(&p.comm),
            p.libraries
                .iter()
                .map(|l| l.kind.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let verdict = match (c.can_trace, &c.nvidia_driver) {
        (false, _) => "not ready: fix the FAIL lines above",
        // Tracing works without a GPU, but there is no GPU work for it to see.
        (true, None) => {
            "can trace, but nothing to trace here: this machine has no NVIDIA driver or GPU (record on a GPU machine and copy the trace, or try `causeway demo`)"
        }
        (true, Some(_)) if c.gpus.is_empty() => {
            "can trace, but nothing to trace here: the NVIDIA driver is loaded and lists no GPU"
        }
        (true, Some(_)) => "ready: causeway trace can run here",
    };
    let _ = writeln!(o, "{verdict}");
    o
}

/// `get_test_report`.
pub fn test_report(r: &TestReportResult, _aud: Audience) -> String {
    let Some(rep) = &r.report else {
        return format!(
            "no self-test report at {}; run `causeway selftest --db TRACE` to write one\n",
            r.path
        );
    };
    let mut o = format!(
        "self-test of causeway {} on {}: {} passed, {} failed ({}s old)\n",
        rep.version,
        q(&rep.trace),
        rep.passed,
        rep.failed,
        r.age_s.unwrap_or(0)
    );
    for c in &rep.cases {
        let _ = writeln!(
            o,
            "{} {} {:.1}ms{}",
            if c.ok { "ok" } else { "FAILED" },
            c.name,
            c.ms,
            c.detail
                .as_deref()
                .map(|d| format!(": {}", q(d)))
                .unwrap_or_default()
        );
    }
    o
}

/// Step times as one line of block characters, the slowest step full height; at most `width`
/// characters (longer series show each column's slowest step).
pub fn sparkline(durations: &[i64], width: usize) -> String {
    const BARS: [char; 8] = [
        '\u{2581}', '\u{2582}', '\u{2583}', '\u{2584}', '\u{2585}', '\u{2586}', '\u{2587}',
        '\u{2588}',
    ];
    if durations.is_empty() || width == 0 {
        return String::new();
    }
    let per = durations.len().div_ceil(width);
    let cols: Vec<i64> = durations
        .chunks(per)
        .map(|c| c.iter().copied().max().unwrap_or(0))
        .collect();
    let lo = cols.iter().copied().min().unwrap_or(0);
    let hi = cols.iter().copied().max().unwrap_or(0);
    cols.iter()
        .map(|&d| {
            if hi == lo {
                BARS[3]
            } else {
                BARS[(((d - lo) as f64 / (hi - lo) as f64) * 7.0).round() as usize]
            }
        })
        .collect()
}

/// A budget as "input 69.0ms (39%), sync ..." (buckets of at least 1% of `of`, largest first).
fn budget_line(b: &StepBudget, of: i64) -> String {
    let mut parts: Vec<(&str, i64)> = b.parts().into_iter().filter(|p| p.1 > 0).collect();
    parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let shown: Vec<String> = parts
        .iter()
        .filter(|p| of > 0 && p.1 * 100 >= of)
        .map(|p| {
            format!(
                "{} {} ({:.0}%)",
                p.0,
                dur(p.1),
                p.1 as f64 * 100.0 / of as f64
            )
        })
        .collect();
    if shown.is_empty() {
        "nothing recorded".into()
    } else {
        shown.join(", ")
    }
}

fn series(o: &mut String, s: &Series, aud: Audience) {
    let rank = s.rank.map(|r| format!(", rank {r}")).unwrap_or_default();
    let _ = writeln!(
        o,
        "\n{} pid {} tid {} ({}{}): {} {} steps",
        q(&s.node),
        s.pid,
        s.tid,
        q(&s.comm),
        rank,
        s.count,
        s.source
    );
    let _ = writeln!(
        o,
        "  step time: p50 {}, p90 {}, p99 {}, max {}, min {}, mean {}; noise {} (step to step)",
        dur(s.p50_ns),
        dur(s.p90_ns),
        dur(s.p99_ns),
        dur(s.max_ns),
        dur(s.min_ns),
        dur(s.mean_ns),
        dur(s.noise_ns)
    );
    let _ = writeln!(
        o,
        "  mean step {}: {}",
        dur(s.mean_ns),
        budget_line(&s.mean_budget, s.mean_ns)
    );
    if let Some(b) = s.gpu_busy_p50_ns {
        let _ = writeln!(
            o,
            "  GPU busy per step (device timeline): p50 {} ({:.0}% of the p50 step)",
            dur(b),
            if s.p50_ns > 0 {
                b as f64 * 100.0 / s.p50_ns as f64
            } else {
                0.0
            }
        );
    }
    let d: Vec<i64> = s.steps.iter().map(|x| x.duration_ns).collect();
    let (first, last) = (
        s.steps.first().map_or(0, |x| x.step),
        s.steps.last().map_or(0, |x| x.step),
    );
    if let Some(i) = &s.inferred {
        let _ = writeln!(
            o,
            "  inferred from the thread's cadence: {} GPU calls per step, anchored on {}, confidence {:.2} (the period is the loop's; where a step starts within it is a guess: the longest idle gap)",
            i.calls_per_step, i.anchor, i.confidence
        );
    }
    let shown = match s.listed {
        Some(n) => format!(", {n} evenly spaced steps of {}", s.count),
        None => String::new(),
    };
    let _ = writeln!(
        o,
        "  over the run (steps {first}-{last}{shown}): {}",
        sparkline(&d, 60)
    );
    if let Some(p) = &s.periodic {
        let list: Vec<String> = p.steps.iter().take(8).map(|x| x.to_string()).collect();
        let _ = writeln!(
            o,
            "  every {}th step is slow (steps {}{}): +{} over the others, +{} {}; {}",
            p.every,
            list.join(", "),
            if p.steps.len() > 8 { ", ..." } else { "" },
            dur(p.extra_ns),
            dur(p.grew_ns),
            p.grew,
            p.what
        );
    }
    if !s.slowest.is_empty() {
        let _ = writeln!(o, "  slowest steps:");
    }
    for x in &s.slowest {
        let grew: Vec<String> = x
            .grew
            .iter()
            .take(3)
            .map(|(b, ns)| format!("+{} {}", dur(*ns), b))
            .collect();
        let busy = x
            .step
            .gpu_busy_ns
            .filter(|_| x.step.duration_ns > 0)
            .map(|b| {
                format!(
                    "; GPU busy {:.0}%",
                    b as f64 * 100.0 / x.step.duration_ns as f64
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "    step {}: {} ({} {} the median){}{}",
            x.step.step,
            dur(x.step.duration_ns),
            dur(x.over_median_ns.abs()),
            if x.over_median_ns < 0 {
                "under"
            } else {
                "over"
            },
            if grew.is_empty() {
                String::new()
            } else {
                format!(": {}", grew.join(", "))
            },
            busy
        );
        let _ = writeln!(
            o,
            "      {}",
            budget_line(&x.step.budget, x.step.duration_ns)
        );
        match &x.finding {
            Some(f) => {
                let _ = writeln!(
                    o,
                    "      explained by {} {}: {}",
                    f.detector,
                    f.severity.as_str(),
                    f.summary
                );
            }
            None => {
                let _ = writeln!(o, "      no finding in this step alone");
            }
        }
    }
    if aud == Audience::Agent {
        let _ = writeln!(o, "  evidence: {}", s.evidence_sql);
    }
}

/// `get_steps` (CLI `causeway steps`).
pub fn steps(r: &Steps, aud: Audience) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} step series in the window ({} from {} ns); a step's budget is its thread's time: {}",
        r.series.len(),
        dur(r.window.until_ns - r.window.from_ns),
        r.window.from_ns,
        causeway_analysis::steps::BUCKETS
            .iter()
            .map(|b| format!("{b} = {}", bucket_meaning(b)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    for s in &r.series {
        series(&mut o, s, aud);
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    note(&mut o, aud);
    o
}

/// `compare_traces` (CLI `causeway diff`).
pub fn diff(d: &Diff, aud: Audience) -> String {
    let mut o = String::new();
    // `step`, or the window runs without steps were cut into.
    let unit = d.unit.as_str();
    let _ = writeln!(o, "{}", d.summary);
    for (label, s) in [("base", &d.base), ("new", &d.new)] {
        let _ = writeln!(
            o,
            "{label}: {} ({} pid {} tid {}): {}, mean {}, p50 {}, noise {}",
            q(&s.trace),
            q(&s.node),
            s.pid,
            s.tid,
            if unit == "step" {
                format!("{} {} steps", s.steps, s.source)
            } else {
                format!("{} windows", s.steps)
            },
            dur(s.mean_ns),
            dur(s.p50_ns),
            dur(s.noise_ns)
        );
    }
    let _ = writeln!(
        o,
        "difference {} per {unit} ({:+.1}%), noise (standard error) {}: {}",
        dur(d.difference_ns),
        d.difference_pct,
        dur(d.noise_ns),
        if d.beyond_noise {
            "beyond noise"
        } else {
            "within noise"
        }
    );
    let _ = writeln!(
        o,
        "\nby bucket (mean per {unit}; the changes sum to the difference):"
    );
    for p in d
        .parts
        .iter()
        .filter(|p| p.per_step.base_ns != 0 || p.per_step.new_ns != 0)
    {
        let _ = writeln!(
            o,
            "  {:<10} {:>10} -> {:>10}  {:>11}  ({:.1}% -> {:.1}% of the {unit}) {}",
            p.bucket,
            dur(p.per_step.base_ns),
            dur(p.per_step.new_ns),
            signed(p.per_step.delta_ns),
            p.per_step.base_pct,
            p.per_step.new_pct,
            p.meaning
        );
    }
    if !d.changed.is_empty() {
        let _ = writeln!(o, "\nwhat changed most (time per {unit}):");
    }
    for c in &d.changed {
        let _ = writeln!(
            o,
            "  {:<8} {} {} -> {} ({}; {:.1} -> {:.1} per {unit})",
            c.kind,
            q(&c.name),
            dur(c.per_step.base_ns),
            dur(c.per_step.new_ns),
            signed(c.per_step.delta_ns),
            c.base_count,
            c.new_count
        );
    }
    for n in &d.notes {
        let _ = writeln!(o, "note: {n}");
    }
    if aud == Audience::Agent {
        let _ = writeln!(o, "evidence (base): {}", d.base.evidence_sql);
        let _ = writeln!(o, "evidence (new): {}", d.new.evidence_sql);
    }
    note(&mut o, aud);
    o
}

fn signed(ns: i64) -> String {
    if ns >= 0 {
        format!("+{}", dur(ns))
    } else {
        format!("-{}", dur(-ns))
    }
}
