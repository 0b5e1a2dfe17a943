//! The agent's settings: `agent.toml` (docs/agent.md lists every key) read, checked and turned
//! into what the recorder, the server and the pusher take; every mistake names its key and how to
//! fix it. `causeway agent` runs them (cmd/agent.rs).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use causeway_collector::{SegmentPolicy, TraceArgs};
use causeway_store::Hinted;
use serde::{Deserialize, Serialize};

use crate::cli::{OtlpProtocol, PushFlags};
use crate::cmd::mcp::{HttpFlags, QueryFlags};

/// The configuration file. Durations are humantime (`90s`, `1h`, `7d`), sizes bytes with a
/// unit (`512MiB`, `20GiB`, `1GB`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Where segments live: closed ones in it, the open one in `open/`.
    pub data_dir: PathBuf,
    /// Node name stored with every row (default: $CAUSEWAY_NODE or the hostname).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Cluster (job) id for processes whose environment names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default)]
    pub segments: SegmentsConf,
    #[serde(default)]
    pub retention: RetentionConf,
    #[serde(default)]
    pub trace: TraceConf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeConf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpConf>,
    /// `[cost]`: prices per GPU-hour for the findings' cost (else the user's config file's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<causeway_analysis::cost::Prices>,
}

/// `[segments]`: when the open segment closes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SegmentsConf {
    /// A segment closes after this long.
    pub period: String,
    /// ... or when its file passes this size.
    pub max_size: String,
}

impl Default for SegmentsConf {
    fn default() -> Self {
        Self {
            period: "1h".into(),
            max_size: "1GiB".into(),
        }
    }
}

/// `[retention]`: which closed segments are kept.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConf {
    /// Closed segments older than this are deleted.
    pub max_age: String,
    /// The oldest closed segments are deleted past this total.
    pub max_total_size: String,
}

impl Default for RetentionConf {
    fn default() -> Self {
        Self {
            max_age: "7d".into(),
            max_total_size: "20GiB".into(),
        }
    }
}

/// `[trace]`: the options of `causeway trace`, with the same names.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceConf {
    pub nccl: bool,
    pub stacks: bool,
    pub no_python_frames: bool,
    pub no_host: bool,
    pub overhead_budget: f64,
    pub exact_counts: bool,
    pub probe_modes: Vec<String>,
    pub sample_duty: f64,
    pub ringbuf_size: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_pods: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_token_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_ca_cert: Option<PathBuf>,
    pub net_syscalls: bool,
}

impl Default for TraceConf {
    fn default() -> Self {
        Self {
            nccl: false,
            stacks: false,
            no_python_frames: false,
            no_host: false,
            overhead_budget: causeway_collector::DEFAULT_OVERHEAD_BUDGET,
            exact_counts: false,
            probe_modes: Vec::new(),
            sample_duty: causeway_collector::DEFAULT_SAMPLE_DUTY_PCT,
            ringbuf_size: causeway_collector::DEFAULT_RINGBUF_BYTES,
            kube_pods: None,
            kube_token_file: None,
            kube_ca_cert: None,
            net_syscalls: false,
        }
    }
}

/// `[serve]`: MCP, the query API, /metrics and the report page over HTTP.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConf {
    /// Address to listen on (a token is required off loopback).
    pub listen: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    #[serde(default)]
    pub allow_origin: Vec<String>,
    #[serde(default)]
    pub allow_host: Vec<String>,
    #[serde(default = "default_query_timeout")]
    pub query_timeout: String,
    #[serde(default = "default_query_memory")]
    pub query_memory: String,
    /// Closed segments that ended within this long are served with the open one, as one trace.
    #[serde(default = "default_window")]
    pub window: String,
}

fn default_query_timeout() -> String {
    "10s".into()
}
fn default_query_memory() -> String {
    "2GB".into()
}
fn default_window() -> String {
    "6h".into()
}
fn default_interval() -> String {
    "10s".into()
}
fn default_protocol() -> String {
    "http".into()
}

/// `[otlp]`: push to `causeway collect` (or any OTLP receiver).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConf {
    pub endpoint: String,
    #[serde(default = "default_protocol")]
    pub protocol: String,
    #[serde(default = "default_interval")]
    pub interval: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
}

/// A configuration checked and turned into what the recorder, server and pusher take.
#[derive(Debug)]
pub struct Agent {
    /// The file as read, defaults filled in.
    pub config: AgentConfig,
    /// The recording (`db` is the data directory).
    pub trace: TraceArgs,
    /// Segments and retention.
    pub policy: SegmentPolicy,
    /// Serving, when configured.
    pub serve: Option<(SocketAddr, HttpFlags, QueryFlags)>,
    /// Pushing, when configured.
    pub push: Option<PushFlags>,
}

fn bad(key: &str, what: String, hint: &str) -> anyhow::Error {
    anyhow::anyhow!(Hinted::new(format!("agent config: {key}: {what}"), hint))
}

fn duration(key: &str, v: &str) -> Result<Duration> {
    let d = humantime::parse_duration(v).map_err(|e| {
        bad(
            key,
            format!("'{v}' is not a duration ({e})"),
            "write e.g. 90s, 1h or 7d",
        )
    })?;
    if d.is_zero() {
        return Err(bad(
            key,
            "must be longer than 0".into(),
            "write e.g. 90s, 1h or 7d",
        ));
    }
    Ok(d)
}

fn size(key: &str, v: &str) -> Result<u64> {
    causeway_store::guarded::parse_size(v).ok_or_else(|| {
        bad(
            key,
            format!("'{v}' is not a size"),
            "write e.g. 512MiB, 20GiB or 1GB",
        )
    })
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<Agent> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(Hinted::new(
            format!("agent config {}: {e}", path.display()),
            "pass the file with --config FILE (deploy/agent.toml is an example)"
        ))
    })?;
    parse(&text, path)
}

/// Checks the configuration `text` (read from `path`, named in errors).
pub fn parse(text: &str, path: &Path) -> Result<Agent> {
    let config: AgentConfig = toml::from_str(text).map_err(|e| {
        anyhow::anyhow!(Hinted::new(
            crate::prices::toml_error("agent config", path, text, &e),
            "keys and sections are listed in docs/agent.md; check it with `causeway agent --check-config`"
        ))
    })?;
    let c = &config;
    if let Some(p) = &c.cost {
        p.validate().map_err(|e| {
            anyhow::anyhow!(Hinted::new(
                format!("agent config {}: {e}", path.display()),
                "e.g. [cost] gpu_hour = 2.50"
            ))
        })?;
    }
    if c.data_dir.as_os_str().is_empty() || c.data_dir.is_relative() {
        return Err(bad(
            "data_dir",
            format!("'{}' is not an absolute path", c.data_dir.display()),
            "e.g. data_dir = \"/var/lib/causeway\"",
        ));
    }
    let policy = SegmentPolicy {
        period: duration("segments.period", &c.segments.period)?,
        max_bytes: size("segments.max_size", &c.segments.max_size)?,
        max_age: duration("retention.max_age", &c.retention.max_age)?,
        max_total_bytes: size("retention.max_total_size", &c.retention.max_total_size)?,
        serve_window: match &c.serve {
            Some(s) => duration("serve.window", &s.window)?,
            None => Duration::ZERO,
        },
    };
    if policy.max_total_bytes < policy.max_bytes {
        return Err(bad(
            "retention.max_total_size",
            format!(
                "{} is less than one segment (segments.max_size {})",
                c.retention.max_total_size, c.segments.max_size
            ),
            "keep room for several segments, e.g. max_total_size = 20 x max_size",
        ));
    }
    let t = &c.trace;
    let mut trace = TraceArgs::with_db(c.data_dir.clone());
    trace.node = c.node.clone();
    trace.cluster = c.cluster.clone();
    trace.nccl = t.nccl;
    trace.stacks = t.stacks;
    trace.no_python_frames = t.no_python_frames;
    trace.no_host = t.no_host;
    trace.overhead_budget = causeway_collector::parse_budget(&t.overhead_budget.to_string())
        .map_err(|e| bad("trace.overhead_budget", e, "a percentage, e.g. 1.0"))?;
    trace.exact_counts = t.exact_counts;
    trace.probe_modes = t
        .probe_modes
        .iter()
        .map(|m| causeway_collector::parse_probe_mode(m))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            bad(
                "trace.probe_modes",
                e,
                "e.g. [\"cudaLaunchKernel=entry_only\"]",
            )
        })?;
    trace.sample_duty = causeway_collector::parse_duty(&t.sample_duty.to_string())
        .map_err(|e| bad("trace.sample_duty", e, "a percentage, e.g. 10"))?;
    if t.ringbuf_size < 4096 || !t.ringbuf_size.is_power_of_two() {
        return Err(bad(
            "trace.ringbuf_size",
            format!("{} is not a power of two >= 4096", t.ringbuf_size),
            "e.g. 8388608 (8 MiB)",
        ));
    }
    trace.ringbuf_size = t.ringbuf_size;
    if t.no_python_frames && !t.stacks {
        return Err(bad(
            "trace.no_python_frames",
            "needs stacks = true".into(),
            "remove it, or set stacks = true",
        ));
    }
    if (t.kube_token_file.is_some() || t.kube_ca_cert.is_some()) && t.kube_pods.is_none() {
        return Err(bad(
            "trace.kube_token_file",
            "needs kube_pods".into(),
            "set kube_pods = \"in-cluster\" or the kubelet's URL",
        ));
    }
    trace.kube_pods = t.kube_pods.clone();
    trace.kube_token_file = t.kube_token_file.clone();
    trace.kube_ca_cert = t.kube_ca_cert.clone();
    trace.net_syscalls = t.net_syscalls;
    let serve = c
        .serve
        .as_ref()
        .map(|s| -> Result<_> {
            let addr: SocketAddr = s.listen.parse().map_err(|_| {
                bad(
                    "serve.listen",
                    format!("'{}' is not an address", s.listen),
                    "e.g. listen = \"0.0.0.0:8765\"",
                )
            })?;
            if s.tls_cert.is_some() != s.tls_key.is_some() {
                return Err(bad(
                    "serve.tls_cert",
                    "tls_cert and tls_key go together".into(),
                    "set both, or neither",
                ));
            }
            let http = HttpFlags {
                token_file: s.token_file.clone(),
                tls_cert: s.tls_cert.clone(),
                tls_key: s.tls_key.clone(),
                tls_client_ca: s.tls_client_ca.clone(),
                allow_origin: s.allow_origin.clone(),
                allow_host: s.allow_host.clone(),
                max_body: 1 << 20,
                max_connections: 4096,
                max_sessions: 1024,
                max_sessions_per_client: 64,
                unused_session_timeout: Duration::from_secs(30),
                header_timeout: Duration::from_secs(10),
                body_timeout: Duration::from_secs(30),
            };
            let query = QueryFlags {
                query_timeout: duration("serve.query_timeout", &s.query_timeout)?,
                query_memory: s.query_memory.clone(),
            };
            size("serve.query_memory", &s.query_memory)?;
            if !addr.ip().is_loopback() && s.token_file.is_none() {
                return Err(bad(
                    "serve.token_file",
                    format!("serving {addr} needs a bearer token"),
                    "set token_file, or listen on a loopback address such as 127.0.0.1",
                ));
            }
            Ok((addr, http, query))
        })
        .transpose()?;
    let push = c
        .otlp
        .as_ref()
        .map(|o| -> Result<_> {
            let protocol = match o.protocol.as_str() {
                "http" => OtlpProtocol::Http,
                "grpc" => OtlpProtocol::Grpc,
                other => {
                    return Err(bad(
                        "otlp.protocol",
                        format!("'{other}' is not http or grpc"),
                        "protocol = \"http\" (port 4318) or \"grpc\" (port 4317)",
                    ));
                }
            };
            Ok(PushFlags {
                otlp_endpoint: Some(o.endpoint.clone()),
                otlp_protocol: protocol,
                otlp_interval: duration("otlp.interval", &o.interval)?,
                otlp_token_file: o.token_file.clone(),
                otlp_ca_cert: o.ca_cert.clone(),
            })
        })
        .transpose()?;
    Ok(Agent {
        config,
        trace,
        policy,
        serve,
        push,
    })
}

/// The keys whose change needs a restart (everything but segments, retention, serve.window).
pub fn restart_only(a: &AgentConfig) -> AgentConfig {
    let mut a = a.clone();
    a.segments = SegmentsConf::default();
    a.retention = RetentionConf::default();
    if let Some(s) = a.serve.as_mut() {
        s.window = default_window();
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Agent> {
        parse(text, Path::new("agent.toml"))
    }

    #[test]
    fn the_smallest_file_gets_every_default() {
        let a = p("data_dir = \"/var/lib/causeway\"\n").unwrap();
        assert_eq!(a.policy.period, Duration::from_secs(3600));
        assert_eq!(a.policy.max_bytes, 1 << 30);
        assert_eq!(a.policy.max_age, Duration::from_secs(7 * 86400));
        assert!(a.serve.is_none() && a.push.is_none());
        assert_eq!(a.trace.overhead_budget, 1.0);
        let printed = toml::to_string_pretty(&a.config).unwrap();
        assert!(printed.contains("period = \"1h\""), "{printed}");
        // What --check-config prints reads back to the same configuration.
        assert_eq!(p(&printed).unwrap().config, a.config);
    }

    #[test]
    fn mistakes_name_the_key_and_how_to_fix_it() {
        for (text, key) in [
            ("data_dir = \"/d\"\nnodes = \"x\"\n", "unknown field"),
            ("data_dir = \"rel\"\n", "data_dir"),
            (
                "data_dir = \"/d\"\n[segments]\nperiod = \"soon\"\n",
                "segments.period",
            ),
            (
                "data_dir = \"/d\"\n[retention]\nmax_total_size = \"lots\"\n",
                "retention.max_total_size",
            ),
            (
                "data_dir = \"/d\"\n[trace]\noverhead_budget = 0.0\n",
                "trace.overhead_budget",
            ),
            (
                "data_dir = \"/d\"\n[trace]\nprobe_modes = [\"nope=full\"]\n",
                "trace.probe_modes",
            ),
            (
                "data_dir = \"/d\"\n[serve]\nlisten = \"0.0.0.0:8765\"\n",
                "serve.token_file",
            ),
            (
                "data_dir = \"/d\"\n[otlp]\nendpoint = \"http://c:4318\"\nprotocol = \"udp\"\n",
                "otlp.protocol",
            ),
        ] {
            let e = p(text).unwrap_err();
            let hinted = e.downcast_ref::<Hinted>().expect("a hinted error");
            assert!(e.to_string().contains(key), "{text}: {e}");
            assert!(!e.to_string().contains('\n'), "one line: {e}");
            assert!(!hinted.hint.is_empty());
        }
    }
}
