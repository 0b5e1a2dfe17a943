//! The function blocklist: the ONE place that says which DuckDB functions a query may not call,
//! and which table functions may appear in FROM at all.
//!
//! Matching is on the function's last name part (so `main.read_csv`, `"READ_CSV"` and
//! `system.main.read_csv` all match `read_csv`), ASCII-case-insensitively, as DuckDB resolves
//! names. Two lists apply:
//!
//! - [`BLOCKED_FUNCTIONS`] (exact names) and [`BLOCKED_PREFIXES`] (families such as `read_*`,
//!   `duckdb_*`, `pragma_*`): refused anywhere, as table functions and as scalar calls, because
//!   they read files, reach the network, read the catalog, read or change settings, read the
//!   environment or secrets, run SQL given as a string, or change state.
//! - [`ALLOWED_TABLE_FUNCTIONS`]: the only functions that may be called in FROM. Every other
//!   table function is refused (fail-closed), including ones this list has never heard of.
//!
//! Scalar functions that are not blocked are allowed: an unknown scalar name (a typo, or a
//! look-alike such as `reаd_csv` with a Cyrillic `а`) cannot do anything, because DuckDB fails
//! to resolve it. Function names with non-ASCII characters are refused outright (every DuckDB
//! built-in is ASCII), which turns look-alikes into a clear message rather than a lookup error.
//! Size bombs among allowed functions (`range(1e12)`, `repeat('x', 2e9)`) are `bombs.rs`'s job.

use crate::policy::Policy;

/// What a blocked function would do, which is why it is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Danger {
    /// Reads files or scans another database file.
    Files,
    /// Reaches the network.
    Network,
    /// Reads the database catalog (tables, settings, extensions, secrets metadata).
    Catalog,
    /// Reads or changes a setting or variable.
    Settings,
    /// Reads the process environment or stored secrets.
    Environment,
    /// Runs SQL (or a serialized plan) given as a string.
    SqlFromString,
    /// Writes, checkpoints, generates tables or advances state.
    Writes,
}

impl Danger {
    /// A verb phrase for messages: "read_csv reads files".
    pub fn describe(self) -> &'static str {
        match self {
            Danger::Files => "reads files",
            Danger::Network => "reaches the network",
            Danger::Catalog => "reads the database catalog",
            Danger::Settings => "reads or changes settings",
            Danger::Environment => "reads the environment or secrets",
            Danger::SqlFromString => "runs SQL from a string",
            Danger::Writes => "changes database state",
        }
    }

    /// What the caller can do instead.
    pub(crate) fn hint(self, policy: &Policy) -> String {
        match self {
            Danger::Files | Danger::Network => format!(
                "only the trace store's own tables can be read: {}",
                policy.relation_list()
            ),
            Danger::Catalog if policy.allows_table("schema_columns") => {
                "to see tables and columns, query the schema_columns relation: \
                 SELECT * FROM schema_columns"
                    .to_string()
            }
            Danger::Catalog => format!(
                "the catalog is not exposed; the readable tables are: {}",
                policy.relation_list()
            ),
            Danger::Settings => "settings are fixed by the server and cannot be read or changed \
                                 from SQL; write the query without it"
                .to_string(),
            Danger::Environment if policy.allows_table("meta") => {
                "the environment and secrets are not exposed; recording metadata is in the meta \
                 relation: SELECT * FROM meta"
                    .to_string()
            }
            Danger::Environment => "the environment and secrets are not exposed".to_string(),
            Danger::SqlFromString => {
                "write the SQL directly as the query instead of passing it as a string".to_string()
            }
            Danger::Writes => {
                "queries are read-only: nothing can be written, checkpointed, generated or \
                 advanced"
                    .to_string()
            }
        }
    }
}

/// Functions refused by exact (lower-case) name, as table functions and as scalar calls.
pub const BLOCKED_FUNCTIONS: &[(&str, Danger)] = &[
    // Files (core DuckDB and the json/parquet/excel/spatial/avro extensions).
    ("glob", Danger::Files),
    ("sniff_csv", Danger::Files),
    ("csv_scan", Danger::Files),
    ("json_scan", Danger::Files),
    ("arrow_scan", Danger::Files),
    ("arrow_scan_dumb", Danger::Files),
    ("st_read", Danger::Files),
    ("st_read_meta", Danger::Files),
    ("st_readosm", Danger::Files),
    ("st_readshp", Danger::Files),
    ("st_drivers", Danger::Files),
    ("excel", Danger::Files),
    ("scan_arrow_ipc", Danger::Files),
    ("read_avro", Danger::Files),
    // Network (httpfs, http_client, cloud credentials).
    ("http_get", Danger::Network),
    ("http_post", Danger::Network),
    ("http_head", Danger::Network),
    ("load_aws_credentials", Danger::Network),
    ("gsheet", Danger::Network),
    // Catalog (PostgreSQL compatibility functions and friends).
    ("current_database", Danger::Catalog),
    ("current_catalog", Danger::Catalog),
    ("current_schema", Danger::Catalog),
    ("current_schemas", Danger::Catalog),
    ("col_description", Danger::Catalog),
    ("obj_description", Danger::Catalog),
    ("shobj_description", Danger::Catalog),
    ("format_type", Danger::Catalog),
    ("format_pg_type", Danger::Catalog),
    ("sql_auto_complete", Danger::Catalog),
    ("has_any_column_privilege", Danger::Catalog),
    ("has_column_privilege", Danger::Catalog),
    ("has_database_privilege", Danger::Catalog),
    ("has_foreign_data_wrapper_privilege", Danger::Catalog),
    ("has_function_privilege", Danger::Catalog),
    ("has_language_privilege", Danger::Catalog),
    ("has_schema_privilege", Danger::Catalog),
    ("has_sequence_privilege", Danger::Catalog),
    ("has_server_privilege", Danger::Catalog),
    ("has_table_privilege", Danger::Catalog),
    ("has_tablespace_privilege", Danger::Catalog),
    ("table_info", Danger::Catalog),
    ("show_databases", Danger::Catalog),
    ("show_tables", Danger::Catalog),
    ("show_tables_expanded", Danger::Catalog),
    // Settings and variables.
    ("current_setting", Danger::Settings),
    ("getvariable", Danger::Settings),
    ("setseed", Danger::Settings),
    ("enable_logging", Danger::Settings),
    ("disable_logging", Danger::Settings),
    ("enable_profiling", Danger::Settings),
    ("disable_profiling", Danger::Settings),
    // Environment and secrets.
    ("getenv", Danger::Environment),
    ("which_secret", Danger::Environment),
    // SQL (or plans) from strings.
    ("query", Danger::SqlFromString),
    ("query_table", Danger::SqlFromString),
    ("json_execute_serialized_sql", Danger::SqlFromString),
    ("json_deserialize_sql", Danger::SqlFromString),
    ("json_serialize_sql", Danger::SqlFromString),
    ("json_serialize_plan", Danger::SqlFromString),
    ("from_substrait", Danger::SqlFromString),
    ("from_substrait_json", Danger::SqlFromString),
    ("get_substrait", Danger::SqlFromString),
    ("get_substrait_json", Danger::SqlFromString),
    ("prql", Danger::SqlFromString),
    // State changes.
    ("checkpoint", Danger::Writes),
    ("force_checkpoint", Danger::Writes),
    ("nextval", Danger::Writes),
    ("currval", Danger::Writes),
    ("dbgen", Danger::Writes),
    ("dsdgen", Danger::Writes),
    ("truncate_duckdb_logs", Danger::Writes),
    ("install_extension", Danger::Writes),
    ("load_extension", Danger::Writes),
];

/// Function families refused by (lower-case) name prefix.
pub const BLOCKED_PREFIXES: &[(&str, Danger)] = &[
    // read_csv, read_csv_auto, read_text, read_blob, read_json*, read_ndjson*, read_parquet,
    // read_xlsx, read_file(s), ...
    ("read_", Danger::Files),
    // parquet_scan, parquet_metadata, parquet_schema, parquet_kv_metadata, ...
    ("parquet_", Danger::Files),
    ("sniff_", Danger::Files),
    ("iceberg_", Danger::Files),
    ("delta_", Danger::Files),
    ("ducklake_", Danger::Files),
    ("sqlite_", Danger::Files),
    ("postgres_", Danger::Network),
    ("mysql_", Danger::Network),
    ("azure_", Danger::Network),
    ("httpfs_", Danger::Network),
    // duckdb_settings(), duckdb_tables(), duckdb_secrets(), duckdb_extensions(), ...
    ("duckdb_", Danger::Catalog),
    // pragma_table_info(), pragma_storage_info(), pragma_database_size(), ...
    ("pragma_", Danger::Catalog),
    // pg_get_viewdef(), pg_typeof(), pg_has_role(), ... (use typeof() instead of pg_typeof)
    ("pg_", Danger::Catalog),
    ("fts_", Danger::Writes),
];

/// The only table functions a query may call in FROM; bounds are checked in `bombs.rs`.
pub const ALLOWED_TABLE_FUNCTIONS: &[&str] = &["unnest", "range", "generate_series"];

/// Why the function named `name` (its last name part, any case) is blocked, if it is.
pub fn blocked_function(name: &str) -> Option<Danger> {
    let lower = name.to_ascii_lowercase();
    BLOCKED_FUNCTIONS
        .iter()
        .find(|(blocked, _)| *blocked == lower)
        .or_else(|| {
            BLOCKED_PREFIXES
                .iter()
                .find(|(prefix, _)| lower.starts_with(prefix))
        })
        .map(|(_, danger)| *danger)
}

/// Whether `name` (its last name part, any case) may be called as a table function in FROM.
pub fn is_allowed_table_function(name: &str) -> bool {
    ALLOWED_TABLE_FUNCTIONS
        .iter()
        .any(|allowed| allowed.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_match_case_insensitively() {
        assert_eq!(blocked_function("getenv"), Some(Danger::Environment));
        assert_eq!(blocked_function("GetEnv"), Some(Danger::Environment));
        assert_eq!(blocked_function("query"), Some(Danger::SqlFromString));
        assert_eq!(blocked_function("glob"), Some(Danger::Files));
        assert_eq!(blocked_function("current_setting"), Some(Danger::Settings));
        assert_eq!(blocked_function("nextval"), Some(Danger::Writes));
    }

    #[test]
    fn prefixes_cover_families() {
        for name in [
            "read_csv",
            "READ_CSV_AUTO",
            "read_text",
            "read_blob",
            "read_json_objects",
            "read_parquet",
            "parquet_scan",
        ] {
            assert_eq!(blocked_function(name), Some(Danger::Files), "{name}");
        }
        assert_eq!(blocked_function("duckdb_settings"), Some(Danger::Catalog));
        assert_eq!(blocked_function("pragma_table_info"), Some(Danger::Catalog));
        assert_eq!(blocked_function("postgres_scan"), Some(Danger::Network));
        assert_eq!(blocked_function("iceberg_scan"), Some(Danger::Files));
        assert_eq!(blocked_function("delta_scan"), Some(Danger::Files));
        assert_eq!(blocked_function("sqlite_scan"), Some(Danger::Files));
    }

    #[test]
    fn ordinary_functions_are_not_blocked() {
        for name in [
            "count",
            "quantile_cont",
            "regexp_matches",
            "list_transform",
            "strftime",
            "json_extract",
            "typeof",
            "unnest",
            "range",
            "date_trunc",
            "array_has_any",
            "reаd_csv", // Cyrillic а: not blocked by name, refused elsewhere (non-ASCII)
        ] {
            assert_eq!(blocked_function(name), None, "{name}");
        }
    }

    #[test]
    fn only_three_table_functions_are_allowed() {
        assert!(is_allowed_table_function("unnest"));
        assert!(is_allowed_table_function("RANGE"));
        assert!(is_allowed_table_function("generate_series"));
        assert!(!is_allowed_table_function("read_csv"));
        assert!(!is_allowed_table_function("repeat_row"));
        assert!(!is_allowed_table_function("test_all_types"));
    }

    #[test]
    fn lists_are_lower_case_and_allowed_never_blocked() {
        for (name, _) in BLOCKED_FUNCTIONS.iter().chain(BLOCKED_PREFIXES) {
            assert_eq!(*name, name.to_ascii_lowercase());
        }
        for name in ALLOWED_TABLE_FUNCTIONS {
            assert_eq!(blocked_function(name), None);
        }
    }

    #[test]
    fn every_danger_has_a_hint() {
        let policy = Policy::new(["events", "schema_columns", "meta"]);
        for danger in [
            Danger::Files,
            Danger::Network,
            Danger::Catalog,
            Danger::Settings,
            Danger::Environment,
            Danger::SqlFromString,
            Danger::Writes,
        ] {
            assert!(!danger.describe().is_empty());
            assert!(!danger.hint(&policy).is_empty());
        }
        assert!(Danger::Catalog.hint(&policy).contains("schema_columns"));
        assert!(
            !Danger::Catalog
                .hint(&Policy::new(["events"]))
                .contains("schema_columns")
        );
    }
}
