//! `throughput_drop`: a launching thread's kernel launch rate falls to a lower level and stays
//! there (change point on launches per second).
//!
//! Trigger: the best change point of the thread's per-second launch series has >= 3 s on each
//! side, a sustained level before (its lower quartile >= 20 launches/s, so a warm-up burst of
//! one or two seconds does not count), and a median after <= 50% of the median before.
//! Time lost: seconds after x (1 - after/before): the extra time the remaining work takes at
//! the lower rate. Severity: the common rule.
//! Recommendation depends on what the thread did meanwhile (on-CPU: host overhead; off-CPU:
//! waits, see the other chains).
//! Not a drop: the overhead controller moved a launch op to a mode that stores no event per
//! call (aggregate, entry_only, sampled) between the series' start and one second after the change
//! point. The stored launches then thin out while the calls go on (seen on every default-mode
//! trace of a launch-bound PyTorch job); the kernel still counted each of them (op_counts;
//! estimated for a sampled op).

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, pct, severity, step};
use crate::chains::Chain;

/// Minimum launch rate before the drop.
pub const MIN_BEFORE_PER_S: f64 = 20.0;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for s in inp.rates {
        let Some(c) = &s.change else { continue };
        // Fewer events stored, not fewer launches made (rates.rs).
        if c.probe_mode.is_some()
            || c.before_low < MIN_BEFORE_PER_S
            || c.after_median > 0.5 * c.before_median
        {
            continue;
        }
        let at_ns = s.start_ns + c.at_second as i64 * 1_000_000_000;
        let after_s = s.per_second.len().saturating_sub(c.at_second) as i64;
        let ratio = c.after_median / c.before_median;
        let lost = (after_s as f64 * (1.0 - ratio) * 1e9) as i64;
        let Some(t) = ctx
            .threads
            .iter()
            .find(|t| t.node == s.node && t.tid == s.tid)
        else {
            continue;
        };
        let on_cpu = 1.0 - t.off_ns as f64 / (t.last_ns - t.first_ns).max(1) as f64;
        let host_bound = on_cpu >= 0.8;
        out.push(
            Finding {
                detector: "throughput_drop",
                node: s.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&s.node)),
                summary: format!(
                    "launch rate of {} (tid {}) fell from {:.0}/s to {:.0}/s ({:.0}% drop) {} into the trace",
                    t.comm, t.tid, c.before_median, c.after_median, (1.0 - ratio) * 100.0, d(at_ns - ctx.window.from_ns)
                ),
                root_cause: if host_bound {
                    "Throughput drop from host overhead: the feeding thread stays on the CPU but spends longer between launches".into()
                } else {
                    "Throughput drop: the feeding thread launches less often because it waits more".into()
                },
                explanation: format!(
                    "Kernel launches per second of {} (pid {}, tid {}) changed level after second {} of its activity: median {:.0}/s before, {:.0}/s after, for the remaining {after_s} s. The thread was on the CPU for {} of its span ({} off-CPU), so the missing launches are {}.",
                    t.comm, t.pid, t.tid, c.at_second, c.before_median, c.after_median,
                    pct(((on_cpu.clamp(0.0, 1.0)) * 1000.0) as i64, 1000), d(t.off_ns),
                    if host_bound { "host-side work between launches (Python overhead, logging, data-dependent control flow, a growing structure), not waiting" } else { "time spent waiting; see the other chains for what it waited on" }
                ),
                timeline: vec![
                    step("CUDA", "cudaLaunchKernel", format!("{:.0}/s -> {:.0}/s", c.before_median, c.after_median), 0),
                    step("GPU", "idle", format!("an estimated {} of extra run time at the lower rate", d(lost)), lost),
                ],
                recommendations: if host_bound {
                    vec![
                        format!("Profile the thread's Python after {} (py-spy dump --pid {}) for work that grows per step.", d(at_ns - ctx.window.from_ns), t.pid),
                        "Capture the step in a CUDA graph (torch.compile mode=\"reduce-overhead\") to cut per-launch host cost.".into(),
                    ]
                } else {
                    vec!["Compare the windows before and after the drop: causeway explain --until/--from around the change point.".into()]
                },
                evidence_sql: format!(
                    "SELECT (timestamp - {start}) // 1000000000 AS second, any_value((timestamp - {start}) // 1000000000 * 1000000000 + {offset}) AS from_window_start_ns, count(*) AS launches FROM events WHERE node = {} AND tid = {} AND op IN ('cudaLaunchKernel', 'cuLaunchKernel') GROUP BY 1 ORDER BY 1",
                    lit(&s.node), s.tid,
                    start = s.start_ns,
                    offset = s.start_ns - ctx.window.from_ns
                ),
            }
            .into_chain()
            .at(
                crate::sites::Scope::thread(&s.node, t.pid, t.tid, &[crate::budget::CallClass::Launch], "launches after the drop")
                    .during(at_ns, ctx.window.until_ns),
            ),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use causeway_store::{ModeSwitch, Reader, Writer, WriterOptions};

    use crate::chains::ChainQuery;
    use crate::detectors::testutil::chains_of;
    use crate::engine::explain;
    use causeway_demo::{Scenario, write_scenario};

    #[test]
    fn fires_on_a_sustained_rate_drop() {
        let c = chains_of(Scenario::ThroughputDrop, false, "throughput_drop");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].summary.contains("fell from"), "{}", c[0].summary);
        assert!(c[0].time_lost_ns > 3_000_000_000, "{}", c[0].time_lost_ns);
    }

    /// The controller moved cudaLaunchKernel to entry_only where the rate "fell": fewer events
    /// were stored, not fewer launches made.
    #[test]
    fn a_switch_to_a_mode_that_stores_no_events_is_not_a_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.duckdb");
        write_scenario(&p, Scenario::ThroughputDrop, false).unwrap();
        let r = Reader::open(&p).unwrap();
        let before = explain(&r, &ChainQuery::default()).unwrap().chains;
        let before = before
            .iter()
            .find(|c| c.detector == "throughput_drop")
            .unwrap();
        let (node, at): (String, i64) = r
            .prepare_trusted(
                "SELECT node, min(timestamp) FROM events WHERE op = 'cudaLaunchKernel' GROUP BY 1",
            )
            .unwrap()
            .query_row([], causeway_store::row)
            .unwrap();
        drop(r);
        let mut w = Writer::open_append(
            &p,
            WriterOptions {
                node,
                ..WriterOptions::default()
            },
        )
        .unwrap();
        // The change point of the demo lies well after the first launch.
        let switch = |ts_ns| ModeSwitch {
            ts_ns,
            op_id: 3,
            mode: "entry_only".into(),
            previous: "full".into(),
            reason: "over_budget".into(),
            overhead_pct: 4.5,
        };
        w.record_mode_switches(&[switch(at + 2_000_000_000)])
            .unwrap();
        w.finish().unwrap();
        let r = Reader::open(&p).unwrap();
        let e = explain(&r, &ChainQuery::default()).unwrap();
        assert!(
            e.chains.iter().all(|c| c.detector != "throughput_drop"),
            "{:#?} (before the switch: {})",
            e.chains,
            before.summary
        );
        // The launch-rate listing says why the stored rate fell.
        let changes: Vec<_> = e.rates.iter().filter_map(|s| s.change.clone()).collect();
        assert!(
            changes
                .iter()
                .any(|c| c.probe_mode.as_deref() == Some("cudaLaunchKernel full -> entry_only")),
            "{changes:?}"
        );
    }

    #[test]
    fn steady_rate_and_periodic_dips_are_not_drops() {
        assert!(chains_of(Scenario::ThroughputDrop, true, "throughput_drop").is_empty());
        assert!(chains_of(Scenario::IoStall, false, "throughput_drop").is_empty());
    }
}
