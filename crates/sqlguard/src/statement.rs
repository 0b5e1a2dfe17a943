//! Top-level statement rules: parse the text, demand exactly one statement, and allow only a
//! query or `EXPLAIN [ANALYZE]` of a query; name everything else in the rejection.

use sqlparser::ast::{DescribeAlias, Statement};
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::rejection::{QUERY_HINT, Rejection};

/// Keywords that open a statement other than a query (DuckDB's and common SQL ones). Used to
/// name the statement when the parser cannot parse it (CHECKPOINT, EXPORT DATABASE, ...).
const NON_QUERY_KEYWORDS: &[&str] = &[
    "ALTER",
    "ANALYZE",
    "ATTACH",
    "BEGIN",
    "CALL",
    "CHECKPOINT",
    "COMMENT",
    "COMMIT",
    "COPY",
    "CREATE",
    "DEALLOCATE",
    "DELETE",
    "DESC",
    "DESCRIBE",
    "DETACH",
    "DROP",
    "EXECUTE",
    "EXPORT",
    "FORCE",
    "GRANT",
    "IMPORT",
    "INSERT",
    "INSTALL",
    "LOAD",
    "MERGE",
    "PRAGMA",
    "PREPARE",
    "REPLACE",
    "RESET",
    "REVOKE",
    "ROLLBACK",
    "SET",
    "SHOW",
    "TRUNCATE",
    "UNINSTALL",
    "UPDATE",
    "USE",
    "VACUUM",
];

/// The parser's recursion limit (nested parentheses, subqueries, unary operators): deeper
/// input is refused as "nests too deeply".
const MAX_PARSER_DEPTH: usize = 50;

/// Modifiers skipped when naming a statement (`CREATE OR REPLACE TEMP TABLE` is `CREATE TABLE`).
const LABEL_MODIFIERS: &[&str] = &[
    "OR",
    "REPLACE",
    "TEMP",
    "TEMPORARY",
    "PERSISTENT",
    "UNIQUE",
    "IF",
    "NOT",
    "EXISTS",
    "GLOBAL",
    "LOCAL",
    "FORCE",
    "MATERIALIZED",
    "SECURE",
];

/// Statement keywords followed by an object kind worth naming (`CREATE SECRET`).
const TWO_WORD_STATEMENTS: &[&str] = &["ALTER", "CREATE", "DROP", "EXPORT", "IMPORT"];

/// Parses `sql` into exactly one statement, or explains why not.
/// `SELECT * ` + `sql` when `sql` starts with FROM (DuckDB's FROM-first form).
fn from_first(sql: &str) -> Option<String> {
    let t = sql.trim_start();
    let keyword = t.get(..4)?;
    let next = t.as_bytes().get(4)?;
    (keyword.eq_ignore_ascii_case("from") && next.is_ascii_whitespace())
        .then(|| format!("SELECT * {t}"))
}

pub(crate) fn parse_one(sql: &str) -> Result<Statement, Rejection> {
    let parse = |text: &str| {
        Parser::new(&DuckDbDialect {})
            .with_recursion_limit(MAX_PARSER_DEPTH)
            .try_with_sql(text)
            .and_then(|mut parser| parser.parse_statements())
    };
    let statements = match parse(sql) {
        Ok(s) => s,
        // DuckDB's FROM-first form without a SELECT (`FROM t WHERE ...`) means SELECT *; the
        // parser takes `FROM t` alone but not its clauses, so it reads the SELECT * form.
        Err(e) => match from_first(sql).map(|s| parse(&s)) {
            Some(Ok(s)) => s,
            _ => return Err(parse_failure(sql, &e)),
        },
    };
    let mut statements = statements.into_iter();
    match (statements.next(), statements.next()) {
        (Some(one), None) => Ok(one),
        (None, _) => Err(Rejection::new("no SQL statement was given", QUERY_HINT)),
        (Some(first), Some(second)) => {
            let labels: Vec<String> = [first, second]
                .iter()
                .chain(statements.as_slice())
                .map(statement_label)
                .collect();
            Err(Rejection::new(
                format!(
                    "{} statements were given ({}); exactly one is allowed",
                    labels.len(),
                    labels.join("; ")
                ),
                "send a single query; a trailing semicolon is fine, a second statement is not",
            ))
        }
    }
}

/// Allows a query, or `EXPLAIN [ANALYZE]` of a query (the inner query is walked like any
/// other; EXPLAIN ANALYZE executes it, so it gets no special treatment).
pub(crate) fn check_top_level(statement: &Statement) -> Result<(), Rejection> {
    match statement {
        Statement::Query(_) => Ok(()),
        Statement::Explain {
            describe_alias,
            statement: inner,
            format,
            options,
            estimate,
            query_plan,
            ..
        } => {
            if *describe_alias != DescribeAlias::Explain {
                return Err(Rejection::new(
                    "DESCRIBE statements are not allowed",
                    describe_hint(),
                ));
            }
            if !matches!(**inner, Statement::Query(_)) {
                return Err(Rejection::new(
                    format!(
                        "EXPLAIN of a {} statement is not allowed; only queries may be explained",
                        statement_label(inner)
                    ),
                    QUERY_HINT,
                ));
            }
            if format.is_some() || options.is_some() || *estimate || *query_plan {
                return Err(Rejection::unsupported(
                    "EXPLAIN with options",
                    "use plain EXPLAIN <query> or EXPLAIN ANALYZE <query>",
                ));
            }
            Ok(())
        }
        other => Err(statement_rejection(&statement_label(other))),
    }
}

/// The rejection for a statement kind that is not a query, with a hint fitted to the kind.
pub(crate) fn statement_rejection(label: &str) -> Rejection {
    let first = label.split(' ').next().unwrap_or(label);
    let hint = match first {
        "SET" | "RESET" | "PRAGMA" => {
            "settings are fixed by the server and cannot be changed from SQL; send a query"
                .to_string()
        }
        "ATTACH" | "DETACH" | "USE" | "COPY" | "EXPORT" | "IMPORT" | "INSTALL" | "LOAD"
        | "UNINSTALL" | "FORCE" => "only the trace store's own tables can be read, and results \
                                    come back as rows; files, other databases and extensions \
                                    are not reachable"
            .to_string(),
        "DESCRIBE" | "DESC" | "SHOW" => describe_hint(),
        "SUMMARIZE" => "compute the summary with aggregates, e.g. SELECT min(duration), \
                        max(duration), avg(duration), quantile_cont(duration, 0.5), count(*) \
                        FROM events; schema_columns lists the columns"
            .to_string(),
        _ => format!("the trace store is read-only; {QUERY_HINT}"),
    };
    Rejection::new(format!("{label} statements are not allowed"), hint)
}

/// Where to look instead of DESCRIBE/SHOW.
fn describe_hint() -> String {
    "to list tables and columns, query the schema_columns relation (SELECT * FROM \
     schema_columns); to see a query's plan, use EXPLAIN <query>"
        .to_string()
}

/// A short upper-case name for a statement: `DROP TABLE`, `CREATE SECRET`, `COPY`.
pub(crate) fn statement_label(statement: &Statement) -> String {
    label_from_words(&statement.to_string())
}

/// The label from a statement's leading words.
fn label_from_words(text: &str) -> String {
    let mut words = text
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .to_ascii_uppercase()
        })
        .filter(|w| !w.is_empty());
    let Some(first) = words.next() else {
        return "this".to_string();
    };
    if !TWO_WORD_STATEMENTS.contains(&first.as_str()) {
        return first;
    }
    match words.find(|w| !LABEL_MODIFIERS.contains(&w.as_str())) {
        Some(object) if object.chars().all(|c| c.is_ascii_alphabetic()) => {
            format!("{first} {object}")
        }
        _ => first,
    }
}

/// A rejection for text that does not parse, naming the statement when its first keyword
/// shows it is not a query (`CHECKPOINT`, `EXPORT DATABASE`, `SUMMARIZE`, `PIVOT`).
fn parse_failure(sql: &str, error: &ParserError) -> Rejection {
    let words = leading_words(sql);
    let first = words.first().map(String::as_str).unwrap_or("");
    match first {
        "PIVOT" | "UNPIVOT" => Rejection::unsupported(
            format!("the {first} statement"),
            "write the pivot as conditional aggregation, e.g. SELECT pid, count(*) FILTER \
             (WHERE op = 1) AS launches, count(*) FILTER (WHERE op = 2) AS syncs FROM events \
             GROUP BY pid",
        ),
        "SUMMARIZE" => statement_rejection("SUMMARIZE"),
        kw if NON_QUERY_KEYWORDS.contains(&kw) => {
            statement_rejection(&label_from_words(&words.join(" ")))
        }
        _ => {
            if matches!(error, ParserError::RecursionLimitExceeded) {
                return Rejection::new(
                    "the SQL nests too deeply for the guard to check it",
                    "flatten the query: move nested subqueries into CTEs (WITH a AS (...), b AS \
                     (SELECT ... FROM a) SELECT ... FROM b)",
                );
            }
            Rejection::new(
                format!("the SQL does not parse: {error}"),
                "check the syntax (DuckDB dialect). The guard's parser does not support \
                 PIVOT/UNPIVOT statements, SUMMARIZE, list comprehensions, ASOF JOIN, USING \
                 SAMPLE or nested /* */ comments: use conditional aggregation, \
                 list_transform/list_filter, a window or range join, or TABLESAMPLE instead",
            )
        }
    }
}

/// The first few keywords of `sql`, skipping whitespace and comments.
fn leading_words(sql: &str) -> Vec<String> {
    let Ok(tokens) = Tokenizer::new(&DuckDbDialect {}, sql).tokenize() else {
        return Vec::new();
    };
    tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .take(6)
        .map_while(|t| match t {
            Token::Word(w) => Some(w.value.to_ascii_uppercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_statement_with_trailing_semicolon() {
        assert!(parse_one("SELECT 1;").is_ok());
        assert!(parse_one("  SELECT 1  ").is_ok());
    }

    #[test]
    fn stacked_statements_are_named() {
        let err = parse_one("SELECT 1; DROP TABLE events").unwrap_err();
        assert_eq!(
            err.reason,
            "2 statements were given (SELECT; DROP TABLE); exactly one is allowed"
        );
    }

    #[test]
    fn empty_input() {
        assert_eq!(
            parse_one("  -- nothing\n").unwrap_err().reason,
            "no SQL statement was given"
        );
    }

    #[test]
    fn labels_skip_modifiers() {
        assert_eq!(
            label_from_words("CREATE OR REPLACE TEMPORARY TABLE x"),
            "CREATE TABLE"
        );
        assert_eq!(
            label_from_words("CREATE PERSISTENT SECRET s (TYPE S3)"),
            "CREATE SECRET"
        );
        assert_eq!(label_from_words("COPY events TO 'x'"), "COPY");
        assert_eq!(label_from_words("EXPORT DATABASE 'x'"), "EXPORT DATABASE");
        assert_eq!(label_from_words(""), "this");
    }

    #[test]
    fn unparsable_statements_are_named_by_keyword() {
        let err = parse_one("/* x */ CHECKPOINT").unwrap_err();
        assert_eq!(err.reason, "CHECKPOINT statements are not allowed");
        let err = parse_one("EXPORT DATABASE '/tmp/x'").unwrap_err();
        assert_eq!(err.reason, "EXPORT DATABASE statements are not allowed");
        let err = parse_one("summarize events").unwrap_err();
        assert_eq!(err.reason, "SUMMARIZE statements are not allowed");
        let err = parse_one("PIVOT events ON op USING count(*)").unwrap_err();
        assert!(
            err.reason
                .starts_with("the PIVOT statement is not supported")
        );
    }

    #[test]
    fn plain_syntax_errors_say_so() {
        let err = parse_one("SELEC 1").unwrap_err();
        assert!(err.reason.starts_with("the SQL does not parse"), "{err}");
        let deep = format!("SELECT {}1{}", "(".repeat(200), ")".repeat(200));
        assert_eq!(
            parse_one(&deep).unwrap_err().reason,
            "the SQL nests too deeply for the guard to check it"
        );
    }

    #[test]
    fn explain_rules() {
        let ok = |sql: &str| check_top_level(&parse_one(sql).unwrap());
        assert!(ok("SELECT 1").is_ok());
        assert!(ok("EXPLAIN SELECT 1").is_ok());
        assert!(ok("EXPLAIN ANALYZE SELECT 1").is_ok());
        assert_eq!(
            ok("EXPLAIN ANALYZE DELETE FROM events").unwrap_err().reason,
            "EXPLAIN of a DELETE statement is not allowed; only queries may be explained"
        );
        assert_eq!(
            ok("DESCRIBE events").unwrap_err().reason,
            "DESCRIBE statements are not allowed"
        );
        assert_eq!(
            ok("DESCRIBE SELECT 1").unwrap_err().reason,
            "DESCRIBE statements are not allowed"
        );
        assert_eq!(
            ok("SET memory_limit = '1GB'").unwrap_err().reason,
            "SET statements are not allowed"
        );
    }

    #[test]
    fn leading_words_skip_comments() {
        assert_eq!(leading_words("/* a */ -- b\nselect 1"), vec!["SELECT"]);
        assert_eq!(leading_words("'unterminated"), Vec::<String>::new());
    }
}
