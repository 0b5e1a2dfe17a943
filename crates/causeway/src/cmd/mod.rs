//! One module per CLI command; each is a thin layer over the library crates.

pub mod agent;
pub mod check;
pub mod collect;
pub mod demo;
pub mod diff;
pub mod explain;
pub mod export;
pub mod fleet;
pub mod import;
pub mod mcp;
pub mod merge;
pub mod query;
pub mod report;
pub mod stacks;
pub mod stats;
pub mod steps;
pub mod trace;
pub mod traces;

/// The file a command writes: `-o/--output` for every command that writes one (import, demo,
/// merge, export). `--db` was import's and demo's spelling; it still works, with a warning.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// The file to write (through a temporary sibling, renamed into place when complete).
    #[arg(short = 'o', long = "output", value_name = "OUT.duckdb")]
    pub output: Option<std::path::PathBuf>,
    /// Deprecated spelling of -o/--output.
    #[arg(
        long = "db",
        hide = true,
        conflicts_with = "output",
        value_name = "OUT.duckdb"
    )]
    pub db: Option<std::path::PathBuf>,
}

impl OutputArgs {
    /// The path given, warning once on stderr when it came as `--db`.
    pub fn path(&self, command: &str) -> Option<std::path::PathBuf> {
        if let Some(db) = &self.db {
            eprintln!(
                "warning: `causeway {command} --db` is deprecated: it names the output, so use -o/--output"
            );
            return Some(db.clone());
        }
        self.output.clone()
    }
}
