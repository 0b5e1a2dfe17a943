-- causeway trace store, schema version 2: what the collector's overhead controller
-- measured and decided. Applied on top of 001 to every new file (schema.rs MIGRATIONS).

-- Per-call cost of causeway's probes, calibrated when the trace started by timing functions of
-- the collector with and without the probes attached (same run), for each probe mode: full,
-- aggregate, entry_only (ours), bare_pair and bare_entry (empty programs, the baseline); and for
-- each kind of first instruction of the probed function (push, nop, endbr64, other), which
-- decides whether the kernel emulates it or single-steps it (a second trap, ~20x the cost).
CREATE TABLE probe_costs (
    node        VARCHAR NOT NULL,
    mode        VARCHAR NOT NULL,
    first_insn  VARCHAR NOT NULL,
    ns_per_call DOUBLE NOT NULL,
    method      VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (node, mode, first_insn)
);

-- Every change of an op's probe mode: at trace start (forced modes), by the overhead controller
-- when the estimated overhead passed the budget, and back when it fell well below it.
CREATE TABLE probe_modes (
    node         VARCHAR NOT NULL,
    ts_ns        BIGINT NOT NULL,
    op_id        USMALLINT NOT NULL,
    mode         VARCHAR NOT NULL,   -- full, aggregate, entry_only
    previous     VARCHAR NOT NULL,   -- the mode before
    reason       VARCHAR NOT NULL,   -- forced, over_budget, under_budget
    overhead_pct DOUBLE NOT NULL DEFAULT 0  -- estimated overhead of the worst process at the switch
);

-- Estimated cost of the probes against the CPU time of each traced process, per controller
-- window: overhead = probe_ns / cpu_ns (the share of the process's CPU time spent in probes).
CREATE TABLE probe_overhead (
    node            VARCHAR NOT NULL,
    pid             UINTEGER NOT NULL,
    window_start_ns BIGINT NOT NULL,
    window_end_ns   BIGINT NOT NULL,
    cpu_ns          UBIGINT NOT NULL,
    probe_ns        UBIGINT NOT NULL,
    calls           UBIGINT NOT NULL,
    budget_pct      DOUBLE NOT NULL
);
