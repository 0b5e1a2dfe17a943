//! `gpu_contention`: several processes feed the same GPU at the same time and time-slice it.
//!
//! The device: the calls' gpu_id where the trace records it (imported traces); else what each
//! process was given (a single NVIDIA device file open, NVIDIA_VISIBLE_DEVICES or
//! CUDA_VISIBLE_DEVICES naming one device), as launchers and device plugins give it.
//! Trigger: on one (node, device), >= 2 processes each with >= 100 launches whose active spans
//! overlap for >= 50% of the shorter one.
//! Time lost: the waits for the GPU (synchronisations, device-to-host copies, from its budget)
//! of the most delayed of those processes x (n - 1) / n: with n processes sharing a GPU, each
//! waits that share of its waits for the others' work (the sum over processes is process
//! time, which the explanation gives; it can exceed the window).
//! Severity: the common rule.
//! Recommendation: one process per GPU, MPS or MIG, or batch the requests in one server.

use causeway_store::StoreError;
use causeway_store::catalog::SYNCS_SQL;

use super::{Finding, Input, d, lit, severity, step};
use crate::base::errors::duck;
use crate::chains::Chain;
use crate::opsets::LAUNCH_NAMES;

/// Processes' device selection as the collector recorded it.
const VISIBLE_SQL: &str = "SELECT node, pid::BIGINT, gpu_visible, gpu_devices FROM processes WHERE (?::VARCHAR = '' OR node = ?::VARCHAR) ORDER BY node, pid";

/// The one device a process can use, from what it was given rather than what it called: the
/// single NVIDIA device file it had open, else a single entry of NVIDIA_VISIBLE_DEVICES (the
/// container's device on the host), else of CUDA_VISIBLE_DEVICES. None where it could use
/// several (or the trace does not say): such processes are not grouped.
pub fn device_of(visible: &str, devices: &str) -> Option<(String, String)> {
    let files: Vec<&str> = devices
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .collect();
    if let [one] = files.as_slice()
        && let Some(n) = one.strip_prefix("nvidia")
    {
        return Some((n.to_string(), format!("it had /dev/{one} open")));
    }
    for name in ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"] {
        let value = visible
            .split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.trim());
        let Some(v) = value else { continue };
        let list: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .collect();
        return match list.as_slice() {
            [one] if !matches!(*one, "all" | "none" | "void") => {
                Some((one.to_string(), format!("{name}={one}")))
            }
            _ => None,
        };
    }
    None
}

/// One process feeding one device: (node, device, how it is known, pid, launches, first,
/// last).
type User = (String, String, String, u32, u64, i64, i64);

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut users: Vec<User> = ctx
        .gpu_launches
        .iter()
        .map(|g| {
            let id = g.gpu_id.to_string();
            (
                g.node.clone(),
                id,
                String::new(),
                g.pid,
                g.launches,
                g.first_ns,
                g.last_ns,
            )
        })
        .collect();
    // Where the calls do not carry the device (the collector's probes do not see it), the
    // device each process was given.
    let known: Vec<(String, u32)> = users.iter().map(|u| (u.0.clone(), u.3)).collect();
    // Stores older than schema 9 do not record it.
    let given: Vec<(String, i64, String, String)> = if ctx.r.schema_version() < 9 {
        Vec::new()
    } else {
        ctx.r
            .prepare_trusted(VISIBLE_SQL)?
            .query_map(
                causeway_store::duckdb::params![ctx.node, ctx.node],
                causeway_store::row,
            )
            .and_then(|rows| rows.collect())
            .map_err(duck(ctx.r, "reading the processes' devices"))?
    };
    for (node, pid, visible, devices) in given {
        let pid = pid as u32;
        if known.contains(&(node.clone(), pid)) {
            continue;
        }
        let Some((dev, how)) = device_of(&visible, &devices) else {
            continue;
        };
        let ts: Vec<_> = ctx
            .threads
            .iter()
            .filter(|t| t.node == node && t.pid == pid && t.launches > 0)
            .collect();
        let launches: u64 = ts.iter().map(|t| t.launches).sum();
        if launches == 0 {
            continue;
        }
        let first = ts.iter().map(|t| t.first_ns).min().unwrap_or(0);
        let last = ts.iter().map(|t| t.last_ns).max().unwrap_or(0);
        users.push((node, dev, how, pid, launches, first, last));
    }
    users.sort_by(|a, b| (&a.0, &a.1, a.3).cmp(&(&b.0, &b.1, b.3)));
    let mut out = Vec::new();
    let mut i = 0;
    while i < users.len() {
        let j = users[i..]
            .iter()
            .take_while(|r| r.0 == users[i].0 && r.1 == users[i].1)
            .count()
            + i;
        let group: Vec<&User> = users[i..j].iter().filter(|r| r.4 >= 100).collect();
        i = j;
        if group.len() < 2 {
            continue;
        }
        let (from, until) = (
            group.iter().map(|r| r.5).max().unwrap_or(0),
            group.iter().map(|r| r.6).min().unwrap_or(0),
        );
        let shortest = group.iter().map(|r| r.6 - r.5).min().unwrap_or(1).max(1);
        if ((until - from) as f64) < 0.5 * shortest as f64 {
            continue;
        }
        let (node, gpu) = (&group[0].0, &group[0].1);
        let n = group.len() as i64;
        // Processes placed by their devices (not by an imported trace's GPU ids) are active
        // over their launching threads' spans.
        let by_threads = group.iter().any(|r| !r.2.is_empty());
        // Their waits for the GPU (synchronisations, device-to-host copies), from their budgets.
        let waits: Vec<(u32, i64)> = inp
            .budgets
            .iter()
            .filter(|b| b.tid.is_none() && &b.node == node && group.iter().any(|r| r.3 == b.pid))
            .map(|b| (b.pid, b.waiting_ns()))
            .collect();
        let sync_ns: i64 = waits.iter().map(|w| w.1).sum();
        // Time lost is the most delayed process's: a sum over processes is process time, and
        // could exceed the window the trace holds.
        let (worst_pid, worst_ns) = waits
            .iter()
            .copied()
            .max_by_key(|w| (w.1, std::cmp::Reverse(w.0)))
            .unwrap_or_default();
        let lost = worst_ns * (n - 1) / n;
        let hows: Vec<&str> = group
            .iter()
            .map(|r| r.2.as_str())
            .filter(|h| !h.is_empty())
            .collect();
        let known_by = if hows.is_empty() {
            String::new()
        } else {
            format!(" (known from what each was given: {})", hows.join(", "))
        };
        let procs: Vec<String> = group
            .iter()
            .map(|r| format!("{} (pid {}, {} launches)", ctx.name(node, r.3), r.3, r.4))
            .collect();
        let pids = group
            .iter()
            .map(|r| r.3.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let launches = LAUNCH_NAMES.map(lit).join(", ");
        let copies = super::gpu_bound::COPIES_SQL.as_str();
        out.push(
            Finding {
                detector: "gpu_contention",
                node: node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(node)),
                summary: format!("{n} processes share GPU {gpu} for {}: {} (pid {worst_pid}) waits {} for the GPU, ~{} of it for the others' work", d(until - from), ctx.name(node, worst_pid), d(worst_ns), d(lost)),
                root_cause: format!("GPU contention: {n} processes time-slice GPU {gpu}, so each one's work queues behind the others'"),
                explanation: format!(
                    "On GPU {gpu}{known_by}, {} launched work concurrently for {}. Their waits for the GPU (synchronisations and device-to-host copies) took {} in total (process time, all {n} together); with {n} processes time-slicing one GPU, about {} of that is waiting for the other processes' work rather than their own. The most delayed, pid {worst_pid}, waited {}, about {} of it for the others.",
                    procs.join(", "), d(until - from), d(sync_ns), d(sync_ns * (n - 1) / n), d(worst_ns), d(lost)
                ),
                timeline: vec![
                    step("CUDA", "cudaLaunchKernel", procs.join("; "), 0),
                    step("CUDA", "cudaStreamSynchronize", format!("pid {worst_pid}: {} waiting, ~{} for other processes", d(worst_ns), d(lost)), lost),
                ],
                recommendations: vec![
                    format!("Give each process its own GPU (CUDA_VISIBLE_DEVICES), or serve the {n} workloads from one process that batches their requests."),
                    "If they must share, enable MPS (nvidia-cuda-mps-control -d) or partition with MIG so kernels run side by side instead of time-slicing.".into(),
                ],
                // Per process: launches, waits for the GPU (wait_ns) and the share of them for
                // the others' work (for_others_ns: the most delayed process's is the summary's
                // and the time lost) and active span; shared_ns is the spans' overlap. A process is active
                // from its launching threads' first event to their last (from its first launch
                // to its last in an imported trace that names the GPU).
                evidence_sql: format!(
                    "WITH q AS (SELECT e.pid, any_value(p.gpu_visible) AS gpu_visible, any_value(p.gpu_devices) AS gpu_devices, count(*) FILTER (WHERE e.op IN ({launches})) AS launches, coalesce(sum(e.duration) FILTER (WHERE e.op IN ({SYNCS_SQL}) OR (e.op IN ({copies}) AND e.arg1 = 2)), 0) AS wait_ns, min(e.timestamp) FILTER (WHERE e.op IN ({launches})) AS first_launch_ns, max(e.timestamp) FILTER (WHERE e.op IN ({launches})) AS last_launch_ns FROM events e LEFT JOIN processes p ON p.node = e.node AND p.pid = e.pid WHERE e.node = {node} AND e.pid IN ({pids}) AND e.timestamp BETWEEN {from} AND {until} GROUP BY e.pid), {active} SELECT q.*, a.active_from, a.active_until, min(a.active_until) OVER () - max(a.active_from) OVER () AS shared_ns, (q.wait_ns * (count(*) OVER () - 1)) // count(*) OVER () AS for_others_ns, (sum(q.wait_ns) OVER () * (count(*) OVER () - 1)) // count(*) OVER () AS all_for_others_ns FROM q JOIN a USING (pid) ORDER BY q.pid",
                    node = lit(node),
                    from = ctx.window.from_ns,
                    until = ctx.window.until_ns,
                    active = if by_threads {
                        format!("t AS (SELECT DISTINCT pid, tid FROM events WHERE node = {node} AND pid IN ({pids}) AND op IN ({launches}) AND timestamp BETWEEN {from} AND {until}), a AS (SELECT e.pid, min(e.timestamp) AS active_from, max(e.timestamp + CASE WHEN e.op = 'process_exit' THEN 0 ELSE e.duration END) AS active_until FROM events e JOIN t USING (pid, tid) WHERE e.node = {node} AND e.timestamp BETWEEN {from} AND {until} GROUP BY e.pid)", node = lit(node), from = ctx.window.from_ns, until = ctx.window.until_ns)
                    } else {
                        "a AS (SELECT pid, first_launch_ns AS active_from, last_launch_ns AS active_until FROM q)".to_string()
                    }
                ),
            }
            .into_chain(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::device_of;
    use crate::detectors::testutil::chains_of;
    use causeway_demo::Scenario;

    #[test]
    fn the_device_a_process_was_given() {
        assert_eq!(
            device_of("CUDA_VISIBLE_DEVICES=1", "").map(|d| d.0),
            Some("1".to_string())
        );
        assert_eq!(
            device_of("NVIDIA_VISIBLE_DEVICES=3; CUDA_VISIBLE_DEVICES=0", "").map(|d| d.0),
            Some("3".to_string()),
            "the container's device on the host first"
        );
        assert_eq!(device_of("", "nvidia2").map(|d| d.0), Some("2".to_string()));
        assert_eq!(
            device_of("CUDA_VISIBLE_DEVICES=0,1", ""),
            None,
            "either of two"
        );
        assert_eq!(device_of("NVIDIA_VISIBLE_DEVICES=all", ""), None);
        assert_eq!(device_of("", ""), None);
    }

    #[test]
    fn fires_when_processes_share_a_gpu() {
        let c = chains_of(Scenario::GpuContention, false, "gpu_contention");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].summary.starts_with("3 processes share GPU 0"),
            "{}",
            c[0].summary
        );
    }

    #[test]
    fn one_process_per_gpu_is_fine() {
        assert!(chains_of(Scenario::GpuContention, true, "gpu_contention").is_empty());
    }
}
