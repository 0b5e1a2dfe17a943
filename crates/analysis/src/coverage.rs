//! Where the trace cannot hold every call: processes whose tracing of a library began after
//! they could have called it (store: library_attach). `stats` and `explain` both say so.

use causeway_store::{Reader, StoreError};

use crate::fmt::dur;
use crate::window::Window;

const ANY_SQL: &str = "SELECT count(*) > 0 FROM library_attach WHERE NOT complete";

/// Attaches that may have missed calls, for a window that begins before the attach or at the
/// trace's start (a process already running then lacks its earlier calls): the latest first.
const GAPS_SQL: &str = "
SELECT a.pid, coalesce(any_value(p.comm), ''), a.how,
       string_agg(DISTINCT regexp_extract(a.library, '[^/]*$'), ', ' ORDER BY regexp_extract(a.library, '[^/]*$')),
       max(a.attached_ns), max(a.attached_ns - coalesce(a.mapped_ns, a.process_start_ns))
FROM library_attach a
LEFT JOIN processes p ON p.node = a.node AND p.pid = a.pid
WHERE NOT a.complete
  AND (a.attached_ns > ? OR ? <= (SELECT min(timestamp) FROM event_rows))
  AND (? < 0 OR a.pid = ?) AND (? = '' OR a.node = ?)
GROUP BY a.pid, a.how
ORDER BY max(a.attached_ns) DESC, a.pid
";

/// Whether a store of schema 7 or later (library_attach, kernels) answers `any_sql` (a
/// `SELECT count(*) > 0 ...`) with true: older and imported stores have nothing to say.
pub(crate) fn has_rows(
    r: &Reader,
    any_sql: &'static str,
    what: &'static str,
) -> Result<bool, StoreError> {
    if r.schema_version() < 7 {
        return Ok(false);
    }
    r.prepare_trusted(any_sql)?
        .query_row([], |row| row.get(0))
        .map_err(crate::base::errors::duck(r, what))
}

/// Notes shown at most; the rest are counted.
const SHOWN: usize = 5;

/// One line per process and way its tracing began late, for a window that begins before the
/// attach or at the trace's start (a later window does not miss those calls). Empty for stores
/// without the table (imported traces, schema < 7): they say nothing either way.
pub fn notes(
    r: &Reader,
    window: &Window,
    pid: Option<u32>,
    node: Option<&str>,
) -> Result<Vec<String>, StoreError> {
    if !has_rows(r, ANY_SQL, "reading library_attach")? {
        return Ok(Vec::new());
    }
    let pid = pid.map_or(-1, i64::from);
    let node = node.unwrap_or("");
    type Gap = (i64, String, String, String, i64, Option<i64>);
    let gaps: Vec<Gap> = r
        .prepare_trusted(GAPS_SQL)?
        .query_map(
            causeway_store::duckdb::params![window.from_ns, window.from_ns, pid, pid, node, node],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(crate::base::errors::duck(r, "reading library_attach"))?;
    let mut out: Vec<String> = gaps
        .iter()
        .take(SHOWN)
        .map(|(pid, comm, how, libs, _, gap)| {
            let who = if comm.is_empty() {
                format!("pid {pid}")
            } else {
                format!("pid {pid} ({})", causeway_store::sanitize::sanitize(comm))
            };
            let gap = gap.filter(|g| *g > 0).map(dur);
            match (how.as_str(), gap) {
                ("running", Some(g)) => format!(
                    "{who} had run {g} before the probes of {libs} were attached: its calls before are not in the trace"
                ),
                ("running", None) => format!(
                    "{who} was running before the probes of {libs} were attached: its calls before are not in the trace"
                ),
                ("hold_timeout", g) => format!(
                    "{who} was let go by the hold timeout before {libs} was attached{}: calls in between are not in the trace",
                    g.map(|g| format!(" ({g} after it was mapped)")).unwrap_or_default()
                ),
                (_, Some(g)) => format!(
                    "{who}: {libs} attached {g} after it was mapped: calls in between are not in the trace"
                ),
                (_, None) => format!(
                    "{who}: {libs} found by the periodic rescan: calls between its mapping and the attach are not in the trace"
                ),
            }
        })
        .collect();
    if gaps.len() > SHOWN {
        out.push(format!(
            "{} more processes began to be traced after they could have made calls (library_attach)",
            gaps.len() - SHOWN
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use causeway_store::{Event, LibraryAttach, Writer, WriterOptions};

    use crate::chains::ChainQuery;
    use crate::stats::{StatsQuery, trace_stats};
    use causeway_demo::model::op;

    const T0: i64 = 1_700_000_000_000_000_000;

    /// pid 7 was running 35 s before its runtime was attached; pid 8 was held (complete).
    fn store(dir: &std::path::Path) -> causeway_store::Reader {
        let p = dir.join("c.duckdb");
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        for (i, pid) in [7u32, 8].into_iter().enumerate() {
            w.append(&Event {
                timestamp: T0 + i as i64 * 1_000_000,
                duration: 10_000,
                pid,
                tid: pid,
                op_id: op("cudaLaunchKernel"),
                ..Event::default()
            })
            .unwrap();
        }
        let row = |pid, how, start: Option<i64>, complete| LibraryAttach {
            pid,
            library: "/usr/lib/libcudart.so.12".into(),
            how,
            process_start_ns: start,
            mapped_ns: None,
            attached_ns: T0 - 1_000_000,
            complete,
        };
        w.record_library_attach(&[
            row(7, "running", Some(T0 - 35_001_000_000), false),
            row(8, "held", None, true),
        ])
        .unwrap();
        w.finish().unwrap();
        causeway_store::Reader::open(&p).unwrap()
    }

    /// `stats` and `explain` say the same thing, about the process that may have lost calls
    /// only, and only for windows that begin before its attach.
    #[test]
    fn stats_and_explain_name_processes_whose_earlier_calls_are_missing() {
        let dir = tempfile::tempdir().unwrap();
        let r = store(dir.path());
        let stats = trace_stats(&r, &StatsQuery::default()).unwrap();
        assert_eq!(
            stats.notes,
            [
                "pid 7 had run 35.00 s before the probes of libcudart.so.12 were attached: its calls before are not in the trace"
            ]
        );
        let e = crate::engine::explain(&r, &ChainQuery::default()).unwrap();
        assert!(e.notes.contains(&stats.notes[0]), "{:?}", e.notes);
        let only8 = trace_stats(
            &r,
            &StatsQuery {
                pid: Some(8),
                ..StatsQuery::default()
            },
        )
        .unwrap();
        assert!(only8.notes.is_empty(), "{:?}", only8.notes);
        // A window that begins after the trace's start misses none of those calls.
        let later = trace_stats(
            &r,
            &StatsQuery {
                window: crate::window::WindowSpec::Range {
                    from: Some(crate::window::TimeRef::Absolute(T0 + 500_000)),
                    until: None,
                },
                ..StatsQuery::default()
            },
        )
        .unwrap();
        assert!(later.notes.is_empty(), "{:?}", later.notes);
    }
}
