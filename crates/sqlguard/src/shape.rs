//! Bounds on the shape of a query: how many CTEs, how many relations one SELECT joins, how
//! many table references in all, and how deeply expressions nest. DuckDB's binder and planner
//! recurse through CTE chains and expressions (a chain of 400 CTEs overflowed the query
//! thread's stack and aborted the process), and its join-order search grows so fast with the
//! relations of one join that planning a 300-way self-join did not answer its interrupt; the
//! guard's own walk and rendering recurse too. Over a bound the query is refused, fail-closed.

use sqlparser::ast::{Query, Select, TableFactor, TableWithJoins};

use crate::rejection::Rejection;

/// The most CTEs one statement may define, at every level together.
pub const MAX_CTES: usize = 64;

/// The most relations one SELECT may join (FROM items and JOIN operands, nested joins
/// included).
pub const MAX_JOINED_RELATIONS: usize = 32;

/// The most table references (tables, CTEs, subqueries, series, unnest) in one statement.
pub const MAX_TABLE_FACTORS: usize = 128;

/// The deepest nesting of expressions (`a OR b OR c ...` nests one level per operator).
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// Counts kept while the walk visits a statement.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    ctes: usize,
    table_factors: usize,
    depth: usize,
}

impl Shape {
    /// A query: counts its CTEs.
    pub(crate) fn query(&mut self, query: &Query) -> Result<(), Rejection> {
        self.ctes += query.with.as_ref().map_or(0, |w| w.cte_tables.len());
        if self.ctes > MAX_CTES {
            return Err(Rejection::new(
                format!(
                    "the query defines more than {MAX_CTES} CTEs; DuckDB plans a chain of CTEs \
                     recursively, so at most {MAX_CTES} are allowed"
                ),
                "combine steps into fewer CTEs (one CTE can compute several columns), or send \
                 several smaller queries",
            ));
        }
        Ok(())
    }

    /// A SELECT: bounds the relations it joins.
    pub(crate) fn select(&mut self, select: &Select) -> Result<(), Rejection> {
        let joined: usize = select.from.iter().map(relations).sum();
        if joined > MAX_JOINED_RELATIONS {
            return Err(Rejection::new(
                format!(
                    "one SELECT joins {joined} relations; DuckDB's join planning grows too fast \
                     with their number to be interrupted, so at most {MAX_JOINED_RELATIONS} are \
                     allowed"
                ),
                "join fewer relations at once: aggregate in CTEs first and join their results",
            ));
        }
        Ok(())
    }

    /// A table reference anywhere in the statement.
    pub(crate) fn table_factor(&mut self) -> Result<(), Rejection> {
        self.table_factors += 1;
        if self.table_factors > MAX_TABLE_FACTORS {
            return Err(Rejection::new(
                format!(
                    "the query reads more than {MAX_TABLE_FACTORS} relations in all (tables, \
                     CTEs, subqueries); at most {MAX_TABLE_FACTORS} are allowed"
                ),
                "send several smaller queries",
            ));
        }
        Ok(())
    }

    /// One level deeper into an expression.
    pub(crate) fn enter_expr(&mut self) -> Result<(), Rejection> {
        self.depth += 1;
        if self.depth > MAX_EXPRESSION_DEPTH {
            return Err(Rejection::new(
                format!(
                    "the SQL nests expressions more than {MAX_EXPRESSION_DEPTH} levels deep \
                     (each operator in a chain such as a OR b OR c adds one)"
                ),
                "use x IN (a, b, c) instead of chains of OR, or compute parts in a CTE",
            ));
        }
        Ok(())
    }

    /// Back out of an expression.
    pub(crate) fn leave_expr(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
}

/// The relations a FROM item joins, nested joins included.
fn relations(table: &TableWithJoins) -> usize {
    std::iter::once(&table.relation)
        .chain(table.joins.iter().map(|j| &j.relation))
        .map(|factor| match factor {
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => relations(table_with_joins),
            _ => 1,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use crate::{Policy, guard};

    fn reason(sql: &str) -> Option<String> {
        guard(sql, &Policy::new(["events", "ops"]), None)
            .err()
            .map(|r| r.reason)
    }

    #[test]
    fn cte_chain_of_400_is_refused_before_it_reaches_duckdb() {
        let sql = format!(
            "WITH a0 AS (SELECT 1 x), {} SELECT * FROM a400",
            (1..=400)
                .map(|i| format!("a{i} AS (SELECT x FROM a{})", i - 1))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(reason(&sql).unwrap().contains("more than 64 CTEs"));
        let ok = format!(
            "WITH a0 AS (SELECT 1 x), {} SELECT * FROM a20",
            (1..=20)
                .map(|i| format!("a{i} AS (SELECT x FROM a{})", i - 1))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert_eq!(reason(&ok), None);
    }

    #[test]
    fn self_join_of_300_is_refused_and_of_ten_passes() {
        let join = |n: usize| {
            format!(
                "SELECT count(*) FROM events e0 {}",
                (1..n)
                    .map(|i| format!("JOIN events e{i} ON e{i}.pid = e{}.pid", i - 1))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        };
        assert!(reason(&join(300)).unwrap().contains("joins 300 relations"));
        assert_eq!(reason(&join(10)), None);
    }

    #[test]
    fn or_chain_deeper_than_the_bound_is_refused() {
        let chain = |n: usize| {
            format!(
                "SELECT count(*) FROM events WHERE {}",
                (0..n)
                    .map(|i| format!("pid = {i}"))
                    .collect::<Vec<_>>()
                    .join(" OR ")
            )
        };
        assert!(reason(&chain(600)).unwrap().contains("nests expressions"));
        assert_eq!(reason(&chain(50)), None);
    }
}
