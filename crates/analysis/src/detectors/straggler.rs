//! `straggler`: on a merged multi-node trace, the rank that arrives late at the collectives
//! (lateness.rs, tried first: the signal of synchronous jobs), else the node whose launch rate
//! or launch latency is an outlier against its peers.
//!
//! Trigger: >= 3 nodes with the metric; per metric (launches per second of the node's span;
//! p50 of cudaLaunchKernel; p50 of cuLaunchKernel, each taken from the node's busiest
//! launching process), a node whose robust z-score 0.6745 (x - median) / MAD is >= 3.5 in the
//! bad direction (lower rate, higher latency) and that is >= 25% off the median (with MAD = 0
//! the relative test alone decides).
//! Time lost: span x (1 - rate / median rate) for a rate outlier, else calls x (p50 - median
//! p50): the extra time the slow node takes, which its peers spend waiting.
//! Not compared on launch rate: a node whose launch ops the overhead controller moved to a mode
//! that stores fewer events than calls (aggregate, entry_only, sampled) in the window: its
//! stored rate is not its launch rate.
//! Severity: the common rule. Recommendation: inspect that node's host (CPU frequency,
//! contention, thermals) and GPU; exclude it from the job until fixed.

use causeway_store::StoreError;

use super::{Finding, Input, d, severity, step};
use crate::chains::Chain;
use crate::rates::launch_switches_away;

/// Median of a slice (sorted copy).
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Index of the outlier in the bad direction (`higher_is_bad`), if any.
pub fn outlier(xs: &[f64], higher_is_bad: bool) -> Option<usize> {
    if xs.len() < 3 {
        return None;
    }
    let med = median(xs);
    let mad = median(&xs.iter().map(|x| (x - med).abs()).collect::<Vec<_>>());
    let mut best: Option<(f64, usize)> = None;
    for (i, &x) in xs.iter().enumerate() {
        let dev = if higher_is_bad { x - med } else { med - x };
        if dev <= 0.0 || dev < 0.25 * med.abs() {
            continue;
        }
        let z = if mad > 0.0 {
            0.6745 * dev / mad
        } else {
            f64::INFINITY
        };
        if z >= 3.5 && best.is_none_or(|b| dev > b.0) {
            best = Some((dev, i));
        }
    }
    best.map(|b| b.1)
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    // Synchronous jobs: the rank that arrives late at the collectives (see lateness.rs).
    if let Some(c) = super::lateness::detect(inp)? {
        return Ok(vec![c]);
    }
    let ctx = inp.ctx;
    if ctx.nodes.len() < 3 {
        return Ok(Vec::new());
    }
    let mut found: Option<(String, i64, String, String)> = None;
    // Launch rate per node, of the nodes that stored every launch.
    let mut thinned = Vec::new();
    for n in &ctx.nodes {
        if !launch_switches_away(ctx, ctx.window.until_ns, n)?.is_empty() {
            thinned.push(n);
        }
    }
    let rates: Vec<(String, f64, i64)> = ctx
        .nodes
        .iter()
        .filter(|n| !thinned.contains(n))
        .filter_map(|n| {
            let l: u64 = ctx
                .threads
                .iter()
                .filter(|t| &t.node == n)
                .map(|t| t.launches)
                .sum();
            let span = ctx.node_span_ns(n);
            (l > 0).then(|| (n.clone(), l as f64 / (span as f64 / 1e9), span))
        })
        .collect();
    let xs: Vec<f64> = rates.iter().map(|r| r.1).collect();
    if let Some(i) = outlier(&xs, false) {
        let med = median(&xs);
        let lost = (rates[i].2 as f64 * (1.0 - rates[i].1 / med)) as i64;
        found = Some((
            rates[i].0.clone(),
            lost,
            format!(
                "launch rate {:.0}/s vs a peer median of {med:.0}/s",
                rates[i].1
            ),
            "launch rate".into(),
        ));
    }
    for op in ["cudaLaunchKernel", "cuLaunchKernel"] {
        let per: Vec<(String, i64, u64)> = ctx
            .nodes
            .iter()
            .filter_map(|n| {
                ctx.ops
                    .iter()
                    .filter(|o| &o.node == n && o.op == op)
                    .max_by_key(|o| o.count)
                    .map(|o| (n.clone(), o.p50_ns, o.count))
            })
            .filter(|x| x.2 >= 50)
            .collect();
        let xs: Vec<f64> = per.iter().map(|p| p.1 as f64).collect();
        if let Some(i) = outlier(&xs, true) {
            let med = median(&xs);
            let lost = ((per[i].1 as f64 - med) * per[i].2 as f64) as i64;
            if found.as_ref().is_none_or(|f| f.1 < lost) {
                found = Some((
                    per[i].0.clone(),
                    lost,
                    format!(
                        "{op} p50 {} vs a peer median of {}",
                        d(per[i].1),
                        d(med as i64)
                    ),
                    format!("{op} latency"),
                ));
            } else if let Some(f) = found.as_mut().filter(|f| f.0 == per[i].0) {
                f.2.push_str(&format!("; {op} p50 {} vs {}", d(per[i].1), d(med as i64)));
            }
        }
    }
    let Some((node, lost, what, metric)) = found else {
        return Ok(Vec::new());
    };
    let peers: Vec<&String> = ctx.nodes.iter().filter(|n| **n != node).collect();
    let peer_list = peers
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Ok(vec![
        Finding {
            detector: "straggler",
            node: node.clone(),
            time_lost_ns: lost,
            severity: severity(lost, ctx.node_span_ns(&node)),
            summary: format!("{node} is a straggler: {what}"),
            root_cause: format!("Cross-node straggler: {node} is slower than its {} peers, and a synchronous job waits for its slowest member", peers.len()),
            explanation: format!(
                "Across {} nodes, {node}'s {metric} is an outlier by median absolute deviation ({what}). In data-parallel training every collective waits for the slowest rank, so the peers ({peer_list}) idle for about {} while {node} catches up.",
                ctx.nodes.len(), d(lost)
            ),
            timeline: vec![
                step("NODE", &node, what.clone(), lost),
                step("NCCL", "ncclAllReduce", format!("{} peers wait at each collective", peers.len()), lost),
            ],
            recommendations: vec![
                format!("Check {node}'s host: CPU frequency and throttling (turbostat), competing processes (causeway explain --node {node}), GPU clocks and thermals (nvidia-smi -q -d PERFORMANCE)."),
                format!("Drain {node} from the job (or restart it on a spare) until it matches its peers."),
            ],
            evidence_sql: (
                "SELECT node, count(*) FILTER (WHERE op IN ('cudaLaunchKernel', 'cuLaunchKernel')) AS launches, quantile_disc(duration, 0.5) FILTER (WHERE op = 'cudaLaunchKernel') AS launch_p50_ns, quantile_disc(duration, 0.5) FILTER (WHERE op = 'cuLaunchKernel') AS cu_launch_p50_ns, (max(timestamp) - min(timestamp)) / 1e9 AS span_s FROM events GROUP BY node ORDER BY node".to_string()
            ),
        }
        .into_chain(),
    ])
}

#[cfg(test)]
mod tests {
    use causeway_store::{ModeSwitch, Reader, Writer, WriterOptions};

    use super::outlier;
    use crate::chains::ChainQuery;
    use crate::detectors::testutil::chains_of;
    use crate::engine::explain;
    use causeway_demo::{Scenario, write_scenario};

    #[test]
    fn mad_outlier_direction() {
        assert_eq!(outlier(&[100.0, 102.0, 98.0, 60.0], false), Some(3));
        assert_eq!(outlier(&[100.0, 102.0, 98.0, 160.0], false), None);
        assert_eq!(outlier(&[100.0, 60.0], false), None);
    }

    #[test]
    fn finds_the_throttled_node() {
        let c = chains_of(Scenario::Straggler, false, "straggler");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(c[0].node, "gpu-node-c");
    }

    #[test]
    fn equal_nodes_have_no_straggler() {
        assert!(chains_of(Scenario::Straggler, true, "straggler").is_empty());
    }

    /// The throttled node's launches stored as sampled: its stored launch rate says nothing of
    /// its real one, and it is not compared on it.
    #[test]
    fn a_node_whose_launches_were_not_all_stored_is_not_compared_on_launch_rate() {
        let rate_chain = |mode: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("t.duckdb");
            write_scenario(&p, Scenario::Straggler, false).unwrap();
            if let Some(mode) = mode {
                let mut w = Writer::open_append(
                    &p,
                    WriterOptions {
                        node: "gpu-node-c".into(),
                        ..WriterOptions::default()
                    },
                )
                .unwrap();
                w.record_mode_switches(&[ModeSwitch {
                    ts_ns: 0,
                    op_id: 3,
                    mode: mode.into(),
                    previous: "full".into(),
                    reason: "over_budget".into(),
                    overhead_pct: 4.5,
                }])
                .unwrap();
                w.finish().unwrap();
            }
            let r = Reader::open(&p).unwrap();
            explain(&r, &ChainQuery::default())
                .unwrap()
                .chains
                .into_iter()
                .filter(|c| c.detector == "straggler")
                .map(|c| c.summary)
                .collect::<Vec<_>>()
        };
        let before = rate_chain(None);
        assert!(
            before.iter().any(|s| s.contains("launch rate")),
            "{before:?}"
        );
        let after = rate_chain(Some("sampled"));
        assert!(
            after.iter().all(|s| !s.contains("launch rate")),
            "{after:?}"
        );
    }
}
