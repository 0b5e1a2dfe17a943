//! One trace over several store files (the agent's rolling segments): every readable relation
//! becomes a view over the same relation of each file, so queries, tools and the analysis see
//! one timeline without knowing how it was cut.
//!
//! Rows a segment repeats from the ones before it (processes, stacks, kernels, ... that the
//! agent writes again into each new segment so that every file stands alone) are kept once:
//! by their key, the newest segment's row wins. Event-like relations are concatenated.

use std::path::{Path, PathBuf};

use duckdb::Connection;

use crate::error::{DuckContext, Result, StoreError};
use crate::schema::RELATIONS;

/// How a relation's rows from several segments combine.
enum Combine {
    /// Every segment holds the same rows (catalogue tables): the newest segment's.
    Newest,
    /// One row per key; the newest segment's row wins (repeated dimension rows).
    Key(&'static str),
    /// Identical rows once (views and histories a segment starts by repeating).
    Distinct,
    /// Every row of every segment.
    All,
}

fn combine(relation: &str) -> Combine {
    match relation {
        "ops" | "sources" | "meta" | "schema_columns" => Combine::Newest,
        "nodes" => Combine::Key("node"),
        "sessions" => Combine::Key("node, session_id"),
        "processes" => Combine::Key("node, pid"),
        "stack_frames" | "python_frames" => Combine::Key("stack_hash, depth"),
        "python_stacks" => Combine::Key("stack_hash"),
        "chains" => Combine::Key("node, chain_id"),
        "cgroups" => Combine::Key("node, cgroup_id"),
        "probe_costs" => Combine::Key("node, mode, first_insn"),
        "kernels" => Combine::Key("node, pid, address"),
        "tasks" => Combine::Key("node, tid"),
        "library_attach" => Combine::Key("node, pid, library"),
        "stacks" | "probe_modes" => Combine::Distinct,
        _ => Combine::All,
    }
}

/// A catalog name as SQL (quoted).
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The alias the `i`-th attached segment gets.
pub(crate) fn alias(i: usize) -> String {
    format!("cw_segment_{i}")
}

/// The query of `relation` over `catalogs` (oldest first, each quoted).
fn union_sql(relation: &str, catalogs: &[String]) -> String {
    let part =
        |c: &String, i: usize| format!("SELECT *, {i} AS cw_segment FROM {c}.main.{relation}");
    let all = catalogs
        .iter()
        .enumerate()
        .map(|(i, c)| part(c, i))
        .collect::<Vec<_>>()
        .join(" UNION ALL BY NAME ");
    let newest = catalogs.last().expect("at least one catalog");
    match combine(relation) {
        Combine::Newest => format!("SELECT * FROM {newest}.main.{relation}"),
        Combine::Key(key) => format!(
            "SELECT * EXCLUDE (cw_segment) FROM ({all}) \
             QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY cw_segment DESC) = 1"
        ),
        Combine::Distinct => format!("SELECT DISTINCT * EXCLUDE (cw_segment) FROM ({all})"),
        Combine::All => format!("SELECT * EXCLUDE (cw_segment) FROM ({all})"),
    }
}

/// Attaches `segments` read-only to the database of `conn` (which must still allow file
/// access), as [`alias`]`(i)`.
pub(crate) fn attach(conn: &Connection, segments: &[PathBuf]) -> Result<()> {
    for (i, p) in segments.iter().enumerate() {
        crate::sniff(p)?;
        let lit = format!("'{}'", p.display().to_string().replace('\'', "''"));
        conn.execute_batch(&format!("ATTACH {lit} AS {} (READ_ONLY)", alias(i)))
            .ctx(p, "attaching a segment")?;
    }
    Ok(())
}

/// The catalog of a live writer's database that holds the timeline's views; its live readers
/// make it their default ([`use_timeline`]). Views of the segments bind inside their own
/// catalogs, which a temporary view would shadow.
const TIMELINE: &str = "cw_timeline";

/// Thread names each segment may intern ([`internal_sql`]): its `comm_id`s are moved into a
/// range of their own so that the union's event rows still join the union's names.
const COMMS_PER_SEGMENT: u64 = 1 << 20;

/// The tables that are not readable relations but that the analysis's own (trusted) queries
/// read: event rows with their segment's thread-name ids moved apart, the names likewise, and
/// the OTLP tables of a cluster store.
/// Event rows also keep a `rowid` of their own, running on from one segment to the next
/// (`first_rows[i]`: the rows of the segments before the `i`-th): the analysis reads them in
/// row-id chunks.
fn internal_sql(table: &str, catalogs: &[String], first_rows: &[u64]) -> String {
    let part = |(i, c): (usize, &String)| {
        let shift = i as u64 * COMMS_PER_SEGMENT;
        match table {
            "event_rows" => format!(
                "SELECT * REPLACE ((comm_id::UBIGINT + {shift})::UINTEGER AS comm_id), \
                 rowid + {} AS rowid FROM {c}.main.{table}",
                first_rows[i]
            ),
            "comms" => format!(
                "SELECT * REPLACE ((comm_id::UBIGINT + {shift})::UINTEGER AS comm_id) \
                 FROM {c}.main.{table}"
            ),
            _ => format!("SELECT * FROM {c}.main.{table}"),
        }
    };
    catalogs
        .iter()
        .enumerate()
        .map(part)
        .collect::<Vec<_>>()
        .join(" UNION ALL BY NAME ")
}

/// Internal tables the timeline also covers ([`internal_sql`]).
const INTERNAL: &[&str] = &[
    "event_rows",
    "comms",
    "metric_rows",
    "otlp_resources",
    "otlp_metrics",
];

/// One view per relation (and internal table) named `{into}{name}` over `catalogs` (quoted,
/// oldest first).
fn views_sql(conn: &Connection, path: &Path, catalogs: &[String], into: &str) -> Result<String> {
    let mut first_rows = vec![0u64; catalogs.len()];
    for i in 1..catalogs.len() {
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {}.main.event_rows", catalogs[i - 1]),
                [],
                |r| r.get(0),
            )
            .ctx(path, "counting a segment's events")?;
        first_rows[i] = first_rows[i - 1] + n.max(0) as u64;
    }
    let derived = derived_views(conn, path, catalogs.last().expect("at least one catalog"))?;
    let tables = RELATIONS
        .iter()
        .filter(|rel| !derived.iter().any(|(v, _)| v == *rel))
        .map(|rel| format!("CREATE VIEW {into}{rel} AS {};\n", union_sql(rel, catalogs)));
    let internal = INTERNAL.iter().map(|t| {
        format!(
            "CREATE VIEW {into}{t} AS {};\n",
            internal_sql(t, catalogs, &first_rows)
        )
    });
    let views = derived
        .iter()
        .map(|(v, body)| format!("CREATE VIEW {into}{v} AS {body};\n"));
    Ok(tables.chain(internal).chain(views).collect())
}

/// The store's own views (events, kernel_launches, stacks, ...) as the newest segment defines
/// them, each after the views it reads: over the timeline they read the combined tables, one
/// join or aggregate over all segments; a union of each segment's view builds one per segment,
/// all held at once (`timeline_views_read_the_combined_tables`).
fn derived_views(conn: &Connection, path: &Path, newest: &str) -> Result<Vec<(String, String)>> {
    let name = newest.trim_matches('"').replace("\"\"", "\"");
    let mut st = conn
        .prepare(
            "SELECT view_name, sql FROM duckdb_views() \
             WHERE database_name = ? AND schema_name = 'main' AND NOT internal ORDER BY view_oid",
        )
        .ctx(path, "reading the store's views")?;
    let views: Vec<(String, String)> = st
        .query_map([name], crate::row)
        .and_then(|rows| rows.collect())
        .ctx(path, "reading the store's views")?;
    let mut views: Vec<(String, String)> = views
        .into_iter()
        .filter(|(v, _)| RELATIONS.contains(&v.as_str()))
        .filter_map(|(v, sql)| {
            let body = sql
                .strip_prefix(&format!("CREATE VIEW {v} AS "))?
                .trim_end()
                .trim_end_matches(';')
                .to_string();
            Some((v, body))
        })
        .collect();
    // A migration may have made a view again after the views it reads: each goes after them
    // (a cycle cannot bind anyway: then the order stays).
    let mut ordered = Vec::with_capacity(views.len());
    while !views.is_empty() {
        let ready = views
            .iter()
            .position(|(v, body)| !views.iter().any(|(o, _)| o != v && mentions(body, o)))
            .unwrap_or(0);
        ordered.push(views.remove(ready));
    }
    Ok(ordered)
}

/// Whether `sql` names `word` as a whole identifier.
fn mentions(sql: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    sql.match_indices(word).any(|(i, _)| {
        !sql[..i].chars().next_back().is_some_and(ident)
            && !sql[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// Gives a live writer's database (`conn`, file access still allowed) the timeline of
/// `segments` and its own file: the segments attached read-only, and an in-memory catalog of
/// views over them and the live tables.
pub(crate) fn attach_to_live(conn: &Connection, path: &Path, segments: &[PathBuf]) -> Result<()> {
    attach(conn, segments)?;
    let own: String = conn
        .query_row("SELECT current_database()", [], |r| r.get(0))
        .ctx(path, "naming the live database")?;
    let mut catalogs: Vec<String> = (0..segments.len()).map(|i| quoted(&alias(i))).collect();
    catalogs.push(quoted(&own));
    let sql = format!(
        "ATTACH ':memory:' AS {TIMELINE};\n{}",
        views_sql(conn, path, &catalogs, &format!("{TIMELINE}.main."))?
    );
    conn.execute_batch(&sql)
        .ctx(path, "creating the timeline's views")
}

/// Makes a live reader's connection read the timeline (when its database has one).
pub(crate) fn use_timeline(conn: &Connection, path: &Path, attached: usize) -> Result<()> {
    if attached == 0 {
        return Ok(());
    }
    conn.execute_batch(&format!("USE {TIMELINE}"))
        .ctx(path, "reading the timeline")
}

/// The closed segments of an agent's data directory, oldest first: the store files directly in
/// `dir` (the open segment lives in `dir/open/` until it is closed). Names sort by time.
pub fn segments_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
        path: dir.to_path_buf(),
        action: "listing the segments",
        source,
    })?;
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "duckdb"))
        .collect();
    v.sort();
    Ok(v)
}

/// Opens the closed segments of `dir` as one read-only trace: an in-memory database with a
/// view per relation over the segments, then no file access and locked settings, as for one
/// file ([`crate::Reader::open_with`]).
pub(crate) fn open_dir(dir: &Path, opts: &crate::ReaderOptions) -> Result<Connection> {
    let segments = segments_in(dir)?;
    if segments.len() as u64 > u64::from(u32::MAX) / COMMS_PER_SEGMENT {
        return Err(StoreError::Invalid {
            message: format!(
                "{}: {} segments are more than one trace can hold",
                dir.display(),
                segments.len()
            ),
            hint: "copy the segments of the time you want into a directory of their own".into(),
        });
    }
    if segments.is_empty() {
        return Err(StoreError::Invalid {
            message: format!("{}: holds no closed segment (*.duckdb)", dir.display()),
            hint: "an agent closes its first segment after its [segments] period; name a store \
                   file, or wait"
                .into(),
        });
    }
    let config = duckdb::Config::default()
        .access_mode(duckdb::AccessMode::ReadWrite)
        .and_then(|c| c.enable_autoload_extension(false))
        .and_then(|c| c.with("autoinstall_known_extensions", "false"))
        .and_then(|c| c.max_memory(&opts.memory_limit))
        .and_then(|c| c.threads(opts.threads))
        .ctx(dir, "configuring the segments' reader")?;
    let conn = Connection::open_in_memory_with_flags(config).ctx(dir, "opening the timeline")?;
    attach(&conn, &segments)?;
    let catalogs: Vec<String> = (0..segments.len()).map(|i| quoted(&alias(i))).collect();
    let mut sql = views_sql(&conn, dir, &catalogs, "")?;
    sql.push_str("SET enable_external_access = false; SET max_temp_directory_size = '0B';");
    conn.execute_batch(&sql)
        .ctx(dir, "creating the timeline's views")?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_relation_has_a_combination_that_reads_its_newest_segment_last() {
        let cats = vec!["\"a\"".to_string(), "\"b\"".to_string()];
        for rel in RELATIONS {
            let sql = union_sql(rel, &cats);
            assert!(sql.contains(&format!("\"b\".main.{rel}")), "{rel}: {sql}");
        }
        assert!(union_sql("processes", &cats).contains("PARTITION BY node, pid"));
        assert!(union_sql("events", &cats).contains("UNION ALL BY NAME"));
        assert!(internal_sql("event_rows", &cats, &[0, 5]).contains("+ 1048576"));
        assert!(internal_sql("event_rows", &cats, &[0, 5]).contains("rowid + 5 AS rowid"));
    }
}
