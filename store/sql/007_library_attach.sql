-- causeway trace store, schema version 7: when tracing began for each process and library. The
-- probes of a library are attached once per file; a process's calls into it before that moment
-- are not in the trace. `complete` says whether any could be missing: a process causeway started
-- and held from the mapping to the attach (or whose libraries were attached before it started)
-- has none missing; one already running when the trace began, or not held (hold disabled, timed
-- out, attached at a rescan), may. Applied on top of 001-006 to every new file (schema.rs).

CREATE TABLE library_attach (
    node               VARCHAR NOT NULL,
    pid                UINTEGER NOT NULL,
    library            VARCHAR NOT NULL,   -- the file whose probes were attached
    how                VARCHAR NOT NULL,   -- before_start, held, hold_timeout, mapped, rescan, running
    process_start_ns   BIGINT,             -- when the process started (running processes), NULL unknown
    mapped_ns          BIGINT,             -- when the process mapped or exec'd the file, NULL unknown
    attached_ns        BIGINT NOT NULL,    -- when its probes were attached
    complete           BOOLEAN NOT NULL    -- true: no call of pid into it is missing before attached_ns
);
