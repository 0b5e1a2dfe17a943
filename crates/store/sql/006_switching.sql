-- causeway trace store, schema version 6: the time a sampled op spent switching. Its links take
-- milliseconds to go in before an attached slice and tens of milliseconds to go out after one
-- (RCU grace periods): the probes still slow the job then, though its calls are not counted. The
-- estimate counts that part of the detached time at the attached rate, not the faster detached
-- one: op_counts.calls = counted x (observed_ns + switching_ns + (detached - switching_ns) x
-- speedup) / observed_ns. Files of version 4-5 get 0 (their estimates did not count it).
-- Applied on top of 001-005 to every new file (schema.rs MIGRATIONS).

ALTER TABLE probe_sampling ADD COLUMN switching_ns UBIGINT DEFAULT 0;
