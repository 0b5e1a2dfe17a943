//! The ground floor of the engine: what every pass and detector stands on and that knows nothing
//! of them. Time windows, batched scans of a thread's events, interval arithmetic, context
//! switches, op sets, the per-thread cursor of the GPU-call pass, the kernel's counters, number
//! and duration formats, and the DuckDB error mapping. Nothing here imports from the floors
//! above (facts, budget, detectors, chains); the module graph test in tests/it checks it.

pub mod counts;
pub mod cursor;
pub(crate) mod errors;
pub mod fmt;
pub mod intervals;
pub mod opsets;
pub mod query;
pub mod scan;
pub mod switches;
pub mod window;
