//! Integration tests of the trace store: the writer, live readers, merge, received batches and
//! the locked-down reader (the SQL guard's corpus run against a cluster trace the store writes).

mod common;
mod device;
mod guard_corpus;
mod live;
mod merge;
mod reader;
mod received;
mod segments;
mod writer;
