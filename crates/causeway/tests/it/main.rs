//! End-to-end tests of the `causeway` binary: commands as a person runs them, exit codes,
//! messages and snapshot-tested output.

mod agent;
mod bombs;
mod browser;
mod cli;
mod collect;
mod collect_limits;
mod collect_server;
mod common;
mod cost;
mod deploy;
mod files;
mod fleet;
mod hostile;
mod house;
mod lab;
mod limits;
mod live;
mod mcp;
mod nvtx;
mod one_answer;
mod otlp;
mod python_sites;
mod report;

mod trace;

/// The code of a google.rpc.Status body (0 when there is none).
pub fn mcp_status_code(body: &[u8]) -> i32 {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(int32, tag = "1")]
        code: i32,
    }
    <Status as prost::Message>::decode(body).map_or(0, |s| s.code)
}
