//! The cluster store of `causeway collect` (received.rs) on real DuckDB files: a version-2 file
//! upgraded to version 3, cumulative snapshots replacing each other (a stale retry ignored),
//! chains upserted, the store reopened as it collects.

use std::sync::Arc;

use causeway_store::received::{ChainRow, CollectedStore, MetricPoint, OpSnapshot, Received};
use causeway_store::{Reader, WriterOptions};

fn count(r: &Reader, sql: &'static str) -> i64 {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap()
}

fn point(node: &str, t: i64) -> MetricPoint {
    MetricPoint {
        node: node.into(),
        resource: Arc::from("{\"host.name\":\"a\"}"),
        scope: Arc::from(""),
        metric: Arc::from("gpu.temperature"),
        unit: Arc::from("Cel"),
        kind: "gauge",
        attributes: "{}".into(),
        time_ns: t,
        value: Some(70.0),
        ..MetricPoint::default()
    }
}

/// A cumulative count of one op of pid 7 on n1, `calls` at `t`.
fn snap(calls: u64, t: i64) -> OpSnapshot {
    OpSnapshot {
        node: "n1".into(),
        pid: 7,
        op_id: 3,
        start_ns: 100,
        time_ns: t,
        calls: Some(calls),
        ..OpSnapshot::default()
    }
}

#[test]
fn a_version_2_file_is_upgraded_and_extended() {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::common::small_store(dir.path(), 3);
    {
        // Make it a version-2 file: without 003's tables.
        let c = causeway_store::duckdb::Connection::open(&path).unwrap();
        c.execute_batch(
            "DROP VIEW metric_points; DROP TABLE metric_rows; DROP TABLE otlp_resources;
             DROP TABLE otlp_metrics; DROP TABLE log_records; DROP TABLE probe_sampling;
             DROP TABLE probe_in_situ; DROP TABLE library_attach;
             DROP VIEW kernel_launches; DROP TABLE kernels; DROP TABLE tasks;
             ALTER TABLE processes DROP COLUMN cgroup_id; ALTER TABLE processes DROP COLUMN gpu_visible;
             ALTER TABLE processes DROP COLUMN gpu_devices; ALTER TABLE cgroups DROP COLUMN runtime;
             ALTER TABLE cgroups DROP COLUMN pod_uid; ALTER TABLE cgroups DROP COLUMN container_name;
             ALTER TABLE cgroups DROP COLUMN note;
             DROP TABLE python_stacks; DROP TABLE python_frames;
             DROP TABLE gpu_activity; DROP TABLE ranges; DROP TABLE steps; DROP TABLE correlations;
             DELETE FROM schema_columns
               WHERE table_name IN ('metric_points', 'log_records', 'probe_sampling', 'probe_in_situ', 'library_attach', 'kernels', 'kernel_launches', 'tasks', 'python_stacks', 'python_frames', 'gpu_activity', 'ranges', 'steps', 'correlations');
             UPDATE meta SET value = '2' WHERE key = 'schema_version'",
        )
        .unwrap();
    }
    assert_eq!(Reader::open(&path).unwrap().schema_version(), 2);
    let mut s = CollectedStore::open(&path, WriterOptions::default()).unwrap();
    s.store(&Received {
        points: vec![point("n1", 5), point("n1", 6)],
        ..Received::default()
    })
    .unwrap();
    s.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.schema_version(), causeway_store::schema::SCHEMA_VERSION);
    assert_eq!(
        count(&r, "SELECT count(*) FROM metric_points WHERE node = 'n1'"),
        2
    );
    // The recorded events are untouched, and the new relations are documented.
    assert_eq!(count(&r, "SELECT count(*) FROM events"), 3);
    // Version 9's columns are back, with their defaults on the old rows.
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM processes WHERE cgroup_id = 0 AND gpu_visible = ''"
        ),
        count(&r, "SELECT count(*) FROM processes")
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM cgroups WHERE runtime = '' OR runtime IS NULL"
        ),
        count(&r, "SELECT count(*) FROM cgroups")
    );
    assert!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'metric_points'"
        ) > 10
    );
    assert!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'log_records'"
        ) > 10
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'probe_sampling'"
        ),
        7
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'probe_in_situ'"
        ),
        14
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'library_attach'"
        ),
        8
    );
    // Version 13's tables are back, empty and documented.
    assert_eq!(count(&r, "SELECT count(*) FROM gpu_activity"), 0);
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM schema_columns WHERE table_name = 'gpu_activity'"
        ),
        17
    );
}

#[test]
fn cumulative_snapshots_replace_and_chains_upsert() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.duckdb");
    let mut s = CollectedStore::create(&path, WriterOptions::default()).unwrap();
    let chain = |lost: i64| ChainRow {
        node: "n1".into(),
        chain_id: "c1".into(),
        detector: "d".into(),
        severity: "HIGH".into(),
        recommendations: "[]".into(),
        timeline: "[]".into(),
        time_lost_ns: lost,
        ..ChainRow::default()
    };
    s.store(&Received {
        ops: vec![snap(10, 200)],
        chains: vec![chain(1)],
        ..Received::default()
    })
    .unwrap();
    // Two batches in one group commit; the older snapshot (a retry) loses.
    let later = Received {
        ops: vec![snap(30, 400)],
        chains: vec![chain(2)],
        ..Received::default()
    };
    let stale = Received {
        ops: vec![snap(20, 300)],
        ..Received::default()
    };
    s.store_all(&[&later, &stale]).unwrap();
    s.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM op_counts"), 1);
    assert_eq!(count(&r, "SELECT sum(calls)::BIGINT FROM op_counts"), 30);
    assert_eq!(count(&r, "SELECT max(window_end_ns) FROM op_counts"), 400);
    assert_eq!(count(&r, "SELECT count(*) FROM chains"), 1);
    assert_eq!(count(&r, "SELECT max(time_lost_ns) FROM chains"), 2);
}

/// A cluster store collects for weeks: it reopens its database every `reopen_rows` points and
/// records so that DuckDB's metadata does not grow, and nothing it caches across batches
/// (interned names, snapshots) goes stale. A live reader (the MCP server of `collect`) follows.
#[test]
fn the_cluster_store_reopens_as_points_arrive_and_its_reader_follows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("collected.duckdb");
    let opts = WriterOptions {
        reopen_rows: 100,
        ..WriterOptions::default()
    };
    let mut s = CollectedStore::create(&path, opts).unwrap();
    let live = s.live_reader().unwrap();
    for batch in 0..20i64 {
        let mut points: Vec<MetricPoint> = (0..30).map(|i| point("n1", batch * 30 + i)).collect();
        // A metric name first seen after a reopen, and the old one again.
        points[0].metric = Arc::from(format!("gpu.metric{}", batch % 3).as_str());
        s.store(&Received {
            points,
            ops: vec![snap(10 * (batch as u64 + 1), 1_000 + batch)],
            ..Received::default()
        })
        .unwrap();
        s = s.maybe_reopen().unwrap();
        let seen = count(&live.lock().unwrap(), "SELECT count(*) FROM metric_points");
        assert_eq!(seen, (batch + 1) * 30, "after {} reopens", s.reopens());
    }
    // 600 points: due after every fourth batch (120 rows).
    assert_eq!(s.reopens(), 5);
    s.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM metric_points"), 600);
    assert_eq!(
        count(&r, "SELECT count(DISTINCT metric) FROM metric_points"),
        4
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM metric_points WHERE metric = 'gpu.metric1'"
        ),
        7
    );
    assert_eq!(count(&r, "SELECT count(*) FROM op_counts"), 1);
    assert_eq!(count(&r, "SELECT sum(calls)::BIGINT FROM op_counts"), 200);
}
