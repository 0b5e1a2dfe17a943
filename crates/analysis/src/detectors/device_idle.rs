//! `device_idle`: the device's own timeline (an imported profiler trace) shows the GPU idle for
//! a large share of the window, and says whom it waited for: the host that had not launched
//! the next work yet (and what the launching thread was doing: the input pipeline, a sync, a
//! copy, a collective, CPU ops, code outside profiled ops), or queued work that waited on a
//! dependency (nodes of a CUDA graph, a collective's peers, an event or stream wait).
//!
//! Trigger: a device of a process was idle (no kernel, copy or memset running) for at least
//! [`MIN_IDLE_SHARE`] of the window, measured ([`crate::device`]).
//! Time lost: the idle whose cause is named (waiting for the host or for a dependency); idle
//! after the device's last work and before work whose launch the trace lacks is reported, not
//! counted.
//! Severity (its own rule, on the measured idle share of the window, since the figure is
//! measured, not estimated): HIGH >= 30%, MEDIUM >= 10%, LOW >= 5%; a busier device is healthy.
//! Where the host waited in the input pipeline and the steps hold DataLoader ranges, the summary
//! says the DataLoader's share of the mean step, from its own evidence row.
//! Recommendation: by the largest reason (input pipeline: more DataLoader workers, pinned
//! memory, prefetching; CPU ops: fewer, larger launches, CUDA graphs; sync: no host reads of
//! device values in the loop; collectives: overlap and balance; dependencies: the stream or
//! rank the work waits for).

use causeway_store::StoreError;

use super::{Finding, Input, d, pct, step};
use crate::chains::{Chain, Severity};
use crate::device::{DeviceTime, IdleReason, idle_evidence, input_share, input_share_evidence};

/// Least measured idle share of the window that is a finding.
pub const MIN_IDLE_SHARE: f64 = 0.05;

fn severity(idle_share: f64) -> Severity {
    if idle_share >= 0.30 {
        Severity::High
    } else if idle_share >= 0.10 {
        Severity::Medium
    } else {
        Severity::Low
    }
}

/// The reasons of one whom (`host`, `dependency`), largest first, and their sum.
fn of<'a>(dev: &'a DeviceTime, whom: &str) -> (Vec<&'a IdleReason>, i64) {
    let v: Vec<&IdleReason> = dev.idle.iter().filter(|r| r.waiting_for == whom).collect();
    let ns = v.iter().map(|r| r.ns).sum();
    (v, ns)
}

fn words(r: &IdleReason) -> String {
    match (r.waiting_for == "host", r.detail.is_empty()) {
        (true, false) => format!("waiting for the host in {}", r.detail),
        (true, true) => format!("waiting for the host: {}", r.reason),
        (false, false) => format!("{} ({})", r.reason, r.detail),
        (false, true) => r.reason.clone(),
    }
}

fn fix(r: &IdleReason) -> String {
    match (r.waiting_for.as_str(), r.reason.as_str()) {
        ("host", "input pipeline") => "Feed the GPU faster: more DataLoader workers (num_workers), pin_memory=True with non_blocking copies, prefetch_factor and persistent_workers; move decoding and augmentation off the training process or onto the GPU.".into(),
        ("host", "sync") => "Take host reads of device values (.item(), .cpu(), printing or branching on a tensor) out of the step, or make them every N steps: each one drains the GPU and it waits for the next launch.".into(),
        ("host", "copy") => "Copy from pinned memory with non_blocking=True (and start the next batch's copy early): a pageable copy holds the launching thread while the device has nothing queued.".into(),
        ("host", "collective") => "Overlap communication with compute (DDP bucket sizes, gradient accumulation with no_sync) and check for a slower rank: the launching thread waits in the collective while this GPU has no work.".into(),
        ("host", "allocation") => "Keep device memory allocated across steps: the caching allocator reuses blocks unless torch.cuda.empty_cache() (or a new tensor shape every step) sends it back to cudaMalloc/cudaFree, which hold the launching thread while the device has nothing queued.".into(),
        ("host", "CPU ops") => format!("The host launches the next kernel after the device finished the last one: the step is host-bound in {}. Cut per-step host work: larger batches, fused ops (torch.compile), CUDA graphs (torch.compile mode=\"reduce-overhead\" or torch.cuda.graphs) so one launch replaces many.", if r.detail.is_empty() { "CPU ops".to_string() } else { r.detail.clone() }),
        ("host", _) => "The launching thread was busy outside the profiled ops (Python between ops, logging, data handling): profile it with stacks (py-spy, torch.profiler with_stack=True) and move that work off the critical path.".into(),
        (_, "work of a CUDA graph waited") => "Work inside a CUDA graph waited with the device idle: look for event waits or collectives captured in the graph that wait for another stream or rank, and for host nodes in it.".into(),
        (_, r) if r.starts_with("a collective") => "A collective kernel was queued but could not start: it waited for its peers (a slower rank) or for another stream; compare the ranks' timelines (causeway merge, HTA) and balance their work.".into(),
        _ => "Queued work waited on an event or another stream with the device idle: check cross-stream waits (cudaStreamWaitEvent) and the work they wait for.".into(),
    }
}

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let (from, until) = (ctx.window.from_ns, ctx.window.until_ns);
    let mut out = Vec::new();
    for dev in inp.devices {
        let (Some(idle), Some(device)) = (dev.idle_ns(), dev.device) else {
            continue;
        };
        let window = dev.window_ns.max(1);
        let share = idle as f64 / window as f64;
        if share < MIN_IDLE_SHARE {
            continue;
        }
        let (host, host_ns) = of(dev, "host");
        let (dep, dep_ns) = of(dev, "dependency");
        let lost = host_ns + dep_ns;
        if lost == 0 {
            continue;
        }
        let who = match dev.rank {
            Some(rank) => format!("GPU {device} (rank {rank}, pid {})", dev.pid),
            None => format!("GPU {device} (pid {})", dev.pid),
        };
        let top = if host_ns >= dep_ns { &host } else { &dep };
        let Some(first) = top.first() else { continue };
        let named: Vec<String> = dev
            .idle
            .iter()
            .take(3)
            .map(|r| format!("{} {}", d(r.ns), words(r)))
            .collect();
        let mut summary = format!(
            "{who} sat idle {} ({} of the window) on its own timeline: {}",
            d(idle),
            pct(idle, window),
            named.join(", ")
        );
        let mut evidence_sql = idle_evidence(&dev.node, dev.pid, from, until);
        // Waiting for input: how much of a step the DataLoader takes is what people tune
        // (workers, prefetching) against; its row joins the evidence.
        if dev
            .idle
            .iter()
            .any(|r| r.waiting_for == "host" && r.reason == "input pipeline" && r.ns > 0)
            && let Some(s) = input_share(ctx.r, &dev.node, dev.pid, from, until)?
        {
            summary.push_str(&format!(
                "; {} took {} of the mean step, {} of {}",
                s.name,
                pct(s.input_ns, s.step_ns),
                d(s.input_ns),
                d(s.step_ns)
            ));
            evidence_sql = format!(
                "SELECT * FROM ({evidence_sql}) AS idle UNION ALL SELECT * FROM ({}) AS input_share",
                input_share_evidence(&dev.node, dev.pid, from, until)
            );
        }
        let root_cause = if host_ns >= dep_ns {
            format!(
                "The device waited for its host: {} of idle passed before the next work was launched, most of it with the launching thread in {}{}.",
                d(host_ns),
                first.reason,
                if first.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", first.detail)
                }
            )
        } else {
            format!(
                "Work was queued but waited with the device idle: {} of idle passed after the next work's launch, most of it because {}.",
                d(dep_ns),
                first.reason
            )
        };
        let rest: i64 = dev
            .idle
            .iter()
            .filter(|r| r.waiting_for != "host" && r.waiting_for != "dependency")
            .map(|r| r.ns)
            .sum();
        let explanation = format!(
            "Measured on the device timeline the trace carries: {who} ran kernels, copies or memsets for {} of the window ({} compute, {} communication, {} memory) and was idle for {} in all. {} of that idle passed before the next work had been launched (the host was late) and {} after its launch (a dependency held it){}. The host-side estimate, made without the device timeline, puts the idle {}.",
            d(dev.busy_ns),
            d(dev.compute_ns),
            d(dev.communication_ns),
            d(dev.memory_ns),
            d(idle),
            d(host_ns),
            d(dep_ns),
            if rest > 0 {
                format!(
                    "; {} is after the last work or before work whose launch the trace lacks",
                    d(rest)
                )
            } else {
                String::new()
            },
            if dev.estimate_known {
                format!("at {:.1}%", dev.gpu_idle_estimated_pct)
            } else {
                format!(
                    "between {:.1}% and {:.1}%: too few of the host's calls waited for the device to tell more",
                    dev.gpu_idle_estimated_pct, dev.gpu_idle_estimated_max_pct
                )
            }
        );
        let timeline = dev
            .idle
            .iter()
            .take(4)
            .map(|r| {
                step(
                    if r.waiting_for == "host" {
                        "host"
                    } else {
                        "GPU"
                    },
                    &r.reason,
                    format!("{} stretches: {}", r.gaps, words(r)),
                    r.ns,
                )
            })
            .collect();
        let mut recommendations = vec![fix(first)];
        if let Some(second) = dev
            .idle
            .iter()
            .filter(|r| r.waiting_for == "host" || r.waiting_for == "dependency")
            .find(|r| fix(r) != recommendations[0])
            .filter(|r| r.ns * 4 >= lost)
        {
            recommendations.push(fix(second));
        }
        out.push(
            Finding {
                detector: "device_idle",
                node: dev.node.clone(),
                time_lost_ns: lost.min(idle),
                severity: severity(share),
                summary,
                root_cause,
                explanation,
                timeline,
                recommendations,
                evidence_sql,
            }
            .into_chain(),
        );
    }
    Ok(out)
}
