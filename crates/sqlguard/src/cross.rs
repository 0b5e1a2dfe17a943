//! Cross joins: operands combined without a join condition are sized (store tables at a
//! nominal size, series and bounded CTEs at their bound) and obviously unbounded products are
//! refused. Everything subtler is left to the store's timeout and memory cap.

use sqlparser::ast::{Expr, GroupByExpr, LimitClause, Query, SelectItem, SetExpr};

use crate::bombs::{literal_number, show};
use crate::rejection::Rejection;

/// Rows assumed for a store table (or a CTE over one) when sizing a cross join.
pub const NOMINAL_TABLE_ROWS: f64 = 1_000_000.0;

/// The largest cross product (with store tables at their nominal size) allowed without a
/// WHERE clause; series-only cross products are held to this bound even with one.
pub const MAX_CROSS_PRODUCT: f64 = 10_000_000.0;

/// One operand of a cross product, as the walk classified it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CrossItem {
    /// A store table or a CTE, by name: unbounded as far as the guard knows.
    Table(String),
    /// An operand with a known row bound: a series, or a CTE/subquery that is one aggregate
    /// row, VALUES, or has a literal LIMIT. Named by the label.
    Bounded(String, f64),
    /// A derived table, `unnest`, or a join group: assumed small.
    Other,
}

/// Refuses a cross product that is obviously unbounded. `items` are the operands combined with
/// no join condition (comma joins, CROSS JOIN, `ON true`); `has_where` says whether the SELECT
/// filters them.
pub(crate) fn check_cross_product(items: &[CrossItem], has_where: bool) -> Result<(), Rejection> {
    if items.len() < 2 {
        return Ok(());
    }
    let series: f64 = items
        .iter()
        .map(|i| match i {
            CrossItem::Bounded(_, n) => n.max(1.0),
            _ => 1.0,
        })
        .product();
    let estimate: f64 = items
        .iter()
        .map(|i| match i {
            CrossItem::Table(_) => NOMINAL_TABLE_ROWS,
            CrossItem::Bounded(_, n) => n.max(1.0),
            CrossItem::Other => 1.0,
        })
        .product();
    let names = items
        .iter()
        .map(|i| match i {
            CrossItem::Table(name) => name.clone(),
            CrossItem::Bounded(label, n) => format!("{label} ({} rows)", show(*n)),
            CrossItem::Other => "a subquery".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" x ");
    if series > MAX_CROSS_PRODUCT {
        return Err(Rejection::new(
            format!(
                "the cross join {names} would produce about {} rows; at most {} are allowed",
                show(series),
                show(MAX_CROSS_PRODUCT)
            ),
            "make the series smaller, or join them with a condition",
        ));
    }
    if !has_where && estimate > MAX_CROSS_PRODUCT {
        return Err(Rejection::new(
            format!(
                "the cross join {names} has no join condition and no WHERE clause, so its size \
                 is the product of the table sizes (unbounded)"
            ),
            "join with a condition (JOIN ... ON a.pid = b.pid, or a time-overlap condition), \
             filter with WHERE, or pre-aggregate one side into a scalar subquery",
        ));
    }
    Ok(())
}

/// Aggregate functions: a SELECT of only these (no GROUP BY) returns exactly one row.
const AGGREGATES: &[&str] = &[
    "any_value",
    "approx_count_distinct",
    "approx_quantile",
    "arg_max",
    "arg_min",
    "array_agg",
    "avg",
    "bit_and",
    "bit_or",
    "bool_and",
    "bool_or",
    "corr",
    "count",
    "covar_pop",
    "covar_samp",
    "entropy",
    "first",
    "histogram",
    "kurtosis",
    "last",
    "list",
    "mad",
    "max",
    "max_by",
    "median",
    "min",
    "min_by",
    "mode",
    "product",
    "quantile",
    "quantile_cont",
    "quantile_disc",
    "skewness",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "string_agg",
    "sum",
    "var_pop",
    "var_samp",
    "variance",
];

/// An upper bound on the rows `query` returns, when the text shows one: a literal LIMIT,
/// VALUES, or a SELECT of aggregates without GROUP BY (one row).
pub(crate) fn bounded_rows(query: &Query) -> Option<f64> {
    if let Some(LimitClause::LimitOffset {
        limit: Some(limit), ..
    }) = &query.limit_clause
        && let Some(n) = literal_number(limit)
    {
        return Some(n.max(0.0));
    }
    match &*query.body {
        SetExpr::Values(values) => Some(values.rows.len() as f64),
        SetExpr::Select(select) => {
            let ungrouped =
                matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
            let aggregates_only = !select.projection.is_empty()
                && select.projection.iter().all(|item| match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        is_aggregate_expr(e)
                    }
                    _ => false,
                });
            (ungrouped && aggregates_only).then_some(1.0)
        }
        SetExpr::Query(inner) => bounded_rows(inner),
        _ => None,
    }
}

/// Whether `expr` is built only from aggregate calls (not windows) and literals.
fn is_aggregate_expr(expr: &Expr) -> bool {
    match expr {
        Expr::Function(f) => {
            f.over.is_none()
                && f.name.0.len() == 1
                && f.name.0[0]
                    .as_ident()
                    .is_some_and(|i| AGGREGATES.iter().any(|a| i.value.eq_ignore_ascii_case(a)))
        }
        Expr::BinaryOp { left, right, .. } => {
            (is_aggregate_expr(left) || literal_number(left).is_some())
                && (is_aggregate_expr(right) || literal_number(right).is_some())
        }
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => is_aggregate_expr(inner),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::Statement;
    use sqlparser::dialect::DuckDbDialect;
    use sqlparser::parser::Parser;

    #[test]
    fn cross_products() {
        let t = |n: &str| CrossItem::Table(n.to_string());
        assert!(check_cross_product(&[t("events")], false).is_ok());
        assert!(check_cross_product(&[t("events"), t("events")], false).is_err());
        assert!(check_cross_product(&[t("events"), t("events")], true).is_ok());
        assert!(check_cross_product(&[t("events"), CrossItem::Other], false).is_ok());
        let bounded = |n: f64| CrossItem::Bounded("range(n)".to_string(), n);
        assert!(check_cross_product(&[t("events"), bounded(10.0)], false).is_ok());
        assert!(check_cross_product(&[t("events"), bounded(1e3)], false).is_err());
        let series = [bounded(1e6), bounded(1e6)];
        assert!(check_cross_product(&series, true).is_err());
    }

    #[test]
    fn bounded_row_counts() {
        let bound = |sql: &str| {
            let statements = Parser::parse_sql(&DuckDbDialect {}, sql).unwrap();
            let Statement::Query(q) = &statements[0] else {
                panic!("not a query")
            };
            bounded_rows(q)
        };
        assert_eq!(bound("SELECT sum(duration) AS t FROM events"), Some(1.0));
        assert_eq!(
            bound("SELECT count(*) * 2, max(x) / 1e9 FROM events"),
            Some(1.0)
        );
        assert_eq!(bound("SELECT * FROM events LIMIT 5"), Some(5.0));
        assert_eq!(bound("VALUES (1), (2)"), Some(2.0));
        assert_eq!(bound("SELECT sum(x) FROM events GROUP BY op"), None);
        assert_eq!(bound("SELECT sum(x) OVER () FROM events"), None);
        assert_eq!(bound("SELECT pid, sum(x) FROM events"), None);
        assert_eq!(bound("SELECT * FROM events"), None);
    }
}
