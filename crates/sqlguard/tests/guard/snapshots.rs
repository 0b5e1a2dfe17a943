//! Snapshot tests of rejection messages (reason + hint), one or more per class: these are what
//! an agent reads, so wording changes must be reviewed. Files live in `tests/snapshots/`.

use causeway_sqlguard::{MAX_SQL_BYTES, guard};

use crate::support::store_policy;

/// Representative refusals: (snapshot name, SQL).
const CASES: &[(&str, &str)] = &[
    ("stacked_statements", "SELECT 1; DROP TABLE events"),
    ("empty", "-- nothing"),
    ("copy_to_file", "COPY events TO '/tmp/events.csv'"),
    ("attach", "ATTACH '/tmp/other.duckdb' AS other"),
    ("set", "SET enable_external_access = true"),
    ("pragma", "PRAGMA database_list"),
    (
        "create_secret",
        "CREATE SECRET s (TYPE S3, KEY_ID 'k', SECRET 's')",
    ),
    ("drop_table", "DROP TABLE events"),
    ("checkpoint_unparsed", "CHECKPOINT"),
    ("describe", "DESCRIBE events"),
    ("summarize", "SUMMARIZE events"),
    ("pivot_statement", "PIVOT events ON op USING count(*)"),
    (
        "explain_analyze_delete",
        "EXPLAIN ANALYZE DELETE FROM events",
    ),
    (
        "cte_delete",
        "WITH x AS (DELETE FROM events RETURNING *) SELECT * FROM x",
    ),
    ("select_into", "SELECT * INTO stolen FROM events"),
    (
        "table_function_read_csv",
        "SELECT * FROM main.read_csv('/etc/passwd')",
    ),
    (
        "table_function_unlisted",
        "SELECT * FROM repeat_row(1, num_rows = 10)",
    ),
    (
        "lookalike_function",
        "SELECT * FROM re\u{430}d_csv('/etc/passwd')",
    ),
    ("scalar_getenv", "SELECT getenv('HOME')"),
    ("catalog_function", "SELECT * FROM duckdb_settings()"),
    (
        "settings_function",
        "SELECT current_setting('memory_limit')",
    ),
    (
        "sql_from_string",
        "SELECT * FROM query('SELECT * FROM secrets')",
    ),
    ("state_function", "SELECT nextval('seq')"),
    (
        "network_function",
        "SELECT http_get('https://evil.example')",
    ),
    ("string_as_table", "SELECT * FROM '/etc/passwd'"),
    ("path_identifier", "SELECT * FROM \"data.csv\""),
    ("unknown_relation", "SELECT * FROM secrets"),
    ("catalog_schema", "SELECT * FROM information_schema.tables"),
    ("other_schema", "SELECT * FROM other.events"),
    ("url_literal", "SELECT 's3://bucket/key.parquet'"),
    ("range_bomb", "SELECT * FROM range(1e12)"),
    ("range_unbounded", "SELECT range(duration) FROM events"),
    ("repeat_bomb", "SELECT repeat('x', 2e9)"),
    (
        "repeat_unbounded",
        "SELECT repeat('x', duration) FROM events",
    ),
    ("printf_width", "SELECT printf('%1000000000d', 1)"),
    (
        "recursive_cte",
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT * FROM t",
    ),
    ("cross_join", "SELECT count(*) FROM events a, events b"),
    (
        "cte_shadows_blocked_name",
        "WITH duckdb_settings AS (SELECT 1) SELECT * FROM duckdb_settings",
    ),
    ("for_update", "SELECT * FROM events FOR UPDATE"),
    ("syntax_error", "SELEC * FROM events"),
];

/// How a case is shown: the SQL, the rejection's reason and its hint.
fn render(sql: &str) -> String {
    let rejection =
        guard(sql, &store_policy(), None).expect_err("every snapshot case must be rejected");
    format!("sql: {sql}\nreason: {rejection}\nhint: {}", rejection.hint)
}

#[test]
fn rejection_messages() {
    insta::with_settings!({
        snapshot_path => "../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        for (name, sql) in CASES {
            insta::assert_snapshot!(*name, render(sql));
        }
        let long = format!("SELECT 1{}", " ".repeat(MAX_SQL_BYTES));
        let rejection = guard(&long, &store_policy(), None).unwrap_err();
        insta::assert_snapshot!("too_long", format!("sql: SELECT 1 + 16 KiB of spaces\nreason: {rejection}\nhint: {}", rejection.hint));
        let deep = format!("SELECT {}1{}", "(".repeat(60), ")".repeat(60));
        let rejection = guard(&deep, &store_policy(), None).unwrap_err();
        insta::assert_snapshot!("too_deep", format!("sql: SELECT ((((...60 levels\nreason: {rejection}\nhint: {}", rejection.hint));
    });
}
