//! The sqlguard integration tests (one binary): the adversarial corpus, snapshot tests of the
//! rejection messages, and property tests, sharing one independent safety re-check.

mod corpus;
mod props;
mod snapshots;
mod support;

use support::{check_safe, store_policy};

#[test]
fn the_recheck_itself_catches_unsafe_sql() {
    let policy = store_policy();
    assert!(check_safe("SELECT * FROM events", &policy).is_ok());
    for unsafe_sql in [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM secrets",
        "SELECT getenv('HOME')",
        "SELECT 's3://bucket/x'",
        "WITH x AS (DELETE FROM events RETURNING *) SELECT * FROM x",
        "WITH RECURSIVE t AS (SELECT 1) SELECT * FROM t",
        "SELECT 1; SELECT 2",
        "DROP TABLE events",
        "SELECT * FROM 'x.csv'",
        "SELECT 1 INTO t",
    ] {
        assert!(check_safe(unsafe_sql, &policy).is_err(), "{unsafe_sql}");
    }
}
