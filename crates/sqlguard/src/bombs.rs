//! Resource bombs: size checks for the calls that are obviously unbounded, and the limits the
//! guard's size checks use.
//!
//! The guard rejects what it can see is unbounded from the query text alone: series functions
//! with huge or non-literal bounds (`range(1e12)`), string and list builders with huge counts
//! (`repeat('x', 2e9)`, nested `repeat(repeat(...))`), replacements and separators repeated
//! for every match or element, format strings with huge field widths (`formats.rs`), cross
//! joins of store tables with no join condition and no WHERE clause (`cross.rs`), and what
//! `costly.rs` finds: backtracking patterns, edit distances, generators multiplied by the
//! lambdas and the rows around them. Everything else (a self-join on a weak condition, a
//! heavy window over millions of rows) is left to the store's runtime limits: a query timeout
//! that interrupts DuckDB, a memory cap, a thread cap, and row and byte caps on the result.
//! `WITH RECURSIVE` is always refused (`clauses.rs`).

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator, Value,
};

use crate::costly::{self, MAX_LIST_SERIES, Scope};
use crate::formats;
use crate::rejection::{Rejection, excerpt};
use crate::sizes::{Columns, value_chars};

pub use crate::cross::{MAX_CROSS_PRODUCT, NOMINAL_TABLE_ROWS};

/// The most rows (or list elements) one `range`/`generate_series` call may produce.
pub const MAX_SERIES_ROWS: f64 = 1_000_000.0;

/// The longest string or list a builder call (`repeat`, `lpad`, `list_resize`, ...) may make,
/// and the widest field a format string may ask for.
pub const MAX_GENERATED_LENGTH: f64 = 100_000.0;

/// Builders whose argument at the given index is a length or a count.
const LENGTH_ARGUMENTS: &[(&str, usize)] = &[
    ("repeat", 1),
    ("lpad", 1),
    ("rpad", 1),
    ("list_resize", 1),
    ("array_resize", 1),
    ("bitstring", 1),
];

pub use crate::sizes::DATA_STRING_CHARS;

/// Checks a scalar call of an allowed function for size bombs, where `scope` says how often it
/// is evaluated (per row, inside lambdas) and `cols` how long the values it reads can be.
pub(crate) fn check_scalar_call(
    name: &str,
    call: &Function,
    scope: Scope,
    cols: &Columns<'_>,
) -> Result<(), Rejection> {
    let args = match &call.args {
        FunctionArguments::List(list) => list.args.as_slice(),
        FunctionArguments::None | FunctionArguments::Subquery(_) => &[],
    };
    costly::check_edit_distance(name, call)?;
    costly::check_nesting(name, call)?;
    if costly::is_reduce(name) {
        costly::check_reduce_body(call)?;
    }
    if let Some((operator, matcher)) = costly::pattern_function(name) {
        let pattern = costly::second_arg(call).ok_or_else(|| {
            Rejection::new(
                format!("{} has no pattern argument", excerpt(call)),
                "call it as like_escape(text, 'pattern', '\\')",
            )
        })?;
        costly::check_pattern(operator, matcher, pattern, call)?;
    }
    if is_series(name) {
        let rows = series_rows(name, args, call)?;
        let total = rows * scope.multiplier;
        let budget = scope.budget(MAX_LIST_SERIES);
        if total > budget {
            return Err(Rejection::new(
                format!(
                    "{} builds a list of about {} elements{}; at most {} are allowed",
                    excerpt(call),
                    show(total),
                    scope.describe(),
                    show(budget)
                ),
                "generate rows in FROM instead (FROM range(n) t(i) streams them), or use a \
                 smaller bound",
            ));
        }
        return Ok(());
    }
    check_growth(name, args, call, scope, cols)?;
    if let Some(&(_, index)) = LENGTH_ARGUMENTS.iter().find(|(n, _)| *n == name) {
        let count = args
            .get(index)
            .and_then(unnamed_expr)
            .and_then(bounded_count)
            .ok_or_else(|| {
                Rejection::new(
                    format!(
                        "the length argument of {name} must be a numeric literal or \
                         least(expression, literal) so the guard can bound its size, in {}",
                        excerpt(call)
                    ),
                    format!("cap it with a literal, e.g. {name}(..., least(n, 100))"),
                )
            })?;
        let size = generated_length_of_call(name, args, cols).unwrap_or(count) * scope.multiplier;
        let budget = scope.budget(MAX_GENERATED_LENGTH);
        if !size.is_finite() || size > budget || count > budget {
            return Err(Rejection::new(
                format!(
                    "{} would build a value of about {} elements{}; at most {} are allowed",
                    excerpt(call),
                    show(size.max(count)),
                    scope.describe(),
                    show(budget)
                ),
                "use a smaller count (for text bar charts, bar(x, min, max, width) is built in)",
            ));
        }
        return Ok(());
    }
    if name == "printf" || name == "format" {
        formats::check_format_string(name, args, call)?;
    }
    Ok(())
}

/// Calls whose output can be much longer than their input: a replacement repeated at every
/// match, a separator between every element of a list.
fn check_growth(
    name: &str,
    args: &[FunctionArg],
    call: &Function,
    scope: Scope,
    cols: &Columns<'_>,
) -> Result<(), Rejection> {
    let arg = |i: usize| args.get(i).and_then(unnamed_expr);
    let text_len = |e: Option<&Expr>| {
        e.map(|e| value_chars(e, cols))
            .filter(|n| *n > 0.0)
            .unwrap_or(DATA_STRING_CHARS)
    };
    let literal_len = |e: Option<&Expr>| e.map(|e| value_chars(e, cols)).unwrap_or(0.0);
    let size = match name {
        "replace" => {
            let to = literal_len(arg(2));
            (to > 1.0).then(|| text_len(arg(0)) * to)
        }
        "regexp_replace" => {
            let to = literal_len(arg(2));
            (to > 1.0).then(|| (text_len(arg(0)) + 1.0) * to)
        }
        "array_to_string" | "list_to_string" | "array_join" => {
            let sep = literal_len(arg(1));
            (sep > 16.0).then(|| {
                let n = arg(0).map_or(costly::UNKNOWN_LIST_ELEMENTS, |e| match e {
                    Expr::Function(f) if is_series(&costly::lower_name(f)) => {
                        series_rows(&costly::lower_name(f), costly::args_of(f), f)
                            .unwrap_or(costly::UNKNOWN_LIST_ELEMENTS)
                    }
                    _ => costly::UNKNOWN_LIST_ELEMENTS,
                });
                n * sep
            })
        }
        _ => None,
    };
    let Some(size) = size.map(|s| s * scope.multiplier) else {
        return Ok(());
    };
    let budget = scope.budget(MAX_GENERATED_LENGTH);
    if !size.is_finite() || size > budget {
        return Err(Rejection::new(
            format!(
                "{} can build a string of about {} characters{} (its replacement or separator \
                 is repeated for every match or element); at most {} are allowed",
                excerpt(call),
                show(size),
                scope.describe(),
                show(budget)
            ),
            "use a short replacement or separator",
        ));
    }
    Ok(())
}

/// Whether `name` (lower-case) is a series generator.
pub(crate) fn is_series(name: &str) -> bool {
    name == "range" || name == "generate_series"
}

/// The number of rows a `range`/`generate_series` call produces, refusing it if that cannot
/// be bounded from literals or is above [`MAX_SERIES_ROWS`].
pub(crate) fn series_rows(
    name: &str,
    args: &[FunctionArg],
    call: &impl std::fmt::Display,
) -> Result<f64, Rejection> {
    let bounds_hint = "write literal integer bounds, e.g. range(0, 100) or generate_series(1, 60); \
                       for time buckets add an interval to an integer series: \
                       SELECT TIMESTAMP '2024-01-01' + INTERVAL (i) MINUTE FROM range(0, 60) t(i)";
    let numbers: Option<Vec<f64>> = args
        .iter()
        .map(|a| unnamed_expr(a).and_then(literal_number))
        .collect();
    let Some(numbers) = numbers else {
        return Err(Rejection::new(
            format!(
                "the bounds of {name} must be numeric literals so the guard can bound its \
                 size, in {}",
                excerpt(call)
            ),
            bounds_hint,
        ));
    };
    let (start, stop, step) = match numbers.as_slice() {
        [stop] => (0.0, *stop, 1.0),
        [start, stop] => (*start, *stop, 1.0),
        [start, stop, step] => (*start, *stop, *step),
        _ => {
            return Err(Rejection::new(
                format!(
                    "{name} takes one to three numeric arguments, in {}",
                    excerpt(call)
                ),
                bounds_hint,
            ));
        }
    };
    if step == 0.0 {
        return Err(Rejection::new(
            format!("{} has a step of 0 and never ends", excerpt(call)),
            "use a non-zero step",
        ));
    }
    let span = (stop - start) / step;
    let rows = if name == "generate_series" {
        (span.floor() + 1.0).max(0.0)
    } else {
        span.ceil().max(0.0)
    };
    if !rows.is_finite() || rows > MAX_SERIES_ROWS {
        return Err(Rejection::new(
            format!(
                "{} would produce about {} rows; at most {} are allowed",
                excerpt(call),
                show(rows),
                show(MAX_SERIES_ROWS)
            ),
            format!(
                "narrow the bounds to at most {} values, or read the trace tables instead of \
                 generating rows",
                show(MAX_SERIES_ROWS)
            ),
        ));
    }
    Ok(rows)
}

/// The length, in elements, of the value a builder call makes, if the guard can tell.
fn generated_length_of_call(name: &str, args: &[FunctionArg], cols: &Columns<'_>) -> Option<f64> {
    let &(_, index) = LENGTH_ARGUMENTS.iter().find(|(n, _)| *n == name)?;
    let count = bounded_count(unnamed_expr(args.get(index)?)?)?.max(0.0);
    let base = args
        .first()
        .and_then(unnamed_expr)
        .map(|e| value_chars(e, cols));
    // The padding and resizing builders make exactly `count` elements.
    Some(match name {
        "repeat" => base.unwrap_or(0.0).max(1.0) * count,
        _ => count,
    })
}

/// A count that is a literal, or `least(...)` with at least one literal argument.
pub(crate) fn bounded_count(expr: &Expr) -> Option<f64> {
    if let Some(n) = literal_number(expr) {
        return Some(n);
    }
    let Expr::Function(f) = expr else {
        return None;
    };
    let is_least = f.name.0.len() == 1
        && f.name.0[0]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("least"));
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if !is_least {
        return None;
    }
    list.args
        .iter()
        .filter_map(unnamed_expr)
        .filter_map(bounded_count)
        .reduce(f64::min)
}

/// The expression of a positional argument (named and wildcard arguments give `None`).
pub(crate) fn unnamed_expr(arg: &FunctionArg) -> Option<&Expr> {
    match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
        _ => None,
    }
}

/// The value of a numeric literal, possibly signed, parenthesised or cast.
pub(crate) fn literal_number(expr: &Expr) -> Option<f64> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(text, _) => text.replace('_', "").parse::<f64>().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => literal_number(expr).map(|n| -n),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        }
        | Expr::Nested(expr)
        | Expr::Cast { expr, .. } => literal_number(expr),
        _ => None,
    }
}

/// The value of a string literal.
pub(crate) fn string_literal(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(v) => v.value.clone().into_string(),
        Expr::Nested(inner) => string_literal(inner),
        _ => None,
    }
}

/// A count for messages: integral values without a fraction, huge ones in scientific notation.
pub(crate) fn show(n: f64) -> String {
    if n.is_finite() && n.abs() < 1e15 {
        format!("{}", n.round() as i64)
    } else {
        format!("{n:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::{SelectItem, SetExpr, Statement};
    use sqlparser::dialect::DuckDbDialect;
    use sqlparser::parser::Parser;

    /// The first projected expression of `SELECT <expr>`.
    fn expr(sql: &str) -> Expr {
        let statements = Parser::parse_sql(&DuckDbDialect {}, &format!("SELECT {sql}")).unwrap();
        let Statement::Query(q) = &statements[0] else {
            panic!("not a query")
        };
        let SetExpr::Select(s) = &*q.body else {
            panic!("not a select")
        };
        match &s.projection[0] {
            SelectItem::UnnamedExpr(e) => e.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn check(sql: &str) -> Result<(), Rejection> {
        let Expr::Function(f) = expr(sql) else {
            panic!("not a call: {sql}")
        };
        let name = f.name.0.last().unwrap().as_ident().unwrap().value.clone();
        let columns = Columns {
            chars: DATA_STRING_CHARS,
            free: &[],
            cte: &|_| None,
        };
        check_scalar_call(&name.to_ascii_lowercase(), &f, Scope::ONCE, &columns)
    }

    #[test]
    fn literal_numbers() {
        assert_eq!(literal_number(&expr("1e12")), Some(1e12));
        assert_eq!(literal_number(&expr("-5")), Some(-5.0));
        assert_eq!(literal_number(&expr("(1_000)")), Some(1000.0));
        assert_eq!(literal_number(&expr("10::BIGINT")), Some(10.0));
        assert_eq!(literal_number(&expr("pid")), None);
    }

    #[test]
    fn series_sizes() {
        assert!(check("range(10)").is_ok());
        assert!(check("generate_series(1, 100000, 1)").is_ok());
        assert!(check("generate_series(0, 100000)").is_err());
        assert!(check("generate_series(1, 99999)").is_ok());
        assert!(check("range(100000)").is_ok());
        assert!(check("range(100001)").is_err());
        assert!(check("range(1e12)").is_err());
        assert!(check("range(0, 1e11, 1e6)").is_ok());
        assert!(check("range(0, 1e12, 1e6)").is_err());
        assert!(check("range(10, 0)").is_ok());
        assert!(check("range(0, 10, 0)").is_err());
        assert!(check("range(pid)").is_err());
        assert!(check("range(1, 2, 3, 4)").is_err());
        let err = check("range(1e12)").unwrap_err();
        assert!(err.reason.contains("1000000000000 rows"), "{}", err.reason);
    }

    #[test]
    fn builder_counts() {
        assert!(check("repeat('x', 10)").is_ok());
        assert!(check("repeat('x', 2e9)").is_err());
        assert!(check("repeat('abc', 50000)").is_err());
        assert!(check("repeat(comm, 20)").is_ok());
        // A column is as long as the data (4096 characters), not free.
        assert!(check("repeat(comm, 50000)").is_err());
        assert!(check("repeat('#', least(duration / 1000, 80))").is_ok());
        assert!(check("repeat('#', duration)").is_err());
        assert!(check("repeat(repeat('x', 1000), 1000)").is_err());
        assert!(check("repeat(concat(repeat('x', 1000), 'y'), 1000)").is_err());
        assert!(check("lpad(comm, 20, ' ')").is_ok());
        assert!(check("rpad('', 2000000000, 'x')").is_err());
        assert!(check("list_resize([1], 1e9)").is_err());
        assert!(check("bitstring('1', 1e10)").is_err());
    }

    #[test]
    fn format_widths() {
        assert!(check("printf('%.2f ms', x)").is_ok());
        assert!(check("printf('%5d|%-10s|%%', a, b)").is_ok());
        assert!(check("printf('%1000000000d', 1)").is_err());
        assert!(check("printf('%*d', 1000000000, 1)").is_err());
        assert!(check("printf(fmt, 1)").is_err());
        assert!(check("format('{} took {:.2f}', a, b)").is_ok());
        assert!(check("format('{:>1000000000}', 'x')").is_err());
        assert!(check("format('{:>{}}', 'x', 1000000000)").is_err());
    }

    #[test]
    fn shown_numbers() {
        assert_eq!(show(1e6), "1000000");
        assert_eq!(show(1e300), "1e300");
        assert_eq!(show(f64::INFINITY), "inf");
    }
}
