//! The ingest queue: network handlers submit decoded rows, one writer thread commits them to
//! the cluster store in group commits (everything queued, up to a batch size, in one
//! transaction) and then answers each submitter. The queue is bounded by items: when it is full
//! a submit is refused (the network answers 503 / UNAVAILABLE, which OTLP senders
//! retry) instead of anything being dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use causeway_store::StoreError;
use causeway_store::received::{CollectedStore, Received};
use serde::Serialize;

/// Called once a submitted batch is committed (Ok) or failed to be written (Err: why).
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Queue sizes.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Items (points, records) waiting for the writer before submits are refused.
    pub max_queued_items: u64,
    /// Items committed together at most.
    pub max_batch_items: u64,
}

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            max_queued_items: 1_000_000,
            max_batch_items: 200_000,
        }
    }
}

/// Why a submit was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full: retry later.
    #[error("the ingest queue is full ({queued} items waiting)")]
    Busy {
        /// Items waiting.
        queued: u64,
    },
    /// The store is shutting down or its writer stopped.
    #[error("the cluster store is closing")]
    Closed,
    /// One request holds more items than the whole queue: it can never be taken.
    #[error(
        "the request holds {items} points and records; at most {max} fit the ingest queue (--queue-items): split it into smaller batches"
    )]
    TooLarge {
        /// Items in the request.
        items: u64,
        /// The queue's size.
        max: u64,
    },
}

/// Counters since start.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    busy: AtomicU64,
    invalid: AtomicU64,
    unauthorized: AtomicU64,
    partial: AtomicU64,
    rejected_items: AtomicU64,
    stored_items: AtomicU64,
    commits: AtomicU64,
    write_failures: AtomicU64,
    reopens: AtomicU64,
}

/// What the collector did since it started.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct IngestStats {
    /// Requests whose rows were accepted into the queue.
    pub requests_accepted: u64,
    /// Requests refused because the queue was full (503 / UNAVAILABLE).
    pub requests_busy: u64,
    /// Requests refused as malformed (400 / INVALID_ARGUMENT).
    pub requests_invalid: u64,
    /// Requests refused for a missing or wrong token (401 / UNAUTHENTICATED).
    pub requests_unauthorized: u64,
    /// Accepted requests of which some points or records were rejected (partial success).
    pub partial_successes: u64,
    /// Points and records rejected inside accepted requests.
    pub rejected_items: u64,
    /// Points and records committed to the store.
    pub stored_items: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Batches the store failed to write (their senders were told to retry).
    pub write_failures: u64,
    /// Items waiting for the writer now.
    pub queued_items: u64,
    /// Times the store's database was closed and opened again to free DuckDB's metadata of the
    /// row groups written ([`CollectedStore::maybe_reopen`]).
    pub store_reopens: u64,
}

struct Job {
    rows: Received,
    items: u64,
    done: Done,
}

/// The handle network handlers share.
pub struct Ingest {
    tx: Mutex<Option<SyncSender<Job>>>,
    writer: Mutex<Option<JoinHandle<Result<(), StoreError>>>>,
    queued: Arc<AtomicU64>,
    counters: Arc<Counters>,
    opts: IngestOptions,
}

impl std::fmt::Debug for Ingest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest").field("opts", &self.opts).finish()
    }
}

impl Ingest {
    /// Starts the writer thread over `store`.
    pub fn start(store: CollectedStore, opts: IngestOptions) -> std::io::Result<Ingest> {
        // The channel bound is a backstop; the item count is what limits the queue.
        let (tx, rx) = sync_channel::<Job>(4096);
        let queued = Arc::new(AtomicU64::new(0));
        let counters = Arc::new(Counters::default());
        let writer = {
            let queued = queued.clone();
            let counters = counters.clone();
            let max_batch = opts.max_batch_items;
            std::thread::Builder::new()
                .name("causeway-ingest".into())
                .spawn(move || write_loop(store, rx, queued, counters, max_batch))?
        };
        Ok(Ingest {
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            queued,
            counters,
            opts,
        })
    }

    /// Queues decoded rows; `done` is called after they are committed. Refused when the queue
    /// is full (nothing of `rows` is kept: the sender retries the whole request), and for good
    /// when the rows alone are more than the whole queue holds.
    pub fn submit(&self, rows: Received, done: Done) -> Result<(), SubmitError> {
        let items = rows.items();
        if items > self.opts.max_queued_items {
            self.counters.invalid.fetch_add(1, Ordering::Relaxed);
            return Err(SubmitError::TooLarge {
                items,
                max: self.opts.max_queued_items,
            });
        }
        let before = self.queued.fetch_add(items, Ordering::AcqRel);
        if before + items > self.opts.max_queued_items {
            self.queued.fetch_sub(items, Ordering::AcqRel);
            self.counters.busy.fetch_add(1, Ordering::Relaxed);
            return Err(SubmitError::Busy { queued: before });
        }
        let tx = self.tx.lock().map_err(|_| SubmitError::Closed)?.clone();
        let Some(tx) = tx else {
            self.queued.fetch_sub(items, Ordering::AcqRel);
            return Err(SubmitError::Closed);
        };
        match tx.try_send(Job { rows, items, done }) {
            Ok(()) => {
                self.counters.requests.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(TrySendError::Full(_)) => {
                self.queued.fetch_sub(items, Ordering::AcqRel);
                self.counters.busy.fetch_add(1, Ordering::Relaxed);
                Err(SubmitError::Busy { queued: before })
            }
            Err(TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(items, Ordering::AcqRel);
                Err(SubmitError::Closed)
            }
        }
    }

    /// Counts a request refused as malformed.
    pub fn count_invalid(&self) {
        self.counters.invalid.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused for its token.
    pub fn count_unauthorized(&self) {
        self.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts points or records rejected inside an accepted request.
    pub fn count_partial(&self, rejected: u64) {
        if rejected > 0 {
            self.counters.partial.fetch_add(1, Ordering::Relaxed);
            self.counters
                .rejected_items
                .fetch_add(rejected, Ordering::Relaxed);
        }
    }

    /// The counters now.
    pub fn stats(&self) -> IngestStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IngestStats {
            requests_accepted: g(&c.requests),
            requests_busy: g(&c.busy),
            requests_invalid: g(&c.invalid),
            requests_unauthorized: g(&c.unauthorized),
            partial_successes: g(&c.partial),
            rejected_items: g(&c.rejected_items),
            stored_items: g(&c.stored_items),
            commits: g(&c.commits),
            write_failures: g(&c.write_failures),
            queued_items: self.queued.load(Ordering::Relaxed),
            store_reopens: g(&c.reopens),
        }
    }

    /// Refuses new submits, commits everything queued, and closes the store (checkpointed,
    /// complete). Returns the final counters.
    pub fn shutdown(&self) -> Result<IngestStats, StoreError> {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(h) = handle {
            match h.join() {
                Ok(r) => r?,
                Err(_) => {
                    return Err(StoreError::Query {
                        message: "the ingest writer thread panicked".into(),
                        hint: "this is a bug in causeway; please report it".into(),
                    });
                }
            }
        }
        Ok(self.stats())
    }
}

fn write_loop(
    mut store: CollectedStore,
    rx: Receiver<Job>,
    queued: Arc<AtomicU64>,
    counters: Arc<Counters>,
    max_batch: u64,
) -> Result<(), StoreError> {
    while let Ok(first) = rx.recv() {
        let mut items = first.items;
        let mut jobs = vec![first];
        while items < max_batch {
            match rx.try_recv() {
                Ok(j) => {
                    items += j.items;
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        commit(&mut store, jobs, &counters);
        queued.fetch_sub(items, Ordering::AcqRel);
        store = match store.maybe_reopen() {
            Ok(s) => {
                counters.reopens.store(s.reopens(), Ordering::Relaxed);
                s
            }
            Err(e) => {
                // Everything committed is in the file; what comes later cannot be written.
                tracing::error!(error = %e, "reopening the cluster store failed: it takes no more data");
                let why = format!("the cluster store stopped: {e}");
                for j in rx.iter() {
                    counters.write_failures.fetch_add(1, Ordering::Relaxed);
                    queued.fetch_sub(j.items, Ordering::AcqRel);
                    (j.done)(Err(why.clone()));
                }
                return Err(e);
            }
        };
    }
    store.finish()
}

/// Commits the jobs together; if that fails, each one alone, so that one bad batch does not
/// fail its neighbours.
fn commit(store: &mut CollectedStore, jobs: Vec<Job>, counters: &Counters) {
    let items: u64 = jobs.iter().map(|j| j.items).sum();
    let together = if jobs.len() == 1 {
        None
    } else {
        let all: Vec<&Received> = jobs.iter().map(|j| &j.rows).collect();
        Some(store.store_all(&all))
    };
    match together {
        Some(Ok(())) => {
            counters.commits.fetch_add(1, Ordering::Relaxed);
            counters.stored_items.fetch_add(items, Ordering::Relaxed);
            for j in jobs {
                (j.done)(Ok(()));
            }
        }
        _ => {
            for j in jobs {
                match store.store(&j.rows) {
                    Ok(()) => {
                        counters.commits.fetch_add(1, Ordering::Relaxed);
                        counters.stored_items.fetch_add(j.items, Ordering::Relaxed);
                        (j.done)(Ok(()));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, items = j.items, "writing a received batch failed");
                        counters.write_failures.fetch_add(1, Ordering::Relaxed);
                        (j.done)(Err(e.to_string()));
                    }
                }
            }
        }
    }
}
