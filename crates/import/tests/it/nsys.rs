//! Import of Nsight Systems SQLite exports: the two real exports in ../data (nsys 2022.2 and
//! 2024.5, recorded on A100s), every count the store holds checked against the file counted
//! with plain SQL written apart from the importer; an export built here to the documented
//! schema for what those two lack (start/end and nested ranges, memsets, driver calls, no
//! session start); bad files refused in one line with nothing left behind.

use causeway_hint::Hint as _;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use causeway_import::{ImportOptions, import};
use causeway_store::Reader;
use rusqlite::Connection;

/// The real exports, by nsys version.
const EXPORTS: &[&str] = &[
    "nsys-2022.2-saxpy-mpi-cuda.sqlite.gz",
    "nsys-2024.5-cloverleaf-cuda.sqlite.gz",
];

/// `name` from tests/data, decompressed into `dir`.
fn export(dir: &Path, name: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&src).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let out = dir.join(name.trim_end_matches(".gz"));
    std::fs::write(&out, bytes).unwrap();
    out
}

fn one(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn table_exists(c: &Connection, t: &str) -> bool {
    one(
        c,
        &format!("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{t}'"),
    ) > 0
}

/// `count(*)` of `table` where `filter` holds, 0 when the export lacks the table.
fn rows(c: &Connection, table: &str, filter: &str) -> i64 {
    if table_exists(c, table) {
        one(c, &format!("SELECT count(*) FROM {table} WHERE {filter}"))
    } else {
        0
    }
}

/// What the export holds, counted from the file.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    runtime: i64,
    kernels: i64,
    memcpys: i64,
    memsets: i64,
    syncs: i64,
    nvtx: i64,
    osrt: i64,
    copied_bytes: i64,
}

/// Calls are the rows of event class 0 (CUDA runtime) and 1 (CUDA driver), as
/// ENUM_NSYS_EVENT_CLASS names them; ranges are NVTX events of type 59 (NvtxPushPopRange) and
/// 60 (NvtxStartEndRange) that have an end, as ENUM_NSYS_EVENT_TYPE names them.
fn source_counts(c: &Connection) -> Counts {
    if table_exists(c, "ENUM_NSYS_EVENT_CLASS") {
        assert_eq!(
            one(
                c,
                "SELECT count(*) FROM ENUM_NSYS_EVENT_CLASS
                 WHERE (id = 0 AND label = 'CUDA runtime') OR (id = 1 AND label = 'CUDA driver')"
            ),
            2
        );
        assert_eq!(
            one(
                c,
                "SELECT count(*) FROM ENUM_NSYS_EVENT_TYPE
                 WHERE (id = 59 AND name = 'NvtxPushPopRange') OR (id = 60 AND name = 'NvtxStartEndRange')"
            ),
            2
        );
    }
    Counts {
        runtime: rows(c, "CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass IN (0, 1)"),
        kernels: rows(c, "CUPTI_ACTIVITY_KIND_KERNEL", "1"),
        memcpys: rows(c, "CUPTI_ACTIVITY_KIND_MEMCPY", "1"),
        memsets: rows(c, "CUPTI_ACTIVITY_KIND_MEMSET", "1"),
        syncs: rows(c, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "1"),
        nvtx: rows(
            c,
            "NVTX_EVENTS",
            "eventType IN (59, 60) AND end IS NOT NULL",
        ),
        osrt: rows(c, "OSRT_API", "1"),
        copied_bytes: if table_exists(c, "CUPTI_ACTIVITY_KIND_MEMCPY") {
            one(
                c,
                "SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY",
            )
        } else {
            0
        },
    }
}

fn count(r: &Reader, sql: &'static str) -> i64 {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap()
}

/// `count` with one text parameter.
fn count_of(r: &Reader, sql: &'static str, p: &str) -> i64 {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([p], |row| row.get(0))
        .unwrap()
}

fn text(r: &Reader, sql: &'static str) -> String {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap()
}

fn store_counts(r: &Reader) -> Counts {
    let events = count(
        r,
        "SELECT count(*) FROM events WHERE source IN ('CUDA', 'DRIVER', 'GRAPH')",
    );
    let dropped = count(
        r,
        "SELECT coalesce(sum(count), 0)::BIGINT FROM drops
         WHERE kind IN ('import_skipped', 'import_invalid')",
    );
    let gpu = |kind: &str| count_of(r, "SELECT count(*) FROM gpu_activity WHERE kind = ?", kind);
    Counts {
        runtime: events + dropped,
        kernels: gpu("kernel"),
        memcpys: gpu("memcpy"),
        memsets: gpu("memset"),
        syncs: gpu("sync"),
        nvtx: count(r, "SELECT count(*) FROM ranges WHERE kind = 'nvtx'"),
        osrt: count(r, "SELECT count(*) FROM ranges WHERE kind = 'osrt'"),
        copied_bytes: count(
            r,
            "SELECT coalesce(sum(bytes), 0)::BIGINT FROM gpu_activity WHERE kind = 'memcpy'",
        ),
    }
}

/// Calls per catalogue op counted from the file: nsys names entry points with their API
/// version (`cudaMemcpy_v3020`); the name before `_v<digits>` is the call.
fn source_calls(c: &Connection) -> BTreeMap<String, i64> {
    let mut st = c
        .prepare(
            "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
             JOIN StringIds s ON s.id = r.nameId WHERE r.eventClass IN (0, 1) GROUP BY 1",
        )
        .unwrap();
    let mut out = BTreeMap::new();
    for row in st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
    {
        let (name, n) = row.unwrap();
        let base = match name.rsplit_once("_v") {
            Some((b, v)) if !v.is_empty() && v.bytes().all(|d| d.is_ascii_digit()) => b,
            _ => name.as_str(),
        };
        if causeway_store::catalog::op_by_name(base).is_some() {
            *out.entry(base.to_string()).or_default() += n;
        }
    }
    out
}

#[test]
fn real_exports_import_with_the_counts_of_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = vec![format!(
        "{:<40} {:>13} {:>11} {:>11} {:>9} {:>11} {:>9} {:>11}",
        "export (source = store)",
        "calls",
        "kernels",
        "memcpys",
        "memsets",
        "syncs",
        "nvtx",
        "osrt"
    )];
    for name in EXPORTS {
        let src = export(dir.path(), name);
        let c = Connection::open(&src).unwrap();
        let want = source_counts(&c);
        let out = dir.path().join("out.duckdb");
        let reports = import(
            std::slice::from_ref(&src),
            &out,
            true,
            &ImportOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        let rep = &reports[0];
        let r = Reader::open(&out).unwrap();
        let got = store_counts(&r);
        assert_eq!(got, want, "{name}");
        assert!(
            want.runtime > 0 && want.kernels > 0 && want.memcpys > 0,
            "{name}"
        );
        assert_eq!(
            count(
                &r,
                "SELECT coalesce(sum(count), 0)::BIGINT FROM drops WHERE kind = 'import_invalid'"
            ),
            0,
            "{name}: nothing in a real export is impossible"
        );

        // Every call the catalogue knows is stored under its name, one for one.
        for (op, n) in source_calls(&c) {
            let stored = count_of(&r, "SELECT count(*) FROM events WHERE op = ?", &op);
            assert_eq!(stored, n, "{name}: {op}");
        }

        // Times: the capture's UTC start plus the export's ns, exactly.
        let utc = one(&c, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME");
        let first_malloc = one(
            &c,
            "SELECT min(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
             WHERE r.eventClass = 0 AND s.value LIKE 'cudaMalloc%'",
        );
        let first_kernel = one(&c, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL");
        assert_eq!(
            count(
                &r,
                "SELECT min(timestamp) FROM events WHERE op = 'cudaMalloc'"
            ),
            utc + first_malloc,
            "{name}"
        );
        assert_eq!(
            count(
                &r,
                "SELECT min(start_ns) FROM gpu_activity WHERE kind = 'kernel'"
            ),
            utc + first_kernel,
            "{name}"
        );

        // Each kernel joins the cudaLaunchKernel that launched it, each copy its cudaMemcpy,
        // and the launch carries the kernel's grid, the copy its bytes.
        let kernels_joined = count(
            &r,
            "SELECT count(*) FROM gpu_activity g JOIN correlations c USING (node, pid, correlation)
             JOIN events e USING (node, seq)
             WHERE g.kind = 'kernel' AND e.op = 'cudaLaunchKernel'
               AND e.arg1 = g.grid_x * g.grid_y * g.grid_z",
        );
        assert_eq!(kernels_joined, want.kernels, "{name}");
        let copies_joined = count(
            &r,
            "SELECT count(*) FROM gpu_activity g JOIN correlations c USING (node, pid, correlation)
             JOIN events e USING (node, seq)
             WHERE g.kind = 'memcpy' AND e.op = 'cudaMemcpy' AND e.arg0 = g.bytes",
        );
        assert_eq!(copies_joined, want.memcpys, "{name}");

        // Names: the profiled host is the node, its GPU the session's, thread names the comm.
        let host: String = c
            .query_row(
                "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(rep.nodes, vec![host.clone()], "{name}");
        let gpu: String = c
            .query_row("SELECT name FROM TARGET_INFO_GPU LIMIT 1", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(
            text(&r, "SELECT gpu_model FROM sessions"),
            gpu,
            "{name}: the session's GPU"
        );
        assert!(gpu.starts_with("NVIDIA A100"), "{gpu}");
        let main_thread: String = c
            .query_row(
                "SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId
                 WHERE (t.globalTid >> 24) & 16777215 = t.globalTid & 16777215",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(
            text(
                &r,
                "SELECT string_agg(DISTINCT comm, ',') FROM events WHERE source = 'CUDA'"
            ),
            main_thread,
            "{name}"
        );

        // OS runtime calls nest as nsys says (nestingLevel) when no NVTX range is around them.
        if want.osrt > 0 && want.nvtx == 0 {
            assert_eq!(
                count(
                    &r,
                    "SELECT sum(depth)::BIGINT FROM ranges WHERE kind = 'osrt'"
                ),
                one(&c, "SELECT sum(nestingLevel) FROM OSRT_API"),
                "{name}"
            );
        }

        // The report's nsys object says what was read and what was not.
        let json = serde_json::to_value(rep).unwrap();
        let nsys = &json["nsys"];
        assert_eq!(nsys["kernels"], want.kernels, "{name}");
        assert_eq!(nsys["runtime_calls"], want.runtime, "{name}");
        assert!(
            nsys["version"].as_str().unwrap().starts_with("202"),
            "{nsys}"
        );
        assert!(nsys["not_imported"]["SCHED_EVENTS"].as_i64().unwrap() > 0);
        assert_eq!(
            rep.events + rep.skipped + rep.invalid,
            want.runtime as u64,
            "{name}"
        );

        // explain runs on the result and its findings hold.
        let e = causeway_analysis::explain(&r, &causeway_analysis::ChainQuery::default()).unwrap();
        let broken = causeway_analysis::invariants::check(&r, &e).unwrap();
        assert!(broken.is_empty(), "{name}: {broken:#?}");

        table.push(format!(
            "{:<40} {:>6} = {:<6} {:>4} = {:<4} {:>4} = {:<4} {:>3} = {:<3} {:>4} = {:<4} {:>3} = {:<3} {:>4} = {:<4}",
            name.trim_end_matches(".sqlite.gz"),
            want.runtime,
            got.runtime,
            want.kernels,
            got.kernels,
            want.memcpys,
            got.memcpys,
            want.memsets,
            got.memsets,
            want.syncs,
            got.syncs,
            want.nvtx,
            got.nvtx,
            want.osrt,
            got.osrt
        ));
        drop(r);
        std::fs::remove_file(&out).unwrap();
    }
    eprintln!("{}", table.join("\n"));
}

#[test]
fn nvtx_ranges_keep_their_domain_and_backtrace_rows_are_not_calls() {
    let dir = tempfile::tempdir().unwrap();
    let src = export(dir.path(), EXPORTS[0]);
    let out = dir.path().join("out.duckdb");
    let reports = import(&[src], &out, false, &ImportOptions::default(), &mut |_| {}).unwrap();
    let r = Reader::open(&out).unwrap();
    // MPI's ranges are in the domain the MPI wrappers created; the app's own in the default one.
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM ranges WHERE kind = 'nvtx' AND name = 'MPI:MPI_Send'"
        ),
        10
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM ranges WHERE kind = 'nvtx' AND name = 'saxpy' AND depth = 0"
        ),
        5
    );
    let nsys = reports[0].nsys.as_ref().unwrap();
    assert_eq!(
        nsys.not_imported
            .get("CUPTI_ACTIVITY_KIND_RUNTIME/eventClass 67 (CUDA backtrace)"),
        Some(&38)
    );
    assert_eq!(
        nsys.not_imported.get("NVTX_EVENTS/NvtxDomainCreate"),
        Some(&1)
    );
    assert_eq!(nsys.version, "2022.2.1.31");
    // cudaHostRegister is not a catalogue op: counted, not stored.
    assert_eq!(
        count(
            &r,
            "SELECT sum(count)::BIGINT FROM drops WHERE kind = 'import_skipped'
             AND detail LIKE '%cudaHostRegister %'"
        ),
        9
    );
    assert_eq!(text(&r, "SELECT comm FROM processes"), "./saxpy-mpi-cuda");
}

/// An export written here to the schema nsys documents, with what the real ones lack: nested
/// push/pop ranges, a start/end range, NVTX text by id only, memsets, per-thread-stream and
/// driver calls, a call the catalogue lacks, a renumbered GPU, no session start and no enum
/// tables.
fn built_export(path: &Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
             eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
             nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
         -- Driver calls in a table of their own, as some nsys versions export them.
         CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME;
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
             deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
             correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
             shortName INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
             gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
             blockZ INTEGER NOT NULL);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
             deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
             correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
             bytes INTEGER NOT NULL, memKind INTEGER);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
             rangeId INTEGER, category INTEGER, color INTEGER, globalTid INTEGER,
             endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
         CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT);
         CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER,
             uuid TEXT, numMultiprocessors INTEGER);
         -- pid 4242, threads 4242 (main) and 4243.
         INSERT INTO StringIds VALUES (1, 'python'), (2, 'loader'),
             (10, 'cudaLaunchKernel_ptsz_v7000'), (11, 'cudaMemsetAsync_v3020'),
             (12, 'cuLaunchKernel'), (13, 'cudaEventQuery_v3020'),
             (20, 'void gemm<float>(float*, int)'), (21, 'gemm'),
             (14, 'cuMemcpyHtoDAsync_v2'), (30, 'ProfilerStep#7'), (31, 'forward'), (32, 'prefetch');
         INSERT INTO ThreadNames VALUES (1, 0, 4242 * 16777216 + 4242), (2, 0, 4242 * 16777216 + 4243);
         INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
             (100, 110, 0, 4242 * 16777216 + 4242, 1, 10, 0, NULL),
             (120, 125, 0, 4242 * 16777216 + 4242, 2, 11, 0, NULL),
             (130, 131, 1, 4242 * 16777216 + 4242, 3, 12, 0, NULL),
             (140, 141, 0, 4242 * 16777216 + 4242, 4, 13, 600, NULL);
         INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER VALUES (170, 175, 1, 4242 * 16777216 + 4243, 5, 14, 0, NULL);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
             (200, 300, 0, 1, 7, 1, 4242 * 16777216, 20, 21, 4, 2, 1, 128, 1, 1),
             (310, 320, 0, 1, 7, 3, 4242 * 16777216, 20, 21, 1, 1, 1, 32, 1, 1);
         INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (150, 160, 0, 1, 7, 2, 4242 * 16777216, 0, 4096, 2);
         INSERT INTO NVTX_EVENTS VALUES
             (90, 400, 59, NULL, NULL, NULL, 4242 * 16777216 + 4242, NULL, 30, NULL),
             (95, 350, 59, NULL, NULL, NULL, 4242 * 16777216 + 4242, NULL, 31, NULL),
             (50, 500, 60, 1, NULL, NULL, 4242 * 16777216 + 4243, 4242 * 16777216 + 4242, 32, NULL),
             (60, NULL, 59, NULL, NULL, NULL, 4242 * 16777216 + 4243, NULL, 30, NULL),
             (70, NULL, 34, NULL, NULL, NULL, 4242 * 16777216 + 4242, NULL, 31, NULL);
         -- CUDA_VISIBLE_DEVICES=1: the process's device 0 is the second GPU.
         INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA A100-SXM4-80GB'), (0, 1, 'NVIDIA H100 80GB HBM3');
         INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 0, 4242, '', 132), (0, 0, 999, '', 108);",
    )
    .unwrap();
}

#[test]
fn an_export_built_to_the_documented_schema_imports_whole() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("built.sqlite");
    built_export(&src);
    let out = dir.path().join("out.duckdb");
    let reports = import(
        std::slice::from_ref(&src),
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let rep = &reports[0];
    let r = Reader::open(&out).unwrap();
    // Without TARGET_INFO_SESSION_START_TIME, times stay ns since the capture's start.
    assert_eq!(count(&r, "SELECT min(timestamp) FROM events"), 100);
    assert_eq!(rep.nodes, vec!["built".to_string()]);
    let ops: String = text(
        &r,
        "SELECT string_agg(op || '/' || arg0 || '/' || arg1 || '/' || comm, ' ' ORDER BY timestamp) FROM events",
    );
    assert_eq!(
        ops,
        "cudaLaunchKernel/0/8/python cudaMemsetAsync/4096/0/python cuLaunchKernel/0/1/python cuMemcpyAsync/0/0/loader"
    );
    assert_eq!(rep.skipped, 1, "cudaEventQuery is not in the catalogue");
    let gpu: String = text(
        &r,
        "SELECT string_agg(kind || ':' || name || ':' || coalesce(bytes, -1) || ':' || coalesce(grid_x, 0), ' ' ORDER BY start_ns) FROM gpu_activity",
    );
    assert_eq!(
        gpu,
        "memset:Memset (Device):4096:0 kernel:gemm<float>:-1:4 kernel:gemm<float>:-1:1"
    );
    assert_eq!(
        text(
            &r,
            "SELECT raw_name FROM gpu_activity WHERE kind = 'kernel' LIMIT 1"
        ),
        "void gemm<float>(float*, int)"
    );
    let ranges: String = text(
        &r,
        "SELECT string_agg(name || '@' || tid || ':' || depth, ' ' ORDER BY start_ns) FROM ranges WHERE kind = 'nvtx'",
    );
    assert_eq!(
        ranges,
        "prefetch@4243:0 ProfilerStep#7@4242:0 forward@4242:1"
    );
    // torch.profiler's step range, as NVTX, is a step; the unterminated one is not.
    assert_eq!(
        text(
            &r,
            "SELECT string_agg(step || '@' || tid || ':' || start_ns - (SELECT min(start_ns) FROM ranges) || '-' || end_ns - (SELECT min(start_ns) FROM ranges) || ':' || source, ' ') FROM steps"
        ),
        "7@4242:40-350:nvtx"
    );
    assert_eq!(
        text(&r, "SELECT gpu_model FROM sessions"),
        "NVIDIA H100 80GB HBM3"
    );
    let nsys = rep.nsys.as_ref().unwrap();
    assert_eq!(nsys.session_start_ns, None);
    assert_eq!(
        nsys.not_imported
            .get("NVTX_EVENTS/NvtxPushPopRange without an end"),
        Some(&1)
    );
    assert_eq!(nsys.not_imported.get("NVTX_EVENTS/NvtxMark"), Some(&1));
    assert_eq!(
        (nsys.memsets, nsys.kernels, nsys.nvtx_ranges, nsys.steps),
        (1, 2, 3, 1)
    );
    causeway_analysis::explain(&r, &causeway_analysis::ChainQuery::default()).unwrap();
}

/// Issue 52: an export's NVTX push/pop ranges are steps by the collector's rule: thread 4243's
/// outermost `iteration` ranges, repeated, are steps 0-2 (its nested `fwd` and a start/end
/// `iteration` are not), beside thread 4242's `ProfilerStep#7`.
#[test]
fn repeated_outermost_nvtx_ranges_of_an_export_are_steps() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("steps.sqlite");
    built_export(&src);
    let t = "4242 * 16777216 + 4243";
    Connection::open(&src)
        .unwrap()
        .execute_batch(&format!(
            "INSERT INTO StringIds VALUES (40, 'iteration'), (41, 'fwd');
             INSERT INTO NVTX_EVENTS VALUES
                 (600, 700, 59, NULL, NULL, NULL, {t}, NULL, 40, NULL),
                 (610, 650, 59, NULL, NULL, NULL, {t}, NULL, 41, NULL),
                 (700, 800, 59, NULL, NULL, NULL, {t}, NULL, 40, NULL),
                 (800, 900, 59, NULL, NULL, NULL, {t}, NULL, 40, NULL),
                 (900, 950, 60, 2, NULL, NULL, {t}, {t}, 40, NULL);"
        ))
        .unwrap();
    let out = dir.path().join("out.duckdb");
    let rep = crate::import_one(&src, &out);
    let r = Reader::open(&out).unwrap();
    assert_eq!(
        text(
            &r,
            "SELECT string_agg(step || '@' || tid || ':' || start_ns || '-' || end_ns || ':' || source, ' ' ORDER BY tid, start_ns) FROM steps"
        ),
        "7@4242:90-400:nvtx 0@4243:600-700:nvtx 1@4243:700-800:nvtx 2@4243:800-900:nvtx"
    );
    assert_eq!(rep.nsys.as_ref().unwrap().steps, 4);
}

/// Imports `src` expecting a failure: one line naming the file, a hint, and no output file.
fn refused(src: &Path) -> String {
    let out = src.with_extension("duckdb");
    let err = import(
        &[src.to_path_buf()],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(
        msg.contains(&src.display().to_string()),
        "names the file: {msg}"
    );
    assert!(err.hint().is_some(), "has a hint: {msg}");
    assert!(!out.exists(), "nothing left behind: {msg}");
    let leftovers: Vec<_> = std::fs::read_dir(src.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("duckdb"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    msg
}

#[test]
fn bad_exports_are_refused_in_one_line_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let real = export(dir.path(), EXPORTS[1]);
    let bytes = std::fs::read(&real).unwrap();

    // An nsys version without the string table.
    let no_strings = dir.path().join("no-strings.sqlite");
    std::fs::copy(&real, &no_strings).unwrap();
    Connection::open(&no_strings)
        .unwrap()
        .execute_batch("DROP TABLE StringIds")
        .unwrap();
    let msg = refused(&no_strings);
    assert!(msg.ends_with("nsys export lacks table StringIds"), "{msg}");

    // One whose kernel table names its kernels otherwise.
    let no_names = dir.path().join("no-names.sqlite");
    std::fs::copy(&real, &no_names).unwrap();
    Connection::open(&no_names)
        .unwrap()
        .execute_batch("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName")
        .unwrap();
    let msg = refused(&no_names);
    assert!(
        msg.ends_with("table CUPTI_ACTIVITY_KIND_KERNEL lacks column demangledName"),
        "{msg}"
    );

    // An export of nothing the store holds.
    let empty = dir.path().join("empty.sqlite");
    Connection::open(&empty)
        .unwrap()
        .execute_batch(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT);",
        )
        .unwrap();
    assert!(refused(&empty).contains("holds no CUDA, NVTX or OS runtime trace"));

    // Cut short, and damaged in the middle.
    let cut = dir.path().join("cut.sqlite");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(refused(&cut).contains("damaged or truncated"));
    let mut damaged = bytes.clone();
    let mid = bytes.len() / 2;
    for b in &mut damaged[mid..mid + 8192] {
        *b ^= 0x5a;
    }
    let damaged_path = dir.path().join("damaged.sqlite");
    std::fs::write(&damaged_path, damaged).unwrap();
    assert!(refused(&damaged_path).contains("damaged or truncated"));
}
