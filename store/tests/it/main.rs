//! Integration tests of the trace store: import of the reference traces in ../shared (with the
//! published figures), bad input, the writer, and the locked-down reader.

mod common;
mod guard_corpus;
mod import;
mod live;
mod merge;
mod reader;
mod received;
mod writer;
