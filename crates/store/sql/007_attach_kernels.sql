-- causeway trace store, schema version 7: when tracing began for each process and library, and
-- kernel names. The probes of a library are attached once per file; a process's calls into it before that moment
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

-- Kernel names. cudaLaunchKernel's first argument (events.arg0) is the host stub of the kernel,
-- whose symbol is the kernel's mangled name (or, CUDA 13, a handle cudaGetKernel made for a
-- stub); the collector names each (process, address) once from the module that maps the stub.
-- Driver launches (cuLaunchKernel, cuLaunchKernelEx) pass a CUfunction, named after the name it
-- was got by (cuModuleGetFunction, cuLibraryGetKernel + cuKernelGetFunction; module ''). The
-- `kernel_launches` view puts the names on the launch events.
CREATE TABLE kernels (
    node      VARCHAR NOT NULL,
    pid       UINTEGER NOT NULL,
    address   BIGINT NOT NULL,    -- = events.arg0 of the process's launches (stub, handle, CUfunction)
    kernel_id UINTEGER NOT NULL,  -- one per (module, symbol) on the node
    name      VARCHAR NOT NULL,   -- demangled, without parameters
    symbol    VARCHAR NOT NULL,   -- the raw symbol, for exact matching
    module    VARCHAR NOT NULL    -- file name of the module holding the stub ('' for driver-loaded code)
);

CREATE VIEW kernel_launches AS
SELECT e.*, k.kernel_id, k.name AS kernel, k.symbol AS kernel_symbol, k.module AS kernel_module
FROM events e
JOIN kernels k ON k.node = e.node AND k.pid = e.pid AND k.address = e.arg0
WHERE e.op IN ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx');
