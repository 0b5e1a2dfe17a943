//! The one writer of a trace store: creates the file, appends events in Arrow batches bounded by
//! size and time, and records processes, stacks, sessions, counters, histograms and drops.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

use duckdb::{Connection, OptionalExt, params};

use duckdb::arrow::record_batch::RecordBatch;

use crate::batch::EventBuffer;
use crate::error::{DuckContext, Result, StoreError};
use crate::reader::Interrupter;
use crate::rows::{
    CgroupInfo, CgroupSchedstat, ChainRow, Event, Frame, HistogramBucket, OpCount, ProcessInfo,
    PythonStack, SessionInfo, SessionRow, SystemSnapshot,
};
use crate::schema;

/// Rows in one DuckDB row group (its default `row_group_size`), the writer's batch size.
const ROW_GROUP_ROWS: usize = 122_880;

/// DuckDB memory limit the writer's block cache is trimmed to after each commit
/// ([`WriterOptions::trim_cache`]): above what stays in memory after a commit (the open
/// indexes and the small tables' rows not yet checkpointed), so only written blocks go.
const TRIMMED_CACHE: &str = "8MB";

/// Tries of the final checkpoint, 20 ms apart, while a live reader's query holds it up (10 s).
const CHECKPOINT_WAITS: u32 = 500;

/// How the writer batches and whose events it writes.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Node name stamped on every row (hostname by default).
    pub node: String,
    /// Commit when this many events are written in the open transaction.
    pub batch_rows: usize,
    /// Hand buffered events to DuckDB in pieces of this many rows, inside the open transaction
    /// (committed at `batch_rows` or the flush interval). Smaller pieces keep less memory on
    /// both sides (this buffer and the appender's copy) while one commit still writes a whole
    /// row group; `batch_rows` (the default) hands over each batch at once.
    pub chunk_rows: usize,
    /// Flush on `tick` when the oldest buffered event is older than this.
    pub flush_interval: Duration,
    /// DuckDB memory limit of the writer's connection (e.g. "32MB"); None: DuckDB's default
    /// (80% of RAM, which a long recording would grow its cache of written blocks into).
    pub memory_limit: Option<String>,
    /// DuckDB worker threads of the writer's database; None: DuckDB's default (one per core).
    /// A recording appends from one thread and its batches are one row group each, so one
    /// thread does the same work without a second thread's wakeups and memory.
    pub threads: Option<u32>,
    /// After each commit, drop the blocks DuckDB keeps cached of the rows just written (a
    /// recording never reads them back): with `memory_limit` set, the limit is lowered to
    /// [`TRIMMED_CACHE`] and set back. The lowering drops blocks already in the file and
    /// moves committed rows not yet checkpointed (commits smaller than a row group) to the
    /// temporary directory. Without it the cache grows toward `memory_limit` over a long
    /// recording (docs/benchmarks.md). A live reader locks the settings, so a writer with
    /// live readers cannot trim.
    pub trim_cache: bool,
    /// [`Writer::maybe_reopen`] closes the database and opens it again once this many rows
    /// were committed since it was opened (0: never; [`REOPEN_ROWS`] is what recordings and
    /// the cluster store use). DuckDB keeps the metadata of every row group written since the
    /// file was opened in memory, about 30 KB per row group of `event_rows` (15 columns), so a
    /// long recording's memory grows without bound; a file opened again loads that metadata
    /// only when a query needs it (docs/benchmarks.md). Live readers are locked and moved to
    /// the new database.
    pub reopen_rows: u64,
    /// Closed store files (oldest first) the live readers see before this one, as one trace
    /// (the agent's recent segments): attached read-only to the writer's database
    /// ([`crate::timeline`]).
    pub timeline: Vec<PathBuf>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            node: crate::default_node_name(),
            // Exactly one DuckDB row group (122,880 rows): such a batch is compressed once and
            // written straight to the file. Measured with the foundation bench: two or more
            // row groups per append cost ~45% more CPU and twice the memory, half a row group
            // was slower still (docs/benchmarks.md).
            batch_rows: ROW_GROUP_ROWS,
            chunk_rows: ROW_GROUP_ROWS,
            flush_interval: Duration::from_secs(1),
            memory_limit: None,
            threads: None,
            trim_cache: false,
            reopen_rows: 0,
            timeline: Vec::new(),
        }
    }
}

/// The longest duration an event may store (2^53 ns, 104 days: a process's lifetime fits;
/// sums of many stay exact in a double). Longer ones are clamped and counted.
pub const MAX_EVENT_DURATION_NS: i64 = 1 << 53;

/// The latest timestamp an event may store (2^62 ns, in 2116): `timestamp + duration` cannot
/// overflow. Later (and negative) ones are clamped and counted.
pub const MAX_TIMESTAMP_NS: i64 = 1 << 62;

/// `ev` with its duration and timestamp clamped into the stored ranges, if they were outside.
fn clamp(ev: &Event) -> Option<Event> {
    let duration = ev.duration.clamp(0, MAX_EVENT_DURATION_NS);
    let timestamp = ev.timestamp.clamp(0, MAX_TIMESTAMP_NS);
    (duration != ev.duration || timestamp != ev.timestamp).then(|| Event {
        duration,
        timestamp,
        ..ev.clone()
    })
}

/// Rows between reopens of a long-lived writer ([`WriterOptions::reopen_rows`]): 16 DuckDB row
/// groups. The reopen bench (`cargo bench -p causeway-store --bench reopen`) keeps the recording
/// writer's heap flat with it, at 26-52 ms a reopen: 1,966,080 events take about 20 s to arrive
/// at 100k events/s.
pub const REOPEN_ROWS: u64 = 16 * ROW_GROUP_ROWS as u64;

/// How long a commit waits for the live readers' running queries to end before it stops them
/// ([`Writer::hold_readers`]): a commit that runs out of memory beside a query can leave
/// DuckDB's table corrupt ("misaligned count", fatal at the next checkpoint), so none runs
/// beside one. Events wait in the poll-to-writer channel meanwhile (10 s of room at 100k/s).
const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Longest wait for interrupted queries to let their readers go: a query that ignores its
/// interrupt that long is left running.
const HOLD_WAIT: Duration = Duration::from_secs(2);

/// A reopen put off this many times in a row for a busy live reader waits for the reader's
/// query the next time: readers that never pause all at once must not keep the metadata growing.
const MAX_REOPEN_PUT_OFF: u32 = 8;

/// The single writer of a store file.
pub struct Writer {
    conn: Connection,
    /// The events' own connection (a clone of `conn` on the same database): it holds the open
    /// transaction the event rows go into, while the other tables commit on `conn` at once.
    events_conn: Connection,
    /// Events appended in the open transaction, not committed yet (0: no transaction open).
    pending: usize,
    path: PathBuf,
    opts: WriterOptions,
    /// `nodes.node_id` of `opts.node`, stamped on every row of `event_rows`.
    node_id: u16,
    next_seq: u64,
    buf: EventBuffer,
    oldest: Option<Instant>,
    written: u64,
    /// Events in batches whose write failed; stored as a `write_failed` drop by `finish`.
    lost: u64,
    /// Events whose duration or timestamp was outside the stored range and was clamped into
    /// it; stored as a `clamped` drop by `finish`.
    clamped: u64,
    /// `lost` and `clamped` already stored as drops in earlier files ([`Writer::rotate`]).
    losses_stored: (u64, u64),
    /// Rows appended through [`Writer::conn`] by the owner (the cluster store), counted towards
    /// [`WriterOptions::reopen_rows`] with `written`.
    other_rows: u64,
    /// `written + other_rows` when the database was (re)opened.
    rows_at_open: u64,
    /// Calls of [`Writer::maybe_reopen`] in a row that found a reopen due and a live reader busy.
    put_off: u32,
    /// Times the database was reopened ([`Writer::maybe_reopen`]).
    reopens: u64,
    /// The live readers handed out: they share the database, so a reopen takes their
    /// connections and gives them new ones (a mutex so that handing out a reader stays a
    /// `&self` method).
    live: Mutex<Vec<(Weak<Mutex<crate::Reader>>, Interrupter)>>,
    /// The open events transaction's batches, kept while live readers share the database:
    /// a reader's query can take the memory an append needs, and the transaction is then
    /// written again with their queries stopped ([`Writer::hold_readers`]).
    kept: Vec<RecordBatch>,
}

/// A live reader, shared with the writer that reopens its database.
pub type SharedReader = Arc<Mutex<crate::Reader>>;

/// Live readers a serving recording hands out ([`Writer::live_readers`]): tool calls run side by
/// side on them, so one slow query does not hold the others.
pub const LIVE_READERS: usize = 4;

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.path)
            .field("node", &self.opts.node)
            .field("written", &self.written)
            .finish()
    }
}

/// Every interned thread name of the file.
fn load_comms(conn: &Connection, path: &Path) -> Result<Vec<(u32, String)>> {
    let mut st = conn
        .prepare("SELECT comm_id, comm FROM comms")
        .ctx(path, "reading thread names")?;
    let rows = st
        .query_map([], crate::row)
        .and_then(|rows| rows.collect::<duckdb::Result<Vec<_>>>())
        .ctx(path, "reading thread names")?;
    Ok(rows)
}

impl Writer {
    /// Creates a new store file with the schema. Fails if `path` exists.
    pub fn create(path: &Path, opts: WriterOptions) -> Result<Writer> {
        let mut w = Self::create_unregistered(path, opts)?;
        w.register_node("recorded", "")?;
        Ok(w)
    }

    /// Creates a new store file without a node row for `opts.node` (the cluster store of
    /// `collect` records only the nodes that send to it).
    pub(crate) fn create_unregistered(path: &Path, opts: WriterOptions) -> Result<Writer> {
        Self::prepare(path, &opts)?;
        let conn = crate::open_rw(path, &opts)?;
        Self::on(conn, path, opts)
    }

    /// Creates a store file with the schema and nothing else, closed, for a writer to go on in
    /// later ([`Writer::rotate`]): the agent prepares its next segment off the writer thread,
    /// so that a rotation does not wait for the schema. Fails if `path` exists.
    pub fn prepare(path: &Path, opts: &WriterOptions) -> Result<()> {
        if path.exists() {
            return Err(StoreError::Exists {
                path: path.to_path_buf(),
            });
        }
        // The schema's own catalogue (schema_columns) reads duckdb_columns(): no timeline yet.
        let bare = WriterOptions {
            timeline: Vec::new(),
            ..opts.clone()
        };
        let conn = crate::open_rw(path, &bare)?;
        schema::create(&conn).ctx(path, "creating the schema")?;
        // Creating the schema leaves the primary-key index of every table in memory (DuckDB's
        // `ART_INDEX` in duckdb_memory()) for the whole recording; a file opened again loads
        // an index only when a statement needs it, so the new file is checkpointed and opened
        // again (peak RSS of probe_cost's sustained run: docs/benchmarks.md).
        conn.execute_batch("CHECKPOINT")
            .ctx(path, "checkpointing the new schema")?;
        conn.close()
            .map_err(|(_, e)| e)
            .ctx(path, "closing the new store")
    }

    /// The options this writer was opened with.
    pub fn options(&self) -> &WriterOptions {
        &self.opts
    }

    /// A writer on an open database, with nothing written yet: the events connection beside
    /// `conn`, and the thread names the file already holds.
    fn on(conn: Connection, path: &Path, opts: WriterOptions) -> Result<Writer> {
        let known = load_comms(&conn, path)?;
        let events_conn = conn
            .try_clone()
            .ctx(path, "opening the events connection")?;
        Ok(Writer {
            conn,
            events_conn,
            pending: 0,
            path: path.to_path_buf(),
            opts,
            node_id: 0,
            next_seq: 0,
            buf: EventBuffer::new(known),
            oldest: None,
            written: 0,
            lost: 0,
            clamped: 0,
            losses_stored: (0, 0),
            other_rows: 0,
            rows_at_open: 0,
            put_off: 0,
            reopens: 0,
            live: Mutex::new(Vec::new()),
            kept: Vec::new(),
        })
    }

    /// A reader that sees this writer's committed rows while it records (live serving). See
    /// [`Reader::from_writer_connection`](crate::Reader) for how it stays read-only. Shared: the
    /// writer locks it while it reopens the database ([`Writer::maybe_reopen`]), so hold the
    /// lock only for a query or a tool call.
    pub fn live_reader(&self) -> Result<SharedReader> {
        let conn = self.reader_conn(&self.conn)?;
        let reader = Arc::new(Mutex::new(crate::Reader::from_writer_connection(
            conn, &self.path,
        )?));
        let interrupter = reader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .interrupter();
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(r, _)| r.strong_count() > 0);
        live.push((Arc::downgrade(&reader), interrupter));
        Ok(reader)
    }

    /// A connection for a live reader on `conn`'s database: it sees the timeline's segments
    /// with this file as one trace.
    fn reader_conn(&self, conn: &Connection) -> Result<Connection> {
        let c = conn
            .try_clone()
            .ctx(&self.path, "opening a reader on the live store")?;
        crate::timeline::use_timeline(&c, &self.path, self.opts.timeline.len())?;
        Ok(c)
    }

    /// The live readers still held by someone (the others are forgotten).
    fn readers_alive(&self) -> Vec<SharedReader> {
        self.live_interrupters()
            .into_iter()
            .map(|(r, _)| r)
            .collect()
    }

    /// [`Writer::readers_alive`], each with what interrupts its query.
    fn live_interrupters(&self) -> Vec<(SharedReader, Interrupter)> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(r, _)| r.strong_count() > 0);
        live.iter()
            .filter_map(|(r, i)| Some((r.upgrade()?, i.clone())))
            .collect()
    }

    /// Runs `f` with every live reader's lock held, so that no reader's query runs beside it
    /// and `f` has the database's memory: a query can hold it all (a report over many
    /// segments), and the recording comes first. Waits `wait` for running queries to end,
    /// then stops them (they fail with DuckDB's interrupt error; one that ignores it for
    /// [`HOLD_WAIT`] is left running).
    fn hold_readers<T>(&mut self, wait: Duration, f: impl FnOnce(&mut Self) -> T) -> T {
        let live = self.live_interrupters();
        if live.is_empty() {
            return f(self);
        }
        let interrupt_at = Instant::now() + wait;
        let give_up = interrupt_at + HOLD_WAIT;
        let mut guards: Vec<MutexGuard<'_, crate::Reader>> = Vec::with_capacity(live.len());
        let mut stopped = 0;
        for (r, interrupter) in &live {
            loop {
                match r.try_lock() {
                    Ok(g) => guards.push(g),
                    Err(TryLockError::Poisoned(p)) => guards.push(p.into_inner()),
                    Err(TryLockError::WouldBlock) if Instant::now() < give_up => {
                        if Instant::now() >= interrupt_at {
                            if let Some(h) = &*interrupter.lock().unwrap_or_else(|p| p.into_inner())
                            {
                                h.interrupt();
                            }
                            stopped += 1;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    Err(TryLockError::WouldBlock) => {}
                }
                break;
            }
        }
        if stopped > 0 || guards.len() < live.len() {
            tracing::info!(
                path = %self.path.display(),
                held = guards.len(),
                readers = live.len(),
                "the recording stopped live readers' queries to write its events"
            );
        }
        let out = f(self);
        drop(guards);
        out
    }

    /// Whether `e` is DuckDB running out of its memory limit (a failed commit says so only
    /// as "failed to pin block").
    fn out_of_memory(e: &StoreError) -> bool {
        let StoreError::Duck { source, .. } = e else {
            return false;
        };
        let m = source.to_string();
        ["Out of Memory", "failed to pin block", "allocate"]
            .iter()
            .any(|s| m.contains(s))
    }

    /// Writes the open transaction's kept batches again in a new transaction (the first was
    /// rolled back after an append ran out of memory), with the live readers' queries stopped.
    fn write_kept_again(&mut self) -> Result<()> {
        self.hold_readers(Duration::ZERO, |w| {
            let path = w.path.clone();
            w.store_comms()?;
            w.events_conn
                .execute_batch("BEGIN TRANSACTION")
                .ctx(&path, "starting the events transaction")?;
            let written = (|| {
                let mut app = w
                    .events_conn
                    .appender("event_rows")
                    .ctx(&path, "opening the appender")?;
                for b in &w.kept {
                    app.append_record_batch(b.clone())
                        .ctx(&path, "appending events")?;
                }
                app.flush().ctx(&path, "flushing events")
            })();
            if written.is_err() {
                let _ = w.events_conn.execute_batch("ROLLBACK");
            }
            written
        })
    }

    /// [`LIVE_READERS`] live readers ([`Writer::live_reader`]).
    pub fn live_readers(&self) -> Result<Vec<SharedReader>> {
        (0..LIVE_READERS).map(|_| self.live_reader()).collect()
    }

    /// Opens an existing store to append more events for `opts.node` (sequence numbers continue).
    pub fn open_append(path: &Path, opts: WriterOptions) -> Result<Writer> {
        let mut w = Self::open_unregistered(path, opts)?;
        w.register_node("recorded", "")?;
        w.next_seq = w.last_seq()?;
        Ok(w)
    }

    /// Opens an existing store to add rows derived from it (the steps inferred after a
    /// recording or an import) without registering a node: every node keeps its origin and
    /// host (`open_append` would mark the node as recorded here, and the engine reads an
    /// imported node's switches by its origin's convention).
    pub fn open_derived(path: &Path) -> Result<Writer> {
        Self::open_unregistered(path, WriterOptions::default())
    }

    /// Opens (and upgrades) an existing store without registering `opts.node`.
    pub(crate) fn open_unregistered(path: &Path, opts: WriterOptions) -> Result<Writer> {
        crate::paths::check_input(path, false)?;
        if !path.exists() {
            return Err(StoreError::Missing {
                path: path.to_path_buf(),
            });
        }
        let conn = crate::open_rw(path, &opts)?;
        let found = crate::check_schema(&conn, path)?;
        schema::upgrade(&conn, found).ctx(path, "upgrading the schema")?;
        Self::on(conn, path, opts)
    }

    /// Switches the node stamped on following rows (flushing first); sequence numbers continue
    /// from that node's last one. Used by the importer and merge for multi-node files.
    pub fn set_node(&mut self, node: &str, origin: &str, cluster: &str) -> Result<()> {
        self.flush()?;
        self.opts.node = node.to_string();
        self.register_node(origin, cluster)?;
        self.next_seq = self.last_seq()?;
        Ok(())
    }

    /// The next sequence number of the current node.
    fn last_seq(&self) -> Result<u64> {
        let next: i64 = self
            .conn
            .query_row(
                "SELECT coalesce(max(seq) + 1, 0)::BIGINT FROM event_rows WHERE node_id = ?",
                params![self.node_id],
                |r| r.get(0),
            )
            .ctx(&self.path, "reading the last sequence number")?;
        Ok(next as u64)
    }

    /// The sequence number the next appended event gets on the current node (side tables
    /// such as `correlations` refer to events by it).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The node this writer stamps on rows.
    pub fn node(&self) -> &str {
        &self.opts.node
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Events written to the file so far (not counting the buffer).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Times the database was closed and opened again ([`Writer::maybe_reopen`]).
    pub fn reopens(&self) -> u64 {
        self.reopens
    }

    /// Counts `n` rows the owner appended through [`Writer::conn`] (not through
    /// [`Writer::append`]) towards [`WriterOptions::reopen_rows`].
    pub fn count_rows(&mut self, n: u64) {
        self.other_rows += n;
    }

    /// Closes the database and opens it again when [`WriterOptions::reopen_rows`] rows were
    /// committed since it was opened and no events transaction is open; otherwise returns the
    /// writer as it is. Live readers are locked meanwhile: their connections are dropped with
    /// the old database and replaced by ones on the new. A reader busy with a query (its lock
    /// held) puts the reopen off to a later call, so the writer does not wait for a query,
    /// unless that happened [`MAX_REOPEN_PUT_OFF`] calls in a row: then it waits for the query
    /// to end. Events buffered but not yet handed to DuckDB stay buffered, in the returned
    /// writer. The file is checkpointed and closed first, so it is complete at every reopen. On
    /// failure the writer is gone: the file holds everything committed, the buffered events are
    /// lost (logged with their count), and the live readers answer [`StoreError::Closed`].
    pub fn maybe_reopen(mut self) -> Result<Writer> {
        let rows = self.written + self.other_rows;
        let due = self.opts.reopen_rows > 0 && rows - self.rows_at_open >= self.opts.reopen_rows;
        if !due || self.pending > 0 {
            return Ok(self);
        }
        let readers = self.readers_alive();
        let wait = self.put_off >= MAX_REOPEN_PUT_OFF;
        let mut guards: Vec<MutexGuard<'_, crate::Reader>> = Vec::with_capacity(readers.len());
        for r in &readers {
            let lock = if wait {
                r.lock().map_err(TryLockError::Poisoned)
            } else {
                r.try_lock()
            };
            match lock {
                Ok(g) => guards.push(g),
                Err(TryLockError::Poisoned(p)) => guards.push(p.into_inner()),
                Err(TryLockError::WouldBlock) => {
                    tracing::debug!(
                        put_off = self.put_off + 1,
                        "a live reader is busy: reopening the store later"
                    );
                    drop(guards);
                    self.put_off += 1;
                    return Ok(self);
                }
            }
        }
        // Every connection of the old database goes, or the file would stay open.
        for g in &mut guards {
            drop(g.swap_conn(None));
        }
        drop(self.events_conn);
        let (path, conn) = (&self.path, self.conn);
        let reopened = conn
            .execute_batch("CHECKPOINT")
            .ctx(path, "checkpointing before reopening")
            .and_then(|()| {
                conn.close()
                    .map_err(|(_, e)| e)
                    .ctx(path, "closing to reopen")
            })
            .and_then(|()| crate::open_rw(path, &self.opts))
            .and_then(|conn| {
                let events_conn = conn
                    .try_clone()
                    .ctx(path, "opening the events connection")?;
                for g in &mut guards {
                    let c = conn
                        .try_clone()
                        .ctx(path, "opening a reader on the reopened store")?;
                    crate::timeline::use_timeline(&c, path, self.opts.timeline.len())?;
                    g.swap_conn(Some(c));
                }
                if !guards.is_empty() {
                    // As on the first database (`Reader::from_writer_connection`).
                    conn.execute_batch("SET lock_configuration = true")
                        .ctx(path, "locking the configuration")?;
                }
                Ok((conn, events_conn))
            });
        let (conn, events_conn) = reopened.inspect_err(|e| {
            for g in &mut guards {
                drop(g.swap_conn(None));
            }
            tracing::error!(path = %path.display(), buffered = self.buf.len(), "reopening the store failed, buffered events are lost: {e}");
        })?;
        drop(guards);
        // Everything else carries over: buffered events, sequence numbers, names, counters,
        // the live readers.
        Ok(Writer {
            conn,
            events_conn,
            rows_at_open: rows,
            put_off: 0,
            reopens: self.reopens + 1,
            ..self
        })
    }

    /// Records (or updates) the node row with its origin and cluster, giving a new node the
    /// next `node_id`. Only a recorded node has this machine's host name: an imported one was
    /// traced elsewhere (OTLP `host.name` must not name the importing machine).
    pub fn register_node(&mut self, origin: &str, cluster: &str) -> Result<()> {
        let host = if origin == "recorded" {
            crate::default_node_name()
        } else {
            String::new()
        };
        let existing: Option<u16> = self
            .conn
            .query_row(
                "SELECT node_id FROM nodes WHERE node = ?",
                params![self.opts.node],
                |r| r.get(0),
            )
            .optional()
            .ctx(&self.path, "looking up the node")?;
        let node_id = match existing {
            Some(id) => id,
            None => {
                let next: i64 = self
                    .conn
                    .query_row(
                        "SELECT coalesce(max(node_id) + 1, 1)::BIGINT FROM nodes",
                        [],
                        |r| r.get(0),
                    )
                    .ctx(&self.path, "numbering the node")?;
                u16::try_from(next).map_err(|_| StoreError::Query {
                    message: format!(
                        "{}: more than {} nodes in one file",
                        self.path.display(),
                        u16::MAX
                    ),
                    hint: "merge fewer nodes into one file".into(),
                })?
            }
        };
        self.conn
            .execute(
                "INSERT INTO nodes (node, node_id, hostname, cluster, origin) VALUES (?, ?, ?, ?, ?)
                 ON CONFLICT (node) DO UPDATE SET origin = excluded.origin,
                     hostname = excluded.hostname,
                     cluster = CASE WHEN excluded.cluster = '' THEN nodes.cluster ELSE excluded.cluster END",
                params![self.opts.node, node_id, host, cluster, origin],
            )
            .ctx(&self.path, "recording the node")?;
        self.node_id = node_id;
        Ok(())
    }

    /// Events lost so far: buffered in a batch whose write failed.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Buffers one event; hands a full chunk to DuckDB and commits a full batch.
    pub fn append(&mut self, ev: &Event) -> Result<()> {
        let fixed;
        let ev = match clamp(ev) {
            Some(c) => {
                self.clamped += 1;
                fixed = c;
                &fixed
            }
            None => ev,
        };
        self.buf.push(self.next_seq, ev);
        self.next_seq += 1;
        if self.oldest.is_none() {
            self.oldest = Some(Instant::now());
        }
        // A chunk never crosses the commit boundary, so every commit holds exactly `batch_rows`
        // events (one row group) whatever `chunk_rows` is: with 16,384-event chunks the commit
        // came at 131,072 events, one row group plus 8,192 rows that DuckDB kept in memory and
        // logged to the WAL (probe_cost's sustained run: docs/benchmarks.md, third pass).
        let room = self.opts.batch_rows.max(1).saturating_sub(self.pending);
        if self.buf.len() >= self.opts.chunk_rows.clamp(1, room.max(1)) {
            self.write_chunk()?;
            if self.pending >= self.opts.batch_rows {
                self.commit()?;
            }
        }
        Ok(())
    }

    /// How long until [`Writer::tick`] commits the oldest uncommitted event (zero when due);
    /// None when nothing waits.
    pub fn flush_due_in(&self) -> Option<Duration> {
        self.oldest
            .map(|t| self.opts.flush_interval.saturating_sub(t.elapsed()))
    }

    /// Commits if the oldest uncommitted event waited longer than the flush interval.
    pub fn tick(&mut self) -> Result<()> {
        match self.oldest {
            Some(t) if t.elapsed() >= self.opts.flush_interval => self.flush(),
            _ => Ok(()),
        }
    }

    /// Writes every buffered event to the file and commits. On failure the events of the
    /// transaction are counted in `lost` and stored as a drop by `finish`.
    pub fn flush(&mut self) -> Result<()> {
        self.write_chunk()?;
        self.commit()
    }

    /// Commits the open events transaction, if any.
    fn commit(&mut self) -> Result<()> {
        self.oldest = (!self.buf.is_empty()).then(Instant::now);
        if self.pending == 0 {
            return Ok(());
        }
        let n = std::mem::take(&mut self.pending) as u64;
        // Never beside a reader's query (`COMMIT_WAIT`).
        let committed = self.hold_readers(COMMIT_WAIT, |w| {
            w.events_conn
                .execute_batch("COMMIT")
                .ctx(&w.path, "committing events")
        });
        self.kept.clear();
        match committed {
            Ok(()) => {
                self.written += n;
                self.trim_cache();
                Ok(())
            }
            Err(e) => {
                self.lost += n;
                let _ = self.events_conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Bytes of written blocks DuckDB holds in memory (`BASE_TABLE` in duckdb_memory()).
    pub fn cached_block_bytes(&self) -> Result<i64> {
        self.conn
            .query_row(
                "SELECT coalesce(sum(memory_usage_bytes), 0)::BIGINT FROM duckdb_memory() \
                 WHERE tag = 'BASE_TABLE'",
                [],
                |r| r.get(0),
            )
            .ctx(&self.path, "reading DuckDB's memory use")
    }

    /// Evicts the cached blocks of committed rows by lowering the memory limit and setting it
    /// back ([`WriterOptions::trim_cache`]). A failure only costs memory, so it is logged.
    fn trim_cache(&self) {
        let Some(limit) = self
            .opts
            .memory_limit
            .as_deref()
            .filter(|_| self.opts.trim_cache)
        else {
            return;
        };
        if let Err(e) = self
            .events_conn
            .execute_batch(&format!("SET memory_limit = '{TRIMMED_CACHE}'"))
        {
            tracing::debug!(path = %self.path.display(), "trimming the block cache: {e}");
        }
        let restore = format!("SET memory_limit = '{}'", limit.replace('\'', "''"));
        if let Err(e) = self.events_conn.execute_batch(&restore) {
            tracing::warn!(path = %self.path.display(), "restoring the memory limit {limit}: {e}");
        }
    }

    /// Stores new thread names (committed at once: a row never names an unknown comm_id), then
    /// appends the buffered rows in the events transaction, opening it if needed. On failure
    /// the transaction is rolled back and its events counted as lost.
    fn write_chunk(&mut self) -> Result<()> {
        let n = self.buf.len();
        if n == 0 {
            return Ok(());
        }
        let batch = match self.buf.take_batch(self.node_id) {
            Ok(b) => b,
            Err(e) => {
                self.lost += n as u64;
                return Err(e);
            }
        };
        // Up to a row group of Arrow arrays, held until the commit, only while readers exist.
        if !self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
        {
            self.kept.push(batch.clone());
        }
        let appended = self.store_comms().and_then(|()| {
            if self.pending == 0 {
                self.events_conn
                    .execute_batch("BEGIN TRANSACTION")
                    .ctx(&self.path, "starting the events transaction")?;
            }
            let mut app = self
                .events_conn
                .appender("event_rows")
                .ctx(&self.path, "opening the appender")?;
            app.append_record_batch(batch)
                .ctx(&self.path, "appending events")?;
            app.flush().ctx(&self.path, "flushing events")
        });
        match appended {
            Ok(()) => {
                self.pending += n;
                Ok(())
            }
            Err(e) => {
                // Unconditionally: a failed statement leaves DuckDB's transaction aborted, and
                // every later BEGIN fails until it is rolled back (seen after an append ran
                // out of memory; with no transaction open this is a harmless error).
                let _ = self.events_conn.execute_batch("ROLLBACK");
                let again = if !self.kept.is_empty() && Self::out_of_memory(&e) {
                    self.write_kept_again()
                } else {
                    Err(e)
                };
                match again {
                    Ok(()) => {
                        self.pending += n;
                        Ok(())
                    }
                    Err(e) => {
                        self.lost += (self.pending + n) as u64;
                        self.pending = 0;
                        self.kept.clear();
                        Err(e)
                    }
                }
            }
        }
    }

    /// Stores the thread names first seen since the last chunk.
    fn store_comms(&mut self) -> Result<()> {
        if self.buf.new_comms().is_empty() {
            return Ok(());
        }
        let mut app = self
            .conn
            .appender("comms")
            .ctx(&self.path, "opening the comms appender")?;
        for (id, comm) in self.buf.new_comms() {
            app.append_row(params![id, comm])
                .ctx(&self.path, "recording a thread name")?;
        }
        app.flush().ctx(&self.path, "flushing thread names")?;
        drop(app);
        self.buf.comms_stored();
        Ok(())
    }

    /// Inserts or updates a process row (last_seen and names move forward).
    pub fn upsert_process(&mut self, p: &ProcessInfo) -> Result<()> {
        crate::rows::upsert_process(&self.conn, &self.path, &self.opts.node, p)
    }

    /// Interns a stack: frames are written once per hash.
    pub fn add_stack(&mut self, stack_hash: i64, frames: &[Frame]) -> Result<()> {
        let tx = self
            .conn
            .transaction()
            .ctx(&self.path, "starting a transaction")?;
        {
            let mut st = tx
                .prepare(
                    "INSERT INTO stack_frames VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                )
                .ctx(&self.path, "preparing a stack insert")?;
            for (depth, f) in frames.iter().enumerate() {
                st.execute(params![
                    stack_hash,
                    depth as u16,
                    f.ip,
                    f.symbol,
                    f.module,
                    f.offset
                ])
                .ctx(&self.path, "recording a stack frame")?;
            }
        }
        tx.commit().ctx(&self.path, "committing a stack")?;
        Ok(())
    }

    /// Records the CPython frames of a stack (once per stack hash).
    pub fn add_python_stack(&mut self, stack_hash: i64, py: &PythonStack) -> Result<()> {
        let tx = self
            .conn
            .transaction()
            .ctx(&self.path, "starting a transaction")?;
        tx.execute(
            "INSERT INTO python_stacks VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            params![stack_hash, py.tid, py.status, py.frames.len() as u16],
        )
        .ctx(&self.path, "recording a Python stack")?;
        {
            let mut st = tx
                .prepare(
                    "INSERT INTO python_frames (stack_hash, depth, file, function, line, entry)
                     VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                )
                .ctx(&self.path, "preparing a Python frame insert")?;
            for (depth, f) in py.frames.iter().enumerate() {
                st.execute(params![
                    stack_hash,
                    depth as u16,
                    f.file,
                    f.function,
                    f.line,
                    f.entry
                ])
                .ctx(&self.path, "recording a Python frame")?;
            }
        }
        tx.commit().ctx(&self.path, "committing a Python stack")?;
        Ok(())
    }

    /// Counts lost events of one kind.
    pub fn record_drop(
        &mut self,
        kind: &str,
        op_id: Option<u16>,
        count: u64,
        detail: &str,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.conn
            .execute(
                "INSERT INTO drops VALUES (?, ?, ?, ?, ?, ?)",
                params![self.opts.node, crate::now_ns(), kind, op_id, count, detail],
            )
            .ctx(&self.path, "recording drops")?;
        Ok(())
    }

    /// Stores kernel-side call counts.
    pub fn record_op_counts(&mut self, rows: &[OpCount]) -> Result<()> {
        let node = self.opts.node.as_str();
        crate::rows::append_op_counts(&self.conn, &self.path, rows.iter().map(|r| (node, r)))
    }

    /// Stores kernel-side log2 histograms.
    pub fn record_histogram(&mut self, rows: &[HistogramBucket]) -> Result<()> {
        let node = self.opts.node.as_str();
        crate::rows::append_histograms(&self.conn, &self.path, rows.iter().map(|r| (node, r)))
    }

    /// Starts a session row and returns its id.
    pub fn begin_session(&mut self, s: &SessionInfo) -> Result<i64> {
        let id: i64 = self
            .conn
            .query_row(
                "SELECT coalesce(max(session_id) + 1, 1) FROM sessions WHERE node = ?",
                params![self.opts.node],
                |r| r.get(0),
            )
            .ctx(&self.path, "numbering the session")?;
        // One insert for recorded and imported sessions: a fresh number never conflicts.
        self.add_session(&SessionRow {
            session_id: id,
            node: self.opts.node.clone(),
            stopped_ns: 0,
            info: s.clone(),
        })?;
        Ok(id)
    }

    /// Marks a session as stopped.
    pub fn end_session(&mut self, id: i64, stopped_ns: i64) -> Result<()> {
        self.conn
            .execute(
                "UPDATE sessions SET stopped_ns = ? WHERE node = ? AND session_id = ?",
                params![stopped_ns, self.opts.node, id],
            )
            .ctx(&self.path, "closing the session")?;
        Ok(())
    }

    /// Runs `f` in one transaction (bulk writers: per-statement commits would each sync the
    /// WAL), committed when `f` succeeds and rolled back when it fails.
    pub fn in_transaction<T, E: From<StoreError>>(
        &mut self,
        f: impl FnOnce(&mut Writer) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.conn
            .execute_batch("BEGIN TRANSACTION")
            .ctx(&self.path, "starting a transaction")?;
        match f(self) {
            Ok(v) => {
                self.conn
                    .execute_batch("COMMIT")
                    .ctx(&self.path, "committing")?;
                Ok(v)
            }
            Err(e) => {
                // The write already failed; a failed rollback adds nothing the caller can use.
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Writes stacks not yet in the store in bulk (an appender, not an INSERT per frame: that
    /// made imports take seconds). A hash already stored is an error; use `add_stack` when the
    /// caller cannot tell.
    pub fn add_new_stacks<'a>(
        &mut self,
        stacks: impl IntoIterator<Item = (i64, &'a [Frame])>,
    ) -> Result<u64> {
        let mut app = self
            .conn
            .appender("stack_frames")
            .ctx(&self.path, "opening the stack appender")?;
        let mut n = 0;
        for (hash, frames) in stacks {
            for (depth, f) in frames.iter().enumerate() {
                app.append_row(params![
                    hash,
                    depth as u16,
                    f.ip,
                    f.symbol,
                    f.module,
                    f.offset
                ])
                .ctx(&self.path, "writing stack frames")?;
            }
            n += 1;
        }
        app.flush().ctx(&self.path, "flushing stack frames")?;
        Ok(n)
    }

    /// Stores causal chains; a chain id already stored for its node is kept as it was.
    pub fn add_chains(&mut self, chains: &[ChainRow]) -> Result<()> {
        crate::rows::insert_chains(
            &self.conn,
            &self.path,
            chains,
            crate::rows::OnConflict::Keep,
            None,
        )
    }

    /// Stores a session recorded elsewhere under its own number and node; a number already
    /// stored for that node is kept as it was.
    pub fn add_session(&mut self, r: &SessionRow) -> Result<()> {
        let s = &r.info;
        self.conn
            .execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT DO NOTHING",
                params![
                    r.session_id,
                    r.node,
                    s.started_ns,
                    r.stopped_ns,
                    s.hostname,
                    s.kernel,
                    s.os_release,
                    s.cpu_model,
                    s.cpu_cores,
                    s.mem_total_mb,
                    s.gpu_model,
                    s.gpu_driver,
                    s.cuda_version,
                    s.python_version,
                    s.tool_version,
                    s.pid_filter,
                    s.flags,
                    s.rank,
                    s.local_rank,
                    s.world_size,
                    s.origin
                ],
            )
            .ctx(&self.path, "writing a session")?;
        Ok(())
    }

    /// Inserts or updates the process row of another node than the writer's (an imported
    /// file's).
    pub fn upsert_process_of(&mut self, node: &str, p: &ProcessInfo) -> Result<()> {
        crate::rows::upsert_process(&self.conn, &self.path, node, p)
    }

    /// The processes whose events `node` has stored so far: pid, first and last event, and a
    /// thread name (for writers that learn processes only from their events).
    pub fn processes_in_events(&mut self, node: &str) -> Result<Vec<ProcessInfo>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT pid, min(timestamp), max(timestamp), any_value(comm)
                 FROM event_data WHERE node = ? GROUP BY pid ORDER BY pid",
            )
            .ctx(&self.path, "listing processes")?;
        st.query_map(params![node], |r| {
            Ok(ProcessInfo {
                pid: r.get(0)?,
                first_seen_ns: r.get(1)?,
                last_seen_ns: r.get(2)?,
                comm: r.get(3)?,
                ..ProcessInfo::default()
            })
        })
        .and_then(|rows| rows.collect())
        .ctx(&self.path, "listing processes")
    }

    /// Stores kernel-side call counts of another node than the writer's.
    pub fn record_op_counts_of(&mut self, node: &str, rows: &[OpCount]) -> Result<()> {
        crate::rows::append_op_counts(&self.conn, &self.path, rows.iter().map(|r| (node, r)))
    }

    /// Stores host snapshots of `node`.
    pub fn add_system_snapshots(&mut self, node: &str, rows: &[SystemSnapshot]) -> Result<()> {
        self.append_of(node, "system_snapshots", rows, |r| {
            vec![
                &r.ts_ns,
                &r.cpu_pct,
                &r.mem_pct,
                &r.mem_avail_mb,
                &r.swap_mb,
                &r.load_avg,
            ]
        })
    }

    /// Stores what `node`'s cgroups are. A cgroup already stored keeps what it had where the
    /// new row knows less (pod metadata arrives after the container id, or never).
    pub fn add_cgroups(&mut self, node: &str, rows: &[CgroupInfo]) -> Result<()> {
        crate::rows::upsert_cgroups(&self.conn, &self.path, node, rows)
    }

    /// Stores per-cgroup off-CPU windows of `node`.
    pub fn add_cgroup_schedstat(&mut self, node: &str, rows: &[CgroupSchedstat]) -> Result<()> {
        self.append_of(node, "cgroup_schedstat", rows, |r| {
            vec![
                &r.cgroup_id,
                &r.window_start_ns,
                &r.window_end_ns,
                &r.p99_off_cpu_ns,
                &r.total_off_cpu_ns,
                &r.events,
            ]
        })
    }

    /// Appends `rows` to `table`, each as `node` followed by the values `columns` gives.
    fn append_of<T>(
        &self,
        node: &str,
        table: &'static str,
        rows: &[T],
        columns: impl for<'a> Fn(&'a T) -> Vec<&'a dyn duckdb::ToSql>,
    ) -> Result<()> {
        let mut app = self
            .conn
            .appender(table)
            .ctx(&self.path, "opening an appender")?;
        for r in rows {
            let mut values: Vec<&dyn duckdb::ToSql> = vec![&node];
            values.extend(columns(r));
            app.append_row(duckdb::appender_params_from_iter(values))
                .ctx(&self.path, "appending host rows")?;
        }
        app.flush().ctx(&self.path, "flushing host rows")
    }

    /// Stores the events clamped and lost to failed writes since the last time as drops.
    fn store_losses(&mut self) -> Result<()> {
        let clamped = self.clamped - self.losses_stored.1;
        if clamped > 0 {
            self.record_drop(
                "clamped",
                None,
                clamped,
                &format!(
                    "events whose duration was outside 0..={MAX_EVENT_DURATION_NS} ns or whose \
                     timestamp was outside 0..={MAX_TIMESTAMP_NS} ns were clamped into range"
                ),
            )?;
        }
        let lost = self.lost - self.losses_stored.0;
        if lost > 0 {
            self.record_drop(
                "write_failed",
                None,
                lost,
                "event batches the store could not append",
            )?;
        }
        self.losses_stored = (self.lost, self.clamped);
        Ok(())
    }

    /// Closes this file complete (as [`Writer::finish`] does) and goes on in a new store file
    /// at `next` (`prepared`: made by [`Writer::prepare`], else created here): same node, sequence numbers, counters and live readers (locked meanwhile,
    /// then seeing `timeline`, the closed files before `next`, with it as one trace). `closed`
    /// runs on the old file once it is closed (the agent moves it among the closed segments).
    /// Nothing is replayed into the new file: the caller writes what it must repeat.
    pub fn rotate(
        mut self,
        next: &Path,
        prepared: bool,
        timeline: Vec<PathBuf>,
        closed: impl FnOnce(&Path) -> std::io::Result<()>,
    ) -> Result<Writer> {
        let flushed = self.flush();
        self.store_losses()?;
        let readers = self.readers_alive();
        // Waits for running queries: they are bounded by their time limits.
        let mut guards: Vec<MutexGuard<'_, crate::Reader>> = readers
            .iter()
            .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        for g in &mut guards {
            drop(g.swap_conn(None));
        }
        drop(self.events_conn);
        let old = self.path.clone();
        self.conn
            .execute_batch("CHECKPOINT")
            .ctx(&old, "checkpointing before rotating")?;
        self.conn
            .close()
            .map_err(|(_, e)| e)
            .ctx(&old, "closing to rotate")?;
        closed(&old).map_err(|source| StoreError::Io {
            path: old.clone(),
            action: "moving the closed segment",
            source,
        })?;
        let mut opts = self.opts;
        opts.timeline = timeline;
        let mut w = if prepared {
            // Made by [`Writer::prepare`]: only opened here.
            let conn = crate::open_rw(next, &opts)?;
            let mut w = Self::on(conn, next, opts)?;
            w.register_node("recorded", "")?;
            w
        } else {
            Writer::create(next, opts)?
        };
        w.next_seq = self.next_seq;
        w.written = self.written;
        w.lost = self.lost;
        w.clamped = self.clamped;
        w.losses_stored = self.losses_stored;
        w.reopens = self.reopens;
        w.rows_at_open = self.written + self.other_rows;
        w.other_rows = self.other_rows;
        for g in &mut guards {
            let c = w.reader_conn(&w.conn)?;
            g.swap_conn(Some(c));
        }
        if !guards.is_empty() {
            w.conn
                .execute_batch("SET lock_configuration = true")
                .ctx(next, "locking the configuration")?;
        }
        drop(guards);
        w.live = Mutex::new(self.live.into_inner().unwrap_or_else(|p| p.into_inner()));
        flushed?;
        Ok(w)
    }

    /// Completes a store file whose writer was killed (an agent's open segment after a crash):
    /// replays its write-ahead log, marks its running sessions stopped at its last event, and
    /// checkpoints, so that it opens read-only like any closed file.
    pub fn seal(path: &Path) -> Result<()> {
        let conn = crate::open_rw(path, &WriterOptions::default())?;
        crate::check_schema(&conn, path)?;
        conn.execute_batch(
            "UPDATE sessions SET stopped_ns = greatest(started_ns, \
               (SELECT coalesce(max(timestamp + duration), 0) FROM event_rows)) \
             WHERE stopped_ns = 0; CHECKPOINT",
        )
        .ctx(path, "sealing")?;
        conn.close().map_err(|(_, e)| e).ctx(path, "closing")
    }

    /// The connection, for trusted bulk writers in this crate (the received-batch writer).
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Flushes, stores the count of events lost to failed writes as a `write_failed` drop,
    /// checkpoints and closes: the file is complete afterwards. A failed last flush is returned
    /// after the rest is done.
    pub fn finish(mut self) -> Result<()> {
        let flushed = self.flush();
        self.store_losses()?;
        // A live reader's query (`trace --serve`, `trace --otlp-endpoint`) may be running: its
        // transaction blocks the checkpoint, so wait for it (bounded) rather than fail the file.
        let mut waited = 0;
        loop {
            match self.conn.execute_batch("CHECKPOINT") {
                Err(e)
                    if waited < CHECKPOINT_WAITS
                        && e.to_string().contains("transactions active") =>
                {
                    waited += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.ctx(&self.path, "checkpointing")?,
            }
        }
        let path = self.path.clone();
        self.conn
            .close()
            .map_err(|(_, e)| e)
            .ctx(&path, "closing")?;
        flushed
    }
}
