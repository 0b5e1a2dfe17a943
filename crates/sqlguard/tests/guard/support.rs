//! Test support shared by the integration tests and the fuzz target (which includes this file
//! by path): the store's allowlist, and an independent re-check of accepted SQL written against
//! sqlparser's own helpers rather than the guard's walk: whatever the guard accepts must pass it.

use std::collections::HashSet;
use std::ops::ControlFlow;

use causeway_sqlguard::Policy;
use causeway_sqlguard::functions::{ALLOWED_TABLE_FUNCTIONS, blocked_function};
use sqlparser::ast::{
    Expr, Query, SetExpr, Statement, TableFactor, Visit, Visitor, visit_expressions,
    visit_relations, visit_statements,
};
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::Parser;

/// The trace store's relations: the allowlist the store passes to the guard (the same file).
pub const STORE_RELATIONS: &[&str] = &include!("../../../store/src/relations.in");

/// The policy the store uses, with default limits.
pub fn store_policy() -> Policy {
    Policy::new(STORE_RELATIONS)
}

/// Checks that `sql` (the guard's output) is one read-only query touching only allowed
/// relations and no blocked function, table function, URL, recursion or nested statement.
pub fn check_safe(sql: &str, policy: &Policy) -> Result<(), String> {
    let statements =
        Parser::parse_sql(&DuckDbDialect {}, sql).map_err(|e| format!("reparse failed: {e}"))?;
    let [statement] = statements.as_slice() else {
        return Err(format!("{} statements", statements.len()));
    };
    let expected_statements = match statement {
        Statement::Query(_) => 1,
        Statement::Explain { statement, .. } if matches!(**statement, Statement::Query(_)) => 2,
        other => return Err(format!("not a query: {other}")),
    };
    let mut count = 0;
    let _ = visit_statements(statement, |_| {
        count += 1;
        ControlFlow::<()>::Continue(())
    });
    if count != expected_statements {
        return Err(format!("{count} statements nested in the tree"));
    }

    let mut shape = Shape::default();
    if let ControlFlow::Break(problem) = statement.visit(&mut shape) {
        return Err(problem);
    }

    let relations = visit_relations(statement, |name| {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
            .collect();
        let is_cte = parts.len() == 1 && shape.ctes.contains(&parts[0]);
        let is_table_function = parts.last().is_some_and(|last| {
            ALLOWED_TABLE_FUNCTIONS.contains(&last.as_str()) && shape.table_functions.contains(last)
        });
        if is_cte || is_table_function || policy.allows_relation(&name.to_string()) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(format!("relation {name} is not allowed"))
        }
    });
    if let ControlFlow::Break(problem) = relations {
        return Err(problem);
    }

    let expressions = visit_expressions(statement, |expr| match expr {
        Expr::Function(f) => {
            let last = f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.clone())
                .unwrap_or_default();
            if !last.is_ascii() || blocked_function(&last).is_some() {
                ControlFlow::Break(format!("function {} is blocked", f.name))
            } else {
                ControlFlow::Continue(())
            }
        }
        Expr::Value(v) => match v.value.clone().into_string() {
            Some(s) if is_url(&s) => ControlFlow::Break(format!("URL literal {s}")),
            _ => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    });
    if let ControlFlow::Break(problem) = expressions {
        return Err(problem);
    }
    Ok(())
}

/// A crude URL test, deliberately not the guard's.
fn is_url(s: &str) -> bool {
    let s = s.trim().to_ascii_lowercase();
    s.starts_with("file:")
        || s.find("://").is_some_and(|i| {
            i > 0
                && s[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
}

/// CTE names, table-function names, and shape problems collected in one pass.
#[derive(Default)]
struct Shape {
    ctes: HashSet<String>,
    table_functions: HashSet<String>,
}

impl Visitor for Shape {
    type Break = String;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
        if let Some(with) = &query.with {
            if with.recursive {
                return ControlFlow::Break("WITH RECURSIVE".into());
            }
            for cte in &with.cte_tables {
                self.ctes.insert(cte.alias.name.value.to_lowercase());
            }
        }
        body_is_read_only(&query.body)
    }

    fn pre_visit_select(&mut self, select: &sqlparser::ast::Select) -> ControlFlow<String> {
        if select.into.is_some() {
            return ControlFlow::Break("SELECT INTO".into());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<String> {
        let function = match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            }
            | TableFactor::Function { name, .. } => Some(name),
            TableFactor::Table { args: None, .. }
            | TableFactor::Derived { .. }
            | TableFactor::UNNEST { .. }
            | TableFactor::NestedJoin { .. }
            | TableFactor::Pivot { .. }
            | TableFactor::Unpivot { .. } => None,
            other => return ControlFlow::Break(format!("table factor {other}")),
        };
        if let Some(name) = function {
            let last = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase())
                .unwrap_or_default();
            if !ALLOWED_TABLE_FUNCTIONS.contains(&last.as_str()) {
                return ControlFlow::Break(format!("table function {name}"));
            }
            self.table_functions.insert(last);
        }
        ControlFlow::Continue(())
    }
}

/// Whether a query body is made only of SELECT, VALUES and nested queries.
fn body_is_read_only(body: &SetExpr) -> ControlFlow<String> {
    match body {
        SetExpr::Select(_) | SetExpr::Query(_) | SetExpr::Values(_) => ControlFlow::Continue(()),
        SetExpr::SetOperation { left, right, .. } => {
            body_is_read_only(left)?;
            body_is_read_only(right)
        }
        other => ControlFlow::Break(format!("body {other}")),
    }
}
