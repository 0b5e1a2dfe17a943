//! Import of the real PyTorch profiler (Kineto) traces in ../shared/investigations/kineto, and of
//! traces designed here (annotation steps, copy directions, Python stacks): every
//! count the store holds is checked against the source file, counted by an independent reader
//! (serde_json's `Value` over the decompressed file), and bad JSON is refused in one line with
//! nothing left behind.

use causeway_hint::Hint as _;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use causeway_import::kineto::JsonLimits;
use causeway_import::{ImportOptions, import};
use causeway_store::Reader;
use serde_json::Value;

/// The traces: `$CAUSEWAY_SHARED_DIR/kineto`, else ../shared/investigations/kineto.
fn kineto_dir() -> PathBuf {
    let dir = std::env::var_os("CAUSEWAY_SHARED_DIR")
        .map(|d| PathBuf::from(d).join("kineto"))
        .unwrap_or_else(|| crate::shared("kineto"));
    assert!(
        dir.is_dir(),
        "{} is missing: these tests read the Kineto traces from ../shared/investigations/kineto",
        dir.display()
    );
    dir
}

fn traces() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(kineto_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 8, "the eight traces of the README");
    v
}

/// What the source file holds, counted from its parsed JSON.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    runtime: i64,
    kernels: i64,
    memcpys: i64,
    /// Device copies host-to-device (`Memcpy HtoD (...)`) queued by a call in the file (one
    /// trace has a copy whose call came before the profiling window).
    htod: i64,
    memsets: i64,
    steps: i64,
    ranges: i64,
    /// Runtime calls by name.
    calls: BTreeMap<String, i64>,
}

fn source_counts(path: &Path) -> Counts {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut text)
        .unwrap();
    let doc: Value = serde_json::from_slice(&text).unwrap();
    let mut c = Counts::default();
    let mut htod = Vec::new();
    let mut called = std::collections::HashSet::new();
    for e in doc["traceEvents"].as_array().unwrap() {
        if e["ph"] != "X" {
            continue;
        }
        let name = e["name"].as_str().unwrap_or("");
        match e["cat"].as_str().unwrap_or("") {
            "cuda_runtime" | "cuda_driver" => {
                c.runtime += 1;
                *c.calls.entry(name.to_string()).or_default() += 1;
                called.insert(e["args"]["correlation"].as_i64());
            }
            "kernel" => c.kernels += 1,
            "gpu_memcpy" => {
                c.memcpys += 1;
                if name.starts_with("Memcpy HtoD ") {
                    htod.push(e["args"]["correlation"].as_i64());
                }
            }
            "gpu_memset" => c.memsets += 1,
            cat @ ("cpu_op" | "user_annotation" | "python_function") => {
                c.ranges += 1;
                if cat != "python_function" && name.starts_with("ProfilerStep#") {
                    c.steps += 1;
                }
            }
            _ => {}
        }
    }
    c.htod = htod.iter().filter(|k| called.contains(k)).count() as i64;
    c
}

fn count(r: &Reader, sql: &'static str) -> i64 {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap()
}

#[test]
fn every_real_trace_imports_with_the_counts_of_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = vec![format!(
        "{:<40} {:>17} {:>15} {:>13} {:>13} {:>11} {:>9} {:>15}",
        "trace (source = store)",
        "runtime calls",
        "stored+skipped",
        "kernels",
        "memcpys",
        "HtoD",
        "memsets",
        "ProfilerSteps"
    )];
    for src in traces() {
        let want = source_counts(&src);
        let out = dir.path().join("one.duckdb");
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
        let events = count(
            &r,
            "SELECT count(*) FROM events WHERE source IN ('CUDA', 'DRIVER', 'GRAPH')",
        );
        let skipped = count(
            &r,
            "SELECT coalesce(sum(count), 0)::BIGINT FROM drops WHERE kind = 'import_skipped'",
        );
        let invalid = count(
            &r,
            "SELECT coalesce(sum(count), 0)::BIGINT FROM drops WHERE kind = 'import_invalid'",
        );
        let got = Counts {
            runtime: events + skipped + invalid,
            kernels: count(
                &r,
                "SELECT count(*) FROM gpu_activity WHERE kind = 'kernel'",
            ),
            memcpys: count(
                &r,
                "SELECT count(*) FROM gpu_activity WHERE kind = 'memcpy'",
            ),
            // Each copy call has the direction of its device copy (issue 52).
            htod: count(
                &r,
                "SELECT count(*) FROM events WHERE op LIKE '%Memcpy%' AND op NOT LIKE '%Peer%' AND arg1 = 1",
            ),
            memsets: count(
                &r,
                "SELECT count(*) FROM gpu_activity WHERE kind = 'memset'",
            ),
            steps: count(&r, "SELECT count(*) FROM steps WHERE source = 'profiler'"),
            ranges: count(&r, "SELECT count(*) FROM ranges"),
            calls: want.calls.clone(),
        };
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(got, want, "{name}");
        assert_eq!(invalid, 0, "{name}: no event of a real trace is impossible");
        assert_eq!(rep.events as i64, events, "{name}");
        assert_eq!(rep.skipped as i64, skipped, "{name}");
        // Every call whose name is a catalogue op is stored under it, one for one; the
        // extended launch (CUDA's cudaLaunchKernelEx family) under the plain launch.
        let mut by_op: BTreeMap<&str, i64> = BTreeMap::new();
        for (call, n) in &want.calls {
            let op = match call.as_str() {
                "cudaLaunchKernelExC" | "cudaLaunchKernelEx" => "cudaLaunchKernel",
                c => c,
            };
            *by_op.entry(op).or_default() += n;
        }
        for (call, n) in &by_op {
            if causeway_store::catalog::op_by_name(call).is_some() {
                let stored: i64 = r
                    .prepare_trusted("SELECT count(*) FROM events WHERE op = ?")
                    .unwrap()
                    .query_row([call], |row| row.get(0))
                    .unwrap();
                assert_eq!(stored, *n, "{name}: {call}");
            }
        }
        // The device work joins its launching call by correlation, and only calls of its kind
        // (a graph launch runs kernels, copies and memsets).
        let joined = count(
            &r,
            "SELECT count(*) FROM gpu_activity g JOIN correlations c USING (node, pid, correlation)
             JOIN events e USING (node, seq)",
        );
        let mismatched: String = r
            .prepare_trusted(
                "SELECT coalesce(string_agg(DISTINCT g.kind || ' <- ' || e.op, ', '), '')
                 FROM gpu_activity g JOIN correlations c USING (node, pid, correlation)
                 JOIN events e USING (node, seq)
                 WHERE e.op <> 'cudaGraphLaunch' AND (
                       (g.kind = 'kernel' AND e.op NOT IN ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx'))
                    OR (g.kind = 'memcpy' AND e.op NOT LIKE '%Memcpy%')
                    OR (g.kind = 'memset' AND e.op NOT LIKE '%Memset%'))",
            )
            .unwrap()
            .query_row([], |row| row.get(0))
            .unwrap();
        assert!(joined > 0, "{name}");
        assert_eq!(mismatched, "", "{name}");
        // distributedInfo's rank is on every stored call and on the session.
        let ranks = count(
            &r,
            "SELECT count(*) FROM events e JOIN sessions s USING (node) WHERE e.rank = s.rank",
        );
        assert_eq!(ranks, events, "{name}");
        table.push(format!(
            "{:<40} {:>8} = {:<6} {:>8}+{:<6} {:>6} = {:<5} {:>6} = {:<5} {:>5} = {:<4} {:>4} = {:<3} {:>7} = {:<5}",
            name.trim_end_matches(".pt.trace.json.gz"),
            want.runtime,
            got.runtime,
            events,
            skipped,
            want.kernels,
            got.kernels,
            want.memcpys,
            got.memcpys,
            want.htod,
            got.htod,
            want.memsets,
            got.memsets,
            want.steps,
            got.steps
        ));
        std::fs::remove_file(&out).unwrap();
    }
    eprintln!("{}", table.join("\n"));
}

#[test]
fn timestamps_are_the_trace_clock_in_ns_with_base_time_added_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.duckdb");
    let nccl = kineto_dir().join("a100-rank0-of-2-nccl.pt.trace.json.gz");
    let ns_resolution = kineto_dir().join("v100-rank0-of-1.pt.trace.json.gz");
    import(
        &[nccl, ns_resolution],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let r = Reader::open(&out).unwrap();
    // A kernel of the ns-resolution trace, "ts": 1712195495505582.988, "dur": 4.928 (19
    // digits: an f64 holds 1712195495505583.0, 12 ns off), launched by correlation 135071.
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM gpu_activity WHERE node = 'twshared39868.02.pnb3.facebook.com'
             AND start_ns = 1712195495505582988 AND end_ns - start_ns = 4928 AND kind = 'kernel'
             AND correlation = 135071 AND grid_y = 106"
        ),
        1
    );
    // Its launch, "ts": 1712195495505543.140 (an f64 holds 1712195495505543.25).
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM events e JOIN correlations c USING (node, seq)
             WHERE e.node = 'twshared39868.02.pnb3.facebook.com' AND e.op = 'cudaLaunchKernel'
               AND e.timestamp = 1712195495505543140 AND e.duration = 41768
               AND c.correlation = 135071"
        ),
        1
    );
    // The NCCL trace's ts are microseconds after its baseTimeNanoseconds (written after the
    // events): a cudnn kernel with "ts": 4458676983543.183, "dur": 41.407.
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM gpu_activity WHERE node = 'a100-rank0-of-2-nccl'
             AND start_ns = 1711964646000000000 + 4458676983543183 AND end_ns - start_ns = 41407"
        ),
        1
    );
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM sessions WHERE rank = 0 AND world_size = 2 AND gpu_model = 'NVIDIA A100-PG509-200'"
        ),
        1
    );
    // Ranges nest: every step range is outermost on its thread.
    assert_eq!(
        count(
            &r,
            "SELECT count(*) FROM ranges WHERE name LIKE 'ProfilerStep#%' AND depth <> 0"
        ),
        0
    );
    assert!(count(&r, "SELECT max(depth) FROM ranges") > 3);
}

#[test]
fn a_directory_of_ranks_imports_each_rank_as_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = dir.path().join("ranks");
    std::fs::create_dir(&ranks).unwrap();
    for f in [
        "rank0-of-128-sampled.pt.trace.json.gz",
        "rank1-of-128-sampled.pt.trace.json.gz",
    ] {
        std::fs::copy(kineto_dir().join(f), ranks.join(f)).unwrap();
    }
    std::fs::write(ranks.join("README.md"), "not a trace\n").unwrap();
    let out = dir.path().join("ranks.duckdb");
    let reports = import(
        &[ranks],
        &out,
        false,
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(reports.len(), 2);
    let r = Reader::open(&out).unwrap();
    assert_eq!(
        count(
            &r,
            "SELECT count(DISTINCT node || ':' || rank::VARCHAR) FROM sessions WHERE world_size = 128"
        ),
        2
    );
}

/// Imports `src` expecting a failure: one line naming the file, a hint, and no output file.
fn refused(src: &Path, limits: JsonLimits) -> String {
    let out = src.with_extension("duckdb");
    let opts = ImportOptions {
        json_limits: limits,
        ..ImportOptions::default()
    };
    let err = import(&[src.to_path_buf()], &out, false, &opts, &mut |_| {}).unwrap_err();
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

fn gzip(path: &Path, bytes: &[u8]) {
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::best(),
    );
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap();
}

#[test]
fn bad_json_is_refused_in_one_line_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let limits = JsonLimits::default();

    // A real trace cut short, gzipped and plain.
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(kineto_dir().join("rank0-of-128-sampled.pt.trace.json.gz")).unwrap(),
    )
    .read_to_end(&mut text)
    .unwrap();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    assert!(refused(&cut, limits).contains("truncated JSON"));
    let real = std::fs::read(kineto_dir().join("rank0-of-128-sampled.pt.trace.json.gz")).unwrap();
    let cut_gz = dir.path().join("cut.json.gz");
    std::fs::write(&cut_gz, &real[..real.len() / 2]).unwrap();
    assert!(refused(&cut_gz, limits).contains("truncated"));

    // Valid JSON of another schema.
    let other = dir.path().join("other.json");
    std::fs::write(&other, br#"{"name": "package", "version": "1.0"}"#).unwrap();
    assert!(refused(&other, limits).contains("not a PyTorch profiler trace"));

    // Not JSON at all past its first brace.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{traceEvents: nope}").unwrap();
    assert!(refused(&junk, limits).contains("not valid JSON"));

    // A nesting bomb.
    let deep = dir.path().join("deep.json");
    let bomb = format!(
        r#"{{"traceEvents": [{{"ph": "X", "args": {}1{}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    std::fs::write(&deep, bomb).unwrap();
    assert!(refused(&deep, limits).contains("deeper than 64 levels"));

    // A huge string (the cap lowered so that the test writes 2 MiB, not gigabytes).
    let long = dir.path().join("long.json.gz");
    let mut doc = br#"{"traceEvents": [{"ph": "X", "name": ""#.to_vec();
    doc.extend(std::iter::repeat_n(b'a', 2 << 20));
    doc.extend(br#""}]}"#);
    gzip(&long, &doc);
    let small = JsonLimits {
        max_string: 1 << 20,
        ..limits
    };
    assert!(refused(&long, small).contains("string longer than 1048576 bytes"));

    // A gzip bomb: 64 MiB of spaces in about 64 KiB.
    let bomb = dir.path().join("bomb.json.gz");
    let mut doc = b"{\"traceEvents\": [".to_vec();
    doc.extend(std::iter::repeat_n(b' ', 64 << 20));
    doc.extend(b"]}");
    gzip(&bomb, &doc);
    let capped = JsonLimits {
        max_bytes: 1 << 30,
        ..limits
    };
    assert!(refused(&bomb, capped).contains("gzip bomb"));

    // Damaged gzip data.
    let mut damaged = real.clone();
    for b in &mut damaged[100..400] {
        *b ^= 0x5a;
    }
    let damaged_path = dir.path().join("damaged.json.gz");
    std::fs::write(&damaged_path, damaged).unwrap();
    let msg = refused(&damaged_path, limits);
    assert!(msg.contains("gzip") || msg.contains("JSON"), "{msg}");
}

/// One complete event (µs on the profiler's clock, `baseTimeNanoseconds` 0).
fn x(cat: &str, name: &str, tid: i64, ts: i64, dur: i64, args: &str) -> String {
    let pid = if matches!(cat, "kernel" | "gpu_memcpy") {
        0
    } else {
        100
    };
    format!(
        r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid}, "ts": {ts}, "dur": {dur}, "args": {{{args}}}}}"#
    )
}

/// A training loop of pid 100 recorded with `with_stack=True`, in µs, and without
/// `ProfilerStep#N` unless `profiler_step`:
///
/// - thread 1: `record_function("train_step")` three times, [0, 1000], [1000, 2000],
///   [2000, 3000], each holding a `forward` annotation, all inside the Python frame
///   `train.py(40): <module>` [0, 3000] (so the steps are outermost among the annotations, not
///   among all ranges); `train.py(12): read_loss` [100, 200] holds a built-in method [140, 190]
///   and a `cudaMemcpyAsync` at 150 whose device copy is `Memcpy DtoH (Device -> Pageable)`
///   (written before the call); a `cudaLaunchKernel` at 300 with only `<module>` around it; a
///   `cudaMemcpyAsync` at 1100 copying `HtoD (Pinned -> Device)`; a `cudaMemcpy` at 2100
///   without a device copy in the trace;
/// - thread 2: NVTX-style `step 12` [0, 500] and `step 13` [500, 900];
/// - thread 3: `load` and `save` once each: no cadence, no steps.
fn designed(profiler_step: bool) -> String {
    let mut ev = vec![
        x(
            "python_function",
            "train.py(40): <module>",
            1,
            0,
            3000,
            r#""Python id": 1"#,
        ),
        x(
            "python_function",
            "train.py(12): read_loss",
            1,
            100,
            100,
            r#""Python id": 2, "Python parent id": 1"#,
        ),
        x(
            "python_function",
            "<built-in method item of Tensor object at 0x7f00>",
            1,
            140,
            50,
            r#""Python id": 3, "Python parent id": 2"#,
        ),
        x(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            7,
            170,
            5,
            r#""device": 0, "stream": 7, "correlation": 1, "bytes": 4096"#,
        ),
        x(
            "cuda_runtime",
            "cudaMemcpyAsync",
            1,
            150,
            10,
            r#""correlation": 1"#,
        ),
        x(
            "cuda_runtime",
            "cudaLaunchKernel",
            1,
            300,
            5,
            r#""correlation": 2"#,
        ),
        x(
            "kernel",
            "gemm",
            7,
            310,
            50,
            r#""device": 0, "stream": 7, "correlation": 2"#,
        ),
        x(
            "cuda_runtime",
            "cudaMemcpyAsync",
            1,
            1100,
            10,
            r#""correlation": 3"#,
        ),
        x(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            7,
            1120,
            5,
            r#""device": 0, "stream": 7, "correlation": 3, "bytes": 8192"#,
        ),
        x(
            "cuda_runtime",
            "cudaMemcpy",
            1,
            2100,
            10,
            r#""correlation": 4"#,
        ),
        x("user_annotation", "step 12", 2, 0, 500, ""),
        x("user_annotation", "step 13", 2, 500, 400, ""),
        x("user_annotation", "load", 3, 0, 100, ""),
        x("user_annotation", "save", 3, 200, 100, ""),
    ];
    for i in 0..3 {
        ev.push(x("user_annotation", "train_step", 1, i * 1000, 1000, ""));
        ev.push(x("user_annotation", "forward", 1, i * 1000 + 400, 300, ""));
    }
    if profiler_step {
        ev.push(x("user_annotation", "ProfilerStep#5", 1, 0, 3000, ""));
    }
    format!(
        r#"{{"schemaVersion": 1, "traceEvents": [{}]}}"#,
        ev.join(",\n")
    )
}

/// Imports `designed(profiler_step)`; the reader of the store.
fn import_designed(dir: &Path, profiler_step: bool) -> Reader {
    let src = dir.join(format!("designed-{profiler_step}.pt.trace.json"));
    std::fs::write(&src, designed(profiler_step)).unwrap();
    let out = src.with_extension("duckdb");
    crate::import_one(&src, &out);
    Reader::open(&out).unwrap()
}

fn text(r: &Reader, sql: &'static str) -> String {
    r.prepare_trusted(sql)
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap()
}

/// Issue 52: annotation ranges other than `ProfilerStep#N` are steps by the collector's NVTX
/// rule (per thread, outermost annotations with an index, else one name repeated); where the
/// trace has `ProfilerStep#N`, those are its steps.
#[test]
fn annotation_ranges_are_steps_where_the_trace_has_no_profiler_step() {
    let dir = tempfile::tempdir().unwrap();
    let r = import_designed(dir.path(), false);
    assert_eq!(
        text(
            &r,
            "SELECT string_agg(tid || '#' || step || '@' || start_ns // 1000 || '-' || end_ns // 1000 || ':' || source, ' ' ORDER BY tid, start_ns) FROM steps"
        ),
        "1#0@0-1000:nvtx 1#1@1000-2000:nvtx 1#2@2000-3000:nvtx 2#12@0-500:nvtx 2#13@500-900:nvtx"
    );
    let r = import_designed(dir.path(), true);
    assert_eq!(
        text(
            &r,
            "SELECT string_agg(tid || '#' || step || ':' || source, ' ') FROM steps"
        ),
        "1#5:profiler"
    );
}

/// Issue 52: a copy call's direction (`arg1`) is the device copy's it is tied to by
/// correlation id, wherever the copy is in the file; a call without one keeps 0.
#[test]
fn copy_calls_take_their_direction_from_the_device_copy() {
    let dir = tempfile::tempdir().unwrap();
    let r = import_designed(dir.path(), false);
    assert_eq!(
        text(
            &r,
            "SELECT string_agg(op || '/' || arg1, ' ' ORDER BY timestamp) FROM events WHERE op LIKE '%Memcpy%'"
        ),
        "cudaMemcpyAsync/2 cudaMemcpyAsync/1 cudaMemcpy/0"
    );
}

/// Issue 52: in a trace recorded with `with_stack=True`, each call's Python stack is the chain
/// of `python_function` frames open around it on its thread (built-in methods are not frames),
/// stored as `trace --stacks` stores one, and a finding's call sites name it.
#[test]
fn calls_get_the_python_frames_around_them_and_sites_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let r = import_designed(dir.path(), false);
    assert_eq!(
        text(
            &r,
            "SELECT string_agg(e.op || ':' || f.depth || ':' || f.file || ':' || f.line || ' ' || f.function, ', ' ORDER BY e.timestamp, f.depth)
             FROM events e JOIN python_frames f USING (stack_hash)"
        ),
        "cudaMemcpyAsync:0:train.py:12 read_loss, cudaMemcpyAsync:1:train.py:40 <module>, \
         cudaLaunchKernel:0:train.py:40 <module>, cudaMemcpyAsync:0:train.py:40 <module>, \
         cudaMemcpy:0:train.py:40 <module>"
    );
    assert_eq!(
        count(&r, "SELECT count(*) FROM python_stacks WHERE status = 'ok'"),
        2
    );
    // A finding about the thread's device-to-host copies names where they come from.
    let scope = causeway_analysis::sites::Scope::thread(
        "designed-false",
        100,
        1,
        &[causeway_analysis::budget::CallClass::CopyD2h],
        "copies",
    );
    let mut chains = [causeway_analysis::detectors::Finding {
        detector: "slow_copies",
        node: "designed-false".into(),
        time_lost_ns: 0,
        severity: causeway_analysis::chains::Severity::Low,
        summary: String::new(),
        root_cause: String::new(),
        explanation: String::new(),
        timeline: Vec::new(),
        recommendations: Vec::new(),
        evidence_sql: String::new(),
    }
    .into_chain()
    .at(scope)];
    let window = causeway_analysis::window::Window {
        from_ns: 0,
        until_ns: 3_000_000,
    };
    causeway_analysis::sites::cite(&r, &window, &mut chains).unwrap();
    let sites = chains[0].call_sites.as_ref().unwrap();
    assert_eq!((sites.calls, sites.calls_with_stack), (1, 1));
    assert!(
        chains[0]
            .explanation
            .contains("1 of 1 copies come from train.py:12 in read_loss"),
        "{}",
        chains[0].explanation
    );
}
