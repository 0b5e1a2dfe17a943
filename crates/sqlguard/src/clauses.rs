//! Clause-level rules, checked once per query and per SELECT: set-expression bodies, WITH
//! (no RECURSIVE, harmless distinct CTE names), join operators, and clauses DuckDB queries
//! never need (INTO, FOR UPDATE, FETCH, TOP, ...). Unknown variants are refused.

use sqlparser::ast::{
    Expr, JoinConstraint, JoinOperator, LimitClause, Query, Select, SetExpr, TableWithJoins, Value,
    With,
};

use crate::cross;
use crate::functions::blocked_function;
use crate::names::looks_like_path;
use crate::rejection::{QUERY_HINT, Rejection, excerpt};
use crate::statement::statement_label;
use crate::walk::address;

/// One CTE as the scope sees it.
#[derive(Debug)]
pub(crate) struct CteScope {
    /// Lower-case name.
    pub(crate) name: String,
    /// Address of its body.
    pub(crate) body: usize,
    /// The most rows its body returns, when the text shows a bound.
    pub(crate) rows: Option<f64>,
    /// The longest value its columns can hold (set once its body has been checked).
    pub(crate) chars: Option<f64>,
}

/// Clauses of a SELECT that DuckDB queries never need, and the join operators in its FROM.
pub(crate) fn check_select_clauses(select: &Select) -> Result<(), Rejection> {
    if select.into.is_some() {
        return Err(Rejection::new(
            "SELECT ... INTO creates a table and is not allowed",
            "drop the INTO clause; results come back as rows",
        ));
    }
    let unsupported = [
        (!select.optimizer_hints.is_empty(), "an optimizer hint"),
        (select.select_modifiers.is_some(), "a MySQL SELECT modifier"),
        (select.top.is_some(), "SELECT TOP (use LIMIT)"),
        (!select.lateral_views.is_empty(), "LATERAL VIEW"),
        (select.prewhere.is_some(), "PREWHERE"),
        (!select.connect_by.is_empty(), "CONNECT BY"),
        (!select.cluster_by.is_empty(), "CLUSTER BY"),
        (!select.distribute_by.is_empty(), "DISTRIBUTE BY"),
        (!select.sort_by.is_empty(), "SORT BY"),
        (select.value_table_mode.is_some(), "SELECT AS STRUCT/VALUE"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(present, _)| *present) {
        return Err(Rejection::unsupported(
            what,
            "write standard DuckDB SQL: SELECT ... FROM ... WHERE ... GROUP BY ... ORDER BY ... \
             LIMIT ...",
        ));
    }
    select.from.iter().try_for_each(check_joins)
}

/// Query-level clauses and the kinds of set-expression bodies.
pub(crate) fn check_query_clauses(query: &Query) -> Result<(), Rejection> {
    check_body(&query.body)?;
    let unsupported = [
        (query.fetch.is_some(), "FETCH FIRST (use LIMIT)"),
        (!query.locks.is_empty(), "FOR UPDATE/FOR SHARE"),
        (query.for_clause.is_some(), "FOR XML/FOR JSON"),
        (query.settings.is_some(), "a SETTINGS clause"),
        (query.format_clause.is_some(), "a FORMAT clause"),
        (!query.pipe_operators.is_empty(), "pipe syntax (|>)"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(present, _)| *present) {
        return Err(Rejection::unsupported(
            what,
            "drop the clause; results come back as rows and LIMIT bounds them",
        ));
    }
    match &query.limit_clause {
        Some(LimitClause::LimitOffset { limit_by, .. }) if !limit_by.is_empty() => Err(
            Rejection::unsupported("LIMIT ... BY", "use QUALIFY row_number() OVER (...) <= n"),
        ),
        Some(LimitClause::OffsetCommaLimit { .. }) => Err(Rejection::unsupported(
            "LIMIT offset, count",
            "write LIMIT count OFFSET offset",
        )),
        _ => Ok(()),
    }
}

/// A query body: SELECT, VALUES, a parenthesised query, or a set operation of those.
pub(crate) fn check_body(body: &SetExpr) -> Result<(), Rejection> {
    match body {
        SetExpr::Select(_) | SetExpr::Query(_) | SetExpr::Values(_) => Ok(()),
        SetExpr::SetOperation { left, right, .. } => {
            check_body(left)?;
            check_body(right)
        }
        SetExpr::Insert(statement)
        | SetExpr::Update(statement)
        | SetExpr::Delete(statement)
        | SetExpr::Merge(statement) => Err(Rejection::new(
            format!(
                "a {} inside a query (a data-modifying CTE or subquery) is not allowed",
                statement_label(statement)
            ),
            QUERY_HINT,
        )),
        SetExpr::Table(_) => Err(Rejection::unsupported(
            "the TABLE <name> shorthand",
            "write SELECT * FROM <name>",
        )),
    }
}

/// WITH: no RECURSIVE, distinct and harmless CTE names. Returns the CTEs' scope entries.
pub(crate) fn check_with(with: &With) -> Result<Vec<CteScope>, Rejection> {
    if with.recursive {
        return Err(Rejection::new(
            "WITH RECURSIVE is not allowed: a recursive CTE can run without bound",
            "use range(n)/generate_series(a, b) with literal bounds, window functions (lag, \
             lead, running sums with OVER), or a self-join",
        ));
    }
    let mut ctes: Vec<CteScope> = Vec::new();
    for cte in &with.cte_tables {
        let name = &cte.alias.name;
        let lower = name.value.to_lowercase();
        if cte.from.is_some() {
            return Err(Rejection::unsupported(
                "a CTE with a FROM clause after it",
                "write WITH name AS (SELECT ...)",
            ));
        }
        if name.quote_style == Some('\'') || looks_like_path(&name.value) {
            return Err(Rejection::new(
                format!(
                    "CTE name {} looks like a string or file path",
                    excerpt(&name.value)
                ),
                "name CTEs with plain identifiers, e.g. WITH slow AS (...)",
            ));
        }
        if blocked_function(&lower).is_some() {
            return Err(Rejection::new(
                format!(
                    "CTE name {} shadows a blocked system function or relation",
                    name.value
                ),
                "pick another name for the CTE, e.g. WITH slow AS (...)",
            ));
        }
        if ctes.iter().any(|existing| existing.name == lower) {
            return Err(Rejection::new(
                format!("CTE name {} is defined twice in one WITH", name.value),
                "give each CTE its own name",
            ));
        }
        ctes.push(CteScope {
            name: lower,
            body: address(&*cte.query),
            rows: cross::bounded_rows(&cte.query),
            chars: None,
        });
    }
    Ok(ctes)
}

/// Join operators DuckDB queries use; the others (APPLY, ASOF with MATCH_CONDITION,
/// STRAIGHT_JOIN, ARRAY JOIN) are refused.
pub(crate) fn check_joins(table: &TableWithJoins) -> Result<(), Rejection> {
    for join in &table.joins {
        let what = match &join.join_operator {
            JoinOperator::Join(_)
            | JoinOperator::Inner(_)
            | JoinOperator::Left(_)
            | JoinOperator::LeftOuter(_)
            | JoinOperator::Right(_)
            | JoinOperator::RightOuter(_)
            | JoinOperator::FullOuter(_)
            | JoinOperator::CrossJoin(_)
            | JoinOperator::Semi(_)
            | JoinOperator::LeftSemi(_)
            | JoinOperator::RightSemi(_)
            | JoinOperator::Anti(_)
            | JoinOperator::LeftAnti(_)
            | JoinOperator::RightAnti(_) => None,
            JoinOperator::CrossApply | JoinOperator::OuterApply => {
                Some("CROSS APPLY/OUTER APPLY (use LATERAL)")
            }
            JoinOperator::AsOf { .. } => Some("ASOF JOIN ... MATCH_CONDITION"),
            JoinOperator::StraightJoin(_) => Some("STRAIGHT_JOIN"),
            JoinOperator::ArrayJoin
            | JoinOperator::LeftArrayJoin
            | JoinOperator::InnerArrayJoin => Some("ARRAY JOIN (use unnest)"),
        };
        if join.global {
            return Err(Rejection::unsupported("GLOBAL JOIN", "drop GLOBAL"));
        }
        if let Some(what) = what {
            return Err(Rejection::unsupported(
                what,
                "use JOIN/LEFT JOIN/SEMI JOIN/ANTI JOIN ... ON, LATERAL subqueries, or a range \
                 join such as ON b.timestamp BETWEEN a.timestamp AND a.timestamp + a.duration",
            ));
        }
    }
    Ok(())
}

/// Whether a join combines its operands without a real condition (a cross product).
pub(crate) fn is_unconditioned(operator: &JoinOperator) -> bool {
    let constraint = match operator {
        JoinOperator::CrossJoin(_) => return true,
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c) => c,
        _ => return false,
    };
    match constraint {
        JoinConstraint::None => true,
        JoinConstraint::On(Expr::Value(v)) => v.value == Value::Boolean(true),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::parse_one;
    use sqlparser::ast::Statement;

    fn query(sql: &str) -> Box<Query> {
        match parse_one(sql).unwrap() {
            Statement::Query(q) => q,
            other => panic!("not a query: {other}"),
        }
    }

    fn select(sql: &str) -> Box<Select> {
        match *query(sql).body {
            SetExpr::Select(s) => s,
            other => panic!("not a select: {other}"),
        }
    }

    #[test]
    fn bodies() {
        assert!(check_body(&query("SELECT 1 UNION ALL (VALUES (2))").body).is_ok());
        let with = query("WITH x AS (UPDATE events SET pid = 1 RETURNING *) SELECT 1")
            .with
            .unwrap();
        let err = check_body(&with.cte_tables[0].query.body).unwrap_err();
        assert!(err.reason.starts_with("a UPDATE inside a query"), "{err}");
    }

    #[test]
    fn query_clauses() {
        assert!(check_query_clauses(&query("SELECT 1 ORDER BY 1 LIMIT 2 OFFSET 1")).is_ok());
        let err = check_query_clauses(&query("SELECT * FROM events FOR UPDATE")).unwrap_err();
        assert!(
            err.reason
                .starts_with("FOR UPDATE/FOR SHARE is not supported")
        );
    }

    #[test]
    fn select_clauses() {
        assert!(check_select_clauses(&select("SELECT DISTINCT ON (pid) pid FROM events")).is_ok());
        let err = check_select_clauses(&select("SELECT 1 INTO t")).unwrap_err();
        assert_eq!(
            err.reason,
            "SELECT ... INTO creates a table and is not allowed"
        );
        let err = check_select_clauses(&select("SELECT TOP 5 * FROM events")).unwrap_err();
        assert!(err.reason.starts_with("SELECT TOP"));
    }

    #[test]
    fn with_rules() {
        let ctes = check_with(
            &query("WITH a AS (SELECT sum(x) FROM events), B AS (SELECT * FROM a) SELECT 1")
                .with
                .unwrap(),
        )
        .unwrap();
        let names: Vec<_> = ctes.iter().map(|c| (c.name.as_str(), c.rows)).collect();
        assert_eq!(names, vec![("a", Some(1.0)), ("b", None)]);
        for (sql, reason) in [
            ("WITH RECURSIVE t AS (SELECT 1) SELECT 1", "WITH RECURSIVE"),
            (
                "WITH a AS (SELECT 1), a AS (SELECT 2) SELECT 1",
                "defined twice",
            ),
            ("WITH glob AS (SELECT 1) SELECT 1", "shadows"),
            ("WITH \"x.csv\" AS (SELECT 1) SELECT 1", "file path"),
        ] {
            let err = check_with(&query(sql).with.unwrap()).unwrap_err();
            assert!(err.reason.contains(reason), "{sql}: {err}");
        }
    }

    #[test]
    fn joins() {
        let from = |sql: &str| select(sql).from.into_iter().next().unwrap();
        assert!(
            check_joins(&from(
                "SELECT 1 FROM events a LEFT JOIN ops b USING (op_id)"
            ))
            .is_ok()
        );
        let err =
            check_joins(&from("SELECT 1 FROM events a CROSS APPLY (SELECT 1) b")).unwrap_err();
        assert!(err.reason.starts_with("CROSS APPLY"));
        let op = |sql: &str| from(sql).joins[0].join_operator.clone();
        assert!(is_unconditioned(&op("SELECT 1 FROM a CROSS JOIN b")));
        assert!(is_unconditioned(&op("SELECT 1 FROM a JOIN b ON true")));
        assert!(!is_unconditioned(&op(
            "SELECT 1 FROM a JOIN b ON a.x = b.x"
        )));
        assert!(!is_unconditioned(&op("SELECT 1 FROM a NATURAL JOIN b")));
    }
}
