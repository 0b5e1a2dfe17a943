//! How each node's sched_switch rows are timestamped. Imported reference traces stamp them at
//! switch-in; the catalogue (and our collector) at switch-out. A thread cannot start a call
//! while off the CPU, so per imported node the reading with fewer impossible call starts wins
//! (0 of 586 vs 586 on the vLLM trace). Counted exactly by sorting, not by a pairwise join.

use std::collections::HashMap;
use std::sync::LazyLock;

use causeway_store::catalog::Source;
use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};

use crate::base::errors::duck;
use crate::intervals::strictly_inside;
use crate::opsets::op_filter;
use crate::scan::columns;
use crate::switches::SWITCH_OP;

const IMPORTED_SQL: &str = "SELECT node FROM nodes WHERE origin LIKE 'imported:%' ORDER BY node";

static CALLS_SQL: LazyLock<String> = LazyLock::new(|| {
    let calls = op_filter(|o| {
        matches!(
            o.source,
            Source::Cuda | Source::Driver | Source::Net | Source::Graph | Source::Nccl
        )
    });
    format!("SELECT tid::BIGINT, timestamp FROM event_data WHERE node = ? AND {calls}")
});

static SWITCHES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT tid::BIGINT, timestamp, duration FROM event_data WHERE node = ? AND op_id = {SWITCH_OP}"
    )
});

/// Call starts that would fall inside an off-CPU interval, under each reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Votes {
    /// If rows were stamped at switch-out (`[t, t + off]`).
    pub if_switch_out: i64,
    /// If rows were stamped at switch-in (`[t - off, t]`).
    pub if_switch_in: i64,
}

/// Imported nodes whose sched_switch rows read as switch-in stamps, as `\x1fnode\x1f...`.
pub fn resume_nodes(r: &Reader) -> Result<String, StoreError> {
    let nodes: Vec<String> = r
        .prepare_trusted(IMPORTED_SQL)?
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "listing imported nodes"))?;
    let mut out = String::from("\x1f");
    for n in nodes {
        let v = votes(r, &n)?;
        if v.if_switch_in < v.if_switch_out {
            out.push_str(&n);
            out.push('\x1f');
        }
    }
    Ok(out)
}

/// Counts the impossible call starts of one node under both readings (whole trace).
pub fn votes(r: &Reader, node: &str) -> Result<Votes, StoreError> {
    let action = "checking how sched_switch is timestamped";
    let [ctid, ct] = columns::<2>(r, CALLS_SQL.as_str(), duckdb::params![node], action)?;
    let [stid, sts, sd] = columns::<3>(r, SWITCHES_SQL.as_str(), duckdb::params![node], action)?;
    // Per thread: call starts, and the bounds of non-empty intervals under each reading.
    type Bounds = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);
    let mut by: HashMap<i64, Bounds> = HashMap::new();
    for (tid, t) in ctid.iter().zip(&ct) {
        by.entry(*tid).or_default().0.push(*t);
    }
    for i in 0..stid.len() {
        let (ts, d) = (sts[i], sd[i]);
        if d <= 0 {
            continue;
        }
        if let Some(b) = by.get_mut(&stid[i]) {
            b.1.push(ts);
            b.2.push(ts + d);
            b.3.push(ts - d);
            b.4.push(ts);
        }
    }
    let mut v = Votes::default();
    for (points, mut out_s, mut out_e, mut in_s, mut in_e) in by.into_values() {
        for x in [&mut out_s, &mut out_e, &mut in_s, &mut in_e] {
            x.sort_unstable();
        }
        v.if_switch_out += strictly_inside(&points, &out_s, &out_e);
        v.if_switch_in += strictly_inside(&points, &in_s, &in_e);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use causeway_store::{Event, Writer, WriterOptions};

    use super::*;
    use causeway_demo::model::op;

    /// A thread that makes a call 1 ms after each 5 ms off-CPU interval ends.
    fn trace(dir: &std::path::Path, origin: &str, switch_in_stamps: bool) -> Reader {
        let p = dir.join(format!("{origin}.duckdb"));
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        w.set_node("n1", origin, "").unwrap();
        let off = 5_000_000;
        for i in 0..50i64 {
            let out_at = 1_000_000_000 + i * 20_000_000;
            let stamp = if switch_in_stamps {
                out_at + off
            } else {
                out_at
            };
            let ev = |ts, d, name: &str| Event {
                timestamp: ts,
                duration: d,
                pid: 1,
                tid: 1,
                op_id: op(name),
                ..Event::default()
            };
            w.append(&ev(stamp, off, "sched_switch")).unwrap();
            w.append(&ev(out_at + off + 1_000_000, 10_000, "cudaLaunchKernel"))
                .unwrap();
        }
        w.finish().unwrap();
        Reader::open(&p).unwrap()
    }

    #[test]
    fn imported_switch_in_stamps_are_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let r = trace(dir.path(), "imported:ref.db", true);
        let v = votes(&r, "n1").unwrap();
        // Read as switch-out stamps, every call would start off the CPU (1 ms into the 5 ms).
        assert_eq!(
            v,
            Votes {
                if_switch_out: 50,
                if_switch_in: 0
            }
        );
        assert_eq!(resume_nodes(&r).unwrap(), "\x1fn1\x1f");

        let r = trace(dir.path(), "imported:other.db", false);
        assert_eq!(votes(&r, "n1").unwrap().if_switch_in, 0);
        assert_eq!(resume_nodes(&r).unwrap(), "\x1f");
        // Recordings are never re-read, whatever their rows look like.
        let r = trace(dir.path(), "recorded", true);
        assert_eq!(resume_nodes(&r).unwrap(), "\x1f");
    }
}
