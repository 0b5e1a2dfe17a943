//! `cpu_contention`: the GPU-feeding thread is taken off the CPU *inside* its CUDA calls.
//!
//! Trigger: on one launching thread, outside the warm-up phase, slow calls (>= 1 ms and >= 10x
//! their op's p50; synchronisations excluded, waiting is their job) contain >= 20 ms of off-CPU
//! time that is preempted (runnable, arg1 = 0) or of unknown state, in at least 3 calls, and
//! at least 0.5% of the node's span. Blocked (sleeping) time inside calls is not contention.
//! Time lost: that preempted + unknown off-CPU time inside the calls.
//! Severity: the common rule, capped at MEDIUM when most of it has an unknown run state.
//! Second trigger, from the thread's time budget (contention also delays the launches between
//! calls, where no call is slow): the thread was preempted by processes that make no GPU call
//! (not its own job's ranks or workers feeding other GPUs) for >= 10% of its span and >= 100
//! ms, inside calls or between them (ranks of collective jobs excepted: the straggler finding
//! names a slow rank's local cause). Time lost: that preempted time; it replaces the first
//! trigger's chain of the thread when at least twice as large.
//! Recommendation: pin the feeding thread, move or deprioritise the tasks that ran instead.

use causeway_store::StoreError;

use super::{Finding, Input, d, lit, pct, severity, step, thread_budgets};
use crate::chains::{Chain, Severity};

/// Minimum preempted/unknown off-CPU time inside slow calls.
pub const MIN_LOST_NS: i64 = 20_000_000;

/// Runs the detector.
pub fn detect(inp: &Input<'_>) -> Result<Vec<Chain>, StoreError> {
    let ctx = inp.ctx;
    let mut out = Vec::new();
    // (node, tid) of each chain in `out`, in order.
    let mut named: Vec<(String, u32)> = Vec::new();
    for a in inp.attr.iter().filter(|a| !a.warmup) {
        let lost = a.preempted_ns + a.unknown_ns;
        let span = ctx.node_span_ns(&a.node);
        if lost < MIN_LOST_NS || a.with_off_cpu < 3 || (lost as f64) < 0.005 * span as f64 {
            continue;
        }
        let comm = ctx
            .threads
            .iter()
            .find(|t| t.node == a.node && t.tid == a.tid)
            .map_or("?".to_string(), |t| t.comm.clone());
        let ops: Vec<String> = a.ops.iter().map(|(o, n)| format!("{n} {o}")).collect();
        let instead: Vec<String> = a
            .ran_instead
            .iter()
            .map(|(pid, ns)| format!("{} (pid {pid}) {}", ctx.name(&a.node, *pid), d(*ns)))
            .collect();
        let unknown_mostly = a.unknown_ns > a.preempted_ns;
        let mut sev = severity(lost, span);
        if unknown_mostly && sev == Severity::High {
            sev = Severity::Medium;
        }
        let s = inp.split;
        let mut explanation = format!(
            "{comm} (pid {}, tid {}) launches the GPU's work. {} of its {} slow calls ({}) had the thread off the CPU inside them: {} off-CPU inside slow calls ({} preempted while runnable, {} blocked, {} of unknown state). ",
            a.pid,
            a.tid,
            a.with_off_cpu,
            a.slow_calls,
            ops.join(", "),
            d(a.off_inside_ns),
            d(a.preempted_ns),
            d(a.blocked_ns),
            d(a.unknown_ns)
        );
        if !instead.is_empty() {
            explanation.push_str(&format!(
                "While it was preempted, these ran instead: {}. ",
                instead.join(", ")
            ));
        }
        explanation.push_str(&format!(
            "Of {} off-CPU time of all traced threads, {} was inside slow GPU calls, {} elsewhere on GPU-calling threads, and {} on threads that made no GPU call (not blamed on the GPU path).",
            d(s.total_ns), d(s.inside_slow_calls_ns), d(s.feeders_elsewhere_ns), d(s.non_gpu_threads_ns)
        ));
        if unknown_mostly {
            explanation.push_str(" The trace does not record whether the thread was runnable or sleeping, so part of this may be voluntary waiting.");
        }
        let culprit = a
            .ran_instead
            .first()
            .map(|(pid, _)| format!("{} (pid {pid})", ctx.name(&a.node, *pid)));
        let mut recs = vec![format!(
            "Pin {comm} (tid {}) to dedicated cores, e.g. `taskset -pc 2-3 {}`, and keep other work off them (isolcpus / cgroup cpusets).",
            a.tid, a.tid
        )];
        match &culprit {
            Some(c) => recs.push(format!("Lower the priority of {c} (`renice +19`) or move it to other cores: it held the CPU for {} inside launches.", d(a.ran_instead[0].1))),
            None => recs.push("Record with run-state tracing (causeway trace) to see which tasks preempt the thread.".into()),
        }
        recs.push(
            "Do not set CUDA_LAUNCH_BLOCKING=1: it serialises launches and makes the loss worse."
                .into(),
        );
        named.push((a.node.clone(), a.tid));
        out.push(
            Finding {
                detector: "cpu_contention",
                node: a.node.clone(),
                time_lost_ns: lost,
                severity: sev,
                summary: format!(
                    "{comm} (tid {}) was preempted inside {} of {} slow GPU calls: {} off-CPU ({} of the trace)",
                    a.tid, a.with_off_cpu, a.slow_calls, d(lost), pct(lost, span)
                ),
                root_cause: match &culprit {
                    Some(c) => format!("CPU contention: {c} and other tasks take the CPU from the GPU-feeding thread in the middle of its CUDA calls"),
                    None => "CPU contention: the GPU-feeding thread is taken off the CPU in the middle of its CUDA calls".into(),
                },
                explanation,
                timeline: vec![
                    step("HOST", "sched_switch", format!("{} preempted inside slow calls{}", d(lost), culprit.map(|c| format!(", mostly by {c}")).unwrap_or_default()), lost),
                    step("CUDA", a.ops.keys().next().map_or("cudaLaunchKernel", |s| s.as_str()), format!("{} slow calls totalling {}", a.slow_calls, d(a.slow_ns)), a.slow_ns),
                    step("GPU", "idle", "the GPU waits for work that was not launched yet".into(), lost),
                ],
                recommendations: recs,
                // The thread's slow calls (as the engine selects them) and its switches are
                // selected first and then joined on time alone: DuckDB joins those with an
                // inequality join, where joining the events table to itself on node and tid
                // took over 300 s on 10M events. Each row is a switch inside a slow call, with
                // the summary's figures: slow_calls, with_off_cpu, preempted_or_unknown_ns.
                evidence_sql: format!(
                    "WITH {}, j AS (SELECT sc.id, sc.op, sc.b - sc.a call_ns, sw.a, sw.b - sw.a off_cpu_ns, sw.ran, sw.st, least(sw.b, sc.b) - greatest(sw.a, sc.a) inside_ns FROM sc JOIN sw ON sw.a < sc.b AND sw.b > sc.a WHERE sc.tid = {tid} AND NOT sc.warmup), t AS (SELECT (SELECT count(*) FROM sc WHERE tid = {tid} AND NOT warmup) slow_calls, count(DISTINCT id) with_off_cpu, coalesce(sum(inside_ns) FILTER (WHERE st <> 1), 0) preempted_or_unknown_ns FROM j) SELECT j.a AS timestamp, j.off_cpu_ns, j.inside_ns, j.ran AS ran_instead, j.st AS state, j.op, j.call_ns, (SELECT slow_calls FROM t) AS slow_calls, (SELECT with_off_cpu FROM t) AS with_off_cpu, (SELECT preempted_or_unknown_ns FROM t) AS preempted_or_unknown_ns FROM j ORDER BY j.inside_ns DESC LIMIT 50",
                    super::slow_calls_ctes(ctx, &a.node, a.pid, a.tid),
                    tid = a.tid
                ),
            }
            .into_chain()
            .at(crate::sites::Scope::thread(&a.node, a.pid, a.tid, &[], "GPU calls")),
        );
    }
    from_budgets(inp, &mut out, &mut named);
    Ok(out)
}

/// The budget trigger: preemption by processes outside the GPU path, inside calls or between.
fn from_budgets(inp: &Input<'_>, out: &mut Vec<Chain>, named: &mut Vec<(String, u32)>) {
    let ctx = inp.ctx;
    for b in thread_budgets(inp) {
        let tid = b.tid.unwrap_or_default();
        // A rank of a collective job: a slow rank is the straggler finding, which names its
        // local cause.
        if b.class(crate::budget::CallClass::Collective).is_some() {
            continue;
        }
        let gpu_pid = |pid: Option<u32>| {
            pid.is_some_and(|p| {
                ctx.threads
                    .iter()
                    .any(|t| t.node == b.node && t.pid == p && t.gpu_calls > 0)
            })
        };
        let others: Vec<_> = b
            .preemptors
            .iter()
            .filter(|p| p.tid != 0 && !gpu_pid(p.pid))
            .collect();
        let lost: i64 = others.iter().map(|p| p.ns).sum();
        if lost < 100_000_000 || (lost as f64) < 0.10 * b.span_ns as f64 {
            continue;
        }
        let names = others
            .iter()
            .take(3)
            .map(|p| match p.pid {
                Some(pid) => format!("{} (pid {pid}, tid {}) {}", p.name, p.tid, d(p.ns)),
                None => format!("{} (tid {}) {}", p.name, p.tid, d(p.ns)),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let inside: i64 = b.inside.iter().map(|i| i.preempted_ns).sum();
        let note = format!(
            " Over its {} span the thread was preempted for {} by processes outside the GPU path ({names}): {} inside GPU calls and {} between them, where it would have launched the next work.",
            d(b.span_ns),
            d(lost),
            d(inside.min(lost)),
            d(b.outside.preempted_ns.min(lost))
        );
        // The slow-call chain of this thread stands unless the budget shows far more: its
        // numbers come from its own evidence.
        if let Some(i) = named.iter().position(|k| k.0 == b.node && k.1 == tid) {
            if lost < 2 * out[i].time_lost_ns {
                continue;
            }
            out.remove(i);
            named.remove(i);
        }
        let top = others[0];
        let culprit = match top.pid {
            Some(pid) => format!("{} (pid {pid})", top.name),
            None => format!("{} (tid {})", top.name, top.tid),
        };
        named.push((b.node.clone(), tid));
        out.push(
            Finding {
                detector: "cpu_contention",
                node: b.node.clone(),
                time_lost_ns: lost,
                severity: severity(lost, ctx.node_span_ns(&b.node)),
                summary: format!(
                    "{} (tid {tid}) was preempted for {} ({} of its span), mostly by {culprit}",
                    b.comm,
                    d(lost),
                    pct(lost, b.span_ns)
                ),
                root_cause: format!("CPU contention: {culprit} and other tasks take the CPU from the GPU-feeding thread, so its launches come late"),
                explanation: format!(
                    "{} (pid {}, tid {tid}) launches the GPU's work.{note} While it waits for a CPU the GPU drains its queue and idles.",
                    b.comm, b.pid
                ),
                timeline: vec![
                    step("HOST", "sched_switch", format!("{} preempted, mostly by {culprit}", d(lost)), lost),
                    step("GPU", "idle", "the GPU waits for work that was not launched yet".into(), lost),
                ],
                recommendations: vec![
                    format!("Pin {} (tid {tid}) to dedicated cores, e.g. `taskset -pc 2-3 {tid}`, and keep other work off them (isolcpus / cgroup cpusets).", b.comm),
                    format!("Lower the priority of {culprit} (`renice +19`) or move it to other cores."),
                ],
                // The preemptors the summary counts: its figure is the rows' sum.
                evidence_sql: format!(
                    "SELECT arg0 AS ran_instead_tid, count(*) AS switches, sum(duration) AS preempted_ns FROM events WHERE node = {} AND tid = {tid} AND op = 'sched_switch' AND arg1 = 0 AND arg0 IN ({}) GROUP BY arg0 ORDER BY preempted_ns DESC",
                    lit(&b.node),
                    others.iter().map(|p| p.tid.to_string()).collect::<Vec<_>>().join(", ")
                ),
            }
            .into_chain()
            .at(crate::sites::Scope::thread(&b.node, b.pid, tid, &[], "GPU calls")),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::detectors::testutil::{chains_of, ev, explain_written};
    use causeway_demo::Scenario;

    #[test]
    fn fires_on_preemption_and_names_the_culprit() {
        let c = chains_of(Scenario::CpuContention, false, "cpu_contention");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].explanation.contains("node_exporter (pid 5151)"),
            "{}",
            c[0].explanation
        );
        assert!(c[0].time_lost_ns > 1_000_000_000);
    }

    /// A preemptor outside the trace is named from `tasks` (what the collector's scheduler
    /// program read), in the chain and in the thread's budget, with its process.
    #[test]
    fn names_a_preemptor_outside_the_trace_from_tasks() {
        use causeway_store::TaskName;

        const T0: i64 = 1_700_000_000_000_000_000;
        let e = explain_written(|w| {
            // 2,000 launches 1 ms apart; after each, 0.6 ms off the CPU while tid 4242 runs.
            for i in 0..2_000i64 {
                let t = T0 + i * 1_000_000;
                w.append(&ev(t, 20_000, "cudaLaunchKernel", 1, 0)).unwrap();
                w.append(&ev(t + 100_000, 600_000, "sched_switch", 4242, 0))
                    .unwrap();
            }
            w.record_tasks(&[TaskName {
                tid: 4242,
                pid: 4240,
                comm: "gzip".into(),
                first_seen_ns: T0 + 100_000,
            }])
            .unwrap();
        });
        let c = e
            .chains
            .iter()
            .find(|c| c.detector == "cpu_contention")
            .unwrap_or_else(|| panic!("{:#?}", e.chains));
        assert!(c.summary.contains("gzip"), "{}", c.summary);
        let b = e.budgets.iter().find(|b| b.tid == Some(10)).unwrap();
        assert_eq!(b.preemptors[0].tid, 4242);
        assert_eq!(b.preemptors[0].pid, Some(4240));
        assert_eq!(b.preemptors[0].name, "gzip");
    }

    /// The evidence of preemption inside slow calls lists the switches of the thread inside its
    /// slow calls (1 ms or more and 10x their op's median, after the process's first second),
    /// the longest overlap first, with the summary's counts and time, as a pass over the events
    /// finds them.
    #[test]
    fn the_evidence_rows_are_the_switches_inside_the_slow_calls() {
        use causeway_store::QueryLimits;
        use std::collections::HashMap;

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.duckdb");
        causeway_demo::write_scenario(&p, Scenario::CpuContention, false).unwrap();
        let r = causeway_store::Reader::open(&p).unwrap();
        let e = crate::engine::explain(&r, &crate::chains::ChainQuery::default()).unwrap();
        let c = e
            .chains
            .iter()
            .find(|c| c.detector == "cpu_contention" && c.evidence_sql.contains("off_cpu_ns"))
            .unwrap_or_else(|| panic!("{:#?}", e.chains));
        assert!(c.evidence_sql.contains("tid = 4242"), "{}", c.evidence_sql);
        let g = causeway_sqlguard::guard(&c.evidence_sql, r.policy(), None).unwrap();
        let res = r.query(&g, &QueryLimits::default()).unwrap();
        let col = |name: &str| res.columns.iter().position(|x| x.name == name).unwrap();
        let got: Vec<i64> = (res.rows.iter())
            .map(|row| row[col("inside_ns")].as_i64().unwrap())
            .collect();
        // The same from the thread's events, read whole and paired here.
        let mut st = r
            .prepare_trusted(
                "SELECT timestamp, duration, op, arg1 FROM events
                 WHERE tid = 4242 AND (op = 'sched_switch' OR source IN ('CUDA', 'DRIVER'))
                 ORDER BY timestamp",
            )
            .unwrap();
        let evs: Vec<(i64, i64, String, i64)> = st
            .query_map([], |x| Ok((x.get(0)?, x.get(1)?, x.get(2)?, x.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let (switches, calls): (Vec<_>, Vec<_>) =
            evs.into_iter().partition(|e| e.2 == "sched_switch");
        let calls: Vec<_> = calls
            .into_iter()
            .filter(|c| !crate::opsets::SYNC_OPS.contains(&c.2.as_str()))
            .collect();
        let mut by_op: HashMap<&str, Vec<i64>> = HashMap::new();
        for c in &calls {
            by_op.entry(c.2.as_str()).or_default().push(c.1);
        }
        let p50: HashMap<&str, i64> = by_op
            .into_iter()
            .map(|(op, mut v)| {
                v.sort_unstable();
                (op, v[(v.len() - 1) / 2])
            })
            .collect();
        let (first, last) = (calls[0].0, calls[calls.len() - 1].0);
        let warm_end = first + 1_000_000_000.max((last - first) / 20);
        let slow: Vec<_> = calls
            .iter()
            .filter(|c| c.0 >= warm_end && c.1 >= 1_000_000.max(10 * p50[c.2.as_str()]))
            .collect();
        let (mut want, mut with_off, mut lost) = (Vec::new(), 0, 0);
        for &&(ct, cd, _, _) in &slow {
            let mut hit = false;
            for &(st, sd, _, state) in &switches {
                if st < ct + cd && st + sd > ct {
                    let ov = (st + sd).min(ct + cd) - st.max(ct);
                    want.push(ov);
                    hit = true;
                    if state != 1 {
                        lost += ov;
                    }
                }
            }
            with_off += i64::from(hit);
        }
        assert!(want.len() > 50, "{} switches inside slow calls", want.len());
        want.sort_unstable_by(|a, b| b.cmp(a));
        want.truncate(50);
        assert_eq!(got, want);
        let first_row = |name: &str| res.rows[0][col(name)].as_i64().unwrap();
        assert_eq!(first_row("slow_calls"), slow.len() as i64);
        assert_eq!(first_row("with_off_cpu"), with_off);
        assert_eq!(first_row("preempted_or_unknown_ns"), lost);
        assert_eq!(c.time_lost_ns, lost);
    }

    #[test]
    fn quiet_without_preemption() {
        assert!(chains_of(Scenario::CpuContention, true, "cpu_contention").is_empty());
    }
}
