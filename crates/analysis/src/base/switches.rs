//! Off-CPU intervals (sched_switch rows) of the threads the engine examines, read once per
//! `explain` and shared by per-call attribution, the gap and I/O waits: per (node, tid), sorted
//! by start, with the node's timestamp convention applied (switch-out stamps cover
//! `[t, t + off]`, switch-in stamps from reference imports `[t - off, t]`).

use std::collections::HashMap;
use std::sync::LazyLock;

use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};

use crate::intervals::{Span, sort};
use crate::opsets::tid_list;
use crate::scan::{NodeRef, for_each_batch};
use crate::window::Window;

/// Switches this far outside the window are still read: an interval that starts before the
/// window can overlap a call inside it.
pub const MARGIN_NS: i64 = 60_000_000_000;

/// What one off-CPU interval records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Off {
    /// Process of the thread (as the row records it).
    pub pid: u32,
    /// The task that ran instead (arg0), when known.
    pub ran: i64,
    /// Run state when switched out (arg1): 0 preempted, 1 blocked, other unknown.
    pub state: i64,
}

/// Off-CPU intervals by (node, tid).
#[derive(Debug, Default)]
pub struct Switches {
    by: HashMap<(String, u32), Vec<Span<Off>>>,
}

static SWITCHES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT tid::BIGINT, pid::BIGINT, timestamp, duration, arg0, arg1 FROM event_data
         WHERE (?::BOOLEAN OR node = ?) AND op_id = {} AND timestamp BETWEEN ? - {MARGIN_NS} AND ? + {MARGIN_NS}
           AND list_contains(string_split(?, ',')::UINTEGER[], tid)",
        SWITCH_OP
    )
});

/// Op id of sched_switch.
pub const SWITCH_OP: u16 = causeway_ops::id("sched_switch");

impl Switches {
    /// Reads the off-CPU intervals of `tids` on `node` around window `w`.
    pub fn load(
        &mut self,
        r: &Reader,
        node: &NodeRef<'_>,
        w: Window,
        tids: &[u32],
        switch_in_stamps: bool,
    ) -> Result<(), StoreError> {
        if tids.is_empty() {
            return Ok(());
        }
        let mut by_tid: Vec<(u32, Vec<Span<Off>>)> = Vec::new();
        let mut index: HashMap<u32, usize> = HashMap::new();
        let mut at = usize::MAX;
        let tids = tid_list(tids.iter().copied());
        let params = duckdb::params![node.only, node.name, w.from_ns, w.until_ns, tids];
        for_each_batch::<6>(
            r,
            SWITCHES_SQL.as_str(),
            params,
            "reading off-CPU intervals",
            |cols| {
                let [tid, pid, ts, dur, arg0, arg1] = cols;
                for i in 0..tid.len() {
                    let th = tid[i] as u32;
                    if by_tid.get(at).is_none_or(|x| x.0 != th) {
                        at = *index.entry(th).or_insert_with(|| {
                            by_tid.push((th, Vec::new()));
                            by_tid.len() - 1
                        });
                    }
                    let start = if switch_in_stamps {
                        ts[i] - dur[i]
                    } else {
                        ts[i]
                    };
                    by_tid[at].1.push(Span {
                        start,
                        end: start + dur[i],
                        data: Off {
                            pid: pid[i] as u32,
                            ran: arg0[i],
                            state: arg1[i],
                        },
                    });
                }
            },
        )?;
        for (tid, mut v) in by_tid {
            sort(&mut v);
            self.by.insert((node.name.to_string(), tid), v);
        }
        Ok(())
    }

    /// The intervals of one thread, sorted by start (empty if none were read).
    pub fn of(&self, node: &str, tid: u32) -> &[Span<Off>] {
        self.by
            .get(&(node.to_string(), tid))
            .map_or(&[], |v| v.as_slice())
    }
}
