//! What every importer leaves out, and how it says so: events with an impossible value
//! (`import_invalid` drops), and names counted one by one up to a bound (`import_skipped`).

use std::collections::BTreeMap;

use causeway_store::{StoreError, Writer};

use crate::ImportError;

/// The largest pid or tid Linux hands out (`PID_MAX_LIMIT`, 2^22).
pub(crate) const MAX_PID: i64 = 1 << 22;

/// Why an event cannot be stored as it is, if it cannot.
pub(crate) fn invalid_event(timestamp: i64, pid: i64, tid: i64) -> Option<String> {
    if !(0..=causeway_store::MAX_TIMESTAMP_NS).contains(&timestamp) {
        Some(format!("timestamp {timestamp} ns"))
    } else if !(0..=MAX_PID).contains(&pid) {
        Some(format!("pid {pid}"))
    } else if !(0..=MAX_PID).contains(&tid) {
        Some(format!("tid {tid}"))
    } else {
        None
    }
}

/// Events skipped for an impossible value: how many, and the first with why.
#[derive(Debug, Default)]
pub(crate) struct Invalid {
    count: u64,
    first: Option<(i64, String)>,
}

impl Invalid {
    pub(crate) fn note(&mut self, rowid: i64, why: String) {
        self.count += 1;
        self.first.get_or_insert((rowid, why));
    }

    /// Stores the count as an `import_invalid` drop naming the first (`place` says where it is
    /// in the source); returns the count.
    pub(crate) fn store(
        &self,
        w: &mut Writer,
        origin: &str,
        place: impl Fn(i64) -> String,
    ) -> Result<u64, StoreError> {
        if let Some((first, why)) = &self.first {
            w.record_drop(
                "import_invalid",
                None,
                self.count,
                &format!(
                    "{origin}: events with an impossible value were skipped (the first: {}, {why})",
                    place(*first)
                ),
            )?;
        }
        Ok(self.count)
    }
}

/// Distinct names an importer counts one by one in its report and drops; the rest together.
const MAX_KINDS: usize = 256;

/// Counts `n` of `key` in `map`, one entry per distinct key up to [`MAX_KINDS`], then
/// `(others)`: a file of made-up call names cannot grow the report without bound.
pub(crate) fn tally(map: &mut BTreeMap<String, u64>, key: &str, n: u64) {
    if let Some(v) = map.get_mut(key) {
        *v += n;
    } else if map.len() < MAX_KINDS {
        map.insert(key.to_string(), n);
    } else {
        *map.entry("(others)".to_string()).or_default() += n;
    }
}

/// Records the runtime calls a source held that the op catalogue lacks, one `import_skipped`
/// drop per call name, and returns how many there were.
pub(crate) fn record_skipped(
    w: &mut Writer,
    origin: &str,
    skipped: &BTreeMap<String, u64>,
) -> Result<u64, ImportError> {
    let mut total = 0;
    for (name, n) in skipped {
        total += n;
        w.record_drop(
            "import_skipped",
            None,
            *n,
            &format!("{origin}: runtime call {name} is not in the op catalogue"),
        )?;
    }
    Ok(total)
}
