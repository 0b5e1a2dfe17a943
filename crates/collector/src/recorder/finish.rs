//! The end of a recording: every program detached, the ring and the threads' batches drained,
//! the last window of counters and overhead written, the helper threads finished, and the
//! summary the command prints.

use causeway_bpf::abi::{RawEvent, Record, THREAD_SLOTS, decode_batch, sum_percpu};
use causeway_bpf::libbpf_rs::{MapCore, MapFlags, RingBuffer};
use causeway_bpf::skel::CausewaySkel;
use causeway_store::catalog::op_by_id;
use tracing::{debug, info};

use super::{Recording, call_counts};
use crate::attach::drop_links;
use crate::error::CollectorError;
use crate::kernels::Kernels;
use crate::overhead_control::is_call_op;
use crate::poll::read_stats;
use crate::sink::{Ctl, DropKind};
use crate::stacks::Stacks;
use crate::trace::{InSituSummary, OpSummary, OverheadSummary, PythonSummary, TraceSummary};

impl Recording<'_, '_> {
    /// Ends the recording; returns the summary and the number of events handed to the writer.
    pub(super) fn finish(self, rb: RingBuffer<'_>) -> Result<(TraceSummary, u64), CollectorError> {
        let Recording {
            ctx,
            calibration,
            mut ctl,
            sampling,
            found,
            links,
            state,
            mut live,
            child,
            command_exit,
            switches,
            ..
        } = self;
        let (args, skel, sink) = (ctx.args, ctx.skel, ctx.sink);
        let mut map_hook = found.map_hook;
        if let Some(h) = found.holds {
            map_hook.hold = h.finish();
            if map_hook.hold.timeouts > 0 {
                let _ = sink.ctl.send(Ctl::Drop {
                    kind: DropKind::HoldTimeout,
                    op: None,
                    count: map_hook.hold.timeouts,
                    detail: format!(
                        "processes let go after {:?} before their libraries' probes were attached: their calls until then are missing",
                        args.hold_timeout
                    ),
                });
            }
        }
        // Detach every program before the last read: a thread's last full-mode events can still
        // be in its batch (calls.h), read below once nothing appends to it or flushes it any more.
        let libraries = found.attached.libs().into_iter().map(|l| l.path).collect();
        drop(found.attached);
        drop_links(links);
        sampling.detacher.finish();
        let _ = rb.consume();
        {
            let mut st = state.borrow_mut();
            for e in unflushed_events(skel) {
                st.push_record(Record::Event(e), sink);
            }
        }
        drop(rb);
        live.finish();
        let mut st = state.borrow_mut();
        st.flush(sink);
        let stats = read_stats(skel);
        let last = ctl.close(
            causeway_store::now_ns(),
            &call_counts(&stats),
            |pid| st.cpu_reading(pid, ctx.boot_start_ns),
            &(&sampling.sampler, &sampling.meter),
        );
        if !last.is_empty() {
            let _ = sink.ctl.send(Ctl::Overhead(last));
        }
        let meter = &sampling.meter;
        st.snapshot(&stats, skel, sink, &(&sampling.sampler, meter), true);
        let in_situ = meter.update(&mut ctl, causeway_store::now_ns());
        let in_situ_summary = in_situ
            .iter()
            .map(|&measured| InSituSummary {
                op: op_by_id(measured.op_id).map_or("?", |o| o.name),
                measured,
            })
            .collect();
        if !in_situ.is_empty() {
            let _ = sink.ctl.send(Ctl::InSitu(in_situ));
        }
        st.close_processes(sink);
        st.finish_nvtx(sink);
        let kernel_summary = st.kernels.take().map(Kernels::finish).unwrap_or_default();
        if let Some(p) = st.places.take() {
            p.finish();
        }
        let python = python_summary(skel, st.stacks.as_ref());
        if let Some(d) = python_drop(&python) {
            let _ = sink.ctl.send(d);
        }
        let (distinct_stacks, stacks_unwound) = st.stacks.take().map_or((0, 0), |s| {
            let n = (s.distinct, s.unwound);
            s.finish();
            n
        });
        if let Some(mut c) = child.filter(|_| command_exit.is_none()) {
            // Interrupted or timed out: the command keeps running untraced, as a detached job
            // would.
            info!(
                pid = c.id(),
                "the command is still running; it is no longer traced"
            );
            let _ = c.try_wait();
        }
        let ops = st
            .totals
            .iter()
            .map(|(&op, t)| OpSummary {
                op: op_by_id(op)
                    .map(|o| o.name.to_string())
                    .unwrap_or_else(|| format!("op{op}")),
                calls: t.calls,
                stored: t.stored,
                timed: t.timed,
                mean_ns: t.total_ns.checked_div(t.timed).unwrap_or(0),
                mode: is_call_op(op).then(|| ctl.mode(op).name()),
                calls_estimated: t.estimated,
            })
            .collect();
        let summary = TraceSummary {
            db: args.db.clone(),
            seconds: 0.0,
            events_written: 0,
            ringbuf_drops: st.ring_drops.values().sum(),
            channel_drops: st.channel_drops.values().sum(),
            write_failed: 0,
            store_reopens: 0,
            libraries,
            processes: st.pids.len(),
            command_exit,
            ops,
            overhead: OverheadSummary {
                budget_pct: ctl.budget_pct(),
                estimated_pct: ctl.overall_pct(),
                cpu_ns: ctl.windows.cpu_ns,
                probe_ns: ctl.windows.probe_ns as u64,
                costs: calibration,
                mode_switches: switches,
                in_situ: in_situ_summary,
            },
            stacks: distinct_stacks,
            stacks_unwound,
            python,
            map_hook,
            kernels: kernel_summary,
            nvtx_ranges: st.nvtx_ranges,
            segments: None,
        };
        Ok((summary, st.sent))
    }
}

/// What the Python walks came to: the kernel's per-call counts and the stacks' statuses.
fn python_summary(skel: &CausewaySkel<'_>, stacks: Option<&Stacks>) -> PythonSummary {
    let Some((s, py)) = stacks.and_then(|s| Some((s, s.python.as_ref()?))) else {
        return PythonSummary::default();
    };
    let count = |slot: u32| {
        skel.maps
            .py_counts
            .lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .map_or(0, |v| sum_percpu(&v))
    };
    PythonSummary {
        processes: py.found(),
        unsupported: py.unsupported(),
        walks: count(0),
        no_thread: count(1),
        truncated: count(2),
        bad_read: count(3),
        early_stacks: s.py_early(),
        stacks: s.py_statuses.clone(),
    }
}

/// The drop row for calls recorded without their Python frames, if any were.
fn python_drop(p: &PythonSummary) -> Option<Ctl> {
    let stacks = |k: &str| p.stacks.get(k).copied().unwrap_or(0);
    let (rejected, unreadable) = (stacks("rejected"), stacks("unreadable"));
    let count = p.no_thread + rejected + unreadable + p.unsupported + p.early_stacks;
    (count > 0).then(|| Ctl::Drop {
        kind: DropKind::PythonFrames,
        op: None,
        count,
        detail: format!(
            "Python frames missing: {} calls whose thread's interpreter state was not found, {rejected} stacks whose frames did not read as code objects, {unreadable} stacks of processes gone before their frames were read, {} stacks recorded before their process's interpreter was found, {} processes with an unsupported CPython",
            p.no_thread, p.early_stacks, p.unsupported
        ),
    })
}

/// The full-mode events still in the threads' batches (read when no program runs any more).
fn unflushed_events(skel: &CausewaySkel<'_>) -> Vec<RawEvent> {
    let mut out = Vec::new();
    for slot in 0..THREAD_SLOTS {
        let Ok(Some(v)) = skel.maps.batches.lookup(&slot.to_ne_bytes(), MapFlags::ANY) else {
            continue;
        };
        match decode_batch(&v) {
            Ok(events) => out.extend(events),
            Err(e) => debug!(error = %e, slot, "undecodable batch"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    use causeway_bpf::abi::{BATCH_EVENTS, BATCH_SIZE, EVENT_SIZE};
    use causeway_bpf::load::{LoadConfig, open_and_load};

    /// A `batches` value holding call events of `tids` (kind, op and pid set).
    fn batch(tids: &[u32]) -> Vec<u8> {
        let mut v = vec![0u8; BATCH_SIZE];
        v[0..4].copy_from_slice(&(tids.len() as u32).to_le_bytes());
        for (i, tid) in tids.iter().enumerate() {
            let e = &mut v[BATCH_EVENTS + i * EVENT_SIZE..][..EVENT_SIZE];
            e[0] = 1; // CW_KIND_CALL
            e[2..4].copy_from_slice(&3u16.to_le_bytes());
            e[4..8].copy_from_slice(&4242u32.to_le_bytes());
            e[8..12].copy_from_slice(&tid.to_le_bytes());
        }
        v
    }

    /// The end-of-trace read of the events left in the threads' batches, on the real map of a
    /// loaded object: every event of every slot that has some, in slot order. (Whether a thread
    /// still has events there when a trace ends depends on the scheduler, so the integration test
    /// `calls::events_still_batched_when_the_trace_ends_are_stored` cannot force this path.)
    #[test]
    fn events_left_in_the_batches_are_read_at_the_end() {
        if std::env::var_os("CAUSEWAY_SKIP_BPF_TESTS").is_some_and(|v| v == "1") {
            eprintln!(
                "events_left_in_the_batches_are_read_at_the_end: skipped (CAUSEWAY_SKIP_BPF_TESTS=1)"
            );
            return;
        }
        let mut storage = MaybeUninit::uninit();
        let cfg = LoadConfig {
            host: false,
            ..LoadConfig::default()
        };
        let skel = open_and_load(&mut storage, &cfg)
            .expect("load (needs root; CAUSEWAY_SKIP_BPF_TESTS=1 skips)");
        for (slot, tids) in [(7u32, &[70u32, 71][..]), (THREAD_SLOTS - 1, &[4095][..])] {
            skel.maps
                .batches
                .update(&slot.to_ne_bytes(), &batch(tids), MapFlags::ANY)
                .unwrap();
        }
        let tids: Vec<u32> = unflushed_events(&skel).iter().map(|e| e.tid).collect();
        assert_eq!(tids, [70, 71, 4095]);
    }
}
