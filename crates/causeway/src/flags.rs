//! Options shared by several commands and the resolution of them into the client crate's
//! types: the fleet (`--nodes` with TLS and token), and OTLP push (`--otlp-endpoint`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use causeway_client::fleet::{Fleet, read_token, tls_config};
use causeway_client::otlp_push::{Protocol, Target};

/// Where the fleet is and how to reach it (shared by `query`/`explain`/`fleet --nodes` and
/// `mcp --nodes`, whose token option is the server's own).
#[derive(Debug, Clone, clap::Args)]
pub struct FleetConn {
    /// Ask these serving nodes (`causeway serve`, `trace --listen`) in parallel:
    /// comma-separated `https://host:port` or `host:port`; results carry each node.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    pub nodes: Vec<String>,
    /// With --nodes: CA certificate(s) to trust for https nodes (PEM).
    #[arg(long, value_name = "PEM", requires = "nodes")]
    pub ca_cert: Option<PathBuf>,
    /// With --nodes: client certificate for mTLS (PEM); needs --client-key.
    #[arg(long, value_name = "PEM", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// With --nodes: the client certificate's key (PEM).
    #[arg(long, value_name = "PEM", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// With --nodes: give up on a node after this long (e.g. 5s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub node_timeout: Duration,
}

impl FleetConn {
    /// The fleet these options describe with `token` (reads the TLS files).
    pub fn fleet(&self, token: Option<String>) -> Result<Fleet> {
        let tls = match &self.ca_cert {
            Some(ca) => Some(Arc::new(tls_config(
                ca,
                self.client_cert.as_ref().zip(self.client_key.as_ref()),
            )?)),
            None => None,
        };
        Ok(Fleet {
            nodes: self.nodes.clone(),
            token,
            tls,
            timeout: self.node_timeout,
        })
    }
}

/// The fleet options of the client commands (`query`, `explain`, `fleet`).
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    #[command(flatten)]
    pub conn: FleetConn,
    /// With --nodes: file holding the bearer token (else $CAUSEWAY_TOKEN).
    #[arg(long, value_name = "FILE", requires = "nodes")]
    pub token_file: Option<PathBuf>,
}

impl FleetArgs {
    /// Whether --nodes was given.
    pub fn given(&self) -> bool {
        !self.conn.nodes.is_empty()
    }

    /// The fleet these options describe (reads the token and TLS files).
    pub fn fleet(&self) -> Result<Fleet> {
        self.conn.fleet(read_token(self.token_file.as_deref())?)
    }
}

/// OTLP transport, as the CLI spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (the collector's port 4318).
    Http,
    /// OTLP/gRPC (the collector's port 4317).
    Grpc,
}

impl From<OtlpProtocol> for Protocol {
    fn from(p: OtlpProtocol) -> Protocol {
        match p {
            OtlpProtocol::Http => Protocol::Http,
            OtlpProtocol::Grpc => Protocol::Grpc,
        }
    }
}

/// `causeway trace` options: push OTLP metrics while recording.
#[derive(Debug, Clone, clap::Args)]
pub struct PushFlags {
    /// Push cumulative OTLP metrics to this receiver every --otlp-interval while recording,
    /// and metrics and causal chains (logs) once more at the end; a failed push is a warning.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport.
    #[arg(long, value_enum, default_value = "http", requires = "otlp_endpoint")]
    pub otlp_protocol: OtlpProtocol,
    /// Time between pushes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s", requires = "otlp_endpoint")]
    pub otlp_interval: Duration,
    /// File holding the receiver's bearer token (else $CAUSEWAY_TOKEN).
    #[arg(long, value_name = "FILE", requires = "otlp_endpoint")]
    pub otlp_token_file: Option<std::path::PathBuf>,
    /// CA certificate(s) to trust for an https receiver (PEM).
    #[arg(long, value_name = "PEM", requires = "otlp_endpoint")]
    pub otlp_ca_cert: Option<std::path::PathBuf>,
}

impl PushFlags {
    /// The receiver these flags name, if any (reads the token and CA files now).
    pub fn target(&self) -> Result<Option<Target>> {
        let Some(url) = &self.otlp_endpoint else {
            return Ok(None);
        };
        if self.otlp_interval < Duration::from_millis(100) {
            bail!(causeway_store::Hinted::new(
                format!("--otlp-interval {:?} is too short", self.otlp_interval),
                "use 1s or more, e.g. --otlp-interval 10s"
            ));
        }
        let timeout = self
            .otlp_interval
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
        Ok(Some(Target::new(
            url,
            self.otlp_protocol.into(),
            read_token(self.otlp_token_file.as_deref())?,
            self.otlp_ca_cert.as_deref(),
            timeout,
        )?))
    }
}
