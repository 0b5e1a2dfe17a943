//! Probe modes applied to the kernel and the links: the controller's switches, and the sampled
//! ops' attached and detached slices, each cutting the segments that measure their cost on the
//! job (insitu.rs). Detaching waits for RCU grace periods, so links go on a thread of their own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ProbeMode;
use causeway_bpf::abi::OpMode;
use causeway_bpf::libbpf_rs::{Link, MapCore, MapFlags};
use causeway_bpf::skel::CausewaySkel;
use causeway_store::InSituRow;
use causeway_store::catalog::op_by_id;
use tracing::{info, warn};

use super::{Recording, map_err};
use crate::attach::{OpProbes, drop_links};
use crate::error::CollectorError;
use crate::insitu::{Counts, sampled_ops};
use crate::overhead_control::{Controller, Switch};
use crate::poll::read_stats;
use crate::sampling::Sampler;
use crate::tuning::{DEFAULT_DUTY, DETACH_WAIT_MAX_S};

/// Sets what the kernel records for `op`'s calls; `returns_back` just before its return probes
/// come back, so that no return pairs with a frame left from before they went, even one that
/// fires before the mode is set (bpf events.h, the return-probe generation).
pub(super) fn set_op_mode(
    skel: &CausewaySkel<'_>,
    op: u16,
    mode: OpMode,
    returns_back: bool,
) -> Result<(), CollectorError> {
    let key = u32::from(op).to_ne_bytes();
    let map = &skel.maps.op_mode;
    let word = map
        .lookup(&key, MapFlags::ANY)
        .map_err(map_err("op_mode"))?
        .and_then(|v| v.try_into().ok())
        .map_or(0, u32::from_ne_bytes);
    let word = OpMode::word(mode, OpMode::generation(word) + u32::from(returns_back));
    map.update(&key, &word.to_ne_bytes(), MapFlags::ANY)
        .map_err(map_err("op_mode"))
}

/// Opens or closes the kernel's count of a sampled op's calls around its attached slice; a
/// failure only costs the estimate some exactness, so it is logged, not raised.
fn gate(skel: &CausewaySkel<'_>, op: u16, mode: OpMode, returns_back: bool) {
    if let Err(e) = set_op_mode(skel, op, mode, returns_back) {
        warn!(op, error = %e, "setting a sampled op's kernel mode failed");
    }
}

/// Which probes `op` needs now: none while sampling has it detached, else what its mode times.
pub(super) fn wanted(ctl: &Controller, sampler: &Sampler, op: u16) -> OpProbes {
    if sampler.is_detached(op) {
        OpProbes::Detached
    } else if ctl.mode(op).needs_return_probe() {
        OpProbes::EntryAndReturn
    } else {
        OpProbes::Entry
    }
}

/// Drops links lists on a thread of its own (each waits for RCU grace periods, tens of ms), so
/// that the ring keeps being drained meanwhile.
pub(super) struct Detacher {
    reap: Sender<Vec<Link>>,
    /// Lists sent and not dropped yet: until none is left, no op is attached again (an old
    /// entry link and a new one on the same function would count its calls twice).
    going: Arc<AtomicUsize>,
    thread: JoinHandle<()>,
}

impl Detacher {
    pub(super) fn start() -> Result<Detacher, CollectorError> {
        let (reap, reaped) = std::sync::mpsc::channel::<Vec<Link>>();
        let going = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new()
            .name("causeway-detach".into())
            .spawn({
                let going = going.clone();
                move || {
                    for links in reaped {
                        drop_links(links);
                        going.fetch_sub(1, Ordering::Release);
                    }
                }
            })
            .map_err(|source| CollectorError::Os {
                what: "starting the detach thread",
                source,
            })?;
        Ok(Detacher {
            reap,
            going,
            thread,
        })
    }

    /// Whether every list sent has been dropped.
    pub(super) fn idle(&self) -> bool {
        self.going.load(Ordering::Acquire) == 0
    }

    pub(super) fn send(&self, links: Vec<Link>) {
        self.going.fetch_add(1, Ordering::Release);
        let _ = self.reap.send(links);
    }

    /// Waits (at most [`DETACH_WAIT_MAX_S`]) until every list sent has been dropped. Only an op
    /// leaving sampled mode between its attached slices waits, once.
    fn wait(&self) {
        let since = Instant::now();
        while !self.idle() {
            if since.elapsed() >= Duration::from_secs(DETACH_WAIT_MAX_S) {
                warn!(
                    "old probe links still going after 5 s: attaching anyway (some calls may be counted twice)"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Drops what is left and ends the thread.
    pub(super) fn finish(self) {
        drop(self.reap);
        let _ = self.thread.join();
    }
}

impl Recording<'_, '_> {
    /// Applies one switch in the order that keeps every call counted and never leaves a timed
    /// call without its return probe: the mode goes first when return probes go away, last when
    /// they come back. An op entering sampled mode starts with its probes attached; one leaving
    /// it between its attached slices gets them back once its old links are gone.
    pub(super) fn apply(&mut self, s: &Switch) -> Result<(), CollectorError> {
        let (from, to) = (s.from.mode, s.to.mode);
        let skel = self.ctx.skel;
        let (op, duty) = (s.op, s.to.duty);
        let (sampling, attached) = (&mut self.sampling, &mut self.found.attached);
        let now = causeway_store::now_ns();
        let detached = from == ProbeMode::Sampled && to != from && sampling.sampler.stop(op, now);
        if to == ProbeMode::Sampled {
            sampling
                .sampler
                .start(op, duty.unwrap_or(DEFAULT_DUTY), now);
        }
        if detached {
            sampling.detacher.wait();
            set_op_mode(skel, op, to.kernel(), true)?;
            let want = if to.needs_return_probe() {
                OpProbes::EntryAndReturn
            } else {
                OpProbes::Entry
            };
            attached.attach_op_probes(skel, op, want);
        } else if from.needs_return_probe() && !to.needs_return_probe() {
            set_op_mode(skel, op, to.kernel(), false)?;
            attached.set_return_probes(skel, op, false);
        } else if !from.needs_return_probe() && to.needs_return_probe() {
            set_op_mode(skel, op, from.kernel(), true)?;
            attached.set_return_probes(skel, op, true);
            set_op_mode(skel, op, to.kernel(), false)?;
        } else {
            set_op_mode(skel, op, to.kernel(), false)?;
        }
        let name = op_by_id(op).map_or("?", |o| o.name);
        info!(op = name, from = from.name(), to = to.name(), reason = s.reason.name(), overhead_pct = format!("{:.2}", s.overhead_pct), duty = ?duty, "probe mode changed");
        Ok(())
    }

    /// Sampled ops whose slice has ended are switched, each switch cutting the in-situ meter's
    /// segments: one ends before the switch starts, the next begins once it is done (for a
    /// detach, once its links are gone).
    pub(super) fn switch_slices(&mut self) {
        let skel = self.ctx.skel;
        let s = &mut self.sampling;
        let attached = &mut self.found.attached;
        let due = s.sampler.due(causeway_store::now_ns());
        let sampled = if due.is_empty() && s.off_pending.is_empty() {
            BTreeSet::new()
        } else {
            sampled_ops(&self.ctl)
        };
        let counts = || Counts::of(&read_stats(skel));
        for (op, attach) in due {
            let duty = self.ctl.duty(op).unwrap_or(DEFAULT_DUTY);
            if attach {
                if s.detacher.idle() {
                    let began = causeway_store::now_ns();
                    s.meter.end(op, began, &counts(), &sampled);
                    gate(skel, op, OpMode::Off, true);
                    attached.attach_op_probes(skel, op, OpProbes::EntryAndReturn);
                    // The calls count from here, when every link is in (the estimate divides
                    // them by the time from here to the detach).
                    gate(skel, op, ProbeMode::Sampled.kernel(), false);
                    let at = causeway_store::now_ns();
                    s.sampler.switched(op, true, began, at, duty);
                    s.meter.begin(op, true, at, &counts(), &sampled);
                }
            } else {
                // No call counts from here, while the links go (tens of ms).
                gate(skel, op, OpMode::Off, false);
                let at = causeway_store::now_ns();
                s.meter.end(op, at, &counts(), &sampled);
                s.sampler.switched(op, false, at, at, duty);
                let (entries, exits) = attached.detach_op_probes(op);
                s.detacher.send(entries);
                s.detacher.send(exits);
                s.off_pending.insert(op);
            }
        }
        if !s.off_pending.is_empty() && s.detacher.idle() {
            let (c, at) = (counts(), causeway_store::now_ns());
            for op in std::mem::take(&mut s.off_pending) {
                s.sampler.settled(op, at);
                if s.sampler.is_detached(op) {
                    s.meter.begin(op, false, at, &c, &sampled);
                }
            }
        }
    }

    /// After the controller's switches: segments of ops that left sampled mode are dropped, ops
    /// that entered it (their probes attached) start measuring; the in-situ measurements go to
    /// the controller. Returns the rows to store.
    pub(super) fn follow_sampled(&mut self) -> Vec<InSituRow> {
        let s = &mut self.sampling;
        let sampled = sampled_ops(&self.ctl);
        for op in s.meter.open_ops() {
            if !sampled.contains(&op) {
                s.meter.stop(op);
            }
        }
        s.off_pending.retain(|op| sampled.contains(op));
        let fresh: Vec<u16> = sampled
            .iter()
            .copied()
            .filter(|op| !s.meter.is_open(*op) && !s.off_pending.contains(op))
            .filter(|op| !s.sampler.is_detached(*op))
            .collect();
        if !fresh.is_empty() {
            let (c, at) = (
                Counts::of(&read_stats(self.ctx.skel)),
                causeway_store::now_ns(),
            );
            for op in fresh {
                s.meter.begin(op, true, at, &c, &sampled);
            }
        }
        s.meter.update(&mut self.ctl, causeway_store::now_ns())
    }
}
