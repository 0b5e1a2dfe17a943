//! `Policy`: which relations a query may read and how many rows it may return, plus the rules
//! for schema/catalog qualifiers on relation names (`main.events` yes, `pg_catalog.x` no).

use std::collections::BTreeSet;

/// The only schema a relation may be qualified with.
pub(crate) const MAIN_SCHEMA: &str = "main";

/// Catalogs that are never the trace store's own, even with a `main` schema after them.
const FOREIGN_CATALOGS: &[&str] = &["system", "temp"];

/// What a query may touch and how many rows it may return.
#[derive(Debug, Clone)]
pub struct Policy {
    allowed_relations: BTreeSet<String>,
    /// Row limit applied when the query names none.
    pub default_limit: u64,
    /// Upper bound on any row limit, including one the query names itself.
    pub max_limit: u64,
    /// Names of values the store calls otherwise (an op's name in another tool): (old, new).
    renamed: Vec<(String, String)>,
}

impl Policy {
    /// A policy allowing exactly these relations (case-insensitive), with default limits
    /// (1,000 rows by default, 10,000 at most).
    pub fn new<I, S>(relations: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self {
            allowed_relations: relations
                .into_iter()
                .map(|r| r.as_ref().to_lowercase())
                .collect(),
            default_limit: 1_000,
            max_limit: 10_000,
            renamed: Vec::new(),
        }
    }

    /// Refuses string literals equal to an `old` name, saying the store's `new` one: a query
    /// written for another tool's names would otherwise match nothing, silently.
    pub fn with_renamed<I, S>(mut self, pairs: I) -> Self
    where
        I: IntoIterator<Item = (S, S)>,
        S: Into<String>,
    {
        self.renamed = pairs
            .into_iter()
            .map(|(a, b)| (a.into(), b.into()))
            .collect();
        self
    }

    /// The store's name for `text`, if `text` is another tool's name of it.
    pub(crate) fn renamed(&self, text: &str) -> Option<&str> {
        self.renamed
            .iter()
            .find(|(old, _)| old == text)
            .map(|(_, new)| new.as_str())
    }

    /// Sets the row limits (the default is clamped to the maximum; both are at least 1).
    pub fn with_limits(mut self, default_limit: u64, max_limit: u64) -> Self {
        self.max_limit = max_limit.max(1);
        self.default_limit = default_limit.clamp(1, self.max_limit);
        self
    }

    /// The relations a query may read, lower-case.
    pub fn allowed_relations(&self) -> impl Iterator<Item = &str> {
        self.allowed_relations.iter().map(String::as_str)
    }

    /// Whether `name` is one of the store's relations. `name` may be written as SQL would
    /// (`events`, `main.events`, `"Events"`, `db.main.events`); single-quoted strings, other
    /// schemas and the `system`/`temp` catalogs are never allowed.
    pub fn allows_relation(&self, name: &str) -> bool {
        let Some(parts) = split_qualified(name) else {
            return false;
        };
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        match table_part(&parts) {
            Ok(table) => self.allows_table(&table),
            Err(_) => false,
        }
    }

    /// Whether an unqualified, lower-case table name is allowed.
    pub(crate) fn allows_table(&self, lower: &str) -> bool {
        self.allowed_relations.contains(lower)
    }

    /// The allowed relations as a comma-separated list, for hints.
    pub(crate) fn relation_list(&self) -> String {
        self.allowed_relations
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The row limit for a request: the requested one or the default, within `1..=max_limit`.
    pub(crate) fn row_limit(&self, requested: Option<u64>) -> u64 {
        requested
            .unwrap_or(self.default_limit)
            .clamp(1, self.max_limit.max(1))
    }
}

/// The lower-case table name of a relation written as `parts` (already unquoted), or the
/// qualifier that makes it foreign: `events` and `main.events` and `cat.main.events` are
/// the table `events`; `information_schema.tables` is refused because of its schema.
pub(crate) fn table_part(parts: &[&str]) -> Result<String, String> {
    match parts {
        [table] => Ok(table.to_lowercase()),
        [schema, table] if schema.eq_ignore_ascii_case(MAIN_SCHEMA) => Ok(table.to_lowercase()),
        [catalog, schema, table]
            if schema.eq_ignore_ascii_case(MAIN_SCHEMA)
                && !FOREIGN_CATALOGS
                    .iter()
                    .any(|c| catalog.eq_ignore_ascii_case(c)) =>
        {
            Ok(table.to_lowercase())
        }
        [] => Err(String::new()),
        [qualifiers @ .., _] => Err(qualifiers.join(".")),
    }
}

/// Splits `a."b.c".d` into `["a", "b.c", "d"]`; `None` for single-quoted or malformed names.
fn split_qualified(name: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = name.trim().chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            '"' => quoted = !quoted,
            '\'' if !quoted => return None,
            '.' if !quoted => parts.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    if quoted {
        return None;
    }
    parts.push(current);
    if parts.iter().any(String::is_empty) {
        return None;
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Policy {
        Policy::new(["events", "OPS"])
    }

    #[test]
    fn defaults_and_limits() {
        let p = store();
        assert_eq!((p.default_limit, p.max_limit), (1_000, 10_000));
        let p = p.with_limits(50_000, 20_000);
        assert_eq!((p.default_limit, p.max_limit), (20_000, 20_000));
        let p = store().with_limits(0, 0);
        assert_eq!((p.default_limit, p.max_limit), (1, 1));
    }

    #[test]
    fn row_limit_clamps_requests() {
        let p = store();
        assert_eq!(p.row_limit(None), 1_000);
        assert_eq!(p.row_limit(Some(0)), 1);
        assert_eq!(p.row_limit(Some(5)), 5);
        assert_eq!(p.row_limit(Some(u64::MAX)), 10_000);
    }

    #[test]
    fn relations_are_case_insensitive_and_main_qualified() {
        let p = store();
        assert!(p.allows_relation("events"));
        assert!(p.allows_relation("EVENTS"));
        assert!(p.allows_relation("ops"));
        assert!(p.allows_relation("main.events"));
        assert!(p.allows_relation("\"main\".\"Events\""));
        assert!(p.allows_relation("trace.main.events"));
        assert_eq!(
            p.allowed_relations().collect::<Vec<_>>(),
            vec!["events", "ops"]
        );
    }

    #[test]
    fn foreign_names_are_refused() {
        let p = store();
        for name in [
            "processes",
            "information_schema.events",
            "pg_catalog.events",
            "system.main.events",
            "temp.main.events",
            "a.b.c.events",
            "'events'",
            "\"events",
            "main.",
            "",
            "\"main.events\"",
        ] {
            assert!(!p.allows_relation(name), "{name} should be refused");
        }
    }

    #[test]
    fn table_part_reports_the_foreign_qualifier() {
        assert_eq!(table_part(&["Events"]), Ok("events".to_string()));
        assert_eq!(
            table_part(&["information_schema", "tables"]),
            Err("information_schema".to_string())
        );
        assert_eq!(
            table_part(&["system", "main", "x"]),
            Err("system.main".to_string())
        );
    }

    #[test]
    fn relation_list_is_sorted() {
        assert_eq!(store().relation_list(), "events, ops");
    }
}
