//! Processes held while their new library's probes are attached (bpf mmap.h): released once the
//! attach is done, and by a watchdog thread when it takes too long, so that no call is missed
//! and a stuck collector never freezes the job.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use causeway_bpf::libbpf_rs::{MapCore, MapFlags, MapHandle, MapImpl};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;
use tracing::{debug, warn};

use crate::host;

/// How long a process may stay held before the watchdog lets it go (`trace --hold-timeout`).
pub const DEFAULT_HOLD_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the watchdog looks at the held processes.
const WATCH_EVERY: Duration = Duration::from_millis(10);
/// After holding is switched off, a program that read the switch just before may still be
/// about to stop a process: the last release waits this long first (programs run for µs).
const SETTLE: Duration = Duration::from_millis(20);

/// What holding did over a trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HoldSummary {
    /// Whether processes were held (causeway started the command and the hook is active).
    pub active: bool,
    /// Processes released after their files were looked at and attached.
    pub released: u64,
    /// Processes the watchdog released because the attach took longer than the timeout:
    /// calls they made before their probes were attached are missing.
    pub timeouts: u64,
    /// The longest hold, µs.
    pub max_us: u64,
    /// All holds together, µs (the time the job was stopped for causeway).
    pub total_us: u64,
}

#[derive(Default)]
struct Counters {
    /// Processes the watchdog let go (their attaches are incomplete).
    timed_out: std::sync::Mutex<std::collections::HashSet<u32>>,
    released: AtomicU64,
    timeouts: AtomicU64,
    max_us: AtomicU64,
    total_us: AtomicU64,
}

impl Counters {
    fn held_for(&self, since_mono_ns: u64) {
        let us = host::monotonic_ns().saturating_sub(since_mono_ns) / 1_000;
        self.max_us.fetch_max(us, Ordering::Relaxed);
        self.total_us.fetch_add(us, Ordering::Relaxed);
    }
}

/// The held processes of one trace: the kernel's `held` map (tgid -> time of the latest hold).
pub(crate) struct Holds {
    held: MapHandle,
    ctl: MapHandle,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

impl Holds {
    /// Switches holding on and starts the watchdog; `None` (logged) if either fails, and then
    /// nothing is held.
    pub(crate) fn start<T: std::fmt::Debug>(
        held: &MapImpl<'_, T>,
        ctl: &MapImpl<'_, T>,
        timeout: Duration,
    ) -> Option<Holds> {
        let handles = MapHandle::try_from(held).and_then(|h| Ok((h, MapHandle::try_from(ctl)?)));
        let (held, ctl) = match handles {
            Ok(h) => h,
            Err(err) => {
                warn!(%err, "cannot hold processes while their libraries are attached: calls made right after a library is mapped may be missed");
                return None;
            }
        };
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (held, counters, stop) = (
                MapHandle::try_from(&held).ok()?,
                counters.clone(),
                stop.clone(),
            );
            std::thread::Builder::new()
                .name("causeway-hold".into())
                .spawn(move || watch(&held, &counters, &stop, timeout))
                .ok()?
        };
        if let Err(err) = ctl.update(&0u32.to_ne_bytes(), &[1u8], MapFlags::ANY) {
            warn!(%err, "cannot switch holding on: calls made right after a library is mapped may be missed");
            stop.store(true, Ordering::Release);
            let _ = watchdog.join();
            return None;
        }
        Some(Holds {
            held,
            ctl,
            counters,
            stop,
            watchdog: Some(watchdog),
        })
    }

    /// The latest hold of `pid`, read before its new files are looked at.
    pub(crate) fn generation(&self, pid: u32) -> Option<u64> {
        self.held
            .lookup(&pid.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .and_then(|v| v.try_into().ok().map(u64::from_ne_bytes))
    }

    /// Whether the watchdog let `pid` go before its files were attached.
    pub(crate) fn timed_out(&self, pid: u32) -> bool {
        self.counters
            .timed_out
            .lock()
            .is_ok_and(|t| t.contains(&pid))
    }

    /// Lets `pid` go after what it mapped up to hold `seen` (its [`Self::generation`] before the
    /// files were looked at) is attached. A hold that came in meanwhile keeps it stopped: its
    /// record is handled next, with a scan that sees the new mapping.
    pub(crate) fn release(&self, pid: u32, seen: Option<u64>) {
        let key = pid.to_ne_bytes();
        let Some(now) = take(&self.held, pid) else {
            return; // not held, or the watchdog was first
        };
        if Some(now) != seen {
            let _ = self
                .held
                .update(&key, &now.to_ne_bytes(), MapFlags::NO_EXIST);
            return;
        }
        cont(pid);
        self.counters.released.fetch_add(1, Ordering::Relaxed);
        self.counters.held_for(now);
    }

    /// Switches holding off, stops the watchdog and releases every process still held.
    pub(crate) fn finish(mut self) -> HoldSummary {
        self.end();
        let c = &self.counters;
        HoldSummary {
            active: true,
            released: c.released.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            max_us: c.max_us.load(Ordering::Relaxed),
            total_us: c.total_us.load(Ordering::Relaxed),
        }
    }

    /// Switches holding off and lets every held process go, once.
    fn end(&mut self) {
        let Some(w) = self.watchdog.take() else {
            return;
        };
        let _ = self.ctl.update(&0u32.to_ne_bytes(), &[0u8], MapFlags::ANY);
        std::thread::sleep(SETTLE);
        self.stop.store(true, Ordering::Release);
        let _ = w.join();
        for pid in held_pids(&self.held) {
            if let Some(since) = take(&self.held, pid) {
                cont(pid);
                self.counters.released.fetch_add(1, Ordering::Relaxed);
                self.counters.held_for(since);
            }
        }
    }
}

impl Drop for Holds {
    /// On an error path nobody calls `finish`: nothing may stay stopped.
    fn drop(&mut self) {
        self.end();
    }
}

/// The watchdog: releases every process held longer than `timeout`.
fn watch(held: &MapHandle, counters: &Counters, stop: &AtomicBool, timeout: Duration) {
    let limit = timeout.as_nanos() as u64;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(WATCH_EVERY);
        let now = host::monotonic_ns();
        for pid in held_pids(held) {
            let since = held
                .lookup(&pid.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten()
                .and_then(|v| v.try_into().ok().map(u64::from_ne_bytes));
            if since.is_none_or(|s| now.saturating_sub(s) < limit) {
                continue;
            }
            if let Some(since) = take(held, pid) {
                cont(pid);
                counters.timeouts.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut t) = counters.timed_out.lock() {
                    t.insert(pid);
                }
                counters.held_for(since);
                warn!(
                    pid,
                    timeout_ms = timeout.as_millis() as u64,
                    "a process held while its library was attached was let go by the timeout: calls it made before the probes were attached are missing"
                );
            }
        }
    }
}

fn held_pids(held: &MapHandle) -> Vec<u32> {
    held.keys()
        .filter_map(|k| k.try_into().ok().map(u32::from_ne_bytes))
        .collect()
}

/// Deletes `pid`'s entry, returning its value if it was there (atomically: the watchdog and
/// the recorder never both release one hold).
fn take(held: &MapHandle, pid: u32) -> Option<u64> {
    held.lookup_and_delete(&pid.to_ne_bytes())
        .ok()
        .flatten()
        .and_then(|v| v.try_into().ok().map(u64::from_ne_bytes))
}

fn cont(pid: u32) {
    if let Err(err) = kill(Pid::from_raw(pid as i32), Signal::SIGCONT) {
        debug!(pid, %err, "SIGCONT to a held process failed (gone?)");
    }
}
