//! Host waits shared by the input-side detectors: for launching threads, the gaps of at least
//! 1 ms between consecutive GPU calls and how much of them the thread slept (blocked off-CPU);
//! for every thread, the off-CPU time that overlaps its *own* block I/O requests. A launching
//! thread's gaps and I/O before it launches steadily (start-up) are left out.
//! Where GPU probes were sampled, a stored gap may hold calls that were made but not stored.
//! Where only launches were sampled, sleeps of at least [`SAMPLED_MIN_SLEEP_NS`] count (a
//! sleeping thread makes no call, and a launch that sleeps does so briefly: the driver spins
//! first); where an op that waits (a sync, a copy) was sampled, a sleep may have been inside
//! one of its calls, and the gap is left out.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use causeway_store::StoreError;
use causeway_store::duckdb;
use serde::Serialize;

use crate::facts::Ctx;
use crate::intervals::{Span, overlaps, sort, spans, union};
use crate::opsets;
use crate::scan::columns;

/// Waits of one thread.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadWaits {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Gaps >= 1 ms between GPU calls (launching threads only).
    pub gaps: u64,
    /// Their total length (ns).
    pub gap_ns: i64,
    /// Blocked (sleeping) off-CPU time inside those gaps (ns).
    pub blocked_in_gaps_ns: i64,
    /// Off-CPU time overlapping the thread's own block I/O (ns).
    pub io_wait_ns: i64,
    /// Block I/O requests the thread issued.
    pub io_requests: u64,
}

static IO_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT pid::BIGINT, tid::BIGINT, timestamp, duration FROM event_data
         WHERE (?::BOOLEAN OR node = ?) AND timestamp BETWEEN ? AND ? AND (?::BIGINT < 0 OR pid = ?::BIGINT)
           AND {}",
        opsets::IO.as_str()
    )
});

/// Shortest single sleep counted inside a gap of a sampled stretch.
pub const SAMPLED_MIN_SLEEP_NS: i64 = 1_000_000;

/// sched_wakeup's op id.
const WAKEUP_OP: u16 = causeway_ops::id("sched_wakeup");

static WAKES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT tid::BIGINT, timestamp, arg0 FROM event_data
         WHERE (?::BOOLEAN OR node = ?) AND op_id = {WAKEUP_OP} AND timestamp BETWEEN ? - {m} AND ? + {m}
           AND list_contains(string_split(?, ',')::UINTEGER[], tid)",
        m = crate::switches::MARGIN_NS
    )
});

/// The threads of `pid`'s child processes on `node` that make no GPU call: its input tasks
/// (DataLoader workers), whose wakeups of its threads hand over input.
pub fn input_tasks(ctx: &Ctx<'_>, node: &str, pid: u32) -> Vec<u32> {
    let child = |p: u32| p != pid && ctx.parents.get(&(node.to_string(), p)) == Some(&pid);
    let calling: std::collections::BTreeSet<u32> = ctx
        .threads
        .iter()
        .filter(|x| x.node == node && x.gpu_calls > 0)
        .map(|x| x.pid)
        .collect();
    let mut v: Vec<u32> = ctx
        .threads
        .iter()
        .filter(|x| x.node == node && child(x.pid) && !calling.contains(&x.pid))
        .map(|x| x.tid)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Computes [`ThreadWaits`] for the window of `ctx`.
pub fn host_waits(ctx: &Ctx<'_>) -> Result<Vec<ThreadWaits>, StoreError> {
    let (r, w) = (ctx.r, ctx.window);
    let mut by: BTreeMap<(String, u32, u32), ThreadWaits> = BTreeMap::new();
    for node in &ctx.nodes {
        let mut feeders: Vec<u32> = ctx
            .feeders()
            .iter()
            .filter(|t| &t.node == node)
            .map(|t| t.tid)
            .collect();
        feeders.sort_unstable();
        feeders.dedup();
        if !feeders.is_empty() {
            gaps(ctx, node, &feeders, &mut by)?;
        }
        let [pid, tid, ts, dur] = columns::<4>(
            r,
            IO_SQL.as_str(),
            duckdb::params![ctx.only_node, node, w.from_ns, w.until_ns, ctx.pid, ctx.pid],
            "measuring waits on block I/O",
        )?;
        let mut io: BTreeMap<u32, Vec<(i64, i64)>> = BTreeMap::new();
        let mut requests: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        let steady = ctx.timelines.get(node).map(|t| &t.steady_from);
        for i in 0..pid.len() {
            let (p, t) = (pid[i] as u32, tid[i] as u32);
            // A launching thread's reads before it launches steadily are start-up (imports
            // reading libraries from a cold page cache), not the loop waiting on the disk.
            if steady.and_then(|s| s.get(&t)).is_some_and(|&f| ts[i] < f) {
                continue;
            }
            *requests.entry((p, t)).or_default() += 1;
            io.entry(t).or_default().push((ts[i], ts[i] + dur[i]));
        }
        let mut waited: HashMap<u32, i64> = HashMap::new();
        for (t, v) in io {
            // Requests in flight together: their union, so that one sleep counts once.
            let merged = spans(union(v));
            let mut ns = 0i64;
            overlaps(&merged, ctx.switches.of(node, t), |_, _, ov| {
                ns = ns.saturating_add(ov)
            });
            waited.insert(t, ns);
        }
        for ((p, t), n) in requests {
            let ns = waited.get(&t).copied().unwrap_or(0);
            let off = ctx
                .threads
                .iter()
                .find(|x| &x.node == node && x.tid == t && x.pid == p)
                .map_or(ns, |x| x.off_ns);
            let e = by
                .entry((node.clone(), p, t))
                .or_insert_with(|| ThreadWaits {
                    node: node.clone(),
                    pid: p,
                    tid: t,
                    ..ThreadWaits::default()
                });
            e.io_requests = n;
            e.io_wait_ns = ns.min(off);
        }
    }
    Ok(by.into_values().collect())
}

/// Per launching thread of `blind` (its gaps where a waiting op was sampled), its sleeps that a
/// thread of its input tasks ended ([`input_tasks`]): (start, end), sorted.
fn woken_by_input(
    ctx: &Ctx<'_>,
    node: &str,
    blind: &BTreeMap<(u32, u32), Vec<Span<()>>>,
) -> Result<HashMap<u32, Vec<(i64, i64)>>, StoreError> {
    let w = ctx.window;
    let tids = crate::opsets::tid_list(blind.keys().map(|k| k.1));
    let [tid, ts, waker] = columns::<3>(
        ctx.r,
        WAKES_SQL.as_str(),
        duckdb::params![ctx.only_node, node, w.from_ns, w.until_ns, tids],
        "reading who woke the launching threads",
    )?;
    let mut wakes: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
    for i in 0..tid.len() {
        wakes
            .entry(tid[i] as u32)
            .or_default()
            .push((ts[i], waker[i]));
    }
    let mut out = HashMap::new();
    for &(p, t) in blind.keys() {
        let inputs = input_tasks(ctx, node, p);
        let Some(mut wk) = wakes.remove(&t) else {
            continue;
        };
        wk.sort_unstable();
        let v: Vec<(i64, i64)> = ctx
            .switches
            .of(node, t)
            .iter()
            .filter(|x| x.data.state == 1)
            .filter(|x| {
                // The wakeup that ended this sleep: the one stamped inside it.
                let i = wk.partition_point(|&(ts, _)| ts < x.start);
                wk.get(i).is_some_and(|&(ts, by)| {
                    ts <= x.end && by > 0 && inputs.binary_search(&(by as u32)).is_ok()
                })
            })
            .map(|x| (x.start, x.end))
            .collect();
        out.insert(t, v);
    }
    Ok(out)
}

/// The intersection of two lists of disjoint intervals sorted by start.
fn intersect(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s < e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Gaps of >= 1 ms between the GPU calls of the launching threads `tids` of `node`, and the
/// blocked off-CPU time inside them.
fn gaps(
    ctx: &Ctx<'_>,
    node: &str,
    tids: &[u32],
    by: &mut BTreeMap<(String, u32, u32), ThreadWaits>,
) -> Result<(), StoreError> {
    let Some(timeline) = ctx.timelines.get(node) else {
        return Ok(());
    };
    // Per thread: gaps in fully recorded stretches, then gaps where launches were sampled;
    // apart, gaps where a waiting op was sampled (only sleeps an input task ended count there).
    type Gaps = [Vec<Span<()>>; 2];
    let mut per_tid: BTreeMap<u32, Gaps> = BTreeMap::new();
    let mut blind: BTreeMap<(u32, u32), Vec<Span<()>>> = BTreeMap::new();
    let mut totals: BTreeMap<(u32, u32), (u64, i64)> = BTreeMap::new();
    let waits_sampled = ctx.sampled_waits.get(node);
    for g in timeline.gaps.iter().filter(|g| {
        tids.binary_search(&g.tid).is_ok()
            && timeline
                .steady_from
                .get(&g.tid)
                .is_none_or(|&f| g.start >= f)
    }) {
        let span = Span {
            start: g.start,
            end: g.end,
            data: (),
        };
        if waits_sampled.is_some_and(|s| crate::probe_overhead::in_sampled(s, g.start, g.end)) {
            blind.entry((g.pid, g.tid)).or_default().push(span);
            continue;
        }
        let e = totals.entry((g.pid, g.tid)).or_default();
        e.0 += 1;
        e.1 += g.end - g.start;
        let sampled = usize::from(ctx.sampled(node, g.start, g.end));
        per_tid.entry(g.tid).or_default()[sampled].push(span);
    }
    let mut blocked: HashMap<u32, i64> = HashMap::new();
    if !blind.is_empty() {
        let woken = woken_by_input(ctx, node, &blind)?;
        for ((p, t), mut v) in blind {
            sort(&mut v);
            let mut ns = 0i64;
            let mut hit: std::collections::BTreeSet<(i64, i64)> = Default::default();
            overlaps(
                &v,
                &spans(woken.get(&t).cloned().unwrap_or_default()),
                |g, _, ov| {
                    ns = ns.saturating_add(ov);
                    hit.insert((g.start, g.end));
                },
            );
            if !hit.is_empty() {
                let e = totals.entry((p, t)).or_default();
                e.0 += hit.len() as u64;
                e.1 += hit.iter().map(|(a, b)| b - a).sum::<i64>();
                *blocked.entry(t).or_default() += ns;
            }
        }
    }
    // A launching thread that sleeps while another launching thread of its process works is
    // handing over (PyTorch runs backward on its autograd thread while the main thread waits),
    // not waiting for input: only the time every launching thread of the process sleeps counts.
    let pid_of: HashMap<u32, u32> = ctx
        .threads
        .iter()
        .filter(|x| x.node == node && tids.binary_search(&x.tid).is_ok())
        .map(|x| (x.tid, x.pid))
        .collect();
    let sleeps_of = |t: u32, min: i64| -> Vec<(i64, i64)> {
        ctx.switches
            .of(node, t)
            .iter()
            .filter(|x| x.data.state == 1 && x.end - x.start >= min)
            .map(|x| (x.start, x.end))
            .collect()
    };
    for (t, gaps) in per_tid {
        let others: Vec<u32> = tids
            .iter()
            .copied()
            .filter(|&o| o != t && pid_of.contains_key(&o) && pid_of.get(&o) == pid_of.get(&t))
            .collect();
        // When every other launching thread of the process sleeps (computed once per thread).
        let others_asleep = others
            .iter()
            .map(|&o| sleeps_of(o, 0))
            .reduce(|a, b| intersect(&a, &b));
        let mut ns = 0i64;
        for (sampled, mut v) in gaps.into_iter().enumerate() {
            sort(&mut v);
            let min = if sampled == 1 {
                SAMPLED_MIN_SLEEP_NS
            } else {
                0
            };
            let own = sleeps_of(t, min);
            let all = match &others_asleep {
                Some(o) => intersect(&own, o),
                None => own,
            };
            overlaps(&v, &spans(all), |_, _, ov| ns = ns.saturating_add(ov));
        }
        *blocked.entry(t).or_default() += ns;
    }
    for ((p, t), (n, ns)) in totals {
        let e = by
            .entry((node.to_string(), p, t))
            .or_insert_with(|| ThreadWaits {
                node: node.to_string(),
                pid: p,
                tid: t,
                ..ThreadWaits::default()
            });
        e.gaps = n;
        e.gap_ns = ns;
        e.blocked_in_gaps_ns = blocked.get(&t).copied().unwrap_or(0).min(ns);
    }
    Ok(())
}
