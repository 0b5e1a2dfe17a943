//! The live page's report cache: one built report per window and filters, answered again while
//! the store is unchanged (a cheap version query decides), and rebuilt at most once per
//! interval while it grows, so polling pages cost the server little whatever the trace's size.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_report::ReportData;
use causeway_store::{Reader, StoreError};

/// Reports kept (one per distinct window and filters; the oldest goes first).
pub const MAX_ENTRIES: usize = 16;

/// Shortest time between two builds of the same report while the store changes.
pub const MIN_REBUILD: Duration = Duration::from_secs(2);

/// A rebuild waits at least this many times the last build's duration, so a large growing
/// trace keeps the server busy a fifth of the time at most.
pub const REBUILD_FACTOR: u32 = 4;

// Row counts of every table (appends), the exact count of events, and a hash of the small
// tables that are rewritten in place (received snapshots replace op_counts/op_histograms rows,
// sessions get their stop time, nodes and processes their names): any commit the report could
// show changes one of them.
const VERSION_SQL: &str = "
SELECT (SELECT string_agg(table_name || '=' || estimated_size, ',' ORDER BY table_name)
        FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main')
    || ';' || (SELECT count(*) FROM event_rows)
    || ';' || (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM op_counts t)
    || ';' || (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM op_histograms t)
    || ';' || (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM drops t)
    || ';' || (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM sessions t)
    || ';' || (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM nodes t)
    || ';' || (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM processes t)";

/// What the store holds, in a string that changes whenever anything a report shows changes.
pub fn store_version(r: &Reader) -> Result<String, StoreError> {
    r.prepare_trusted(VERSION_SQL)?
        .query_row([], |row| row.get::<_, Option<String>>(0))
        .map(Option::unwrap_or_default)
        .map_err(|source| StoreError::Duck {
            path: r.path().to_path_buf(),
            action: "reading the store's version",
            source,
        })
}

/// One built report.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The store's version it was built from.
    pub version: String,
    /// The report.
    pub data: Arc<ReportData>,
    /// When it was built.
    pub built: Instant,
    /// How long building it took.
    pub took: Duration,
}

/// What to answer a request with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The cached report: the store is unchanged since it was built.
    Current,
    /// The cached report, though the store changed: the last build is too recent.
    Stale,
    /// Build the report again.
    Build,
}

impl Entry {
    /// What to do with this entry for a store now at `version`.
    pub fn decide(&self, version: &str, now: Instant) -> Decision {
        if self.version == version {
            return Decision::Current;
        }
        let wait = MIN_REBUILD.max(self.took * REBUILD_FACTOR);
        if now.saturating_duration_since(self.built) < wait {
            Decision::Stale
        } else {
            Decision::Build
        }
    }
}

/// Built reports by query (window and filters as a string).
#[derive(Debug, Default)]
pub struct ReportCache {
    entries: HashMap<String, Entry>,
}

impl ReportCache {
    /// The entry of `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// Keeps `e` as `key`'s report, forgetting the oldest build when full.
    pub fn put(&mut self, key: String, e: Entry) {
        if !self.entries.contains_key(&key) && self.entries.len() >= MAX_ENTRIES {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.built)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(key, e);
    }

    /// Reports kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_store::{Event, SessionInfo, Writer, WriterOptions};

    fn entry(version: &str, built: Instant, took: Duration) -> Entry {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.duckdb");
        let w = Writer::create(&path, WriterOptions::default()).unwrap();
        let live = w.live_reader().unwrap();
        let r = live.lock().unwrap();
        let data = causeway_report::build(&r, &Default::default(), &Default::default()).unwrap();
        Entry {
            version: version.into(),
            data: Arc::new(data),
            built,
            took,
        }
    }

    #[test]
    fn unchanged_store_is_answered_from_the_cache_and_a_growing_one_rebuilt_at_most_once_per_interval()
     {
        let t0 = Instant::now();
        let e = entry("v1", t0, Duration::from_millis(100));
        assert_eq!(
            e.decide("v1", t0 + Duration::from_secs(3600)),
            Decision::Current
        );
        assert_eq!(
            e.decide("v2", t0 + Duration::from_millis(500)),
            Decision::Stale
        );
        assert_eq!(e.decide("v2", t0 + MIN_REBUILD), Decision::Build);
        // A slow build waits REBUILD_FACTOR times its duration before the next.
        let slow = entry("v1", t0, Duration::from_secs(3));
        assert_eq!(
            slow.decide("v2", t0 + Duration::from_secs(11)),
            Decision::Stale
        );
        assert_eq!(
            slow.decide("v2", t0 + Duration::from_secs(12)),
            Decision::Build
        );
    }

    #[test]
    fn the_cache_keeps_at_most_its_cap_and_forgets_the_oldest() {
        let t0 = Instant::now();
        let mut c = ReportCache::default();
        let e = entry("v", t0, Duration::ZERO);
        for i in 0..MAX_ENTRIES + 3 {
            let mut e = e.clone();
            e.built = t0 + Duration::from_secs(i as u64);
            c.put(format!("q{i}"), e);
        }
        assert_eq!(c.len(), MAX_ENTRIES);
        assert!(c.get("q0").is_none() && c.get("q2").is_none());
        assert!(c.get("q3").is_some() && c.get(&format!("q{}", MAX_ENTRIES + 2)).is_some());
    }

    #[test]
    fn a_clock_before_the_build_counts_as_too_recent() {
        // Instants from another thread may read earlier than `built`: no rebuild storm then.
        let t0 = Instant::now() + Duration::from_secs(60);
        let e = entry("v1", t0, Duration::ZERO);
        assert_eq!(
            e.decide("v2", t0 - Duration::from_secs(30)),
            Decision::Stale
        );
        assert_eq!(
            e.decide("v1", t0 - Duration::from_secs(30)),
            Decision::Current
        );
    }

    #[test]
    fn rebuilding_a_kept_report_at_the_cap_forgets_no_other() {
        let t0 = Instant::now();
        let mut c = ReportCache::default();
        assert!(c.is_empty());
        let e = entry("v", t0, Duration::ZERO);
        for i in 0..MAX_ENTRIES {
            let mut e = e.clone();
            e.built = t0 + Duration::from_secs(i as u64);
            c.put(format!("q{i}"), e);
        }
        let mut newer = e.clone();
        newer.version = "v2".into();
        newer.built = t0 + Duration::from_secs(3600);
        c.put("q5".into(), newer);
        assert_eq!(c.len(), MAX_ENTRIES);
        assert!((0..MAX_ENTRIES).all(|i| c.get(&format!("q{i}")).is_some()));
        assert_eq!(c.get("q5").unwrap().version, "v2");
    }

    #[test]
    fn store_version_changes_with_appended_events_and_rows_updated_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.duckdb");
        let mut w = Writer::create(&path, WriterOptions::default()).unwrap();
        let live = w.live_reader().unwrap();
        let version = || store_version(&live.lock().unwrap()).unwrap();
        let empty = version();
        assert_eq!(version(), empty, "reading it changes nothing");
        let session = w
            .begin_session(&SessionInfo {
                started_ns: 1_000,
                ..SessionInfo::default()
            })
            .unwrap();
        w.flush().unwrap();
        let started = version();
        assert_ne!(started, empty, "a session was added");
        w.append(&Event {
            timestamp: 2_000,
            duration: 10,
            pid: 7,
            tid: 7,
            op_id: 1,
            ..Event::default()
        })
        .unwrap();
        w.flush().unwrap();
        let appended = version();
        assert_ne!(appended, started, "an event was appended");
        w.end_session(session, 3_000).unwrap();
        w.flush().unwrap();
        assert_ne!(
            version(),
            appended,
            "the session's stop time was set in place"
        );
    }
}
