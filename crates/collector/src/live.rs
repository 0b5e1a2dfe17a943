//! The live terminal summary while tracing: per-op calls, rate, p50/p99 (from the kernel's log2
//! histograms, so ops without stored events show too), probe mode, drops and the estimated
//! overhead, redrawn in place on stderr about once a second. Only when stderr is a terminal:
//! logs, pipes and CI output stay clean.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};

use causeway_bpf::abi::{HIST_BUCKETS, Stat, StatKey};
use causeway_store::catalog::op_by_id;

/// One op's line.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveOp {
    /// Catalogue name.
    pub op: String,
    /// Calls/events counted in the kernel so far.
    pub calls: u64,
    /// Per second over the last redraw interval.
    pub rate: f64,
    /// Median duration: upper bound of its log2 bucket (ns), None without timed calls.
    pub p50_ns: Option<u64>,
    /// 99th percentile, same.
    pub p99_ns: Option<u64>,
    /// Probe mode (calls only).
    pub mode: &'static str,
}

/// Everything one redraw shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveView {
    /// Seconds since the trace started.
    pub seconds: f64,
    /// Events handed to the writer.
    pub events: u64,
    /// Records lost in the kernel (ring buffer full).
    pub ring_drops: u64,
    /// Events lost between the threads (channel full).
    pub channel_drops: u64,
    /// Estimated probe overhead of the traced processes so far (%) and the budget.
    pub overhead_pct: f64,
    /// --overhead-budget.
    pub budget_pct: f64,
    /// Busiest ops first.
    pub ops: Vec<LiveOp>,
}

/// Nearest-rank percentile of a log2 histogram: the upper bound of the bucket holding it.
pub fn hist_percentile(hist: &[u64; HIST_BUCKETS], permille: u64) -> Option<u64> {
    let n: u64 = hist.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = (permille * n).div_ceil(1000).max(1);
    let mut seen = 0;
    for (b, c) in hist.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some((1u64 << (b + 1)) - 1);
        }
    }
    None
}

/// Sums the kernel statistics per op (all processes): (calls, histogram).
pub fn per_op(stats: &HashMap<StatKey, Stat>) -> BTreeMap<u16, (u64, [u64; HIST_BUCKETS])> {
    let mut out: BTreeMap<u16, (u64, [u64; HIST_BUCKETS])> = BTreeMap::new();
    for (k, s) in stats {
        let e = out.entry(k.op).or_insert((0, [0; HIST_BUCKETS]));
        e.0 += s.calls;
        for (a, b) in e.1.iter_mut().zip(s.hist.iter()) {
            *a += b;
        }
    }
    out
}

fn dur(ns: Option<u64>) -> String {
    match ns {
        None => "-".into(),
        // Bucket 0 holds zero-length events (page allocations, process events).
        Some(n) if n <= 1 => "0".into(),
        Some(n) if n < 1_000 => format!("{n}ns"),
        Some(n) if n < 1_000_000 => format!("{:.1}us", n as f64 / 1e3),
        Some(n) if n < 1_000_000_000 => format!("{:.1}ms", n as f64 / 1e6),
        Some(n) => format!("{:.1}s", n as f64 / 1e9),
    }
}

/// The text of one redraw (also what the tests check).
pub fn render(v: &LiveView, max_ops: usize) -> String {
    let mut o = format!(
        "causeway trace  {:.0}s  events {}  drops {} (ring {}, channel {})  overhead ~{:.2}% (budget {}%)\n",
        v.seconds,
        v.events,
        v.ring_drops + v.channel_drops,
        v.ring_drops,
        v.channel_drops,
        v.overhead_pct,
        v.budget_pct
    );
    o.push_str(&format!(
        "  {:<24} {:>12} {:>10} {:>9} {:>9}  {}\n",
        "OP", "CALLS", "PER S", "P50<=", "P99<=", "MODE"
    ));
    for op in v.ops.iter().take(max_ops) {
        o.push_str(&format!(
            "  {:<24} {:>12} {:>10.0} {:>9} {:>9}  {}\n",
            op.op,
            op.calls,
            op.rate,
            dur(op.p50_ns),
            dur(op.p99_ns),
            op.mode
        ));
    }
    if v.ops.len() > max_ops {
        o.push_str(&format!("  ... {} more ops\n", v.ops.len() - max_ops));
    }
    o
}

/// The redrawing state.
#[derive(Debug)]
pub struct Live {
    enabled: bool,
    drawn_lines: usize,
    last_calls: HashMap<u16, u64>,
    /// Sampled ops' detached time at the last redraw (ns), and every op's last rate.
    last_detached: HashMap<u16, i64>,
    last_rate: HashMap<u16, f64>,
}

/// A sampled op's rate is taken over at least this much attached time (s).
const MIN_ATTACHED_S: f64 = 0.05;

impl Live {
    /// Enabled only when stderr is a terminal.
    pub fn new() -> Live {
        Live {
            enabled: std::io::stderr().is_terminal(),
            drawn_lines: 0,
            last_calls: HashMap::new(),
            last_detached: HashMap::new(),
            last_rate: HashMap::new(),
        }
    }

    /// Whether redraws happen.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Builds the per-op lines from the kernel statistics; `interval_s` since the last call.
    pub fn ops(
        &mut self,
        stats: &HashMap<StatKey, Stat>,
        interval_s: f64,
        mode: impl Fn(u16) -> &'static str,
        detached_ns: impl Fn(u16) -> i64,
    ) -> Vec<LiveOp> {
        let mut ops: Vec<LiveOp> = per_op(stats)
            .into_iter()
            .map(|(op, (calls, hist))| {
                let prev = self.last_calls.insert(op, calls).unwrap_or(0);
                let counted = calls.saturating_sub(prev) as f64;
                // A sampled op counts only while attached: its rate is over that time, and
                // an interval with (almost) none keeps the last rate.
                let total = detached_ns(op);
                let off_s =
                    (total - self.last_detached.insert(op, total).unwrap_or(0)) as f64 / 1e9;
                let rate = if off_s <= 0.0 {
                    counted / interval_s.max(1e-3)
                } else if interval_s - off_s >= MIN_ATTACHED_S {
                    counted / (interval_s - off_s)
                } else {
                    self.last_rate.get(&op).copied().unwrap_or(0.0)
                };
                self.last_rate.insert(op, rate);
                LiveOp {
                    op: op_by_id(op)
                        .map(|o| o.name.to_string())
                        .unwrap_or_else(|| format!("op{op}")),
                    calls,
                    rate,
                    p50_ns: hist_percentile(&hist, 500),
                    p99_ns: hist_percentile(&hist, 990),
                    mode: mode(op),
                }
            })
            .collect();
        ops.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.op.cmp(&b.op)));
        ops
    }

    /// Redraws the summary in place (nothing when disabled).
    pub fn draw(&mut self, v: &LiveView) {
        if !self.enabled {
            return;
        }
        let text = render(v, 12);
        let mut err = std::io::stderr().lock();
        if self.drawn_lines > 0 {
            // Up to the first line of the previous summary, then clear to the end of the screen.
            let _ = write!(err, "\x1b[{}A\r\x1b[J", self.drawn_lines);
        }
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
        self.drawn_lines = text.lines().count();
    }

    /// Leaves the last summary on screen and stops redrawing over it.
    pub fn finish(&mut self) {
        self.drawn_lines = 0;
    }
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(calls: u64, buckets: &[(usize, u64)]) -> Stat {
        let mut hist = [0; HIST_BUCKETS];
        for (b, c) in buckets {
            hist[*b] = *c;
        }
        Stat {
            calls,
            stored: 0,
            total_ns: 0,
            bytes: 0,
            hist,
            nested: 0,
        }
    }

    #[test]
    fn ops_are_summed_over_processes_with_histogram_percentiles() {
        let mut stats = HashMap::new();
        // cudaLaunchKernel: 90 calls in [8, 16) us, 10 in [1, 2) ms, over two processes.
        stats.insert(StatKey { pid: 1, op: 3 }, stat(50, &[(13, 50)]));
        stats.insert(StatKey { pid: 2, op: 3 }, stat(50, &[(13, 40), (20, 10)]));
        // cudaMalloc, entry-only: counted, never timed.
        stats.insert(StatKey { pid: 1, op: 1 }, stat(4, &[]));
        let mut live = Live::new();
        let ops = live.ops(
            &stats,
            2.0,
            |op| if op == 1 { "entry_only" } else { "full" },
            |_| 0,
        );
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].op, "cudaLaunchKernel");
        assert_eq!((ops[0].calls, ops[0].rate), (100, 50.0));
        assert_eq!(ops[0].p50_ns, Some((1 << 14) - 1));
        assert_eq!(ops[0].p99_ns, Some((1 << 21) - 1));
        assert_eq!((ops[1].p50_ns, ops[1].mode), (None, "entry_only"));
        // The rate is over the interval since the last redraw.
        stats.insert(StatKey { pid: 1, op: 3 }, stat(70, &[(13, 70)]));
        let ops = live.ops(&stats, 1.0, |_| "full", |_| 0);
        assert_eq!(ops[0].rate, 20.0);
        // Sampled: 20 counted while attached 0.2 s of the second, 100 a second.
        let mut sampled = Live::new();
        let _ = sampled.ops(&stats, 1.0, |_| "sampled", |_| 0);
        stats.insert(StatKey { pid: 1, op: 3 }, stat(90, &[(13, 90)]));
        let ops = sampled.ops(&stats, 1.0, |_| "sampled", |_| 800_000_000);
        assert!((ops[0].rate - 100.0).abs() < 1e-9, "{}", ops[0].rate);
        // A second with no attached slice keeps the last rate.
        let ops = sampled.ops(&stats, 1.0, |_| "sampled", |_| 1_800_000_000);
        assert!((ops[0].rate - 100.0).abs() < 1e-9, "{}", ops[0].rate);
        let text = render(
            &LiveView {
                seconds: 3.0,
                events: 120,
                ring_drops: 2,
                overhead_pct: 0.5,
                budget_pct: 1.0,
                ops,
                ..LiveView::default()
            },
            1,
        );
        assert!(text.contains("drops 2 (ring 2, channel 0)"), "{text}");
        assert!(text.contains("cudaLaunchKernel"), "{text}");
        assert!(text.contains("16.4us") && text.contains("2.1ms"), "{text}");
        assert!(text.contains("... 1 more ops"), "{text}");
        assert!(!text.contains("cudaMalloc"), "{text}");
    }

    #[test]
    fn redraws_only_on_a_terminal() {
        // The test harness's stderr is a pipe or file under cargo: nothing is drawn.
        let mut live = Live::new();
        if !std::io::stderr().is_terminal() {
            assert!(!live.enabled());
            live.draw(&LiveView::default());
            assert_eq!(live.drawn_lines, 0);
        }
    }
}
