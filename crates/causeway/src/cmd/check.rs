//! `causeway check` and the machine inspection behind `get_check`: the collector inspects, the
//! tools crate shapes and renders, so the command and the MCP tool print the same report.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use causeway_tools::check::{CheckItem, CheckReport, Checker, CudaProcessOut, LibraryOut};

/// Arguments of `causeway check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Print the report as JSON (the `get_check` tool's structured result).
    #[arg(long)]
    pub json: bool,
}

fn lib(l: &causeway_collector::discover::LibFile) -> LibraryOut {
    LibraryOut {
        kind: l.library.name().to_string(),
        path: l.path.display().to_string(),
    }
}

/// Inspects this machine (the collector's check) and shapes the report.
pub fn report() -> CheckReport {
    let r = causeway_collector::check();
    CheckReport::new(
        r.kernel,
        r.items
            .into_iter()
            .map(|i| CheckItem {
                name: i.name.to_string(),
                ok: i.ok,
                detail: i.detail,
                hint: i.hint,
            })
            .collect(),
        Some(r.nvidia_driver),
        r.gpus,
        r.libraries.iter().map(lib).collect(),
        r.cuda_processes
            .into_iter()
            .map(|p| CudaProcessOut {
                pid: p.pid,
                comm: p.comm,
                libraries: p.libraries.iter().map(lib).collect(),
            })
            .collect(),
    )
}

/// The checker handed to tool contexts.
pub fn checker() -> Checker {
    Arc::new(report)
}

/// Runs `check`: the report on stdout; exit status 1 when this machine cannot trace.
pub fn run(args: &CheckArgs) -> Result<ExitCode> {
    let r = report();
    if args.json {
        crate::print_json(&r)?;
    } else {
        crate::print_text(&causeway_tools::print::check(
            &r,
            causeway_tools::print::Audience::Person,
        ))?;
    }
    Ok(if r.can_trace {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
