//! End-to-end tests of the `causeway` binary: commands as a person runs them, exit codes,
//! messages and snapshot-tested output.

mod bombs;
mod cli;
mod collect;
mod collect_server;
mod common;
mod fleet;
mod hostile;
mod limits;
mod live;
mod mcp;
mod otlp;
mod trace;
