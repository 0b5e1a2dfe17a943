//! The reference tool's per-minute counters (`event_aggregates`) as `op_counts`: "stored" is
//! what the new store holds (the events imported into each bucket), never the source's own
//! `stored` column, and counters that cannot be right are said and not kept as calls, so the
//! engine never extrapolates from them.

use std::collections::{BTreeMap, HashMap};

use causeway_store::OpCount;

/// The reference tool's buckets: minute-truncated nanoseconds since the epoch.
pub const BUCKET_NS: i64 = 60_000_000_000;

/// The bucket an event starting at `timestamp` falls in.
pub fn bucket(timestamp: i64) -> i64 {
    timestamp - timestamp.rem_euclid(BUCKET_NS)
}

/// Events imported per (pid, op, bucket).
pub type Stored = HashMap<(u32, u16, i64), u64>;

/// Why a (pid, op)'s counters were not kept as calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doubt {
    /// Fewer calls counted than events imported, over all buckets or grossly in one.
    BelowStored {
        /// Calls the source counted.
        counted: u64,
        /// Events imported.
        stored: u64,
    },
    /// Every bucket at least the events of all buckets so far, rising: running totals.
    Cumulative {
        /// Buckets.
        buckets: usize,
    },
}

/// The counters with `stored` taken from the imported events, and, per (pid, op) whose
/// counters cannot be right, why: their rows then count the stored events as calls.
pub fn reconcile(rows: Vec<OpCount>, stored: &Stored) -> (Vec<OpCount>, Vec<(u32, u16, Doubt)>) {
    let mut by: BTreeMap<(u32, u16), Vec<OpCount>> = BTreeMap::new();
    for mut r in rows {
        r.stored = stored
            .get(&(r.pid, r.op_id, r.window_start_ns))
            .copied()
            .unwrap_or(0);
        by.entry((r.pid, r.op_id)).or_default().push(r);
    }
    let mut out = Vec::new();
    let mut doubts = Vec::new();
    for ((pid, op), mut rows) in by {
        rows.sort_by_key(|r| r.window_start_ns);
        if let Some(d) = doubt(&rows) {
            for r in &mut rows {
                r.calls = r.stored;
            }
            doubts.push((pid, op, d));
        }
        out.extend(rows);
    }
    (out, doubts)
}

/// Whether one (pid, op)'s rows, in time order, cannot be per-bucket counts of its calls.
fn doubt(rows: &[OpCount]) -> Option<Doubt> {
    let counted: u64 = rows.iter().map(|r| r.calls).fold(0, u64::saturating_add);
    let stored: u64 = rows.iter().map(|r| r.stored).sum();
    // One bucket may lose a few events to the next one (where a call is bucketed by its end);
    // half of a bucket's events missing from its count is not that.
    let gross = rows
        .iter()
        .any(|r| r.stored >= 10 && r.calls * 2 < r.stored);
    if counted < stored || gross {
        return Some(Doubt::BelowStored { counted, stored });
    }
    let mut so_far = 0u64;
    let rising = rows.windows(2).all(|w| w[1].calls > w[0].calls);
    let covers = rows.iter().all(|r| {
        so_far += r.stored;
        r.calls >= so_far
    });
    let any_events = rows.iter().filter(|r| r.stored > 0).count() >= 2;
    (rows.len() >= 3 && rising && covers && any_events).then_some(Doubt::Cumulative {
        buckets: rows.len(),
    })
}

impl Doubt {
    /// One line for the import summary.
    pub fn describe(&self, pid: u32, op: &str) -> String {
        match self {
            Doubt::BelowStored { counted, stored } => format!(
                "pid {pid} {op}: the source counted {counted} calls where the file holds {stored} events: counters not used (no figure is scaled from them)"
            ),
            Doubt::Cumulative { buckets } => format!(
                "pid {pid} {op}: the source's counters rise in all {buckets} minutes and each covers every event so far (running totals?): counters not used (no figure is scaled from them)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_040_000_000_000;

    fn row(pid: u32, op: u16, minute: i64, calls: u64, source_stored: u64) -> OpCount {
        OpCount {
            pid,
            op_id: op,
            window_start_ns: T + minute * BUCKET_NS,
            window_end_ns: T + (minute + 1) * BUCKET_NS,
            calls,
            stored: source_stored,
            total_ns: 0,
            bytes: 0,
        }
    }

    fn stored(v: &[(u32, u16, i64, u64)]) -> Stored {
        v.iter()
            .map(|&(p, o, m, n)| ((p, o, T + m * BUCKET_NS), n))
            .collect()
    }

    /// The held-out trace of issue 50: the source said 6 stored where the file held 310.
    #[test]
    fn stored_comes_from_the_imported_events_not_the_source_column() {
        let (rows, doubts) = reconcile(vec![row(1, 5, 0, 675, 6)], &stored(&[(1, 5, 0, 310)]));
        assert_eq!((rows[0].calls, rows[0].stored), (675, 310));
        assert!(doubts.is_empty());
    }

    #[test]
    fn counters_below_the_events_are_not_kept_as_calls() {
        let (rows, doubts) = reconcile(
            vec![row(1, 5, 0, 40, 40), row(1, 5, 1, 3, 3)],
            &stored(&[(1, 5, 0, 20), (1, 5, 1, 30)]),
        );
        assert_eq!(
            doubts,
            vec![(
                1,
                5,
                Doubt::BelowStored {
                    counted: 43,
                    stored: 50
                }
            )]
        );
        assert_eq!(rows.iter().map(|r| r.calls).collect::<Vec<_>>(), [20, 30]);
    }

    #[test]
    fn running_totals_are_said_and_not_kept() {
        let (rows, doubts) = reconcile(
            vec![
                row(2, 3, 0, 100, 0),
                row(2, 3, 1, 210, 0),
                row(2, 3, 2, 330, 0),
            ],
            &stored(&[(2, 3, 0, 10), (2, 3, 1, 11), (2, 3, 2, 12)]),
        );
        assert_eq!(doubts, vec![(2, 3, Doubt::Cumulative { buckets: 3 })]);
        assert_eq!(rows.iter().map(|r| r.calls).sum::<u64>(), 33);
    }

    /// Sampled storage with a steady rate is what the counters are for: kept.
    #[test]
    fn steady_sampled_counters_are_kept() {
        let (rows, doubts) = reconcile(
            vec![
                row(2, 3, 0, 100, 0),
                row(2, 3, 1, 98, 0),
                row(2, 3, 2, 103, 0),
            ],
            &stored(&[(2, 3, 0, 10), (2, 3, 1, 11), (2, 3, 2, 12)]),
        );
        assert!(doubts.is_empty());
        assert_eq!(rows.iter().map(|r| r.calls).sum::<u64>(), 301);
    }

    #[test]
    fn buckets_are_minutes_since_the_epoch() {
        assert_eq!(bucket(T + 59_999_999_999), T);
        assert_eq!(bucket(T + BUCKET_NS), T + BUCKET_NS);
    }
}
