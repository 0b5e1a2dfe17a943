//! `causeway export`: writes a trace for existing tools; `--format perfetto` gives Chrome
//! trace-event JSON that ui.perfetto.dev and chrome://tracing open (tracks per node and
//! thread, off-CPU spans, causal chains as flow events); `--format otlp` pushes OTLP metrics
//! and logs to a receiver (`--endpoint`) or writes them as protobuf files (`-o`, docs/otlp.md).

use causeway_hint::Hint as _;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use causeway_analysis::ChainQuery;
use causeway_export::otlp::LogsOptions;
use causeway_export::{ExportError, PerfettoOptions, write_perfetto};
use causeway_store::{Reader, StoreError};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Chrome trace-event JSON (Perfetto UI, chrome://tracing).
    Perfetto,
    /// OTLP metrics and logs (protobuf): pushed with --endpoint, or written with -o.
    Otlp,
}

/// Arguments of `causeway export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The trace store to export.
    #[arg(long, value_name = "TRACE.duckdb")]
    pub db: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "perfetto")]
    pub format: Format,
    /// Output file (`-` for stdout); written through a temporary file and renamed. With
    /// `--format otlp`: the metrics request, and the logs request in OUT with `.logs` before
    /// its extension (otlp.pb and otlp.logs.pb).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Replace OUT if it exists.
    #[arg(long)]
    pub force: bool,
    /// Perfetto: most events to export (the earliest are kept; the file says how many were cut).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_events: usize,
    /// Leave the causal chains out (Perfetto: no findings track; OTLP: no log records).
    #[arg(long)]
    pub no_chains: bool,
    /// Also export the chains stored in the file (imported from another tool, or sent by
    /// nodes), labelled by their origin; by default only causeway's findings.
    #[arg(long, conflicts_with = "no_chains")]
    pub stored_chains: bool,
    #[command(flatten, next_help_heading = "OTLP push (--format otlp)")]
    pub otlp: OtlpArgs,
}

/// Where `--format otlp` pushes.
#[derive(Debug, clap::Args)]
pub struct OtlpArgs {
    /// Push to this OTLP receiver instead of writing files, e.g. http://collector:4318
    /// (POST /v1/metrics and /v1/logs) or, with --protocol grpc, http://collector:4317.
    #[arg(long, value_name = "URL", conflicts_with = "output")]
    pub endpoint: Option<String>,
    /// OTLP transport.
    #[arg(long, value_enum, default_value = "http", requires = "endpoint")]
    pub protocol: crate::cli::OtlpProtocol,
    /// File holding the bearer token sent as `Authorization: Bearer` (else $CAUSEWAY_TOKEN).
    #[arg(long, value_name = "FILE", requires = "endpoint")]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) to trust for an https endpoint (PEM).
    #[arg(long, value_name = "PEM", requires = "endpoint")]
    pub ca_cert: Option<PathBuf>,
    /// Give up on one push after this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub timeout: Duration,
}

fn to_store(e: ExportError, out: &std::path::Path) -> StoreError {
    match e {
        ExportError::Store(e) => e,
        ExportError::Write(msg) => StoreError::Io {
            path: out.to_path_buf(),
            action: "writing the export",
            source: std::io::Error::other(msg),
        },
    }
}

/// Runs `export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    if args.format == Format::Otlp {
        return run_otlp(args);
    }
    if args.otlp.endpoint.is_some() {
        bail!(causeway_store::Hinted::new(
            "--endpoint is only for --format otlp",
            "add --format otlp, or write a file with -o OUT"
        ));
    }
    let Some(output) = &args.output else {
        bail!(causeway_store::Hinted::new(
            "--format perfetto needs an output file",
            "add -o trace.json (or -o - for stdout)"
        ));
    };
    let reader = Reader::open(&args.db)?;
    let chains = if args.no_chains {
        Vec::new()
    } else {
        // The findings explain prints; the file's stored chains only on request.
        let q = causeway_analysis::FindingsQuery {
            stored: args.stored_chains,
            ..Default::default()
        };
        let f = causeway_tools::stats::findings_for(&reader, &q).map_err(|e| {
            anyhow!(causeway_store::Hinted::new(
                e.message(),
                e.hint().unwrap_or_default()
            ))
        })?;
        let mut chains = f.explain.chains;
        chains.extend(f.stored_chains.unwrap_or_default());
        chains
    };
    let opts = PerfettoOptions {
        max_events: args.max_events,
        switch_in_nodes: switch_in_nodes(&reader)?,
        chains,
    };
    let summary = if output.as_os_str() == "-" {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let s = write_perfetto(&reader, &opts, &mut out)?;
        out.flush()?;
        s
    } else {
        causeway_store::write_atomically(output, args.force, |tmp| {
            let f = std::fs::File::create(tmp).map_err(|source| StoreError::Io {
                path: tmp.to_path_buf(),
                action: "creating the export",
                source,
            })?;
            let mut out = std::io::BufWriter::new(f);
            let s = write_perfetto(&reader, &opts, &mut out).map_err(|e| to_store(e, tmp))?;
            out.flush().map_err(|source| StoreError::Io {
                path: tmp.to_path_buf(),
                action: "writing the export",
                source,
            })?;
            Ok(s)
        })?
    };
    eprintln!(
        "exported {} events ({} cut), {} node(s), {} thread(s), {} chain(s), {} flow(s){}{}",
        summary.events,
        summary.events_cut,
        summary.nodes,
        summary.threads,
        summary.chains,
        summary.flows,
        if summary.overlap_tracks > 0 {
            format!(
                ", {} overlap track(s) for slices that overlap others on their thread",
                summary.overlap_tracks
            )
        } else {
            String::new()
        },
        if output.as_os_str() == "-" {
            String::new()
        } else {
            format!(" -> {}", output.display())
        }
    );
    Ok(())
}

/// Data points of every metric in a request.
fn points(m: &ExportMetricsServiceRequest) -> usize {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    m.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Gauge(g)) => g.data_points.len(),
            _ => 0,
        })
        .sum()
}

/// Log records in a request.
fn records(l: &ExportLogsServiceRequest) -> usize {
    l.resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum()
}

fn run_otlp(args: &ExportArgs) -> Result<()> {
    let target = match (&args.otlp.endpoint, &args.output) {
        (Some(url), _) => Some(causeway_client::otlp_push::Target::new(
            url,
            args.otlp.protocol.into(),
            causeway_client::fleet::read_token(args.otlp.token_file.as_deref())?,
            args.otlp.ca_cert.as_deref(),
            args.otlp.timeout,
        )?),
        (None, Some(out)) if out.as_os_str() == "-" => bail!(causeway_store::Hinted::new(
            "--format otlp writes two files and cannot write to stdout",
            "give -o otlp.pb (the logs go to otlp.logs.pb), or push with --endpoint URL"
        )),
        (None, Some(_)) => None,
        (None, None) => bail!(causeway_store::Hinted::new(
            "--format otlp needs --endpoint URL (push to a receiver) or -o FILE (write files)",
            "causeway export --db T --format otlp --endpoint http://collector:4318"
        )),
    };
    let reader = Reader::open(&args.db)?;
    let metrics = causeway_export::otlp::metrics_request(&reader)?;
    let logs = if args.no_chains {
        ExportLogsServiceRequest::default()
    } else {
        causeway_export::otlp::logs_request(
            &reader,
            &LogsOptions {
                stored: args.stored_chains,
                prices: crate::prices::load()?,
                ..LogsOptions::default()
            },
        )?
    };
    drop(reader);
    let (resources, points, records) = (
        metrics.resource_metrics.len(),
        points(&metrics),
        records(&logs),
    );
    if let Some(target) = target {
        let runtime = super::mcp::runtime()?;
        let (m, l) = runtime.block_on(async {
            let m = target.push_metrics(metrics).await?;
            let l = target.push_logs(logs).await?;
            Ok::<_, anyhow::Error>((m, l))
        })?;
        for (what, rejected) in [("data points", m.rejected), ("log records", l.rejected)] {
            if rejected > 0 {
                tracing::warn!(rejected, what, endpoint = %target.url, "the receiver rejected part of the push");
            }
        }
        eprintln!(
            "pushed {points} data point(s) in {resources} resource(s) and {records} chain log record(s) \
             to {} ({} + {} bytes)",
            target.url, m.bytes, l.bytes
        );
        return Ok(());
    }
    let out = args.output.as_ref().expect("checked above");
    let logs_out = causeway_client::otlp_push::logs_path(out);
    // Both files are checked before either is written.
    causeway_store::paths::check_output(&logs_out, args.force)?;
    let write = |path: &std::path::Path, bytes: Vec<u8>| {
        causeway_store::write_atomically(path, args.force, |tmp| {
            std::fs::write(tmp, &bytes).map_err(|source| StoreError::Io {
                path: tmp.to_path_buf(),
                action: "writing the export",
                source,
            })
        })
    };
    // The logs go first: a failure there leaves no metrics file behind either.
    write(&logs_out, logs.encode_to_vec())?;
    if let Err(e) = write(out, metrics.encode_to_vec()) {
        let _ = std::fs::remove_file(&logs_out);
        return Err(e.into());
    }
    eprintln!(
        "exported {points} data point(s) in {resources} resource(s) -> {}, {records} chain log record(s) -> {}",
        out.display(),
        logs_out.display()
    );
    Ok(())
}

/// Nodes whose sched_switch rows are stamped at switch-in (imported reference traces).
fn switch_in_nodes(r: &Reader) -> Result<BTreeSet<String>> {
    let ctx = causeway_analysis::facts::Ctx::load(r, &ChainQuery::default())?;
    Ok(ctx
        .resume_nodes
        .split('\u{1f}')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect())
}
