//! Calls whose cost DuckDB does not bound: the memory or time they take grows faster than
//! their input, inside one function call that neither DuckDB's memory limit nor its interrupt
//! reaches (measured with DuckDB 1.5.6: docs/sql-guard.md). The walk refuses them with a
//! reason and a way to ask the same question cheaply:
//!
//! - pattern matching that backtracks: LIKE with `_` or ESCAPE, ILIKE, GLOB and the
//!   `*like_escape` functions take time exponential in the number of `%`/`*` that are followed
//!   by more pattern (`repeat('a', 60) LIKE '%a%a%a%a%a%a%a%a_b'` ran 17 s without answering an
//!   interrupt); at most one such wildcard is allowed, and only a literal pattern;
//! - edit distances (`levenshtein`, `damerau_levenshtein`, `editdist3`), quadratic in time and,
//!   for Damerau's, in memory (two 25,000-character strings took 4.8 GB): every argument must
//!   have a length the guard can bound (a literal, `left(x, n)`, `substr(x, s, n)`, ...) and
//!   the product of the lengths is capped;
//! - lambdas (`list_transform`, `list_filter`, `list_reduce`, ...) run their body once per
//!   element, so what the body generates is multiplied by the list's length
//!   (`list_transform(range(10000), x -> range(1000000))` took 4.2 GB): [`Scope`] carries the
//!   product of the enclosing lists' lengths into the size checks of `bombs.rs`;
//! - a value generated per row of a table is multiplied by the rows DuckDB evaluates at once
//!   (2,048): `SELECT range(1000000) FROM events` took 4.2 GB, so a SELECT with a FROM clause
//!   may generate at most [`MAX_ROW_GENERATED`] elements per row;
//! - `list_reduce` bodies that grow their accumulator (`(a, b) -> a || a` doubles it at every
//!   step: 6.7 GB from a 64-element list): only arithmetic and comparisons are allowed there.

use sqlparser::ast::{BinaryOperator, Expr, Function, FunctionArg, FunctionArguments};

use crate::bombs::{literal_number, show, string_literal, unnamed_expr};
use crate::rejection::{Rejection, excerpt};

/// Elements (list elements or characters) one row of a SELECT over a table may generate.
pub const MAX_ROW_GENERATED: f64 = 20_000.0;

/// Elements of a list-valued `range`/`generate_series` call outside FROM (the table functions
/// stream and keep `MAX_SERIES_ROWS`).
pub const MAX_LIST_SERIES: f64 = 100_000.0;

/// The largest product of the two argument lengths of an edit-distance call.
pub const MAX_EDIT_CELLS: f64 = 250_000.0;

/// Elements assumed for a list whose length the guard cannot tell (built from the trace's rows).
pub const UNKNOWN_LIST_ELEMENTS: f64 = 1_000_000.0;

/// Where a call is evaluated: per row of a table or once, and how many times the enclosing
/// lambdas run it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scope {
    /// Inside a SELECT (at any depth) that reads a FROM clause: evaluated per row.
    pub per_row: bool,
    /// Product of the lengths of the lists the enclosing lambdas iterate over, and of the rows
    /// an enclosing collecting aggregate keeps (1 outside).
    pub multiplier: f64,
    /// Inside the argument of an aggregate that keeps every row's value (`list`, `string_agg`).
    pub collected: bool,
}

/// Aggregates that keep every row's value: what they collect is multiplied by the rows
/// (`list(range(1000)) FROM events` ran past its interrupt for 3.5 s and took 1 GB over a
/// 512 MB limit).
pub const COLLECTING_AGGREGATES: &[&str] = &[
    "list",
    "array_agg",
    "string_agg",
    "group_concat",
    "listagg",
    "histogram",
];

impl Scope {
    /// A call evaluated once, outside any lambda.
    pub const ONCE: Scope = Scope {
        per_row: false,
        multiplier: 1.0,
        collected: false,
    };

    /// The most elements a generator may produce here, multiplier included.
    pub(crate) fn budget(self, once: f64) -> f64 {
        if self.per_row {
            MAX_ROW_GENERATED.min(once)
        } else {
            once
        }
    }

    /// Words for messages: where the limit comes from.
    pub(crate) fn describe(self) -> String {
        let mut parts = Vec::new();
        if self.collected {
            parts.push(format!(
                "kept for every row by an aggregate, {} times in all",
                show(self.multiplier)
            ));
        } else if self.multiplier > 1.0 {
            parts.push(format!(
                "once per element of lists of {} elements in all",
                show(self.multiplier)
            ));
        }
        if self.per_row {
            parts.push("per row of a table".to_string());
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    }
}

/// Lambda functions whose body is an accumulator step (its result feeds the next call).
const REDUCE_FUNCTIONS: &[&str] = &["list_reduce", "array_reduce", "reduce"];

/// Functions allowed in a `list_reduce` body: none of them grows a string or a list.
const REDUCE_SAFE_FUNCTIONS: &[&str] = &[
    "abs", "ceil", "ceiling", "coalesce", "exp", "floor", "greatest", "if", "ifnull", "least",
    "ln", "log", "log10", "log2", "mod", "nullif", "pow", "power", "round", "sign", "sqrt",
    "trunc", "isnan", "isinf", "isfinite", "len", "length",
];

/// Whether `name` (lower-case) is a reduce-style lambda function.
pub(crate) fn is_reduce(name: &str) -> bool {
    REDUCE_FUNCTIONS.contains(&name)
}

/// The lambdas among `call`'s arguments, each with the length of the list it iterates over
/// (the call's first argument).
pub(crate) fn lambdas(call: &Function) -> Vec<(&Expr, f64)> {
    let FunctionArguments::List(list) = &call.args else {
        return Vec::new();
    };
    let items = list
        .args
        .first()
        .and_then(unnamed_expr)
        .map_or(UNKNOWN_LIST_ELEMENTS, list_length);
    list.args
        .iter()
        .filter_map(unnamed_expr)
        .filter(|e| matches!(e, Expr::Lambda(_)))
        .map(|e| (e, items.max(1.0)))
        .collect()
}

/// An upper bound on the elements of the list `expr` evaluates to.
fn list_length(expr: &Expr) -> f64 {
    match expr {
        Expr::Array(a) => a.elem.len() as f64,
        Expr::Nested(e) | Expr::Cast { expr: e, .. } => list_length(e),
        Expr::Function(f) => {
            let name = lower_name(f);
            let args = args_of(f);
            if crate::bombs::is_series(&name) {
                crate::bombs::series_rows(&name, args, f).unwrap_or(UNKNOWN_LIST_ELEMENTS)
            } else if matches!(
                name.as_str(),
                "list_transform" | "array_transform" | "apply" | "list_apply" | "array_apply"
            ) {
                args.first()
                    .and_then(unnamed_expr)
                    .map_or(UNKNOWN_LIST_ELEMENTS, list_length)
            } else if matches!(name.as_str(), "list_value" | "list_pack" | "array_value") {
                args.len() as f64
            } else {
                UNKNOWN_LIST_ELEMENTS
            }
        }
        _ => UNKNOWN_LIST_ELEMENTS,
    }
}

/// Checks a `list_reduce` body: arithmetic, comparisons and [`REDUCE_SAFE_FUNCTIONS`] only.
pub(crate) fn check_reduce_body(call: &Function) -> Result<(), Rejection> {
    for (lambda, _) in lambdas(call) {
        let Expr::Lambda(l) = lambda else { continue };
        if let Some(bad) = growing_part(&l.body) {
            return Err(Rejection::new(
                format!(
                    "{} can grow its accumulator at every step ({} in its body); a reduce body \
                     may only do arithmetic and comparisons",
                    excerpt(call),
                    excerpt(bad)
                ),
                "join strings with string_agg over unnest(list), or concatenate lists with \
                 flatten(...); reduce numbers with list_sum, list_max or list_reduce((a, b) -> a + b)",
            ));
        }
    }
    Ok(())
}

/// The first part of a reduce body that could make its result larger than its inputs.
fn growing_part(e: &Expr) -> Option<&Expr> {
    match e {
        Expr::Identifier(_)
        | Expr::CompoundIdentifier(_)
        | Expr::Value(_)
        | Expr::TypedString(_) => None,
        Expr::BinaryOp { left, op, right } => {
            if *op == BinaryOperator::StringConcat {
                Some(e)
            } else {
                growing_part(left).or_else(|| growing_part(right))
            }
        }
        Expr::UnaryOp { expr, .. }
        | Expr::Nested(expr)
        | Expr::Cast { expr, .. }
        | Expr::IsNull(expr)
        | Expr::IsNotNull(expr)
        | Expr::IsTrue(expr)
        | Expr::IsFalse(expr) => growing_part(expr),
        Expr::Between {
            expr, low, high, ..
        } => growing_part(expr)
            .or_else(|| growing_part(low))
            .or_else(|| growing_part(high)),
        Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => operand
            .as_deref()
            .and_then(growing_part)
            .or_else(|| {
                conditions
                    .iter()
                    .find_map(|w| growing_part(&w.condition).or_else(|| growing_part(&w.result)))
            })
            .or_else(|| else_result.as_deref().and_then(growing_part)),
        Expr::Function(f) if REDUCE_SAFE_FUNCTIONS.contains(&lower_name(f).as_str()) => args_of(f)
            .iter()
            .filter_map(unnamed_expr)
            .find_map(growing_part),
        _ => Some(e),
    }
}

/// Edit-distance functions: quadratic in the lengths of their two arguments.
const EDIT_DISTANCES: &[&str] = &["levenshtein", "damerau_levenshtein", "editdist3"];

/// Refuses an edit distance whose argument lengths the guard cannot bound, or whose matrix is
/// over [`MAX_EDIT_CELLS`].
pub(crate) fn check_edit_distance(name: &str, call: &Function) -> Result<(), Rejection> {
    if !EDIT_DISTANCES.contains(&name) {
        return Ok(());
    }
    let hint = format!(
        "cut both arguments to a known length: {name}(left(a, 500), left(b, 500)) \
         (the product of the two lengths may be at most {})",
        show(MAX_EDIT_CELLS)
    );
    let args = args_of(call);
    let mut cells = 1.0;
    for arg in args.iter().take(2) {
        let Some(len) = unnamed_expr(arg).and_then(bounded_length) else {
            return Err(Rejection::new(
                format!(
                    "{name} takes time (and memory) quadratic in its arguments' lengths, and \
                     the length of {} is unknown",
                    excerpt(arg)
                ),
                hint,
            ));
        };
        cells *= len.max(1.0);
    }
    if cells > MAX_EDIT_CELLS {
        return Err(Rejection::new(
            format!(
                "{} compares strings of up to {} x {} characters; at most {} cells are allowed",
                excerpt(call),
                show(
                    args.first()
                        .and_then(unnamed_expr)
                        .and_then(bounded_length)
                        .unwrap_or(0.0)
                ),
                show(
                    args.get(1)
                        .and_then(unnamed_expr)
                        .and_then(bounded_length)
                        .unwrap_or(0.0)
                ),
                show(MAX_EDIT_CELLS)
            ),
            hint,
        ));
    }
    Ok(())
}

/// The most characters a string expression can have, when the guard can tell from the text
/// alone (a column, or a negative length such as `left(x, -1)`, is not a bound).
pub(crate) fn bounded_length(e: &Expr) -> Option<f64> {
    if let Some(s) = string_literal(e) {
        return Some(s.chars().count() as f64);
    }
    let length = |e: &Expr| literal_number(e).filter(|n| n.is_finite() && *n >= 0.0);
    match e {
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => bounded_length(inner),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => Some(bounded_length(left)? + bounded_length(right)?),
        Expr::Substring {
            substring_for: Some(len),
            ..
        } => length(len),
        Expr::Function(f) => {
            let name = lower_name(f);
            let args = args_of(f);
            let arg = |i: usize| args.get(i).and_then(unnamed_expr);
            match name.as_str() {
                "left" | "right" | "lpad" | "rpad" => arg(1).and_then(length),
                "substr" | "substring" if args.len() == 3 => arg(2).and_then(length),
                "repeat" => {
                    let n = arg(1).and_then(length)?;
                    Some(arg(0).and_then(bounded_length)? * n)
                }
                "concat" => args
                    .iter()
                    .map(|a| unnamed_expr(a).and_then(bounded_length))
                    .sum(),
                _ => None,
            }
        }
        _ => None,
    }
}

/// JSON functions that recurse once per nesting level of their input (or, for `json_pretty`,
/// write output quadratic in it): a deeply nested value overflows the stack of the thread
/// running the query and aborts the process, so their inputs must be short.
const NESTING_FUNCTIONS: &[&str] = &[
    "json_structure",
    "json_group_structure",
    "json_contains",
    "json_merge_patch",
    "json_pretty",
];

/// JSON functions whose second argument is a structure they build a type from, recursively.
const STRUCTURE_FUNCTIONS: &[&str] = &["json_transform", "json_transform_strict", "from_json"];

/// The longest input a [`NESTING_FUNCTIONS`] call (or a cast to VARIANT) may take: at most
/// half as many nesting levels, far below what a 2 MB thread stack holds.
pub const MAX_NESTED_INPUT_CHARS: f64 = 4_000.0;

/// The deepest structure argument of `json_transform`.
pub const MAX_STRUCTURE_DEPTH: usize = 32;

/// Refuses a recursive JSON function whose input the guard cannot bound to
/// [`MAX_NESTED_INPUT_CHARS`], and a `json_transform` structure that is not a shallow literal.
pub(crate) fn check_nesting(name: &str, call: &Function) -> Result<(), Rejection> {
    if NESTING_FUNCTIONS.contains(&name) {
        for arg in args_of(call) {
            check_nested_input(name, unnamed_expr(arg), call)?;
        }
    }
    if STRUCTURE_FUNCTIONS.contains(&name)
        && let Some(structure) = args_of(call).get(1)
    {
        let depth = unnamed_expr(structure)
            .and_then(string_literal)
            .map(|s| nesting_depth(&s));
        if depth.is_none_or(|d| d > MAX_STRUCTURE_DEPTH) {
            return Err(Rejection::new(
                format!(
                    "the structure argument of {name} must be a string literal nested at most                      {MAX_STRUCTURE_DEPTH} levels deep, in {}",
                    excerpt(call)
                ),
                format!("write the structure out: {name}(j, '{{\"a\": \"INTEGER\"}}')"),
            ));
        }
    }
    Ok(())
}

/// Refuses an input to a function (or cast) that recurses once per nesting level unless the
/// guard can bound its length to [`MAX_NESTED_INPUT_CHARS`].
pub(crate) fn check_nested_input(
    what: &str,
    arg: Option<&Expr>,
    whole: &impl std::fmt::Display,
) -> Result<(), Rejection> {
    let expr = arg.map_or_else(|| "a named argument".to_string(), excerpt);
    match arg.and_then(bounded_length) {
        Some(n) if n <= MAX_NESTED_INPUT_CHARS => Ok(()),
        _ => Err(Rejection::new(
            format!(
                "{what} recurses once per nesting level of its input, and {} is not known to be \
                 at most {} characters long (a deeply nested value would overflow the query \
                 thread's stack), in {}",
                expr,
                show(MAX_NESTED_INPUT_CHARS),
                excerpt(whole)
            ),
            "read JSON with json_extract / json_extract_string / json_keys / json_type, which \
             do not recurse; or give a short literal",
        )),
    }
}

/// The deepest bracket nesting of a JSON text.
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Which matcher a pattern operator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Matcher {
    /// `LIKE` / `NOT LIKE` / `~~` without ESCAPE: linear unless the pattern has `_`.
    Like,
    /// `ILIKE`, `LIKE ... ESCAPE`, the `*like_escape` functions: always the backtracking one.
    Backtracking,
    /// `GLOB`: `*` and `?`, always the backtracking matcher.
    Glob,
}

/// Refuses a pattern match that can backtrack exponentially, or whose pattern is not a literal.
pub(crate) fn check_pattern(
    operator: &str,
    matcher: Matcher,
    pattern: &Expr,
    whole: &impl std::fmt::Display,
) -> Result<(), Rejection> {
    let hint = "use regexp_matches(text, 'regex') (RE2: linear time), e.g. \
                regexp_matches(symbol, 'launch.*kernel'); or drop `_` from a LIKE pattern \
                (a pattern of literals and % alone is matched in linear time)";
    let Some(text) = string_literal(pattern) else {
        return Err(Rejection::new(
            format!(
                "the pattern of {operator} in {} is not a string literal; a pattern built from \
                 data can make the match take exponential time",
                excerpt(whole)
            ),
            hint,
        ));
    };
    let (many, one) = match matcher {
        Matcher::Glob => ('*', '?'),
        Matcher::Like | Matcher::Backtracking => ('%', '_'),
    };
    let backtracks = matcher != Matcher::Like || text.contains(one);
    if !backtracks {
        return Ok(());
    }
    // A wildcard that more pattern follows makes the matcher try every split point; the
    // last one, at the end, matches at once.
    let trimmed = text.trim_end_matches(many);
    let mut inner = 0;
    let mut previous = None;
    for c in trimmed.chars() {
        if c == many && previous != Some(many) {
            inner += 1;
        }
        previous = Some(c);
    }
    if inner >= 2 {
        return Err(Rejection::new(
            format!(
                "{operator} '{}' backtracks: DuckDB's matcher for it takes time exponential in \
                 its {inner} inner `{many}` wildcards and cannot be interrupted",
                excerpt(&text)
            ),
            hint,
        ));
    }
    Ok(())
}

/// Function forms of the pattern operators (`like_escape`, and DuckDB's operator names called
/// as functions, `"~~"(a, b)`): the operator for messages, and its matcher.
pub(crate) fn pattern_function(name: &str) -> Option<(&'static str, Matcher)> {
    Some(match name {
        "like_escape" => ("LIKE ... ESCAPE", Matcher::Backtracking),
        "not_like_escape" => ("NOT LIKE ... ESCAPE", Matcher::Backtracking),
        "ilike_escape" => ("ILIKE ... ESCAPE", Matcher::Backtracking),
        "not_ilike_escape" => ("NOT ILIKE ... ESCAPE", Matcher::Backtracking),
        "~~" => ("~~ (LIKE)", Matcher::Like),
        "!~~" => ("!~~ (NOT LIKE)", Matcher::Like),
        "~~*" => ("~~* (ILIKE)", Matcher::Backtracking),
        "!~~*" => ("!~~* (NOT ILIKE)", Matcher::Backtracking),
        "~~~" => ("~~~ (GLOB)", Matcher::Glob),
        "!~~~" => ("!~~~ (NOT GLOB)", Matcher::Glob),
        _ => return None,
    })
}

/// The second argument of a call (the pattern of a `*like_escape` function).
pub(crate) fn second_arg(call: &Function) -> Option<&Expr> {
    args_of(call).get(1).and_then(unnamed_expr)
}

pub(crate) fn args_of(f: &Function) -> &[FunctionArg] {
    match &f.args {
        FunctionArguments::List(list) => list.args.as_slice(),
        _ => &[],
    }
}

pub(crate) fn lower_name(f: &Function) -> String {
    f.name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_ascii_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::{Policy, guard};

    fn refused(sql: &str) -> Option<String> {
        let policy = Policy::new(["events", "stack_frames"]);
        guard(sql, &policy, None).err().map(|r| r.reason)
    }

    /// Each measured bomb (DuckDB 1.5.6, in docs/sql-guard.md) is refused, with words that
    /// say why.
    #[test]
    fn measured_bombs_are_refused() {
        for (sql, says) in [
            (
                "SELECT damerau_levenshtein(repeat('a',25000), repeat('b',25000))",
                "cells",
            ),
            ("SELECT levenshtein(comm, 'python') FROM events", "unknown"),
            (
                "SELECT list_transform(range(10000), x -> range(1000000))",
                "lists",
            ),
            (
                "SELECT len(list_transform(range(10000), x -> range(1000000)))",
                "elements",
            ),
            (
                "SELECT list_transform(range(100000), x -> list_transform(range(1000), y -> x + y))",
                "elements",
            ),
            (
                "SELECT repeat('a',60) LIKE '%a%a%a%a%a%a%a%a_b'",
                "backtracks",
            ),
            ("SELECT repeat('a',60) ILIKE '%a%a%b'", "backtracks"),
            ("SELECT repeat('a',60) GLOB '*a*a?b'", "does not parse"),
            ("SELECT 'x' LIKE '%a%b' ESCAPE '\\'", "backtracks"),
            ("SELECT like_escape('x', '%a%b%', '\\')", "backtracks"),
            ("SELECT comm ~~* '%a%b' FROM events", "backtracks"),
            ("SELECT comm LIKE comm FROM events", "not a string literal"),
            ("SELECT range(1000000) FROM events", "per row"),
            ("SELECT repeat('x', 100000) FROM events", "per row"),
            (
                "SELECT string_split(repeat('a,', 50000), ',') FROM events",
                "per row",
            ),
            (
                "SELECT regexp_replace(repeat('a', 100000), '', repeat('b', 10000), 'g')",
                "replacement",
            ),
            (
                "SELECT replace(repeat('a', 100000), 'a', repeat('b', 100000))",
                "replacement",
            ),
            (
                "SELECT array_to_string(range(1000000), repeat('x', 100000))",
                "separator",
            ),
            (
                "SELECT length(list_reduce(list_transform(range(64), x -> 'ab'), (a, b) -> a || a))",
                "accumulator",
            ),
            (
                "SELECT list_reduce(range(10), (a, b) -> [a, a])",
                "accumulator",
            ),
            (
                "SELECT map_from_entries(list_transform(range(1000000), x -> (x, x)))",
                "elements",
            ),
            (
                "SELECT quantile_cont(duration, list_transform(range(1000000), x -> x / 1e6)) FROM events",
                "elements",
            ),
            (
                "SELECT list_filter(range(100000), x -> len(range(100000)) > 0)",
                "lists",
            ),
            ("SELECT list(range(1000)) FROM events", "aggregate"),
            (
                "SELECT string_agg(repeat('#', 100), '') FROM events",
                "aggregate",
            ),
        ] {
            let reason = refused(sql).unwrap_or_else(|| panic!("accepted: {sql}"));
            assert!(reason.contains(says), "{sql}: {reason}");
        }
    }

    /// What agents ask every day stays allowed.
    #[test]
    fn ordinary_queries_pass() {
        for sql in [
            "SELECT comm FROM events WHERE comm LIKE '%python%'",
            "SELECT comm FROM events WHERE comm LIKE 'py_hon%'",
            "SELECT comm FROM events WHERE comm NOT LIKE '%a%b%c%d%'",
            "SELECT comm FROM events WHERE comm ILIKE '%vllm%'",
            "SELECT comm FROM events WHERE comm ILIKE '%engine_core%'",
            "SELECT comm FROM events WHERE comm SIMILAR TO '.*a.*b.*c'",
            "SELECT levenshtein(left(comm, 100), 'python') FROM events",
            "SELECT damerau_levenshtein('kitten', 'sitting')",
            "SELECT repeat('#', least(duration // 1000000, 80)) FROM events",
            "SELECT lpad(comm, 20, ' ') FROM events",
            "SELECT replace(comm, ' ', '_') FROM events",
            "SELECT array_to_string(list(DISTINCT comm), ', ') FROM events",
            "SELECT list_transform(list(duration), d -> d / 1000) FROM events",
            "SELECT list_transform(list(comm), c -> c || ' ' || pid) FROM events",
            "SELECT list_filter(list(comm), c -> c LIKE '%py%') FROM events",
            "SELECT list_reduce(list(duration), (a, b) -> greatest(a, b)) FROM events",
            "SELECT list_transform(range(100), x -> range(100))",
            "SELECT unnest(range(100000))",
            "SELECT * FROM range(1000000) t(i)",
            "SELECT i, repeat('=', 40) FROM range(10) t(i)",
            "SELECT list(comm), string_agg(DISTINCT comm, ', ') FROM events",
            "SELECT list(range(10))",
        ] {
            assert_eq!(refused(sql), None, "{sql}");
        }
    }
}
