//! `network_wait`: the GPU-feeding thread blocks in socket calls (a parameter server, remote
//! dataset, RPC), optionally with TCP retransmits on the node.
//!
//! Trigger: a launching thread spends >= 5% of its span and >= 50 ms inside net_send/net_recv;
//! for a rank of a collective job (NCCL calls), only its sleep in socket calls outside GPU calls
//! counts (from its time budget): a collective's own socket traffic is the collective waiting
//! for its peers, the straggler finding's subject.
//! Time lost: that time (the thread cannot launch while it waits on the socket).
//! Severity: the common rule, raised one level when the node retransmitted >= 20 segments.
//! Recommendation: move network I/O off the feeding thread; prefetch; fix the network path.

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, pct, severity, step};
use crate::chains::{Chain, Severity};

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    for t in ctx.feeders() {
        let span = (t.last_ns - t.first_ns).max(1);
        let budget = inp
            .budgets
            .iter()
            .find(|b| b.node == t.node && b.tid == Some(t.tid));
        let net_ns = match budget {
            Some(b) if b.class(crate::budget::CallClass::Collective).is_some() => {
                b.outside.blocked_net_ns
            }
            _ => t.net_ns,
        };
        if net_ns < 50_000_000 || (net_ns as f64) < 0.05 * span as f64 {
            continue;
        }
        let retx: u64 = ctx
            .ops
            .iter()
            .filter(|o| o.node == t.node && o.op == "tcp_retransmit")
            .map(|o| o.count)
            .sum();
        let mut sev = severity(net_ns, ctx.node_span_ns(&t.node));
        if retx >= 20 {
            sev = match sev {
                Severity::Low => Severity::Medium,
                _ => Severity::High,
            };
        }
        out.push(
            Finding {
                detector: "network_wait",
                node: t.node.clone(),
                time_lost_ns: net_ns,
                severity: sev,
                summary: format!("{} (tid {}) waited {} in socket calls ({} of its span); {retx} TCP retransmits", t.comm, t.tid, d(net_ns), pct(net_ns, span)),
                root_cause: "Network wait: the thread that launches GPU work blocks on the network between steps".into(),
                explanation: format!(
                    "{} (pid {}, tid {}) issued {} kernel launches and spent {} blocked in net_send/net_recv, time in which no work reached the GPU. The node recorded {retx} TCP retransmits{}.",
                    t.comm, t.pid, t.tid, t.launches, d(net_ns),
                    if retx > 0 { ", each of which stalls a stream for at least one retransmission timeout" } else { "" }
                ),
                timeline: vec![
                    step("NET", "net_recv", format!("{} in socket calls on the feeding thread", d(net_ns)), net_ns),
                    step("TCP", "tcp_retransmit", format!("{retx} retransmits"), 0),
                    step("GPU", "idle", "no launches while the thread waits".into(), net_ns),
                ],
                recommendations: vec![
                    "Move network reads to a background thread or DataLoader workers and prefetch ahead of the step.".into(),
                    "If retransmits are high, check the NIC, MTU and congestion (ss -ti, ethtool -S) before tuning the job.".into(),
                ],
                evidence_sql: format!(
                    "SELECT op, count(*) AS calls, sum(duration) AS total_ns, max(duration) AS max_ns FROM events WHERE node = {} AND (tid = {} AND source = 'NET' OR op = 'tcp_retransmit') GROUP BY op",
                    lit(&t.node), t.tid
                ),
            }
            .into_chain(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;

    #[test]
    fn fires_when_the_feeder_blocks_on_sockets() {
        let c = chains_of(Scenario::NetworkWait, false, "network_wait");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].summary.contains("40 TCP retransmits"),
            "{}",
            c[0].summary
        );
    }

    #[test]
    fn quiet_without_socket_waits() {
        assert!(chains_of(Scenario::NetworkWait, true, "network_wait").is_empty());
    }
}
