//! AST guard for SQL that comes from outside (MCP `run_sql`, CLI `query`, the query API).
//!
//! [`guard`] parses with sqlparser's DuckDB dialect and returns either a [`GuardedSql`] (the
//! only value the store's query path accepts) or a [`Rejection`] whose `reason` names the
//! offending construct and whose `hint` says what is allowed instead. It is the first of two
//! layers: the store also runs every query on a read-only connection with external access,
//! extension autoload and configuration changes disabled, a timeout, and memory, thread, row
//! and byte caps.
//!
//! # What is accepted
//!
//! Exactly one statement (a trailing `;` is fine) that is a query (SELECT, WITH ... SELECT,
//! FROM-first, VALUES, set operations) or `EXPLAIN [ANALYZE]` of one. EXPLAIN ANALYZE executes
//! the query, so the explained query is checked exactly like a plain one; DESCRIBE, SHOW and
//! SUMMARIZE are refused (the `schema_columns` relation lists tables and columns). Inside the
//! query, the walk (`walk.rs`) visits every node and refuses:
//!
//! - relations other than the policy's allowlist (case-insensitive, optionally `main.` or
//!   `<catalog>.main.` qualified) and CTEs in scope; other schemas (`information_schema`,
//!   `pg_catalog`, ...), the `system`/`temp` catalogs, string literals used as tables
//!   (`FROM 'x.csv'`) and path- or URL-like quoted names (`FROM "/etc/passwd"`);
//! - blocked functions anywhere and every table function except `unnest`, `range` and
//!   `generate_series` (see [`functions`], the one documented list), plus function names with
//!   non-ASCII characters (look-alikes);
//! - string literals that are URLs (`s3://`, `https://`, `hf://`, `file:`...), anywhere;
//! - data-modifying statements nested in the query (`WITH x AS (DELETE ...)`), SELECT INTO,
//!   FOR UPDATE and other non-DuckDB clauses, unknown table factors and join kinds (fail-closed);
//! - resource bombs that are visible in the text (see [`bombs`]): huge or non-literal series
//!   bounds, huge `repeat`/`lpad`/`list_resize` counts, huge format widths, cross joins of
//!   store tables without a condition, and `WITH RECURSIVE` (always refused: a recursive CTE
//!   can run without bound, and `range`/`generate_series` with literal bounds, window functions
//!   or self-joins cover the analysis needs). What the text cannot show (a heavy self-join on a
//!   weak condition) is left to the store's timeout and memory cap.
//!
//! # Normalisation and row limits
//!
//! The SQL that is returned is sqlparser's rendering of the checked AST, not the input text:
//! comments are gone and quoting is canonical, so what DuckDB runs is exactly what was checked.
//! The guard re-parses its own output and checks it again before returning it, so guarding
//! [`GuardedSql::as_str`] once more (as the store does) accepts it; with
//! `Some(guarded.row_limit())` as the requested limit it returns an equal [`GuardedSql`] (with a
//! smaller limit, only the LIMIT literal can change).
//!
//! The row limit is applied in the AST: the outer query's LIMIT is set to `row_limit + 1` when
//! it has none (or `LIMIT ALL`) and lowered to that when it is a larger literal; the extra row
//! lets the store detect truncation. A LIMIT written as an expression is kept (the store's fetch
//! cap still applies), and EXPLAIN's inner query is not rewritten. [`GuardedSql::row_limit`] is
//! the requested limit (or the policy's default) clamped to `1..=max_limit`.
//!
//! Queries longer than [`MAX_SQL_BYTES`] are refused before parsing, which also bounds the
//! nesting depth the parser, the walk and the renderer recurse through; the parser's recursion
//! limit refuses deeper nesting of parentheses and subqueries, and [`shape`] bounds CTEs,
//! joined relations and expression depth (what DuckDB's planner recurses through). The check
//! runs on a thread with a large stack of its own.
//!
//! # Sizes
//!
//! A value the guard cannot see in the text is never free: a column of a CTE or subquery is as
//! long as what it computes, a column of a store table counts as 4096 characters, and an
//! unknown call as its longest argument ([`sizes`]); calls that multiply a value (`repeat`,
//! separators, replacements, lambdas) are checked with those bounds, and functions that
//! recurse once per nesting level of their input (`json_structure`, `json_contains`, a cast to
//! VARIANT, ...) need an input the guard can bound to a few thousand characters.
//!
//! # Test corpus
//!
//! `crates/sqlguard/tests/corpus/accept.txt` and `reject.txt` hold the adversarial corpus in a plain
//! text format described at the top of each file and parsed by [`corpus::parse_corpus`], so
//! other crates (the store's end-to-end test) can `include_str!` and load the same entries.

pub mod bombs;
mod clauses;
pub mod corpus;
pub mod costly;
mod cross;
mod formats;
pub mod functions;
mod limit;
mod names;
mod policy;
mod rejection;
pub mod shape;
pub mod sizes;
mod statement;
mod walk;

use std::fmt;

use sqlparser::ast::Statement;

pub use crate::policy::Policy;
pub use crate::rejection::Rejection;

/// The longest SQL text (input or normalised output) the guard accepts, in bytes.
pub const MAX_SQL_BYTES: usize = 16 * 1024;

/// SQL that passed the guard. Only this crate can make one, so any function taking a
/// `GuardedSql` knows its text was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedSql {
    sql: String,
    row_limit: u64,
}

impl GuardedSql {
    /// The checked, normalised SQL text (with the outer LIMIT capped at `row_limit() + 1`).
    pub fn as_str(&self) -> &str {
        &self.sql
    }

    /// The most rows a caller may return for this query.
    pub fn row_limit(&self) -> u64 {
        self.row_limit
    }
}

impl fmt::Display for GuardedSql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sql)
    }
}

/// The stack of the thread the guard checks on. Parsing, walking, rendering and dropping the
/// syntax tree all recurse, and a type such as `INT[][]...[]` nests once per suffix without
/// counting against the parser's recursion limit; within [`MAX_SQL_BYTES`] this is ample.
const GUARD_STACK_BYTES: usize = 64 << 20;

/// Checks `sql` against `policy`; `requested_limit` (if any) is clamped to the policy's maximum.
///
/// The check runs on a thread of its own with a [`GUARD_STACK_BYTES`] stack, so no input can
/// overflow the caller's stack; a panic in the check is a rejection.
pub fn guard(
    sql: &str,
    policy: &Policy,
    requested_limit: Option<u64>,
) -> Result<GuardedSql, Rejection> {
    check_length(sql)?;
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("causeway-sqlguard".into())
            .stack_size(GUARD_STACK_BYTES)
            .spawn_scoped(scope, || guard_here(sql, policy, requested_limit))
            .map_err(|_| Rejection::internal("it could not start its checking thread"))?
            .join()
            .unwrap_or_else(|_| Err(Rejection::internal("the check failed")))
    })
}

/// [`guard`] on the calling thread.
fn guard_here(
    sql: &str,
    policy: &Policy,
    requested_limit: Option<u64>,
) -> Result<GuardedSql, Rejection> {
    let row_limit = policy.row_limit(requested_limit);
    let mut statement = checked(sql, policy)?;
    if let Statement::Query(query) = &mut statement {
        limit::apply(query, row_limit.saturating_add(1));
    }
    let sql = statement.to_string();
    check_length(&sql)?;
    // What DuckDB runs is this text: it must parse back to itself and pass again.
    let again = checked(&sql, policy).map_err(|r| renormalise_failure(&r.reason))?;
    if again.to_string() != sql {
        return Err(renormalise_failure("the rendering is not stable"));
    }
    Ok(GuardedSql { sql, row_limit })
}

/// Parses `sql` and runs every check on it.
fn checked(sql: &str, policy: &Policy) -> Result<Statement, Rejection> {
    let statement = statement::parse_one(sql)?;
    statement::check_top_level(&statement)?;
    walk::check(&statement, policy)?;
    Ok(statement)
}

/// Refuses text over [`MAX_SQL_BYTES`].
fn check_length(sql: &str) -> Result<(), Rejection> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Rejection::new(
            format!(
                "the SQL is {} bytes long; at most {MAX_SQL_BYTES} are accepted",
                sql.len()
            ),
            "send a shorter query: move repeated expressions into a CTE",
        ));
    }
    Ok(())
}

/// The rejection when the normalised text does not survive a second check.
fn renormalise_failure(why: &str) -> Rejection {
    Rejection::new(
        format!("the SQL guard could not normalise this query safely ({why})"),
        "rewrite the query with plainer syntax (standard quoting, no exotic literals)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Policy {
        Policy::new(["events", "ops", "processes", "chains"])
    }

    #[test]
    fn from_first_with_clauses_runs_as_select_star() {
        let g = guard(
            "  from events where op = 'cudaLaunchKernel' order by duration desc limit 3",
            &store(),
            None,
        )
        .unwrap();
        assert_eq!(
            g.as_str(),
            "SELECT * FROM events WHERE op = 'cudaLaunchKernel' ORDER BY duration DESC LIMIT 3"
        );
        // Still guarded: a relation outside the store is refused in this form too.
        assert!(guard("FROM secrets WHERE 1 = 1", &store(), None).is_err());
        assert!(guard("FROMevents WHERE 1 = 1", &store(), None).is_err());
    }

    #[test]
    fn accepts_a_query_and_caps_its_limit() {
        let g = guard("select * from events -- all", &store(), None).unwrap();
        assert_eq!(g.as_str(), "SELECT * FROM events LIMIT 1001");
        assert_eq!(g.row_limit(), 1_000);
        assert_eq!(g.to_string(), g.as_str());
    }

    #[test]
    fn requested_limits_are_clamped() {
        let g = guard("SELECT 1", &store(), Some(50_000)).unwrap();
        assert_eq!(g.row_limit(), 10_000);
        assert_eq!(g.as_str(), "SELECT 1 LIMIT 10001");
        let g = guard("SELECT 1 LIMIT 3", &store(), Some(5)).unwrap();
        assert_eq!((g.as_str(), g.row_limit()), ("SELECT 1 LIMIT 3", 5));
    }

    #[test]
    fn reguarding_is_idempotent() {
        let g = guard(
            "FROM events SELECT op, count(*) GROUP BY ALL",
            &store(),
            Some(20),
        )
        .unwrap();
        let again = guard(g.as_str(), &store(), Some(g.row_limit())).unwrap();
        assert_eq!(again, g);
    }

    #[test]
    fn explain_is_not_rewritten() {
        let g = guard("EXPLAIN ANALYZE SELECT * FROM events", &store(), None).unwrap();
        assert_eq!(g.as_str(), "EXPLAIN ANALYZE SELECT * FROM events");
    }

    #[test]
    fn long_sql_is_refused_before_parsing() {
        let sql = format!("SELECT 1{}", " ".repeat(MAX_SQL_BYTES));
        assert!(
            guard(&sql, &store(), None)
                .unwrap_err()
                .reason
                .contains("bytes long")
        );
    }

    #[test]
    fn output_that_grows_past_the_cap_is_refused() {
        // `1+1` renders as `1 + 1`: flat, but longer.
        let sql = format!("SELECT 1+1{}", ",1+1".repeat(MAX_SQL_BYTES / 4 - 4));
        assert!(sql.len() <= MAX_SQL_BYTES);
        let err = guard(&sql, &store(), None).unwrap_err();
        assert!(err.reason.contains("bytes long"), "{err}");
    }

    /// Every layer of the guard recurses (parser, walk, rendering, drop): no input within the
    /// byte cap may overflow the stack of the thread that calls it (tokio's are 2 MiB).
    /// `1::INT[][]...[]` overflowed a 1 MiB stack before the guard got its own thread.
    #[test]
    fn deep_inputs_within_the_byte_cap_do_not_overflow_a_small_stack() {
        let n = MAX_SQL_BYTES / 2;
        let inputs = [
            format!("SELECT {}1{}", "(".repeat(n - 8), ")".repeat(n - 8)),
            format!("SELECT {}1", "-".repeat(n - 8)),
            format!("SELECT {}1", "NOT ".repeat(n / 2 - 8)),
            format!("SELECT 1{}", "+1".repeat(n - 8)),
            format!("SELECT 'a'{}", "||'a'".repeat(n / 3 - 8)),
            format!("SELECT {}1{}", "[".repeat(n - 8), "]".repeat(n - 8)),
            format!(
                "SELECT {}1{}",
                "abs(".repeat(n / 3 - 8),
                ")".repeat(n / 3 - 8)
            ),
            format!(
                "SELECT 1::{}INT{}",
                "STRUCT(a ".repeat(n / 6),
                ")".repeat(n / 6)
            ),
            format!("SELECT 1::INT{}", "[]".repeat(n - 8)),
            format!("SELECT 1{}", " UNION ALL SELECT 1".repeat(n / 10 - 2)),
            format!(
                "SELECT * FROM events{}",
                " NATURAL JOIN events".repeat(n / 11 - 2)
            ),
            format!(
                "SELECT {}1{}",
                "CASE WHEN true THEN ".repeat(n / 11),
                " END".repeat(n / 11)
            ),
            format!("SELECT {}1{}", "(SELECT ".repeat(n / 5), ")".repeat(n / 5)),
            format!("SELECT {}", "x -> ".repeat(n / 3 - 8)),
        ];
        let accepted = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                inputs
                    .iter()
                    .filter(|sql| guard(sql, &store(), None).is_ok())
                    .map(|sql| sql[..20].to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap()
            .join()
            .unwrap();
        // A long flat UNION ALL is fine for every layer; everything else nests too deeply.
        assert_eq!(accepted, vec!["SELECT 1 UNION ALL S".to_string()]);
    }

    #[test]
    fn rejection_display_is_the_reason_and_the_hint_is_data() {
        let err = guard("DROP TABLE events", &store(), None).unwrap_err();
        assert_eq!(err.to_string(), "DROP TABLE statements are not allowed");
        assert!(!err.hint.is_empty());
    }
}
