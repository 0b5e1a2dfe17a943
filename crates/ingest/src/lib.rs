//! causeway-ingest: what `causeway collect` does with received OTLP, without the network.
//! [`decode`] turns OTLP metrics and logs requests into store rows (causeway's own metrics and
//! chains mapped back onto the trace tables, everything else kept generically), and [`Ingest`]
//! queues them, bounded, for the one writer thread of the cluster store.

mod admission;
pub mod decode;
mod queue;

pub use admission::{DECODE_FACTOR, MemoryBudget, Reservation};
pub use decode::Decoded;
pub use queue::{Done, Ingest, IngestOptions, IngestStats, SubmitError};

/// The store types the rows are made of.
pub use causeway_store::received;
