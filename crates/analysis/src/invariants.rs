//! What every answer must keep, checked on any trace: no figure larger than the trace holds,
//! and one value per quantity in every command. The corpus, the lab and the property tests run
//! [`check`] on every trace they have; each line it returns is a violation.
//!
//! - every finding's time lost, and every duration its summary prints, is at most the window;
//!   a finding about one thread loses at most that thread's span;
//! - every percentage it prints is in [0, 100];
//! - every count of calls it prints ("4,527 slow launches", "~33,300 copies") is at most the
//!   calls of that kind the trace counts on its node in the window ([`crate::counts`]), every
//!   byte figure at most the bytes its events carry (scaled as the counts are);
//! - every thread's time budget puts no more (scaled) time inside GPU calls than its span;
//! - `stats`' calls and stored events of every op equal the coverage the budget and the
//!   detectors read, and the budget's coverage notes quote those figures.

use std::collections::HashMap;
use std::sync::LazyLock;

use causeway_store::{Reader, StoreError, catalog};

use crate::counts::{OpCoverage, coverage};
use crate::engine::Explain;
use crate::stats::{StatsQuery, trace_stats};
use crate::window::{TimeRef, WindowSpec};

/// Words after a number that make it a count of events, with the ops it counts: a class of
/// GPU calls, or any event ("calls", "reads", "context switches" count whatever the node did).
const NOUNS: [(&str, Class); 14] = [
    ("cop", Class::Copy),
    ("host-to-device", Class::Copy),
    ("device-to-host", Class::Copy),
    ("launch", Class::Launch),
    ("sync", Class::Sync),
    ("free", Class::Free),
    ("alloc", Class::Alloc),
    ("call", Class::Any),
    ("read", Class::Any),
    ("collective", Class::Any),
    ("wait", Class::Any),
    ("context switch", Class::Any),
    ("event", Class::Any),
    ("slow", Class::Any),
];

/// The ops a count of calls counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Host-device copies.
    Copy,
    /// Kernel launches.
    Launch,
    /// Synchronisations.
    Sync,
    /// Device frees.
    Free,
    /// Device allocations.
    Alloc,
    /// Any event.
    Any,
}

impl Class {
    fn has(self, op: &str) -> bool {
        match self {
            Class::Copy => op.contains("Memcpy"),
            Class::Launch => crate::opsets::LAUNCH_NAMES.contains(&op),
            Class::Sync => op.contains("Synchronize"),
            Class::Free => op.contains("Free"),
            Class::Alloc => op.contains("Malloc") || op.contains("MemAlloc"),
            Class::Any => true,
        }
    }
}

/// Violations of the module's rules by `e` (an explain of `r`), one line each.
pub fn check(r: &Reader, e: &Explain) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let window_ns = (e.window.until_ns - e.window.from_ns).max(0);
    let cov = coverage(r, &e.window, None, None)?;
    let calls_of = |node: &str, class: Class| -> u64 {
        cov.iter()
            .filter(|c| {
                c.node == node && catalog::op_by_id(c.op_id).is_some_and(|o| class.has(o.name))
            })
            .map(|c| c.calls)
            .sum()
    };
    let bytes = event_bytes(r, &e.window, &cov)?;
    let thread_span: HashMap<(String, u32), i64> = e
        .budgets
        .iter()
        .filter_map(|b| b.tid.map(|t| ((b.node.clone(), t), b.span_ns)))
        .collect();

    for c in &e.chains {
        let who = format!("{} ({})", c.id, c.detector);
        if c.time_lost_ns > window_ns {
            out.push(format!(
                "{who}: {} ns lost in a {window_ns} ns window",
                c.time_lost_ns
            ));
        }
        if let Some(span) = c
            .scope
            .as_ref()
            .and_then(|s| s.tid.map(|t| (s.node.clone(), t)))
            .and_then(|k| thread_span.get(&k))
            && c.time_lost_ns > *span
        {
            out.push(format!(
                "{who}: {} ns lost by a thread seen for {span} ns",
                c.time_lost_ns
            ));
        }
        let texts = std::iter::once(c.summary.as_str())
            .chain(std::iter::once(c.explanation.as_str()))
            .chain(c.timeline.iter().map(|t| t.detail.as_str()));
        let node_bytes = bytes.get(&c.node).copied().unwrap_or(0.0);
        for text in texts {
            for f in figures(text) {
                match f.unit.as_str() {
                    "%" if !(0.0..=100.0).contains(&f.value) => {
                        out.push(format!("{who}: {} outside [0, 100] in: {text}", f.text));
                    }
                    // The explanation may add up several threads' time; the summary speaks
                    // of the finding's own.
                    "ns" | "us" | "ms" | "s"
                        if std::ptr::eq(text, c.summary.as_str())
                            && f.ns() > window_ns as f64 * 1.001 =>
                    {
                        out.push(format!(
                            "{who}: {} is longer than the {window_ns} ns window in: {text}",
                            f.text
                        ));
                    }
                    "KiB" | "MiB" | "GiB" if f.bytes() > node_bytes * 1.05 + 1024.0 => {
                        out.push(format!(
                            "{who}: {} is more than the {node_bytes:.0} bytes the node's events carry in: {text}",
                            f.text
                        ));
                    }
                    "calls" => {
                        let class = f.class.unwrap_or(Class::Any);
                        let n = calls_of(&c.node, class);
                        // A scaled count is an estimate: each op's is rounded on its own, and
                        // a thread's share is scaled by its process's ratio; within 1% of the
                        // coverage's is the same figure (a gross excess is what this catches).
                        if f.value > n as f64 * 1.01 + 4.0 {
                            out.push(format!(
                                "{who}: {} is more than the {n} calls ({class:?}) the node made in the window in: {text}",
                                f.text
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    for b in e.budgets.iter().filter(|b| b.tid.is_some()) {
        let inside: i64 = b.inside.iter().map(|i| i.estimated_total_ns()).sum();
        if inside as f64 > b.span_ns as f64 * 1.01 {
            out.push(format!(
                "budget of {} (tid {:?}): {inside} ns inside GPU calls (scaled) in a span of {} ns",
                b.comm, b.tid, b.span_ns
            ));
        }
    }

    // stats and the coverage every other answer reads: one value per op.
    let stats = trace_stats(
        r,
        &StatsQuery {
            window: WindowSpec::Range {
                from: Some(TimeRef::Absolute(e.window.from_ns)),
                until: Some(TimeRef::Absolute(e.window.until_ns)),
            },
            ..StatsQuery::default()
        },
    )?;
    let mut per_op: HashMap<u16, (u64, u64)> = HashMap::new();
    for c in &cov {
        let x = per_op.entry(c.op_id).or_default();
        x.0 += c.stored;
        x.1 += c.calls;
    }
    for o in &stats.ops {
        let Some(op) = catalog::op_by_name(&o.op) else {
            continue;
        };
        let (stored, calls) = per_op.get(&op.id).copied().unwrap_or_default();
        let stats_calls = o.counted_calls.unwrap_or(o.count).max(o.count);
        if o.count != stored || stats_calls != calls.max(stored) {
            out.push(format!(
                "{}: stats says {stats_calls} calls / {} stored, the coverage {calls} / {stored}",
                o.op, o.count
            ));
        }
    }
    for b in e.budgets.iter().filter(|b| b.tid.is_none()) {
        for note in &b.coverage {
            let Some((op, s, n)) = parse_note(note) else {
                continue;
            };
            let found = cov.iter().find(|c| {
                c.node == b.node
                    && c.pid == b.pid
                    && catalog::op_by_id(c.op_id).is_some_and(|o| o.name == op)
            });
            if found.is_none_or(|c| (c.stored, c.calls) != (s, n)) {
                out.push(format!(
                    "budget of pid {}: the note '{note}' does not match the coverage {found:?}",
                    b.pid
                ));
            }
        }
    }
    Ok(out)
}

/// Bytes stored per (node, pid, op whose arg0 is bytes: copies, allocations, block and socket
/// I/O, collectives) in the window ($1, $2).
static BYTES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT node, pid::BIGINT, op_id::BIGINT, sum(greatest(arg0, 0))::DOUBLE FROM event_data WHERE timestamp BETWEEN $1 AND $2 AND op_id IN ({}) GROUP BY ALL",
        catalog::OPS
            .iter()
            .filter(|o| o.arg0.starts_with("bytes"))
            .map(|o| o.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
});

/// Bytes each node's events carry in the window, each (pid, op) scaled as its counts.
fn event_bytes(
    r: &Reader,
    w: &crate::window::Window,
    cov: &[OpCoverage],
) -> Result<HashMap<String, f64>, StoreError> {
    let rows: Vec<(String, i64, i64, f64)> = r
        .prepare_trusted(BYTES_SQL.as_str())?
        .query_map(
            causeway_store::duckdb::params![w.from_ns, w.until_ns],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(crate::base::errors::duck(r, "summing copied bytes"))?;
    let mut out: HashMap<String, f64> = HashMap::new();
    for (node, pid, op, b) in rows {
        let scale = cov
            .iter()
            .find(|c| c.node == node && c.pid as i64 == pid && c.op_id as i64 == op)
            .map_or(1.0, |c| c.scale);
        *out.entry(node).or_default() += b * scale;
    }
    Ok(out)
}

/// "cudaMemcpyAsync: 6 of 675 calls stored (1%); ..." -> (op, stored, calls).
fn parse_note(note: &str) -> Option<(&str, u64, u64)> {
    let (op, rest) = note.split_once(": ")?;
    let (s, rest) = rest.split_once(" of ")?;
    let (n, _) = rest.split_once(" calls stored")?;
    Some((op, s.parse().ok()?, n.parse().ok()?))
}

/// A number a text prints, with what follows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The number.
    pub value: f64,
    /// "%", a duration or byte unit, "calls" for a count of calls, "" otherwise.
    pub unit: String,
    /// The number and its unit as printed.
    pub text: String,
    /// For a count of calls, what it counts.
    pub class: Option<Class>,
}

impl Figure {
    fn ns(&self) -> f64 {
        self.value
            * match self.unit.as_str() {
                "us" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                _ => 1.0,
            }
    }

    fn bytes(&self) -> f64 {
        self.value
            * match self.unit.as_str() {
                "KiB" => 1024.0,
                "MiB" => 1048576.0,
                "GiB" => 1073741824.0,
                _ => 1.0,
            }
    }
}

/// The numbers of a text with their units: durations, bytes, percentages and counts of calls
/// (a number followed by a call noun, possibly after one adjective: "4,527 slow launches").
/// Identifiers (after "pid", "tid", "GPU", "rank", "+", "#") and rates ("/s") are not figures.
pub fn figures(text: &str) -> Vec<Figure> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let prev = if i > 0 { words[i - 1] } else { "" };
        if matches!(
            prev,
            "pid" | "tid" | "GPU" | "rank" | "(pid" | "(tid" | "node"
        ) {
            continue;
        }
        let t = w.trim_start_matches(['(', '~', '[']);
        if !t.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let num_end = t
            .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
            .unwrap_or(t.len());
        let num = t[..num_end].trim_end_matches(['.', ',']);
        let Ok(value) = num.replace(',', "").parse::<f64>() else {
            continue;
        };
        let glued = &t[num_end..];
        let mut class = None;
        let next = words.get(i + 1).copied().unwrap_or("");
        let clean = |s: &str| {
            s.trim_end_matches([',', ';', ':', ')', '.', ']'])
                .to_string()
        };
        let unit = if glued.starts_with('%') {
            "%".to_string()
        } else if !glued.is_empty() {
            // "2.0x", "4.4/s", "+1.6s": ratios, rates, offsets.
            continue;
        } else if matches!(
            clean(next).as_str(),
            "ns" | "us" | "ms" | "s" | "KiB" | "MiB" | "GiB"
        ) {
            clean(next)
        } else {
            let after = words
                .get(i + 1..(i + 3).min(words.len()))
                .unwrap_or_default()
                .join(" ")
                .to_lowercase();
            // The noun, or an adjective and the noun ("slow launches"): the more specific.
            let second = after.split_once(' ').map_or("", |(_, w)| w);
            let of = |w: &str| NOUNS.iter().find(|(n, _)| w.starts_with(n)).map(|x| x.1);
            class = match (of(&after), of(second)) {
                (Some(Class::Any), Some(c)) => Some(c),
                (Some(c), _) | (None, Some(c)) => Some(c),
                (None, None) => None,
            };
            if class.is_some() && !next.contains("/s") && !after.contains("/s") {
                "calls".to_string()
            } else {
                String::new()
            }
        };
        if unit.is_empty() {
            continue;
        }
        let text = if unit == "%" || unit == "calls" {
            format!("{num}{}", if unit == "%" { "%" } else { "" })
        } else {
            format!("{num} {unit}")
        };
        out.push(Figure {
            value,
            unit,
            text,
            class,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(text: &str) -> Vec<(f64, String)> {
        figures(text)
            .into_iter()
            .map(|f| (f.value, f.unit))
            .collect()
    }

    #[test]
    fn durations_bytes_percentages_and_counts_of_calls_are_figures() {
        let got = units(
            "python (tid 7) spent 11.90 s (56.6% of its span) copying 103.5 GiB host-to-device; made ~33,300 host-to-device copies, 4,527 slow launches at 1654 syncs/s, 2.0x, +1.6s, pid 42",
        );
        assert_eq!(
            got,
            [
                (11.9, "s".to_string()),
                (56.6, "%".to_string()),
                (103.5, "GiB".to_string()),
                (33300.0, "calls".to_string()),
                (4527.0, "calls".to_string()),
            ]
        );
        let classes: Vec<Option<Class>> =
            figures("~33,300 host-to-device copies, 4,527 slow launches, 12 reads")
                .into_iter()
                .map(|f| f.class)
                .collect();
        assert_eq!(
            classes,
            [Some(Class::Copy), Some(Class::Launch), Some(Class::Any)]
        );
    }

    #[test]
    fn coverage_notes_are_read_back() {
        assert_eq!(
            parse_note(
                "cudaMemcpyAsync: 6 of 675 calls stored (1%); time inside cudaMemcpyAsync is counted from the stored calls only"
            ),
            Some(("cudaMemcpyAsync", 6, 675))
        );
    }
}
