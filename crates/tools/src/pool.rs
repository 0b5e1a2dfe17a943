//! Read connections per trace: tool calls take one each, so a slow query never holds another
//! tool, `/metrics` or a second client. A finished recording's pool opens DuckDB once and
//! clones connections from it on demand (one instance: one cache, one memory limit); a live
//! recording's pool is the readers its writer handed out (the writer moves them across its
//! reopens). A reader whose query was abandoned stays taken until the query returns.

use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use causeway_store::{Reader, ReaderOptions, SharedReader};

use crate::error::ToolError;

/// Most connections a finished recording's pool opens.
pub const MAX_READERS: usize = 4;

/// How long a call waits for a connection when every one is taken.
pub const ACQUIRE_WAIT: Duration = Duration::from_secs(15);

struct Slot {
    reader: SharedReader,
    taken: AtomicBool,
}

/// The connections of one trace.
pub(crate) struct Pool {
    slots: Mutex<Vec<Arc<Slot>>>,
    /// What new connections are cloned from (finished recordings); never used for a query.
    origin: Option<Mutex<Reader>>,
    max: usize,
}

/// A connection taken from a pool, given back when dropped. Locking it waits only for a live
/// writer that is moving it to a reopened database.
pub struct Lease {
    slot: Arc<Slot>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").finish_non_exhaustive()
    }
}

impl Deref for Lease {
    type Target = Mutex<Reader>;
    fn deref(&self) -> &Mutex<Reader> {
        &self.slot.reader
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slot.taken.store(false, Ordering::Release);
    }
}

impl Pool {
    /// A pool over a finished recording's file.
    pub(crate) fn open(path: &Path, options: &ReaderOptions) -> Result<Pool, ToolError> {
        Ok(Pool {
            slots: Mutex::new(Vec::new()),
            origin: Some(Mutex::new(Reader::open_with(path, options)?)),
            max: MAX_READERS,
        })
    }

    /// A pool of a live recording's readers.
    pub(crate) fn live(readers: Vec<SharedReader>) -> Pool {
        let slots = readers
            .into_iter()
            .map(|reader| {
                Arc::new(Slot {
                    reader,
                    taken: AtomicBool::new(false),
                })
            })
            .collect::<Vec<_>>();
        Pool {
            max: slots.len(),
            slots: Mutex::new(slots),
            origin: None,
        }
    }

    /// The trace file (for error messages).
    pub(crate) fn path(&self) -> Option<std::path::PathBuf> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        match (&self.origin, slots.first()) {
            (Some(o), _) => Some(o.lock().unwrap_or_else(|p| p.into_inner()).path().into()),
            (None, Some(s)) => Some(
                s.reader
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .path()
                    .into(),
            ),
            (None, None) => None,
        }
    }

    /// A free connection (a new one while the pool has room), waiting up to `wait`.
    pub(crate) fn acquire(&self, wait: Duration) -> Result<Lease, ToolError> {
        let deadline = Instant::now() + wait;
        loop {
            {
                let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
                for slot in slots.iter() {
                    if slot
                        .taken
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        return Ok(Lease { slot: slot.clone() });
                    }
                }
                if slots.len() < self.max
                    && let Some(origin) = &self.origin
                {
                    let reader = origin
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .try_clone()?;
                    let slot = Arc::new(Slot {
                        reader: Arc::new(Mutex::new(reader)),
                        taken: AtomicBool::new(true),
                    });
                    slots.push(slot.clone());
                    return Ok(Lease { slot });
                }
            }
            if Instant::now() >= deadline {
                return Err(ToolError::failed(
                    format!(
                        "all {} connections to this trace are busy with other queries",
                        self.max
                    ),
                    "try again in a moment; long queries hold a connection until they end",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_store::{Writer, WriterOptions};

    fn store(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let path = dir.path().join("t.duckdb");
        Writer::create(&path, WriterOptions::default())
            .unwrap()
            .finish()
            .unwrap();
        path
    }

    #[test]
    fn leases_are_exclusive_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::open(&store(&dir), &ReaderOptions::default()).unwrap();
        let held: Vec<Lease> = (0..MAX_READERS)
            .map(|_| pool.acquire(Duration::ZERO).unwrap())
            .collect();
        let err = pool.acquire(Duration::from_millis(20)).unwrap_err();
        assert!(err.message().contains("busy"), "{}", err.message());
        drop(held);
        let again = pool.acquire(Duration::ZERO).unwrap();
        assert!(again.lock().unwrap().path().ends_with("t.duckdb"));
    }
}
