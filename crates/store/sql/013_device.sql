-- causeway trace store, schema version 13: what a profiler recorded beside the host's calls
-- (PyTorch profiler / Kineto imports, docs/import.md): the device's own timeline, the host's
-- CPU-op and annotation ranges, training steps, and the id tying each runtime call to the
-- device work it launched. Applied on top of 001-012 to every new file (schema.rs).

-- The device's own timeline: one row per kernel, copy, memset or synchronisation as the
-- device ran it (start and end measured on the device, not estimated from the host).
CREATE TABLE gpu_activity (
    node        VARCHAR NOT NULL,
    pid         UINTEGER NOT NULL,   -- the process that launched it
    device      SMALLINT NOT NULL,   -- CUDA device ordinal
    stream      BIGINT NOT NULL,     -- stream id as the source numbers it
    kind        VARCHAR NOT NULL,    -- kernel, memcpy, memset, sync
    name        VARCHAR NOT NULL,    -- kernels: demangled, without parameters; others as the source names them
    raw_name    VARCHAR NOT NULL,    -- the name as the source wrote it
    start_ns    BIGINT NOT NULL,
    end_ns      BIGINT NOT NULL,
    bytes       BIGINT,              -- copies and memsets; NULL when the source has none
    correlation BIGINT,              -- id of the launching runtime/driver call (correlations)
    grid_x      UINTEGER,            -- launch geometry of kernels, NULL when the source has none
    grid_y      UINTEGER,
    grid_z      UINTEGER,
    block_x     UINTEGER,
    block_y     UINTEGER,
    block_z     UINTEGER
);

-- Host ranges: CPU ops, user annotations (record_function), NVTX ranges, Python functions.
CREATE TABLE ranges (
    node     VARCHAR NOT NULL,
    pid      UINTEGER NOT NULL,
    tid      UINTEGER NOT NULL,
    name     VARCHAR NOT NULL,
    kind     VARCHAR NOT NULL,       -- cpu_op, user_annotation, nvtx, python_function
    start_ns BIGINT NOT NULL,
    end_ns   BIGINT NOT NULL,
    depth    USMALLINT NOT NULL      -- 0 = outermost range open on the thread
);

-- Training steps, the unit people compare runs by.
CREATE TABLE steps (
    node     VARCHAR NOT NULL,
    pid      UINTEGER NOT NULL,
    tid      UINTEGER NOT NULL,
    step     BIGINT NOT NULL,        -- the step's index (ProfilerStep#N: N)
    start_ns BIGINT NOT NULL,
    end_ns   BIGINT NOT NULL,
    source   VARCHAR NOT NULL        -- profiler, nvtx, inferred
);

-- The correlation id of an imported runtime/driver call: join events on (node, seq), and
-- gpu_activity on (node, pid, correlation) for the device work the call launched.
CREATE TABLE correlations (
    node        VARCHAR NOT NULL,
    seq         UBIGINT NOT NULL,
    pid         UINTEGER NOT NULL,
    correlation BIGINT NOT NULL
);
