//! Calibration of what a probed call costs the traced thread, measured when a trace starts: four
//! functions of the collector, one per kind of first instruction (cost.rs), are timed without
//! probes, with the empty uprobe(+uretprobe) pair, and with causeway's own programs in each probe
//! mode, all in the same run. The overhead controller multiplies these costs by the calls the
//! kernel counted.
//!
//! The call probes normally ignore the collector's own process; the `calib_tid` load-time
//! setting lets them fire for this thread only, under the reserved op id `OP_CALIBRATE` (whose
//! counters, events and drops user space ignores and clears).

use std::hint::black_box;
use std::time::Instant;

use causeway_bpf::abi::{OP_CALIBRATE, OpMode, StatKey};
use causeway_bpf::libbpf_rs::{Link, MapCore, MapFlags, ProgramMut};
use causeway_bpf::probes::cookie;
use causeway_bpf::skel::CausewaySkel;
use tracing::{debug, info, warn};

use crate::attach::attach_at;
use crate::cost::{CostModel, Costs, FirstInsn};
use crate::tuning::{CALLS_FAST, CALLS_SLOW, ROUNDS, WARMUP};

/// One tiny function per kind of first instruction, written in assembly so that the first
/// instruction is exactly the one named. Each returns its argument plus one.
#[allow(unsafe_code)]
mod targets {
    // SAFETY (unsafe_code allowed in this module only): global_asm! defines the functions below;
    // they follow the System V ABI for `fn(u64) -> u64`: read rdi, write rax, restore rsp/rbp,
    // and touch no memory but their own stack slot.
    std::arch::global_asm!(
        ".pushsection .text.causeway_calibration,\"ax\",@progbits",
        ".p2align 4",
        "causeway_calib_push:",
        "push rbp",
        "mov rbp, rsp",
        "lea rax, [rdi + 1]",
        "pop rbp",
        "ret",
        ".p2align 4",
        "causeway_calib_nop:",
        ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
        "lea rax, [rdi + 1]",
        "ret",
        ".p2align 4",
        "causeway_calib_endbr:",
        "endbr64",
        "lea rax, [rdi + 1]",
        "ret",
        ".p2align 4",
        "causeway_calib_other:",
        "mov rax, rdi",
        "add rax, 1",
        "ret",
        ".popsection",
        ".globl causeway_calib_push",
        ".globl causeway_calib_nop",
        ".globl causeway_calib_endbr",
        ".globl causeway_calib_other",
    );

    unsafe extern "C" {
        pub safe fn causeway_calib_push(x: u64) -> u64;
        pub safe fn causeway_calib_nop(x: u64) -> u64;
        pub safe fn causeway_calib_endbr(x: u64) -> u64;
        pub safe fn causeway_calib_other(x: u64) -> u64;
    }
}

fn target(kind: FirstInsn) -> extern "C" fn(u64) -> u64 {
    match kind {
        FirstInsn::Push => targets::causeway_calib_push,
        FirstInsn::Nop => targets::causeway_calib_nop,
        FirstInsn::Endbr => targets::causeway_calib_endbr,
        FirstInsn::Other => targets::causeway_calib_other,
    }
}

/// ns per call of `kind`'s target.
fn time_calls(kind: FirstInsn) -> f64 {
    let n = if kind == FirstInsn::Other || kind == FirstInsn::Endbr {
        CALLS_SLOW
    } else {
        CALLS_FAST
    };
    let f = black_box(target(kind));
    // Warm up: the first hits after an attach set up the out-of-line slot and fault pages in.
    let mut x = 0u64;
    for i in 0..WARMUP {
        x = f(x ^ i);
    }
    // The thread's CPU time, not wall time: the probes' cost is CPU time charged to the calling
    // thread, and time spent preempted by other load (a shared machine) must not count.
    let t0 = thread_cpu_ns();
    for i in 0..n {
        x = f(x ^ i);
    }
    black_box(x);
    (thread_cpu_ns() - t0) as f64 / n as f64
}

fn thread_cpu_ns() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
        .unwrap_or(0)
}

/// Where a target lies in its file: (file, file offset), from /proc/self/maps.
fn location(kind: FirstInsn) -> Option<(String, usize)> {
    let addr = target(kind) as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (range, offset, path) = (f.first()?, f.get(2)?, f.get(5)?);
        let (lo, hi) = range.split_once('-')?;
        let lo = usize::from_str_radix(lo, 16).ok()?;
        let hi = usize::from_str_radix(hi, 16).ok()?;
        let off = usize::from_str_radix(offset, 16).ok()?;
        ((lo..hi).contains(&addr) && path.starts_with('/'))
            .then(|| (path.to_string(), addr - lo + off))
    })
}

fn set_mode(skel: &CausewaySkel<'_>, mode: OpMode) -> Result<(), causeway_bpf::libbpf_rs::Error> {
    skel.maps.op_mode.update(
        &u32::from(OP_CALIBRATE).to_ne_bytes(),
        &mode.value().to_ne_bytes(),
        MapFlags::ANY,
    )
}

/// The four targets' file and offsets.
struct Targets {
    path: String,
    offsets: Vec<usize>,
}

impl Targets {
    fn find() -> Option<Targets> {
        let mut path = None;
        let mut offsets = Vec::new();
        for kind in FirstInsn::ALL {
            let (p, off) = location(kind)?;
            if path.get_or_insert_with(|| p.clone()) != &p {
                return None;
            }
            offsets.push(off);
        }
        Some(Targets {
            path: path?,
            offsets,
        })
    }

    /// One link of `prog` on every target (one per target for classic uprobes).
    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        multi: bool,
        retprobe: bool,
    ) -> Result<Vec<Link>, causeway_bpf::libbpf_rs::Error> {
        let pid = std::process::id() as i32;
        let path = std::path::Path::new(&self.path);
        let points: Vec<(usize, u64)> = self
            .offsets
            .iter()
            .map(|&o| (o, cookie(OP_CALIBRATE, 0)))
            .collect();
        if multi {
            return Ok(vec![attach_at(prog, true, pid, path, &points, retprobe)?]);
        }
        points
            .iter()
            .map(|p| attach_at(prog, false, pid, path, &[*p], retprobe))
            .collect()
    }
}

/// Times every target: ns per call, in `FirstInsn::ALL` order.
fn time_all() -> Vec<f64> {
    FirstInsn::ALL.into_iter().map(time_calls).collect()
}

/// One round: the time per call of each configuration, minus the unprobed time, per kind.
fn round(
    skel: &CausewaySkel<'_>,
    multi: bool,
    t: &Targets,
) -> Result<Vec<Costs>, causeway_bpf::libbpf_rs::Error> {
    let p = &skel.progs;
    let (bare_in, bare_out, ours_in, ours_out) = if multi {
        (
            &p.cw_bare_entry_multi,
            &p.cw_bare_exit_multi,
            &p.cw_call_entry_multi,
            &p.cw_call_exit_multi,
        )
    } else {
        (
            &p.cw_bare_entry,
            &p.cw_bare_exit,
            &p.cw_call_entry,
            &p.cw_call_exit,
        )
    };
    let none = time_all();
    let entry = t.attach(bare_in, multi, false)?;
    let exit = t.attach(bare_out, multi, true)?;
    let bare_pair = time_all();
    drop(exit);
    let bare_entry = time_all();
    drop(entry);
    set_mode(skel, OpMode::Full)?;
    let entry = t.attach(ours_in, multi, false)?;
    let exit = t.attach(ours_out, multi, true)?;
    let full = time_all();
    set_mode(skel, OpMode::Aggregate)?;
    let aggregate = time_all();
    set_mode(skel, OpMode::EntryOnly)?;
    drop(exit);
    let entry_only = time_all();
    drop(entry);
    Ok((0..FirstInsn::ALL.len())
        .map(|i| {
            let d = |v: &[f64]| (v[i] - none[i]).max(0.0);
            Costs {
                bare_pair_ns: d(&bare_pair),
                bare_entry_ns: d(&bare_entry),
                full_ns: d(&full),
                aggregate_ns: d(&aggregate),
                entry_only_ns: d(&entry_only),
            }
        })
        .collect())
}

/// Measures the costs (a few tenths of a second). Needs a skeleton loaded with `bare` and
/// `calib_tid` set to the calling thread, `multi` as loaded; falls back to the documented
/// figures when that fails.
pub fn calibrate(skel: &CausewaySkel<'_>, multi: bool) -> CostModel {
    let started = Instant::now();
    let measured = Targets::find()
        .ok_or_else(|| "the calibration functions were not found in /proc/self/maps".to_string())
        .and_then(|t| {
            let mut best: Option<Vec<Costs>> = None;
            for _ in 0..ROUNDS {
                let r = round(skel, multi, &t).map_err(|e| e.to_string())?;
                best = Some(match best {
                    None => r,
                    Some(b) => b.into_iter().zip(r).map(|(a, c)| a.min(c)).collect(),
                });
            }
            best.ok_or_else(|| "no round".to_string())
        });
    let _ = set_mode(skel, OpMode::Full);
    clear_own_counters(skel);
    match measured {
        Ok(costs) => {
            let kinds: Vec<(FirstInsn, Costs)> = FirstInsn::ALL
                .into_iter()
                .zip(costs.into_iter().map(Costs::monotonic))
                .collect();
            for (kind, c) in &kinds {
                info!(
                    first_insn = kind.name(),
                    bare_pair_ns = c.bare_pair_ns as u64,
                    full_ns = c.full_ns as u64,
                    aggregate_ns = c.aggregate_ns as u64,
                    bare_entry_ns = c.bare_entry_ns as u64,
                    entry_only_ns = c.entry_only_ns as u64,
                    ratio = format!("{:.2}", c.full_ns / c.bare_pair_ns.max(1.0)),
                    "probe cost calibrated"
                );
            }
            debug!(
                ms = started.elapsed().as_millis() as u64,
                "calibration took"
            );
            CostModel {
                kinds,
                method: format!(
                    "calibrated at trace start: {CALLS_FAST} (emulated) / {CALLS_SLOW} (stepped) calls x {ROUNDS} rounds, smallest"
                ),
            }
        }
        Err(why) => {
            warn!(%why, "probe cost calibration failed; using the documented figures");
            CostModel::fallback(&why)
        }
    }
}

/// Removes the calibration's own entries from the statistics (their slots are left unused).
fn clear_own_counters(skel: &CausewaySkel<'_>) {
    let me = std::process::id();
    let mine: Vec<Vec<u8>> = skel
        .maps
        .stat_slots
        .keys()
        .filter(|k| StatKey::decode(k).is_some_and(|k| k.pid == me))
        .collect();
    for k in mine {
        if let Err(e) = skel.maps.stat_slots.delete(&k) {
            debug!(error = %e, "clearing a calibration counter");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_targets_compute_and_start_with_their_kind_of_instruction() {
        let t = Targets::find().expect("calibration targets in /proc/self/maps");
        let code = std::fs::read(&t.path).unwrap();
        for (kind, off) in FirstInsn::ALL.into_iter().zip(&t.offsets) {
            assert_eq!(FirstInsn::of(&code[*off..*off + 8]), kind);
            assert_eq!(target(kind)(41), 42);
        }
    }
}
