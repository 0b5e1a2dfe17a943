-- causeway trace store, schema version 8: names of the tasks that are not traced but took the
-- CPU from a traced thread (the preemptors of sched_switch events, whose arg0 is a thread id).
-- The collector's scheduler program reads the task's name and process when it first sees it
-- run in a traced thread's place, so a short-lived process is named too. Applied on top of
-- 001-007 to every new file (schema.rs).

CREATE TABLE tasks (
    node          VARCHAR NOT NULL,
    tid           UINTEGER NOT NULL,  -- = events.arg0 of sched_switch rows
    pid           UINTEGER NOT NULL,  -- its process (thread group)
    comm          VARCHAR NOT NULL,   -- its thread name when first seen
    first_seen_ns BIGINT NOT NULL     -- the switch it was first seen at
);
