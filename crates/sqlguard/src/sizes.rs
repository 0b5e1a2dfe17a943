//! Upper bounds on the length (characters or list elements) of the values an expression or a
//! query can produce, so that a value the guard cannot see from the text is never counted as
//! free: a column of a CTE or subquery is as long as what that CTE or subquery computes, a
//! column of a store table is [`DATA_STRING_CHARS`], and a call the guard does not know is as
//! long as its longest argument.
//!
//! The size checks of `bombs.rs` and `costly.rs` multiply these bounds (a `repeat` count, a
//! separator per list element, a lambda per element); the walk also refuses a query whose
//! values can grow past [`MAX_VALUE_CHARS`] (a CTE that concatenates the previous one with
//! itself doubles at every step).

use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArguments, Query, SelectItem, SetExpr, TableFactor,
    TableWithJoins,
};

use crate::bombs::{bounded_count, is_series, literal_number, series_rows, unnamed_expr};

/// Characters assumed for a value read from a store table (the data bounds it; the checks
/// that multiply a value need a figure).
pub const DATA_STRING_CHARS: f64 = 4096.0;

/// The longest value (characters or list elements) any column of a query may be computed to
/// hold.
pub const MAX_VALUE_CHARS: f64 = 1_000_000.0;

/// A value collected per row up to this long (a few columns concatenated) is data the rows
/// hold, not generated: the collection is as long as the data.
pub(crate) const DATA_COLLECTED_CHARS: f64 = 16.0 * DATA_STRING_CHARS;

/// A separator no longer than this does not make collected data longer than the data.
const SHORT_SEPARATOR: f64 = 16.0;

/// Calls whose result is a number or a boolean, whatever their arguments hold.
const SCALAR_RESULTS: &[&str] = &[
    "len",
    "length",
    "strlen",
    "octet_length",
    "bit_length",
    "array_length",
    "list_count",
    "count",
    "count_star",
    "sum",
    "avg",
    "mean",
    "stddev",
    "variance",
    "quantile_cont",
    "quantile_disc",
    "median",
    "approx_count_distinct",
    "hash",
    "strpos",
    "instr",
    "position",
    "ascii",
    "ord",
    "abs",
    "round",
    "floor",
    "ceil",
    "ceiling",
    "epoch",
    "epoch_ms",
    "epoch_us",
    "epoch_ns",
    "date_part",
    "datepart",
    "date_diff",
    "datediff",
    "year",
    "month",
    "day",
    "hour",
    "minute",
    "second",
    "contains",
    "starts_with",
    "ends_with",
    "prefix",
    "suffix",
    "regexp_matches",
    "regexp_full_match",
    "list_contains",
    "list_has",
    "array_contains",
    "array_has",
    "list_has_any",
    "list_has_all",
    "list_sum",
    "list_avg",
    "list_position",
    "list_indexof",
    "isnan",
    "isinf",
    "isfinite",
    "json_array_length",
    "json_valid",
    "typeof",
    "row_number",
    "rank",
    "dense_rank",
    "ntile",
    "percent_rank",
    "cume_dist",
];

/// How to size the identifiers of an expression.
pub(crate) struct Columns<'a> {
    /// Length of a column read at this point (the longest of the FROM items in scope).
    pub(crate) chars: f64,
    /// Names sized 0: the parameters of an enclosing lambda (their elements are counted in
    /// the list the lambda iterates over).
    pub(crate) free: &'a [String],
    /// The bound of a CTE visible from outside the expression, by lower-case name.
    pub(crate) cte: &'a dyn Fn(&str) -> Option<f64>,
}

/// The longest value `expr` can evaluate to.
pub(crate) fn value_chars(expr: &Expr, cols: &Columns<'_>) -> f64 {
    let v = |e: &Expr| value_chars(e, cols);
    match expr {
        Expr::Value(value) => value
            .value
            .clone()
            .into_string()
            .map_or(0.0, |s| s.chars().count() as f64),
        Expr::Identifier(ident) => {
            if cols
                .free
                .iter()
                .any(|f| f.eq_ignore_ascii_case(&ident.value))
            {
                0.0
            } else {
                cols.chars
            }
        }
        Expr::CompoundIdentifier(_) | Expr::CompoundFieldAccess { .. } => cols.chars,
        Expr::Nested(inner)
        | Expr::Cast { expr: inner, .. }
        | Expr::Collate { expr: inner, .. }
        | Expr::UnaryOp { expr: inner, .. } => v(inner),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => v(left) + v(right),
        Expr::BinaryOp { .. }
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::InList { .. }
        | Expr::InSubquery { .. }
        | Expr::InUnnest { .. }
        | Expr::Between { .. }
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::SimilarTo { .. }
        | Expr::Exists { .. }
        | Expr::Extract { .. }
        | Expr::Interval(_)
        | Expr::TypedString(_)
        | Expr::Wildcard(_)
        | Expr::QualifiedWildcard(..) => 0.0,
        Expr::Case {
            conditions,
            else_result,
            ..
        } => conditions
            .iter()
            .map(|w| v(&w.result))
            .chain(else_result.as_deref().map(v))
            .fold(0.0, f64::max),
        Expr::Array(array) => array.elem.iter().map(v).sum(),
        Expr::Tuple(items) => items.iter().map(v).sum(),
        Expr::Struct { values, .. } => values.iter().map(v).sum(),
        Expr::Dictionary(fields) => fields.iter().map(|f| v(&f.value)).sum(),
        Expr::Subquery(query) => query_chars(query, cols.cte),
        Expr::Function(call) => call_chars(call, cols),
        Expr::Lambda(lambda) => v(&lambda.body),
        Expr::Substring {
            expr,
            substring_for: Some(len),
            ..
        } => literal_number(len)
            .filter(|n| n.is_finite() && *n >= 0.0)
            .unwrap_or_else(|| v(expr)),
        // Anything else is as long as a column read here, or longer if it holds longer parts.
        _ => cols.chars,
    }
}

/// The longest value a call can return.
fn call_chars(call: &Function, cols: &Columns<'_>) -> f64 {
    let name = crate::costly::lower_name(call);
    let args: Vec<&Expr> = match &call.args {
        FunctionArguments::List(list) => list.args.iter().filter_map(unnamed_expr).collect(),
        FunctionArguments::Subquery(query) => return query_chars(query, cols.cte),
        FunctionArguments::None => Vec::new(),
    };
    let v = |e: &Expr| value_chars(e, cols);
    let arg = |i: usize| args.get(i).copied();
    if SCALAR_RESULTS.contains(&name.as_str()) {
        return 0.0;
    }
    if is_series(&name) {
        let list = match &call.args {
            FunctionArguments::List(list) => list.args.as_slice(),
            _ => &[],
        };
        return series_rows(&name, list, call).unwrap_or(f64::INFINITY);
    }
    if crate::costly::COLLECTING_AGGREGATES.contains(&name.as_str()) {
        // Rows of data collected are as long as the data; generated values are multiplied
        // by the rows (the walk refuses those per row).
        let each = arg(0).map_or(0.0, v);
        let separators = arg(1).map_or(0.0, v);
        return if each <= DATA_COLLECTED_CHARS && separators <= SHORT_SEPARATOR {
            each.max(DATA_STRING_CHARS)
        } else {
            (each + separators) * crate::cross::NOMINAL_TABLE_ROWS
        };
    }
    let count = |i: usize| {
        arg(i)
            .and_then(bounded_count)
            .map_or(f64::INFINITY, |n| n.max(0.0))
    };
    match name.as_str() {
        "repeat" => arg(0).map_or(0.0, v).max(1.0) * count(1),
        "lpad" | "rpad" => count(1),
        "left" | "right" | "substr" | "substring" => {
            let i = if name.starts_with("sub") { 2 } else { 1 };
            let whole = arg(0).map_or(0.0, v);
            match arg(i).and_then(literal_number) {
                Some(n) if n.is_finite() && n >= 0.0 => n.min(whole.max(n)),
                _ => whole,
            }
        }
        "list_resize" | "array_resize" => count(1).max(arg(0).map_or(0.0, v)),
        "array_to_string" | "list_to_string" | "array_join" | "concat_ws" => {
            // Each element, and a separator between every two.
            let parts: f64 = args.iter().skip(1).map(|e| v(e)).sum();
            let sep = arg(if name == "concat_ws" { 0 } else { 1 }).map_or(0.0, v);
            if name == "concat_ws" {
                parts + sep * args.len() as f64
            } else {
                let list = arg(0).map_or(0.0, v);
                list * (1.0 + sep)
            }
        }
        "replace" | "regexp_replace" => {
            let text = arg(0).map_or(0.0, v);
            let to = arg(2).map_or(0.0, v);
            (text + 1.0) * to.max(1.0)
        }
        "list_transform" | "array_transform" | "apply" | "list_apply" | "array_apply" => {
            let items = crate::costly::lambdas(call)
                .first()
                .map_or(0.0, |(_, items)| *items);
            let body = args
                .iter()
                .find_map(|e| match e {
                    Expr::Lambda(l) => Some(value_chars(&l.body, cols)),
                    _ => None,
                })
                .unwrap_or(0.0);
            if items >= crate::costly::UNKNOWN_LIST_ELEMENTS && body <= DATA_COLLECTED_CHARS {
                // A list read from the data, mapped element by element: as long as the data.
                body.max(DATA_STRING_CHARS)
            } else {
                items * body.max(1.0)
            }
        }
        // Concatenations and constructors: the sum; anything else: its longest argument.
        "concat" | "list_concat" | "array_concat" | "list_value" | "list_pack" | "array_value"
        | "struct_pack" | "row" | "map" | "flatten" => args.iter().map(|e| v(e)).sum(),
        _ => args.iter().map(|e| v(e)).fold(0.0, f64::max),
    }
}

/// The longest value any column of `query` can hold.
pub(crate) fn query_chars(query: &Query, outer: &dyn Fn(&str) -> Option<f64>) -> f64 {
    let mut local: Vec<(String, f64)> = Vec::new();
    if let Some(with) = &query.with {
        for cte in &with.cte_tables {
            let chars = {
                let lookup = |name: &str| lookup_in(&local, name).or_else(|| outer(name));
                query_chars(&cte.query, &lookup)
            };
            local.push((cte.alias.name.value.to_lowercase(), chars));
        }
    }
    let lookup = |name: &str| lookup_in(&local, name).or_else(|| outer(name));
    body_chars(&query.body, &lookup)
}

fn lookup_in(local: &[(String, f64)], name: &str) -> Option<f64> {
    local.iter().rev().find(|(n, _)| n == name).map(|(_, c)| *c)
}

fn body_chars(body: &SetExpr, cte: &dyn Fn(&str) -> Option<f64>) -> f64 {
    match body {
        SetExpr::Select(select) => {
            let chars = from_chars(&select.from, cte);
            let cols = Columns {
                chars,
                free: &[],
                cte,
            };
            select
                .projection
                .iter()
                .map(|item| match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        value_chars(e, &cols)
                    }
                    _ => chars,
                })
                .fold(0.0, f64::max)
        }
        SetExpr::Query(q) => query_chars(q, cte),
        SetExpr::SetOperation { left, right, .. } => {
            body_chars(left, cte).max(body_chars(right, cte))
        }
        SetExpr::Values(values) => {
            let cols = Columns {
                chars: DATA_STRING_CHARS,
                free: &[],
                cte,
            };
            values
                .rows
                .iter()
                .flat_map(|row| row.content.iter())
                .map(|e| value_chars(e, &cols))
                .fold(0.0, f64::max)
        }
        _ => DATA_STRING_CHARS,
    }
}

/// The longest column of the FROM items of a SELECT ([`DATA_STRING_CHARS`] for store tables).
pub(crate) fn from_chars(from: &[TableWithJoins], cte: &dyn Fn(&str) -> Option<f64>) -> f64 {
    from.iter()
        .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)))
        .map(|f| factor_chars(f, cte))
        .fold(0.0, f64::max)
}

fn factor_chars(factor: &TableFactor, cte: &dyn Fn(&str) -> Option<f64>) -> f64 {
    match factor {
        TableFactor::Table {
            name, args: None, ..
        } => match name.0.as_slice() {
            [single] => single
                .as_ident()
                .and_then(|i| cte(&i.value.to_lowercase()))
                .unwrap_or(DATA_STRING_CHARS),
            _ => DATA_STRING_CHARS,
        },
        TableFactor::Derived { subquery, .. } => query_chars(subquery, cte),
        TableFactor::UNNEST { array_exprs, .. } => {
            let cols = Columns {
                chars: DATA_STRING_CHARS,
                free: &[],
                cte,
            };
            array_exprs
                .iter()
                .map(|e| value_chars(e, &cols))
                .fold(DATA_STRING_CHARS, f64::max)
        }
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => from_chars(std::slice::from_ref(table_with_joins), cte),
        _ => DATA_STRING_CHARS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::parse_one;
    use sqlparser::ast::Statement;

    fn chars(sql: &str) -> f64 {
        let Statement::Query(q) = parse_one(sql).unwrap() else {
            panic!("not a query")
        };
        query_chars(&q, &|_| None)
    }

    #[test]
    fn columns_of_ctes_and_subqueries_carry_their_size() {
        assert_eq!(chars("SELECT comm FROM events"), DATA_STRING_CHARS);
        assert_eq!(chars("SELECT 'abc'"), 3.0);
        assert_eq!(
            chars("WITH s AS (SELECT repeat('x', 1000) v) SELECT v FROM s"),
            1000.0
        );
        assert_eq!(
            chars("SELECT upper(v) || v FROM (SELECT repeat('x', 1000) AS v) t"),
            2000.0
        );
        assert_eq!(chars("SELECT count(*), sum(duration) FROM events"), 0.0);
        assert_eq!(
            chars("SELECT list(a.comm || b.comm) FROM events a JOIN events b USING (pid)"),
            2.0 * DATA_STRING_CHARS
        );
        assert!(chars("SELECT list(repeat('x', 100000)) FROM events") > MAX_VALUE_CHARS);
        assert_eq!(chars("SELECT left(comm, 10) FROM events"), 10.0);
        assert_eq!(
            chars("SELECT left(comm, -1) FROM events"),
            DATA_STRING_CHARS
        );
        assert!(chars("SELECT repeat('x', duration) FROM events").is_infinite());
    }
}
