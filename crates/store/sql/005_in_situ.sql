-- causeway trace store, schema version 5: the in-situ cost of a sampled op's probes. While a
-- sampled op's probes are attached, a job they slow makes its other CUDA calls at a lower rate
-- than while they are detached; the collector compares the two rates (over the segments between
-- switches) and divides the time lost by the op's probe hits. The overhead controller scales the
-- op's calibrated costs by lost / calibrated when the lower bound of the measurement is above
-- the calibration. One row per op and counts window (5 s), cumulative since the op was first
-- sampled: the last row of an op is its best measurement. Once a process's slowdown is measured,
-- its sampled op_counts count the detached time at the attached rate times
-- detached_rate / attached_rate (a thread the probes slow calls faster without them).
-- Applied on top of 001-004 to every new file (schema.rs MIGRATIONS).

CREATE TABLE probe_in_situ (
    node                  VARCHAR NOT NULL,
    ts_ns                 BIGINT NOT NULL,
    op_id                 USMALLINT NOT NULL,
    pid                   UINTEGER NOT NULL,  -- the process with the most probe hits of the op
    attached_ns           BIGINT NOT NULL,    -- time measured with the op's probes attached
    detached_ns           BIGINT NOT NULL,    -- ... and detached
    attached_rate         DOUBLE NOT NULL,    -- progress calls per second while attached
    detached_rate         DOUBLE NOT NULL,    -- ... while detached
    hits                  UBIGINT NOT NULL,   -- probe hits of the op while attached
    slowdown              DOUBLE NOT NULL,    -- 1 - attached_rate / detached_rate
    slowdown_se           DOUBLE NOT NULL,    -- its standard error
    lost_ns_per_hit       DOUBLE NOT NULL,    -- slowdown x attached_ns / hits
    calibrated_ns_per_hit DOUBLE NOT NULL,    -- the calibrated full-mode cost of the op
    factor                DOUBLE NOT NULL     -- what the controller scales the op's costs by (>= 1)
);
