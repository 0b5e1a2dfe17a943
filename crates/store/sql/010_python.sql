-- causeway trace store, schema version 10: the CPython frames of call stacks (`trace --stacks` of
-- a Python program). The collector walks the calling thread's interpreter frames in the kernel
-- at each recorded call, in the same stack (same stack_hash) as its native frames, and names
-- them from the code objects. Applied on top of 001-009 to every new file (schema.rs).

-- One row per stack the collector looked for Python frames in.
CREATE TABLE python_stacks (
    stack_hash BIGINT NOT NULL PRIMARY KEY,
    tid        UINTEGER NOT NULL,  -- the calling thread (the frames are its own)
    status     VARCHAR NOT NULL,   -- ok, truncated, partial, no_thread, rejected, unreadable
    frames     USMALLINT NOT NULL  -- rows in python_frames
);

-- One row per Python frame, depth 0 = innermost (the call nearest the GPU call).
CREATE TABLE python_frames (
    stack_hash BIGINT NOT NULL,
    depth      USMALLINT NOT NULL,
    file       VARCHAR NOT NULL,
    function   VARCHAR NOT NULL,
    line       UINTEGER NOT NULL,
    PRIMARY KEY (stack_hash, depth)
);
