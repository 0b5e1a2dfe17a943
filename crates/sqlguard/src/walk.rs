//! The AST walk: one sqlparser `Visitor` over the whole statement that checks every query,
//! SELECT, table factor, relation, function call and literal, with CTE scoping.
//!
//! The visitor derive in sqlparser descends into every field of every node, so nothing is
//! skipped: subqueries in expressions, CTE bodies, lateral and derived tables, join conditions,
//! ORDER BY, QUALIFY, window specs, lambdas, PIVOT sources. The checks are fail-closed: table
//! factors, set-expression bodies, join operators and query clauses are matched exhaustively
//! and anything the guard does not know to be safe is refused; a relation name is accepted
//! only where a table factor approved it first.
//!
//! CTE scoping follows SQL: a CTE name is visible in the main body of its query, in later CTEs
//! of the same WITH, and in everything nested inside those; not in its own body (a
//! non-recursive CTE that names itself reads the real relation of that name, which then has to
//! be allowed) and not outside its query. Only unqualified names can refer to a CTE.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArguments, LambdaFunction, ObjectName,
    ObjectNamePart, OneOrManyWithParens, Query, Select, Statement, TableFactor, ValueWithSpan,
    Visit, Visitor,
};

use crate::bombs;
use crate::clauses::{
    CteScope, check_joins, check_query_clauses, check_select_clauses, check_with, is_unconditioned,
};
use crate::costly::{self, Matcher, Scope};
use crate::cross::{self, CrossItem};
use crate::functions::{ALLOWED_TABLE_FUNCTIONS, blocked_function, is_allowed_table_function};
use crate::names::{check_value, function_name, identifiers, looks_like_path};
use crate::policy::{Policy, table_part};
use crate::rejection::{QUERY_HINT, Rejection, excerpt};
use crate::shape::Shape;
use crate::sizes::{self, Columns, DATA_STRING_CHARS, MAX_VALUE_CHARS};
use crate::statement::statement_label;

/// Schemas whose functions and relations are the catalog, whatever their name.
const CATALOG_SCHEMAS: &[&str] = &["information_schema", "pg_catalog"];

/// Checks every node of `statement` (already known to be a query or EXPLAIN of one).
pub(crate) fn check(statement: &Statement, policy: &Policy) -> Result<(), Rejection> {
    let mut walk = Walk {
        policy,
        statements: allowed_statements(statement),
        frames: Vec::new(),
        approved_relations: HashSet::new(),
        selects: Vec::new(),
        lambda_lists: HashMap::new(),
        lambdas: Vec::new(),
        shape: Shape::default(),
    };
    match statement.visit(&mut walk) {
        ControlFlow::Break(rejection) => Err(*rejection),
        ControlFlow::Continue(()) if walk.frames.is_empty() => Ok(()),
        ControlFlow::Continue(()) => Err(Rejection::internal("query scopes did not close")),
    }
}

/// The statement itself and, for EXPLAIN, the explained query: the only statements allowed.
fn allowed_statements(statement: &Statement) -> Vec<usize> {
    let mut allowed = vec![address(statement)];
    if let Statement::Explain { statement, .. } = statement {
        allowed.push(address(&**statement));
    }
    allowed
}

/// The result of one visit step: continue, or stop with a rejection.
type Flow = ControlFlow<Box<Rejection>>;

/// Stops the walk with `rejection`.
fn stop(rejection: Rejection) -> Flow {
    ControlFlow::Break(Box::new(rejection))
}

/// Converts a check result into a visit step.
fn flow(result: Result<(), Rejection>) -> Flow {
    match result {
        Ok(()) => ControlFlow::Continue(()),
        Err(rejection) => stop(rejection),
    }
}

/// A node's address, used to recognise the same node when the visitor reaches it again.
pub(crate) fn address<T>(node: &T) -> usize {
    std::ptr::from_ref(node).addr()
}

/// The CTEs a query defines, and how many of them are visible at the current point.
#[derive(Debug)]
struct Frame {
    /// Address of the query that owns this frame.
    query: usize,
    /// The query's CTEs, in definition order.
    ctes: Vec<CteScope>,
    /// How many of `ctes` (a prefix) are in scope right now.
    visible: usize,
}
/// The visitor state.
struct Walk<'p> {
    policy: &'p Policy,
    /// Addresses of the statements allowed in this tree.
    statements: Vec<usize>,
    /// One frame per query being visited, innermost last.
    frames: Vec<Frame>,
    /// Addresses of relation names approved by their table factor.
    approved_relations: HashSet<usize>,
    /// One entry per SELECT being visited, innermost last: whether it reads a FROM clause, and
    /// the longest value its FROM items hold.
    selects: Vec<(bool, f64)>,
    /// Lambda expressions (by address) seen as arguments, with the length of their list.
    lambda_lists: HashMap<usize, f64>,
    /// The lambdas and collecting aggregates being visited, innermost last: (address, how
    /// many times they run what they enclose, whether it is an aggregate).
    lambdas: Vec<(usize, f64, bool)>,
    /// Counts that bound the work of DuckDB's planner and the recursion of every layer.
    shape: Shape,
}

impl Visitor for Walk<'_> {
    type Break = Box<Rejection>;

    fn pre_visit_statement(&mut self, statement: &Statement) -> Flow {
        if self.statements.contains(&address(statement)) {
            return ControlFlow::Continue(());
        }
        stop(Rejection::new(
            format!(
                "a {} statement inside the query is not allowed",
                statement_label(statement)
            ),
            QUERY_HINT,
        ))
    }

    fn pre_visit_query(&mut self, query: &Query) -> Flow {
        let this = address(query);
        if let Some(frame) = self.frames.last_mut()
            && let Some(k) = frame.ctes.iter().position(|cte| cte.body == this)
        {
            // Inside the body of CTE k: only the CTEs defined before it are visible.
            frame.visible = k;
        }
        if let Err(rejection) = check_query_clauses(query).and_then(|()| self.shape.query(query)) {
            return stop(rejection);
        }
        let ctes = match &query.with {
            Some(with) => match check_with(with) {
                Ok(ctes) => ctes,
                Err(rejection) => return stop(rejection),
            },
            None => Vec::new(),
        };
        self.frames.push(Frame {
            query: this,
            ctes,
            visible: 0,
        });
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &Query) -> Flow {
        let this = address(query);
        match self.frames.pop() {
            Some(frame) if frame.query == this => {}
            _ => return stop(Rejection::internal("query scopes are unbalanced")),
        }
        let chars = sizes::query_chars(query, &|name| self.cte_chars(name));
        if chars.is_nan() || chars > MAX_VALUE_CHARS {
            return stop(Rejection::new(
                format!(
                    "{} can compute values of about {} characters or elements (a value \
                     generated, repeated or concatenated with itself); at most {} are allowed",
                    excerpt(query),
                    bombs::show(chars),
                    bombs::show(MAX_VALUE_CHARS)
                ),
                "build shorter values: cut them with left(x, n), and do not concatenate a \
                 column with itself from one CTE to the next",
            ));
        }
        if let Some(frame) = self.frames.last_mut()
            && let Some(k) = frame.ctes.iter().position(|cte| cte.body == this)
        {
            // After the body of CTE k, it and the ones before it are visible.
            frame.visible = k + 1;
            frame.ctes[k].chars = Some(chars);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> Flow {
        let chars = sizes::from_chars(&select.from, &|name| self.cte_chars(name));
        self.selects.push((!select.from.is_empty(), chars));
        flow(check_select_clauses(select).and_then(|()| self.shape.select(select)))
    }

    fn post_visit_select(&mut self, select: &Select) -> Flow {
        self.selects.pop();
        // After the FROM items were checked, so a refused relation is named first.
        flow(self.check_cross_product(select))
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> Flow {
        flow(
            self.shape
                .table_factor()
                .and_then(|()| self.check_table_factor(factor)),
        )
    }

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> Flow {
        if self.approved_relations.contains(&address(relation)) {
            return ControlFlow::Continue(());
        }
        stop(Rejection::new(
            format!(
                "relation {} appears where the guard does not allow one",
                excerpt(relation)
            ),
            QUERY_HINT,
        ))
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> Flow {
        if let Err(rejection) = self.shape.enter_expr() {
            return stop(rejection);
        }
        match expr {
            Expr::Function(function) => {
                for (lambda, items) in costly::lambdas(function) {
                    self.lambda_lists.insert(address(lambda), items);
                }
                let checked = self.check_function_call(function);
                let name = costly::lower_name(function);
                if checked.is_ok()
                    && self.scope().per_row
                    && costly::COLLECTING_AGGREGATES.contains(&name.as_str())
                {
                    self.lambdas
                        .push((address(expr), crate::cross::NOMINAL_TABLE_ROWS, true));
                }
                flow(checked)
            }
            Expr::Lambda(lambda) => {
                let this = address(expr);
                let items = self
                    .lambda_lists
                    .get(&this)
                    .copied()
                    .unwrap_or(costly::UNKNOWN_LIST_ELEMENTS);
                let checked = self.check_lambda_body(lambda, items);
                self.lambdas.push((this, items, false));
                flow(checked)
            }
            Expr::Cast {
                expr: operand,
                data_type,
                ..
            } if data_type
                .to_string()
                .to_ascii_uppercase()
                .contains("VARIANT") =>
            {
                flow(costly::check_nested_input(
                    "a cast to VARIANT",
                    Some(operand),
                    expr,
                ))
            }
            Expr::Like {
                pattern,
                escape_char,
                ..
            } => {
                let (operator, matcher) = match escape_char {
                    None => ("LIKE", Matcher::Like),
                    Some(_) => ("LIKE ... ESCAPE", Matcher::Backtracking),
                };
                flow(costly::check_pattern(operator, matcher, pattern, expr))
            }
            Expr::ILike { pattern, .. } => flow(costly::check_pattern(
                "ILIKE",
                Matcher::Backtracking,
                pattern,
                expr,
            )),
            Expr::BinaryOp { op, right, .. } => {
                let matcher = match op {
                    BinaryOperator::Glob => Some(("GLOB", Matcher::Glob)),
                    BinaryOperator::PGLikeMatch | BinaryOperator::PGNotLikeMatch => {
                        Some(("~~", Matcher::Like))
                    }
                    BinaryOperator::PGILikeMatch | BinaryOperator::PGNotILikeMatch => {
                        Some(("~~*", Matcher::Backtracking))
                    }
                    _ => None,
                };
                match matcher {
                    Some((operator, matcher)) => {
                        flow(costly::check_pattern(operator, matcher, right, expr))
                    }
                    None => ControlFlow::Continue(()),
                }
            }
            _ => ControlFlow::Continue(()),
        }
    }

    fn post_visit_expr(&mut self, expr: &Expr) -> Flow {
        self.shape.leave_expr();
        if matches!(expr, Expr::Lambda(_) | Expr::Function(_))
            && self
                .lambdas
                .last()
                .is_some_and(|(a, ..)| *a == address(expr))
        {
            self.lambdas.pop();
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_value(&mut self, value: &ValueWithSpan) -> Flow {
        if let Some(text) = value.value.clone().into_string()
            && let Some(new) = self.policy.renamed(&text)
        {
            return stop(Rejection::new(
                format!(
                    "'{}' is another tool's name: this store calls it '{new}', so the query \
                     would match nothing",
                    excerpt(&text)
                ),
                format!("write '{new}' (the ops table lists every op with its reference name)"),
            ));
        }
        flow(check_value(&value.value))
    }
}

impl Walk<'_> {
    /// The cross-join bound over a SELECT's FROM items.
    fn check_cross_product(&self, select: &Select) -> Result<(), Rejection> {
        let mut items = Vec::new();
        for table in &select.from {
            items.push(self.cross_item(&table.relation));
            for join in &table.joins {
                if is_unconditioned(&join.join_operator) {
                    items.push(self.cross_item(&join.relation));
                }
            }
        }
        cross::check_cross_product(&items, select.selection.is_some())
    }

    /// How a FROM operand counts in a cross product.
    fn cross_item(&self, factor: &TableFactor) -> CrossItem {
        match factor {
            TableFactor::Table {
                name, args: None, ..
            } => {
                let cte = match name.0.as_slice() {
                    [single] => single.as_ident().and_then(|i| self.visible_cte(&i.value)),
                    _ => None,
                };
                match cte.and_then(|c| c.rows) {
                    Some(rows) => CrossItem::Bounded(name.to_string(), rows),
                    None => CrossItem::Table(name.to_string()),
                }
            }
            TableFactor::Table {
                name,
                args: Some(args),
                ..
            } => series_item(name, &args.args, factor),
            TableFactor::Function { name, args, .. } => series_item(name, args, factor),
            _ => CrossItem::Other,
        }
    }

    /// Exhaustive over table factors: plain relations, allowed table functions, subqueries,
    /// UNNEST, nested joins and PIVOT/UNPIVOT pass; everything else is refused.
    fn check_table_factor(&mut self, factor: &TableFactor) -> Result<(), Rejection> {
        match factor {
            TableFactor::Table {
                name,
                alias: _,
                args,
                with_hints,
                version,
                with_ordinality: _,
                partitions,
                json_path,
                sample: _,
                index_hints,
            } => {
                if !with_hints.is_empty()
                    || version.is_some()
                    || !partitions.is_empty()
                    || json_path.is_some()
                    || !index_hints.is_empty()
                {
                    return Err(Rejection::unsupported(
                        format!(
                            "a table hint, time travel, partition or JSON path on {}",
                            excerpt(name)
                        ),
                        "name the table alone: FROM events e",
                    ));
                }
                match args {
                    None => self.check_relation(name)?,
                    Some(args) => {
                        if args.settings.is_some() {
                            return Err(Rejection::unsupported(
                                "SETTINGS in a table function call",
                                "drop the SETTINGS clause",
                            ));
                        }
                        self.check_table_function(name, &args.args, factor)?;
                    }
                }
                self.approved_relations.insert(address(name));
                Ok(())
            }
            TableFactor::Function { name, args, .. } => {
                self.check_table_function(name, args, factor)
            }
            TableFactor::Derived { .. }
            | TableFactor::UNNEST { .. }
            | TableFactor::Pivot { .. }
            | TableFactor::Unpivot { .. } => Ok(()),
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => check_joins(table_with_joins),
            TableFactor::TableFunction { .. } => {
                Err(table_function_rejection(self.policy, "TABLE(...)"))
            }
            TableFactor::JsonTable { .. }
            | TableFactor::OpenJsonTable { .. }
            | TableFactor::XmlTable { .. }
            | TableFactor::MatchRecognize { .. }
            | TableFactor::SemanticView { .. }
            | TableFactor::UnpivotExpr { .. } => Err(Rejection::unsupported(
                format!("the FROM item {}", excerpt(factor)),
                format!(
                    "read the trace store's tables ({}) with joins, subqueries, unnest or range",
                    self.policy.relation_list()
                ),
            )),
        }
    }

    /// A relation in FROM: a visible CTE (unqualified only) or an allowed store table.
    fn check_relation(&self, name: &ObjectName) -> Result<(), Rejection> {
        let idents = identifiers(name)?;
        if let Some(literal) = idents.iter().find(|i| i.quote_style == Some('\'')) {
            return Err(Rejection::new(
                format!(
                    "the string literal '{}' is used as a table: DuckDB would read it as a file, \
                     which is not allowed",
                    excerpt(&literal.value)
                ),
                format!(
                    "read one of the trace store's tables: {}",
                    self.policy.relation_list()
                ),
            ));
        }
        if let Some(path) = idents.iter().find(|i| looks_like_path(&i.value)) {
            return Err(Rejection::new(
                format!(
                    "relation \"{}\" looks like a file path or URL; files and URLs cannot be read",
                    excerpt(&path.value)
                ),
                format!(
                    "read one of the trace store's tables: {}",
                    self.policy.relation_list()
                ),
            ));
        }
        if let [single] = idents.as_slice()
            && self.cte_visible(&single.value)
        {
            return Ok(());
        }
        let parts: Vec<&str> = idents.iter().map(|i| i.value.as_str()).collect();
        let hint = format!(
            "read one of the trace store's tables ({}), unqualified or as main.<table>, or a \
             CTE defined earlier in the same WITH",
            self.policy.relation_list()
        );
        match table_part(&parts) {
            Ok(table) if self.policy.allows_table(&table) => Ok(()),
            Ok(_) => Err(Rejection::new(
                format!(
                    "relation {} is not one of the trace store's tables",
                    excerpt(name)
                ),
                hint,
            )),
            Err(qualifier) => {
                let catalog = CATALOG_SCHEMAS
                    .iter()
                    .any(|s| qualifier.to_lowercase().contains(s));
                let reason = if catalog {
                    format!(
                        "relation {} is in the catalog schema {qualifier}, which is not readable",
                        excerpt(name)
                    )
                } else {
                    format!(
                        "relation {} is qualified with {qualifier}; only the trace store's own \
                         tables (schema main) can be read",
                        excerpt(name)
                    )
                };
                Err(Rejection::new(reason, hint))
            }
        }
    }

    /// Whether `name` is a CTE in scope at this point of the walk.
    fn cte_visible(&self, name: &str) -> bool {
        self.visible_cte(name).is_some()
    }

    /// The innermost CTE called `name` in scope at this point of the walk.
    fn visible_cte(&self, name: &str) -> Option<&CteScope> {
        let lower = name.to_lowercase();
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.ctes[..f.visible].iter().find(|cte| cte.name == lower))
    }

    /// A function called in FROM: only unnest/range/generate_series, with bounded series.
    fn check_table_function(
        &self,
        name: &ObjectName,
        args: &[FunctionArg],
        factor: &TableFactor,
    ) -> Result<(), Rejection> {
        let function = function_name(name)?;
        let lower = function.to_ascii_lowercase();
        if let Some(danger) = blocked_function(&lower) {
            return Err(Rejection::new(
                format!(
                    "table function {function} {} and is not allowed",
                    danger.describe()
                ),
                danger.hint(self.policy),
            ));
        }
        if !is_allowed_table_function(&lower) {
            return Err(table_function_rejection(
                self.policy,
                &format!("table function {function}"),
            ));
        }
        if bombs::is_series(&lower) {
            bombs::series_rows(&lower, args, factor)?;
        }
        Ok(())
    }

    /// A scalar (or aggregate, or window) call: not blocked, ASCII, bounded.
    fn check_function_call(&self, function: &Function) -> Result<(), Rejection> {
        let name = function_name(&function.name)?;
        let lower = name.to_ascii_lowercase();
        if let Some(danger) = blocked_function(&lower) {
            return Err(Rejection::new(
                format!("function {name} {} and is not allowed", danger.describe()),
                danger.hint(self.policy),
            ));
        }
        let qualifiers = &function.name.0[..function.name.0.len() - 1];
        if let Some(schema) = qualifiers.iter().find_map(|part| {
            part.as_ident().filter(|i| {
                CATALOG_SCHEMAS
                    .iter()
                    .any(|s| i.value.eq_ignore_ascii_case(s))
            })
        }) {
            return Err(Rejection::new(
                format!(
                    "function {} is in the catalog schema {} and is not allowed",
                    excerpt(&function.name),
                    schema.value
                ),
                "call DuckDB's built-in functions by their plain name",
            ));
        }
        if !matches!(function.parameters, FunctionArguments::None) {
            return Err(Rejection::unsupported(
                format!("the parametric call {}", excerpt(function)),
                "call the function with one argument list",
            ));
        }
        let columns = Columns {
            chars: self.column_chars(),
            free: &[],
            cte: &|name| self.cte_chars(name),
        };
        bombs::check_scalar_call(&lower, function, self.scope(), &columns)
    }

    /// The longest value a column read at this point can hold: the longest FROM item of the
    /// enclosing SELECTs (store tables count [`DATA_STRING_CHARS`]).
    fn column_chars(&self) -> f64 {
        self.selects
            .iter()
            .map(|(_, chars)| *chars)
            .fold(DATA_STRING_CHARS, f64::max)
    }

    /// The size bound of the CTE called `name` in scope here, once its body was checked.
    fn cte_chars(&self, name: &str) -> Option<f64> {
        self.visible_cte(name).and_then(|c| c.chars)
    }

    /// A lambda runs its body once per element: what the body returns beyond its own
    /// parameters (a captured column, a generated value) is multiplied by the list's length.
    fn check_lambda_body(&self, lambda: &LambdaFunction, items: f64) -> Result<(), Rejection> {
        let params: Vec<String> = match &lambda.params {
            OneOrManyWithParens::One(p) => vec![p.name.value.clone()],
            OneOrManyWithParens::Many(ps) => ps.iter().map(|p| p.name.value.clone()).collect(),
        };
        let columns = Columns {
            chars: self.column_chars(),
            free: &params,
            cte: &|name| self.cte_chars(name),
        };
        let each = sizes::value_chars(&lambda.body, &columns);
        if items >= costly::UNKNOWN_LIST_ELEMENTS && each <= sizes::DATA_COLLECTED_CHARS {
            // A list read from the data, mapped to values of a few columns: as long as the
            // data, like collecting those values with list().
            return Ok(());
        }
        let scope = self.scope();
        let total = each * items * scope.multiplier;
        let budget = scope.budget(bombs::MAX_GENERATED_LENGTH);
        if each > 0.0 && (total.is_nan() || total > budget) {
            return Err(Rejection::new(
                format!(
                    "the lambda {} returns a value of up to {} characters or elements, once per \
                     element of lists of {} elements{}: about {} in all; at most {} are allowed",
                    excerpt(lambda),
                    bombs::show(each),
                    bombs::show(items),
                    scope.describe(),
                    bombs::show(total),
                    bombs::show(budget)
                ),
                "return something small from the lambda (a number, a short left(x, n)), or \
                 unnest the list and join instead",
            ));
        }
        Ok(())
    }

    /// How often a call at the current point of the walk is evaluated.
    fn scope(&self) -> Scope {
        Scope {
            per_row: self.selects.iter().any(|(has_from, _)| *has_from),
            multiplier: self.lambdas.iter().map(|(_, n, _)| *n).product(),
            collected: self.lambdas.iter().any(|(.., aggregate)| *aggregate),
        }
    }
}

/// The rejection for a function in FROM that is not on the allowed list.
fn table_function_rejection(policy: &Policy, what: &str) -> Rejection {
    Rejection::new(
        format!(
            "{what} is not allowed in FROM: only {} may be called there",
            ALLOWED_TABLE_FUNCTIONS.join(", ")
        ),
        format!(
            "read the trace store's tables ({}); unnest(list), range(n) and \
             generate_series(a, b) with literal bounds can generate rows",
            policy.relation_list()
        ),
    )
}

/// The size of a series table function for the cross-join bound.
fn series_item(name: &ObjectName, args: &[FunctionArg], factor: &TableFactor) -> CrossItem {
    let lower = name
        .0
        .last()
        .and_then(ObjectNamePart::as_ident)
        .map(|i| i.value.to_ascii_lowercase())
        .unwrap_or_default();
    if !bombs::is_series(&lower) {
        return CrossItem::Other;
    }
    match bombs::series_rows(&lower, args, factor) {
        Ok(rows) => CrossItem::Bounded(excerpt(factor), rows),
        Err(_) => CrossItem::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::parse_one;

    fn walk(sql: &str) -> Result<(), Rejection> {
        let policy = Policy::new(["events", "ops", "processes"]);
        check(&parse_one(sql).unwrap(), &policy)
    }

    fn reason(sql: &str) -> String {
        walk(sql).unwrap_err().reason
    }

    #[test]
    fn cte_scoping() {
        assert!(walk("WITH a AS (SELECT 1) SELECT * FROM a").is_ok());
        assert!(walk("WITH a AS (SELECT 1), b AS (SELECT * FROM a) SELECT * FROM b").is_ok());
        assert!(
            reason("WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a")
                .contains("relation b is not one of")
        );
        assert!(reason("WITH secret AS (SELECT * FROM secret) SELECT 1").contains("secret"));
        assert!(
            reason("SELECT * FROM (WITH s AS (SELECT 1) SELECT * FROM s) x, s")
                .contains("relation s is not")
        );
        assert!(reason("WITH s AS (SELECT 1) SELECT * FROM main.s").contains("main.s"));
        assert!(
            walk("WITH s AS (SELECT 1) SELECT (SELECT count(*) FROM s), * FROM events").is_ok()
        );
        assert!(walk("WITH events AS (SELECT * FROM events) SELECT * FROM events").is_ok());
    }

    #[test]
    fn nested_statements_are_refused() {
        assert!(
            reason("WITH x AS (DELETE FROM events RETURNING *) SELECT * FROM x")
                .contains("DELETE inside a query")
        );
    }

    #[test]
    fn relations_need_approval() {
        assert!(walk("SELECT * FROM events e JOIN ops o USING (op_id)").is_ok());
        assert!(reason("SELECT * FROM information_schema.tables").contains("catalog schema"));
        assert!(reason("SELECT * FROM 'x.csv'").contains("string literal 'x.csv'"));
        assert!(reason("SELECT * FROM \"/etc/passwd\"").contains("looks like a file path"));
    }

    #[test]
    fn functions() {
        assert!(reason("SELECT getenv('HOME')").starts_with("function getenv reads"));
        assert!(reason("SELECT * FROM main.read_csv('x')").starts_with("table function read_csv"));
        assert!(
            reason("SELECT * FROM repeat_row(1, num_rows := 5)").contains("not allowed in FROM")
        );
        assert!(reason("SELECT reаd_csv('x')").contains("non-ASCII"));
        assert!(reason("SELECT pg_catalog.lower('x')").contains("catalog schema"));
        assert!(walk("SELECT * FROM range(10) t(i), unnest([1, 2]) u(x)").is_ok());
    }

    #[test]
    fn cross_joins() {
        assert!(reason("SELECT count(*) FROM events a, events b").contains("cross join"));
        assert!(
            reason("SELECT count(*) FROM events a JOIN events b ON true").contains("cross join")
        );
        assert!(walk("SELECT count(*) FROM events a, events b WHERE a.pid = b.pid").is_ok());
        assert!(
            reason("SELECT count(*) FROM range(1000000) a, range(1000000) b WHERE true")
                .contains("cross join")
        );
    }
}
