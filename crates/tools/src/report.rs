//! `get_test_report` and `causeway selftest`: the latest self-test report of this installation.
//! It lives at `$CAUSEWAY_TEST_REPORT`, else `$XDG_STATE_HOME/causeway/test-report.json`, else
//! `~/.local/state/causeway/test-report.json`. `selftest` calls every tool of the registry on a
//! trace (the same path an agent takes), times each call and writes the report there.

use std::path::{Path, PathBuf};
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::ToolError;

/// Where the report lives on this machine.
pub fn default_path() -> PathBuf {
    if let Some(p) = std::env::var_os("CAUSEWAY_TEST_REPORT").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    state.join("causeway").join("test-report.json")
}

/// A self-test report.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TestReport {
    /// causeway version that wrote it.
    pub version: String,
    /// When (ns epoch).
    pub generated_ns: i64,
    /// Trace it ran on.
    pub trace: String,
    /// Cases that passed.
    pub passed: u32,
    /// Cases that failed.
    pub failed: u32,
    /// One per case.
    pub cases: Vec<TestCase>,
}

/// One self-test case.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TestCase {
    /// Case name (the tool called).
    pub name: String,
    /// Passed.
    pub ok: bool,
    /// Wall time.
    pub ms: f64,
    /// Error, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Output of `get_test_report`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TestReportResult {
    /// Whether a report exists.
    pub found: bool,
    /// Where it is (or would be).
    pub path: String,
    /// Seconds since it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_s: Option<u64>,
    /// The report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<TestReport>,
}

/// `get_test_report`: the report, or `found: false` when none was written yet.
pub fn get_test_report(ctx: &Context) -> Result<TestReportResult, ToolError> {
    let path = ctx.test_report_path();
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(TestReportResult {
                found: false,
                path: shown,
                age_s: None,
                report: None,
            });
        }
        Err(e) => {
            return Err(ToolError::failed(
                format!("cannot read the test report {shown}: {e}"),
                "check the file's permissions, or run `causeway selftest` again",
            ));
        }
    };
    let report: TestReport = serde_json::from_str(&text).map_err(|e| {
        ToolError::failed(
            format!("the test report {shown} is not valid: {e}"),
            "run `causeway selftest --db TRACE` to write a fresh one",
        )
    })?;
    let age_s = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map(|d| d.as_secs());
    Ok(TestReportResult {
        found: true,
        path: shown,
        age_s,
        report: Some(report),
    })
}

/// Runs every tool once on the context's default trace and returns the report.
pub fn run_selftest(ctx: &Context) -> TestReport {
    let trace = ctx.default_db().display().to_string();
    let mut calls: Vec<(&str, serde_json::Value)> = vec![
        ("list_traces", serde_json::json!({})),
        ("describe_trace", serde_json::json!({})),
        ("get_trace_stats", serde_json::json!({})),
        ("get_causal_chains", serde_json::json!({"limit": 3})),
        ("get_stacks", serde_json::json!({"limit": 3})),
        ("get_steps", serde_json::json!({"slowest": 1})),
        (
            "run_sql",
            serde_json::json!({"sql": "SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY n DESC LIMIT 5"}),
        ),
    ];
    // get_check needs the collector's inspection, which only the causeway binary hands in.
    if ctx.checker().is_some() {
        calls.insert(0, ("get_check", serde_json::json!({})));
    }
    let mut cases = Vec::new();
    for (name, args) in calls {
        let started = Instant::now();
        let outcome = crate::registry::call(ctx, name, args);
        cases.push(TestCase {
            name: name.to_string(),
            ok: outcome.is_ok(),
            ms: started.elapsed().as_secs_f64() * 1e3,
            detail: outcome.err().map(|e| e.message()),
        });
    }
    let passed = cases.iter().filter(|c| c.ok).count() as u32;
    TestReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        generated_ns: causeway_store::now_ns(),
        trace,
        passed,
        failed: cases.len() as u32 - passed,
        cases,
    }
}

/// Writes a report (creating its directory), through a temporary file and a rename.
pub fn write(report: &TestReport, path: &Path) -> Result<(), ToolError> {
    let io = |e: std::io::Error| {
        ToolError::failed(
            format!("cannot write the test report {}: {e}", path.display()),
            "set CAUSEWAY_TEST_REPORT or XDG_STATE_HOME to a writable location",
        )
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("json.tmp");
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    std::fs::write(&tmp, json).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
