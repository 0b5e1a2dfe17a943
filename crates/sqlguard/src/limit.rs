//! Row limits in the AST: the outer query's LIMIT is set or clamped to `row_limit + 1`.
//!
//! The extra row lets the store tell "exactly row_limit rows" from "truncated" without running
//! the query twice. A literal LIMIT at or below the cap is kept; a larger literal is lowered; a
//! missing one (or `LIMIT ALL`) is added. A LIMIT that is an expression (`LIMIT (SELECT ...)`)
//! is left as written (the guard walked it like any expression) and the store's own fetch cap
//! bounds the rows. EXPLAIN's inner query is never rewritten, so the plan shown is the plan of
//! the query as written. Applying the cap twice gives the same text (idempotent).

use sqlparser::ast::{Expr, LimitClause, Query, Value};

use crate::bombs::literal_number;

/// Sets or lowers the outer LIMIT of `query` to at most `cap` rows.
pub(crate) fn apply(query: &mut Query, cap: u64) {
    let cap_expr = || Expr::value(Value::Number(cap.to_string(), false));
    match &mut query.limit_clause {
        None => {
            query.limit_clause = Some(LimitClause::LimitOffset {
                limit: Some(cap_expr()),
                offset: None,
                limit_by: Vec::new(),
            });
        }
        Some(LimitClause::LimitOffset { limit, .. }) => match limit {
            None => *limit = Some(cap_expr()),
            Some(expr) => {
                if literal_number(expr).is_some_and(|n| exceeds(n, cap)) {
                    *expr = cap_expr();
                }
            }
        },
        Some(LimitClause::OffsetCommaLimit { limit, .. }) => {
            if literal_number(limit).is_some_and(|n| exceeds(n, cap)) {
                *limit = cap_expr();
            }
        }
    }
}

/// Whether a literal limit `n` is above `cap` (or not a number at all).
fn exceeds(n: f64, cap: u64) -> bool {
    n.is_nan() || n > cap as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::Statement;
    use sqlparser::dialect::DuckDbDialect;
    use sqlparser::parser::Parser;

    fn limited(sql: &str, cap: u64) -> String {
        let mut statements = Parser::parse_sql(&DuckDbDialect {}, sql).unwrap();
        let Statement::Query(query) = &mut statements[0] else {
            panic!("not a query")
        };
        apply(query, cap);
        statements[0].to_string()
    }

    #[test]
    fn adds_a_missing_limit() {
        assert_eq!(
            limited("SELECT * FROM events", 1001),
            "SELECT * FROM events LIMIT 1001"
        );
        assert_eq!(limited("FROM events", 11), "FROM events LIMIT 11");
        assert_eq!(
            limited("SELECT * FROM events LIMIT ALL", 11),
            "SELECT * FROM events LIMIT 11"
        );
        assert_eq!(
            limited("SELECT * FROM events OFFSET 5", 11),
            "SELECT * FROM events LIMIT 11 OFFSET 5"
        );
    }

    #[test]
    fn clamps_only_larger_literals() {
        assert_eq!(limited("SELECT 1 LIMIT 5", 1001), "SELECT 1 LIMIT 5");
        assert_eq!(limited("SELECT 1 LIMIT 1e9", 1001), "SELECT 1 LIMIT 1001");
        assert_eq!(
            limited("SELECT 1 LIMIT 2000 OFFSET 3", 1001),
            "SELECT 1 LIMIT 1001 OFFSET 3"
        );
        assert_eq!(
            limited("SELECT 1 LIMIT (SELECT 5)", 1001),
            "SELECT 1 LIMIT (SELECT 5)"
        );
    }

    #[test]
    fn set_operations_get_one_outer_limit() {
        assert_eq!(
            limited("SELECT 1 UNION ALL SELECT 2 ORDER BY 1", 3),
            "SELECT 1 UNION ALL SELECT 2 ORDER BY 1 LIMIT 3"
        );
    }

    #[test]
    fn idempotent() {
        let once = limited("SELECT * FROM events", 1001);
        assert_eq!(limited(&once, 1001), once);
    }
}
