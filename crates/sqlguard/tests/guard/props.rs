//! Property tests: the guard never panics (arbitrary strings, SQL token soup, mutated corpus
//! queries), everything it accepts passes the independent re-check and re-guards to itself,
//! and inserting comments or whitespace between the tokens of a refused query never makes it
//! accepted. Cases per property: `PROPTEST_CASES` (default 1,024).

use std::sync::LazyLock;

use causeway_sqlguard::{MAX_SQL_BYTES, Policy, guard};
use proptest::prelude::*;
use proptest::sample::Index;

use crate::corpus::{ACCEPT, REJECT, all_entries};
use crate::support::{check_safe, store_policy};
use causeway_sqlguard::corpus::{CorpusEntry, parse_corpus};

/// Pieces of SQL, hostile and ordinary, that token soups and mutations are built from.
const VOCABULARY: &[&str] = &[
    "SELECT",
    "select",
    "FROM",
    "WHERE",
    "WITH",
    "RECURSIVE",
    "AS",
    "UNION",
    "ALL",
    "JOIN",
    "LATERAL",
    "ON",
    "true",
    "GROUP BY",
    "ALL",
    "ORDER BY",
    "LIMIT",
    "QUALIFY",
    "EXPLAIN",
    "ANALYZE",
    "DROP TABLE events",
    "DELETE FROM events",
    "INSERT INTO events VALUES (1)",
    "COPY events TO '/tmp/x'",
    "ATTACH 'x.db' AS x",
    "SET threads = 1",
    "PRAGMA version",
    "INSTALL httpfs",
    "LOAD httpfs",
    "CREATE SECRET s (TYPE S3)",
    "CALL checkpoint()",
    "events",
    "ops",
    "processes",
    "chains",
    "main.events",
    "secrets",
    "information_schema.tables",
    "read_csv('/etc/passwd')",
    "main.read_csv('/x')",
    "glob('/*')",
    "query('SELECT 1')",
    "getenv('HOME')",
    "duckdb_settings()",
    "range(1e12)",
    "range(10)",
    "generate_series(1, 5)",
    "unnest([1, 2])",
    "repeat('x', 2e9)",
    "'/etc/passwd'",
    "\"/etc/passwd\"",
    "'s3://b/k'",
    "'https://x'",
    "*",
    ",",
    ";",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "'",
    "\"",
    "$$",
    "::",
    "->",
    "x -> x",
    "/*",
    "*/",
    "/* c */",
    "--",
    "\n",
    "\t",
    "\u{a0}",
    "\u{2003}",
    "\u{200b}",
    " ",
    "1",
    "0",
    "-1",
    "1e9",
    "pid",
    "duration",
    "e.timestamp",
    "count(*)",
    "quantile_cont(duration, 0.99)",
    "re\u{430}d_csv('/x')",
    "E'\\x'",
    "?",
    "$1",
    "%",
    "||",
    "=",
    "<",
    "AND",
    "OR",
    "NOT",
];

/// The policy every property uses.
fn policy() -> Policy {
    store_policy()
}

/// Cases per property.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_024)
}

/// Runs the guard on `sql` and checks what it says.
fn check(sql: &str) -> Result<(), TestCaseError> {
    let policy = policy();
    match guard(sql, &policy, None) {
        Ok(guarded) => {
            if let Err(problem) = check_safe(guarded.as_str(), &policy) {
                return Err(TestCaseError::fail(format!(
                    "accepted unsafe SQL: {problem}\n  input: {sql:?}\n  output: {guarded}"
                )));
            }
            let again = guard(guarded.as_str(), &policy, Some(guarded.row_limit()));
            prop_assert_eq!(again.as_ref(), Ok(&guarded), "input: {:?}", sql);
        }
        Err(rejection) => {
            prop_assert!(!rejection.reason.is_empty());
            prop_assert!(!rejection.hint.is_empty());
        }
    }
    Ok(())
}

/// One edit applied to a corpus query.
#[derive(Debug, Clone)]
enum Mutation {
    /// Insert a vocabulary piece at a character position.
    Insert(Index, &'static str),
    /// Delete up to this many characters at a position.
    Delete(Index, usize),
    /// Swap two whitespace-separated tokens.
    Swap(Index, Index),
    /// Duplicate a token.
    Duplicate(Index),
    /// Flip the case of a range of characters.
    FlipCase(Index, usize),
    /// Wrap the query as a subquery, a CTE, or an EXPLAIN.
    Wrap(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), prop::sample::select(VOCABULARY))
            .prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<Index>(), 1usize..12).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        any::<Index>().prop_map(Mutation::Duplicate),
        (any::<Index>(), 1usize..20).prop_map(|(i, n)| Mutation::FlipCase(i, n)),
        (0usize..4).prop_map(Mutation::Wrap),
    ]
}

/// Applies `mutation` to `sql`.
fn apply(sql: &str, mutation: &Mutation) -> String {
    let chars: Vec<char> = sql.chars().collect();
    let at = |i: &Index| i.index(chars.len() + 1);
    let mut tokens: Vec<&str> = sql.split_whitespace().collect();
    match mutation {
        Mutation::Insert(i, piece) => {
            let at = at(i);
            let mut out: String = chars[..at].iter().collect();
            out.push(' ');
            out.push_str(piece);
            out.push(' ');
            out.extend(&chars[at..]);
            out
        }
        Mutation::Delete(i, n) => {
            let at = at(i);
            let end = (at + n).min(chars.len());
            chars[..at].iter().chain(&chars[end..]).collect()
        }
        Mutation::Swap(a, b) if !tokens.is_empty() => {
            let (a, b) = (a.index(tokens.len()), b.index(tokens.len()));
            tokens.swap(a, b);
            tokens.join(" ")
        }
        Mutation::Duplicate(i) if !tokens.is_empty() => {
            let i = i.index(tokens.len());
            tokens.insert(i, tokens[i]);
            tokens.join(" ")
        }
        Mutation::FlipCase(i, n) => {
            let at = at(i);
            chars
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    if k >= at && k < at + n {
                        if c.is_uppercase() {
                            c.to_lowercase().next().unwrap_or(*c)
                        } else {
                            c.to_uppercase().next().unwrap_or(*c)
                        }
                    } else {
                        *c
                    }
                })
                .collect()
        }
        Mutation::Wrap(kind) => match kind {
            0 => format!("SELECT * FROM ({sql}) wrapped"),
            1 => format!("WITH w AS ({sql}) SELECT * FROM w"),
            2 => format!("EXPLAIN ANALYZE {sql}"),
            _ => format!("{sql}; {sql}"),
        },
        Mutation::Swap(..) | Mutation::Duplicate(_) => sql.to_string(),
    }
}

/// Every corpus entry, parsed once.
static ENTRIES: LazyLock<Vec<CorpusEntry>> = LazyLock::new(all_entries);

/// Rejected corpus queries without quotes or comments, parsed once.
static PLAIN_REJECTED: LazyLock<Vec<String>> = LazyLock::new(plain_rejected);

/// Rejected corpus queries without quotes or comments, where every space is between tokens.
fn plain_rejected() -> Vec<String> {
    parse_corpus(REJECT)
        .unwrap()
        .into_iter()
        .map(|e| e.sql)
        .filter(|sql| {
            !sql.contains(['\'', '"', '$', '`', '\\'])
                && !sql.contains("--")
                && !sql.contains("/*")
                && sql.is_ascii()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_strings(sql in any::<String>()) {
        check(&sql)?;
    }

    #[test]
    fn never_panics_on_printable_text(sql in "\\PC{0,400}") {
        check(&sql)?;
    }

    #[test]
    fn token_soup_is_handled(pieces in prop::collection::vec(prop::sample::select(VOCABULARY), 0..48)) {
        check(&pieces.join(" "))?;
        check(&pieces.concat())?;
    }

    #[test]
    fn mutated_corpus_queries_are_handled(
        entry in any::<Index>(),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let mut sql = ENTRIES[entry.index(ENTRIES.len())].sql.clone();
        for m in &mutations {
            sql = apply(&sql, m);
        }
        check(&sql)?;
    }

    #[test]
    fn comments_and_whitespace_never_turn_a_rejection_into_acceptance(
        entry in any::<Index>(),
        fillers in prop::collection::vec(
            prop::sample::select(&[" /**/ ", " /* SELECT 1 */ ", "\t", "\n", " -- x\n", "\r\n  "][..]),
            1..16,
        ),
    ) {
        let sql = &PLAIN_REJECTED[entry.index(PLAIN_REJECTED.len())];
        let mut fill = fillers.iter().cycle();
        let mut mutated = String::new();
        for (k, piece) in sql.split(' ').enumerate() {
            if k > 0 {
                mutated.push_str(fill.next().copied().unwrap_or(" "));
            }
            mutated.push_str(piece);
        }
        prop_assert!(
            guard(&mutated, &policy(), None).is_err(),
            "{:?} became acceptable as {:?}", sql, mutated
        );
    }
}

#[test]
fn accept_corpus_is_in_the_mutation_pool() {
    let entries = all_entries();
    assert!(entries.len() > parse_corpus(ACCEPT).unwrap().len());
    assert!(plain_rejected().len() > 50);
}

/// Deep trees at the size cap (left-deep operator chains are built without parser recursion)
/// must not overflow a 2 MiB thread stack (tokio's and the test harness's default) in the
/// parser, the walk, the renderer or drop.
#[test]
fn deep_inputs_at_the_size_cap_fit_a_2_mib_stack() {
    let fill = |unit: &str, prefix: &str| {
        let n = (MAX_SQL_BYTES - prefix.len()) / unit.len();
        format!("{prefix}{}", unit.repeat(n))
    };
    let inputs = vec![
        fill("+1", "SELECT 1"),
        fill("[1]", "SELECT a"),
        fill(" IS NULL", "SELECT 1"),
        fill("->'b'", "SELECT a"),
        fill("::INT", "SELECT 1"),
        fill(" UNION SELECT 1", "SELECT 1"),
        fill(" JOIN events ON true", "SELECT 1 FROM events"),
        fill(" AND a = 1", "SELECT 1 FROM events WHERE a = 1"),
        fill(" || 'x'", "SELECT 'x'"),
        fill(" BETWEEN 1 AND 2", "SELECT 1"),
    ];
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for sql in inputs {
                let _ = guard(&sql, &store_policy(), None);
                let half = &sql[..sql.len() / 2];
                let _ = guard(half, &store_policy(), None);
            }
        })
        .expect("spawn");
    assert!(handle.join().is_ok());
}
