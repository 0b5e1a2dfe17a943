-- causeway trace store, schema version 4: duty-cycled probes. An op the overhead controller moved
-- to probe mode `sampled` has its probes attached only part of the time; its op_counts rows then
-- hold estimates (the calls counted while attached, scaled by the window over the attached
-- time). This table keeps what the estimate rests on, per op and counts window.
-- Applied on top of 001-003 to every new file (schema.rs MIGRATIONS).

CREATE TABLE probe_sampling (
    node            VARCHAR NOT NULL,
    op_id           USMALLINT NOT NULL,
    window_start_ns BIGINT NOT NULL,
    window_end_ns   BIGINT NOT NULL,
    observed_ns     UBIGINT NOT NULL,  -- time the op's probes were attached in the window
    counted         UBIGINT NOT NULL   -- calls the kernel counted then (all processes)
);
