-- causeway trace store, schema version 11: the memory limit each traced process ran under (its
-- memory cgroup's or an ancestor's, the smallest: cgroup v2 memory.max, v1
-- memory.limit_in_bytes), read with its other /proc facts. A job at its limit reclaims memory
-- itself (`mm_reclaim` events with arg1 = 1). Applied on top of 001-010 to every new file
-- (schema.rs).

ALTER TABLE processes ADD COLUMN IF NOT EXISTS memory_limit UBIGINT DEFAULT 0;
