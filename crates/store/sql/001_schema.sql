-- causeway trace store, schema version 2.
-- One DuckDB file per trace (or per merged cluster). Times are ns since the Unix epoch,
-- durations are ns. Physical event rows live in event_rows with numeric ids only (node_id,
-- comm_id, op_id): strings per row are what made appends slow. The `event_data` view puts the
-- node and thread names back, and the `events` view adds the op catalogue, so that people and
-- agents filter by name:
--   SELECT * FROM events WHERE op = 'cudaLaunchKernel' ORDER BY duration DESC LIMIT 10

CREATE TABLE meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

CREATE TABLE sources (
    source_id   UTINYINT PRIMARY KEY,
    source      VARCHAR NOT NULL UNIQUE,
    description VARCHAR NOT NULL
);

CREATE TABLE ops (
    op_id            USMALLINT PRIMARY KEY,
    source           VARCHAR NOT NULL,
    op               VARCHAR NOT NULL UNIQUE,
    description      VARCHAR NOT NULL,
    duration_meaning VARCHAR NOT NULL,
    arg0_meaning     VARCHAR NOT NULL,
    arg1_meaning     VARCHAR NOT NULL,
    reference_name   VARCHAR NOT NULL
);

-- One row per machine whose events are in this file.
CREATE TABLE nodes (
    node                 VARCHAR PRIMARY KEY,
    node_id              USMALLINT NOT NULL UNIQUE,  -- key of the node's rows in event_rows
    hostname             VARCHAR NOT NULL DEFAULT '',
    cluster              VARCHAR NOT NULL DEFAULT '',
    clock_offset_ns      BIGINT,           -- estimated offset to the reference node (merge), NULL if unknown
    clock_uncertainty_ns BIGINT,
    origin               VARCHAR NOT NULL DEFAULT ''  -- 'recorded', 'imported:<file>', 'merged:<file>'
);

-- One row per recording (a `causeway trace` run, or an imported reference session).
CREATE TABLE sessions (
    session_id     BIGINT NOT NULL,
    node           VARCHAR NOT NULL,
    started_ns     BIGINT NOT NULL,
    stopped_ns     BIGINT NOT NULL DEFAULT 0,
    hostname       VARCHAR NOT NULL DEFAULT '',
    kernel         VARCHAR NOT NULL DEFAULT '',
    os_release     VARCHAR NOT NULL DEFAULT '',
    cpu_model      VARCHAR NOT NULL DEFAULT '',
    cpu_cores      INTEGER NOT NULL DEFAULT 0,
    mem_total_mb   BIGINT NOT NULL DEFAULT 0,
    gpu_model      VARCHAR NOT NULL DEFAULT '',
    gpu_driver     VARCHAR NOT NULL DEFAULT '',
    cuda_version   VARCHAR NOT NULL DEFAULT '',
    python_version VARCHAR NOT NULL DEFAULT '',
    tool_version   VARCHAR NOT NULL DEFAULT '',
    pid_filter     VARCHAR NOT NULL DEFAULT '',
    flags          VARCHAR NOT NULL DEFAULT '',
    rank           INTEGER,
    local_rank     INTEGER,
    world_size     INTEGER,
    origin         VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (node, session_id)
);

-- Processes seen while tracing (names are data from the traced machine: sanitise before display).
CREATE TABLE processes (
    node          VARCHAR NOT NULL,
    pid           UINTEGER NOT NULL,
    ppid          UINTEGER NOT NULL DEFAULT 0,
    comm          VARCHAR NOT NULL DEFAULT '',
    cmdline       VARCHAR NOT NULL DEFAULT '',
    first_seen_ns BIGINT NOT NULL DEFAULT 0,
    last_seen_ns  BIGINT NOT NULL DEFAULT 0,
    rank          INTEGER,
    local_rank    INTEGER,
    world_size    INTEGER,
    cluster       VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (node, pid)
);

-- Thread names, interned: event_rows stores a comm_id per row instead of the string.
-- comm_id 0 is the empty name. Names are data from the traced machine: sanitise before display.
CREATE TABLE comms (
    comm_id UINTEGER PRIMARY KEY,
    comm    VARCHAR NOT NULL UNIQUE
);
INSERT INTO comms VALUES (0, '');

-- Physical event rows, numbers only. (node_id, seq) identifies an event uniquely, also across
-- merged nodes. No index or key: DuckDB's zone maps serve time and pid filters, and appends
-- stay fast. Queries read them through `event_data` or `events`; only compiled-in hot paths
-- that need no names (stats) read event_rows directly.
CREATE TABLE event_rows (
    node_id    USMALLINT NOT NULL,
    seq        UBIGINT NOT NULL,
    timestamp  BIGINT NOT NULL,
    duration   BIGINT NOT NULL,
    pid        UINTEGER NOT NULL,
    tid        UINTEGER NOT NULL,
    comm_id    UINTEGER NOT NULL,
    op_id      USMALLINT NOT NULL,
    arg0       BIGINT NOT NULL,
    arg1       BIGINT NOT NULL,
    ret_code   INTEGER NOT NULL,
    gpu_id     SMALLINT NOT NULL,
    stack_hash BIGINT NOT NULL,
    cgroup_id  UBIGINT NOT NULL,
    rank       INTEGER
);

-- Event rows with node and thread names, numeric op_id (the compiled-in queries read this).
CREATE VIEW event_data AS
SELECT
    n.node,
    r.seq,
    r.timestamp,
    r.duration,
    r.pid,
    r.tid,
    c.comm,
    r.op_id,
    r.arg0,
    r.arg1,
    r.ret_code,
    r.gpu_id,
    r.stack_hash,
    r.cgroup_id,
    r.rank
FROM event_rows r
JOIN nodes n ON n.node_id = r.node_id
JOIN comms c ON c.comm_id = r.comm_id;

CREATE VIEW events AS
SELECT
    d.node || ':' || d.seq::VARCHAR AS id,
    d.seq,
    d.timestamp,
    d.duration,
    d.pid,
    d.tid,
    d.comm,
    d.node,
    o.source,
    o.op,
    d.op_id,
    d.arg0,
    d.arg1,
    d.ret_code,
    d.gpu_id,
    d.stack_hash,
    d.cgroup_id,
    d.rank
FROM event_data d
JOIN ops o ON o.op_id = d.op_id;

-- Call stacks, one row per frame (depth 0 = innermost), interned by stack_hash.
CREATE TABLE stack_frames (
    stack_hash BIGINT NOT NULL,
    depth      USMALLINT NOT NULL,
    ip         UBIGINT NOT NULL,
    symbol     VARCHAR NOT NULL,
    module     VARCHAR NOT NULL,
    "offset"   UBIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (stack_hash, depth)
);

CREATE VIEW stacks AS
SELECT
    stack_hash,
    count(*) AS depth,
    string_agg(CASE WHEN symbol = '' THEN printf('0x%x', ip) ELSE symbol END || ' (' || module || ')', ' <- ' ORDER BY depth) AS frames
FROM stack_frames
GROUP BY stack_hash;

-- Causal chains: found by the analysis engine, or imported from reference traces.
CREATE TABLE chains (
    chain_id        VARCHAR NOT NULL,
    node            VARCHAR NOT NULL DEFAULT '',
    detector        VARCHAR NOT NULL,
    detected_ns     BIGINT NOT NULL,
    severity        VARCHAR NOT NULL,  -- HIGH, MEDIUM, LOW
    summary         VARCHAR NOT NULL,
    root_cause      VARCHAR NOT NULL,
    explanation     VARCHAR NOT NULL,
    recommendations VARCHAR NOT NULL,  -- JSON array of strings
    timeline        VARCHAR NOT NULL,  -- JSON array of {layer, op, detail, duration_ns}
    evidence_sql    VARCHAR NOT NULL DEFAULT '',
    time_lost_ns    BIGINT NOT NULL DEFAULT 0,
    cuda_op         VARCHAR NOT NULL DEFAULT '',
    p50_ns          BIGINT NOT NULL DEFAULT 0,
    p99_ns          BIGINT NOT NULL DEFAULT 0,
    tail_ratio      DOUBLE NOT NULL DEFAULT 0,
    origin          VARCHAR NOT NULL DEFAULT '',  -- 'engine' or 'imported:<file>'
    PRIMARY KEY (node, chain_id)
);

-- Every call counted in the kernel, per (pid, op) and window, including calls whose individual
-- events were sampled out or dropped. calls - stored = calls with no row in event_rows.
CREATE TABLE op_counts (
    node            VARCHAR NOT NULL,
    pid             UINTEGER NOT NULL,
    op_id           USMALLINT NOT NULL,
    window_start_ns BIGINT NOT NULL,
    window_end_ns   BIGINT NOT NULL,
    calls           UBIGINT NOT NULL,
    stored          UBIGINT NOT NULL,
    total_ns        UBIGINT NOT NULL,
    bytes           UBIGINT NOT NULL DEFAULT 0
);

-- Per-(pid, op) log2 duration histograms from the kernel: bucket b counts calls with
-- 2^b <= duration_ns < 2^(b+1). Percentiles from these are estimates and are labelled so.
CREATE TABLE op_histograms (
    node            VARCHAR NOT NULL,
    pid             UINTEGER NOT NULL,
    op_id           USMALLINT NOT NULL,
    window_start_ns BIGINT NOT NULL,
    window_end_ns   BIGINT NOT NULL,
    log2_bucket     UTINYINT NOT NULL,
    count           UBIGINT NOT NULL
);

-- Everything that was lost, counted: kernel ring buffer full, user channel full, write failures,
-- events sampled out on purpose.
CREATE TABLE drops (
    node   VARCHAR NOT NULL,
    ts_ns  BIGINT NOT NULL,
    kind   VARCHAR NOT NULL,  -- ringbuf_full, channel_full, write_failed, sampled, import_skipped
    op_id  USMALLINT,
    count  UBIGINT NOT NULL,
    detail VARCHAR NOT NULL DEFAULT ''
);

CREATE TABLE system_snapshots (
    node         VARCHAR NOT NULL,
    ts_ns        BIGINT NOT NULL,
    cpu_pct      DOUBLE NOT NULL,
    mem_pct      DOUBLE NOT NULL,
    mem_avail_mb BIGINT NOT NULL,
    swap_mb      BIGINT NOT NULL,
    load_avg     DOUBLE NOT NULL
);

CREATE TABLE cgroups (
    node         VARCHAR NOT NULL,
    cgroup_id    UBIGINT NOT NULL,
    container_id VARCHAR NOT NULL DEFAULT '',
    cgroup_path  VARCHAR NOT NULL DEFAULT '',
    pod_name     VARCHAR NOT NULL DEFAULT '',
    namespace    VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (node, cgroup_id)
);

CREATE TABLE cgroup_schedstat (
    node             VARCHAR NOT NULL,
    cgroup_id        UBIGINT NOT NULL,
    window_start_ns  BIGINT NOT NULL,
    window_end_ns    BIGINT NOT NULL,
    p99_off_cpu_ns   BIGINT NOT NULL,
    total_off_cpu_ns BIGINT NOT NULL,
    events           BIGINT NOT NULL
);

-- What every column means, with units: written from the schema docs in code, read by agents.
CREATE TABLE schema_columns (
    table_name  VARCHAR NOT NULL,
    column_name VARCHAR NOT NULL,
    type        VARCHAR NOT NULL,
    unit        VARCHAR NOT NULL,
    meaning     VARCHAR NOT NULL,
    PRIMARY KEY (table_name, column_name)
);
