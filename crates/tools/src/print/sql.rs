//! `query` and `run_sql`: rows of a guarded query, for a person (an aligned table) and for an
//! agent (tab-separated, strings quoted as data); and a node's line under a fleet answer.

use std::fmt::Write;

use causeway_store::QueryResult;

use super::table::{Align, table};
use super::{Audience, note, q};

/// Renders a query's rows for `aud`.
pub fn sql(r: &QueryResult, aud: Audience) -> String {
    match aud {
        Audience::Person => person(r),
        Audience::Agent => agent(r),
    }
}

/// The person's: an aligned table, then the row count.
fn person(r: &QueryResult) -> String {
    let names: Vec<String> = r.columns.iter().map(|c| c.name.clone()).collect();
    render_rows(&names, &r.rows, r.truncated_reason.as_deref())
}

/// Rows under aligned headers (numbers right-aligned), then the row count: `query`,
/// `query --nodes` and `fleet` print their rows through this one function.
pub fn render_rows(
    names: &[String],
    rows: &[Vec<serde_json::Value>],
    truncated: Option<&str>,
) -> String {
    let headers: Vec<(&str, Align)> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let numeric = rows
                .first()
                .and_then(|row| row.get(i))
                .is_some_and(|v| v.is_number());
            (
                name.as_str(),
                if numeric { Align::Right } else { Align::Left },
            )
        })
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "NULL".into(),
                    other => other.to_string(),
                })
                .collect()
        })
        .collect();
    let mut out = table(&headers, &cells);
    out.push_str(&format!(
        "({} row{}",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    ));
    if let Some(why) = truncated {
        out.push_str(&format!("; truncated: {why}"));
    }
    out.push_str(")\n");
    out
}

/// One node's line under a fleet answer: its round trip and clock offset, or why it did not
/// answer.
pub fn node_line(
    node: &str,
    ok: bool,
    ms: f64,
    clock: Option<(i64, i64)>,
    warning: Option<&str>,
) -> String {
    match (ok, clock) {
        (true, Some((off, unc))) => format!(
            "node {node}: {ms:.1} ms, clock offset {:+.3} ms +- {:.3} ms\n",
            off as f64 / 1e6,
            unc as f64 / 1e6
        ),
        (true, None) => format!("node {node}: {ms:.1} ms\n"),
        (false, _) => format!(
            "warning: node {node} did not answer: {}\n",
            warning.unwrap_or("")
        ),
    }
}

/// The agent's: tab-separated rows under a header line, strings quoted as data.
fn agent(r: &QueryResult) -> String {
    let mut o = String::new();
    if let Some(why) = &r.truncated_reason {
        let _ = writeln!(o, "truncated: {why}");
    }
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    let _ = writeln!(o, "{}", names.join("\t"));
    rows(&mut o, &r.rows);
    let _ = writeln!(o, "({} rows, {:.1} ms)", r.rows.len(), r.elapsed_ms);
    note(&mut o, Audience::Agent);
    o
}

/// Result rows as tab-separated lines, strings quoted as data.
pub(super) fn rows(o: &mut String, rows: &[Vec<serde_json::Value>]) {
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .map(|v| match v {
                serde_json::Value::String(s) => q(s),
                other => other.to_string(),
            })
            .collect();
        let _ = writeln!(o, "{}", cells.join("\t"));
    }
}
