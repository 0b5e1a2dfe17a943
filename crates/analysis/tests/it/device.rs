//! GPU time measured on the device timeline (issue 52): a profiler trace written here with
//! every interval chosen, so the busy time, the unions per class and every idle stretch's
//! reason are known from its design; and, on the eight real Kineto traces, the host-side
//! estimate made with the device timeline stripped against what the device measured.

use std::path::{Path, PathBuf};

use causeway_analysis::device::DeviceTime;
use causeway_analysis::{ChainQuery, explain};
use causeway_store::Reader;

pub fn import(src: &Path, out: &Path) {
    causeway_import::import(
        &[src.to_path_buf()],
        out,
        false,
        &causeway_import::ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
}

/// µs on the profiler's clock (`baseTimeNanoseconds` 0).
pub fn x(cat: &str, name: &str, pid: i64, tid: i64, ts: i64, dur: i64, args: &str) -> String {
    format!(
        r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid}, "ts": {ts}, "dur": {dur}, "args": {{{args}}}}}"#
    )
}

/// One step of a training loop on one thread (pid 100, tid 1) and device 0, in µs:
///
/// - ranges: ProfilerStep#1 [0, 1000], the DataLoader [100, 300], `## forward ##` [300, 700];
/// - launches: gemm at 10 (runs [20, 100], stream 7), relu at 305 ([312, 400], stream 7), add
///   at 320 ([350, 450], stream 8, beside relu), a copy at 460 ([470, 480]), an NCCL kernel at
///   650 ([660, 800], stream 9).
///
/// The trace spans [10, 800] (its first call to its last device work): 790 µs. Busy: 80 + 138
/// (relu and add overlap) + 10 + 140 = 368 µs; compute 218, communication 140, memory 10.
/// Idle 422 µs:
/// - [10, 20]: gemm was launched at 10: queued work waited 10;
/// - [100, 312]: relu launched at 305: the host, in the DataLoader for 200 and in forward for
///   5, then queued 7;
/// - [450, 470]: the copy launched at 460: the host in forward 10, then queued 10;
/// - [480, 660]: the NCCL kernel launched at 650: the host in forward 170, then a collective
///   waited 10.
fn designed() -> String {
    let events = [
        x("user_annotation", "ProfilerStep#1", 100, 1, 0, 1000, ""),
        x(
            "cpu_op",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            100,
            1,
            100,
            200,
            "",
        ),
        x("user_annotation", "## forward ##", 100, 1, 300, 400, ""),
        x(
            "cuda_runtime",
            "cudaLaunchKernel",
            100,
            1,
            10,
            5,
            r#""correlation": 1"#,
        ),
        x(
            "cuda_runtime",
            "cudaLaunchKernel",
            100,
            1,
            305,
            5,
            r#""correlation": 2"#,
        ),
        x(
            "cuda_runtime",
            "cudaLaunchKernel",
            100,
            1,
            320,
            5,
            r#""correlation": 3"#,
        ),
        x(
            "cuda_runtime",
            "cudaMemcpyAsync",
            100,
            1,
            460,
            5,
            r#""correlation": 4"#,
        ),
        x(
            "cuda_runtime",
            "cudaLaunchKernel",
            100,
            1,
            650,
            5,
            r#""correlation": 5"#,
        ),
        x(
            "kernel",
            "gemm",
            0,
            7,
            20,
            80,
            r#""device": 0, "stream": 7, "correlation": 1"#,
        ),
        x(
            "kernel",
            "relu",
            0,
            7,
            312,
            88,
            r#""device": 0, "stream": 7, "correlation": 2"#,
        ),
        x(
            "kernel",
            "add",
            0,
            8,
            350,
            100,
            r#""device": 0, "stream": 8, "correlation": 3"#,
        ),
        x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            0,
            7,
            470,
            10,
            r#""device": 0, "stream": 7, "correlation": 4, "bytes": 4096"#,
        ),
        x(
            "kernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float",
            0,
            9,
            660,
            140,
            r#""device": 0, "stream": 9, "correlation": 5"#,
        ),
    ];
    format!(
        r#"{{"schemaVersion": 1, "distributedInfo": {{"rank": 2, "world_size": 4}}, "traceEvents": [{}]}}"#,
        events.join(",\n")
    )
}

fn device_of(db: &Path) -> DeviceTime {
    let r = Reader::open(db).unwrap();
    let e = explain(&r, &ChainQuery::default()).unwrap();
    let mut measured: Vec<DeviceTime> = e
        .devices
        .into_iter()
        .filter(|d| d.device.is_some())
        .collect();
    assert_eq!(measured.len(), 1, "{measured:#?}");
    measured.remove(0)
}

#[test]
fn busy_idle_and_reasons_are_those_of_the_design() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("designed.pt.trace.json");
    std::fs::write(&src, designed()).unwrap();
    let db = dir.path().join("designed.duckdb");
    import(&src, &db);
    let d = device_of(&db);
    let us = 1_000;
    assert_eq!(d.pid, 100);
    assert_eq!(d.rank, Some(2));
    assert_eq!(d.device, Some(0));
    assert_eq!(d.window_ns, 790 * us);
    assert_eq!((d.first_ns, d.last_ns), (Some(20 * us), Some(800 * us)));
    assert_eq!(d.activities, 5);
    assert_eq!(d.busy_ns, 368 * us);
    assert_eq!(
        (d.compute_ns, d.communication_ns, d.memory_ns),
        (218 * us, 140 * us, 10 * us)
    );
    assert_eq!(d.non_compute_ns, 150 * us);
    assert_eq!(d.gpu_idle_measured_pct, Some(53.4)); // 422 / 790
    assert_eq!(d.span_idle_pct, Some(52.8)); // (780 - 368) / 780
    let mut got: Vec<(&str, &str, &str, i64, i64)> = d
        .idle
        .iter()
        .map(|r| {
            (
                r.waiting_for.as_str(),
                r.reason.as_str(),
                r.detail.as_str(),
                r.gaps,
                r.ns / us,
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "dependency",
                "a collective waited (peers or another stream)",
                "",
                1,
                10
            ),
            (
                "dependency",
                "queued work waited (an event or stream wait)",
                "",
                3,
                27
            ),
            ("host", "CPU ops", "## forward ##", 3, 185),
            ("host", "input pipeline", "", 1, 200),
        ]
    );
    assert_eq!(d.host_wait_ns(), 385 * us);
    let streams: Vec<(i64, i64, i64, i64)> = d
        .streams
        .iter()
        .map(|s| (s.stream, s.busy_ns / us, s.kernels, s.copies))
        .collect();
    assert_eq!(
        streams,
        vec![(7, 178, 2, 1), (9, 140, 1, 0), (8, 100, 1, 0)]
    );
}

/// The PyTorch profiler traces of ../shared/investigations/kineto (CAUSEWAY_SHARED_DIR
/// overrides the folder), in name order.
pub fn kineto_traces() -> Vec<PathBuf> {
    let shared = std::env::var_os("CAUSEWAY_SHARED_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/investigations"),
        PathBuf::from,
    );
    let mut files: Vec<_> = std::fs::read_dir(shared.join("kineto"))
        .expect("../shared/investigations/kineto")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    files
}

/// The two real Nsight Systems exports the importer's tests carry (A100s, recorded by others:
/// crates/import/tests/data/README.md), unpacked into `dir`.
fn nsys_exports(dir: &Path) -> Vec<PathBuf> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../import/tests/data");
    let mut out = Vec::new();
    for name in [
        "nsys-2022.2-saxpy-mpi-cuda.sqlite",
        "nsys-2024.5-cloverleaf-cuda.sqlite",
    ] {
        let gz = std::fs::File::open(data.join(format!("{name}.gz"))).unwrap();
        let dst = dir.join(name);
        let mut f = std::fs::File::create(&dst).unwrap();
        std::io::copy(&mut flate2::read::GzDecoder::new(gz), &mut f).unwrap();
        out.push(dst);
    }
    out
}

/// The check of the host-side model on traces other people recorded: each Kineto trace (and
/// each real Nsight Systems export, whose loops do wait for the device) is imported, then copied with its device timeline deleted; the engine's host-side estimate on
/// the copy (same window) is compared with the idle the device measured. The estimate is a
/// range (what the host proves idle .. the window less what it proves busy): the measured idle
/// must lie in it on every trace, and where the range is narrow (`estimate_known`), its low end
/// within 5 percentage points. Where it is wide the host cannot know, and the table says so.
#[test]
fn the_host_side_estimate_holds_the_measured_idle() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = vec![format!(
        "{:<44} {:>4} {:>10} {:>18} {:>6}  host can tell",
        "trace", "rank", "measured", "host-side range", "diff"
    )];
    for (i, f) in kineto_traces()
        .into_iter()
        .chain(nsys_exports(dir.path()))
        .enumerate()
    {
        let f = &f;
        let db = dir.path().join(format!("k{i}.duckdb"));
        import(f, &db);
        let r = Reader::open(&db).unwrap();
        let e = explain(&r, &ChainQuery::default()).unwrap();
        let w = e.window;
        drop(r);
        let stripped = dir.path().join(format!("k{i}-stripped.duckdb"));
        std::fs::copy(&db, &stripped).unwrap();
        {
            let c = causeway_store::duckdb::Connection::open(&stripped).unwrap();
            c.execute_batch("DELETE FROM gpu_activity; CHECKPOINT;")
                .unwrap();
        }
        let r = Reader::open(&stripped).unwrap();
        let q = ChainQuery {
            window: causeway_analysis::WindowSpec::Range {
                from: Some(causeway_analysis::TimeRef::Absolute(w.from_ns)),
                until: Some(causeway_analysis::TimeRef::Absolute(w.until_ns)),
            },
            ..ChainQuery::default()
        };
        let blind = explain(&r, &q).unwrap();
        assert_eq!(blind.window, w);
        for m in e.devices.iter().filter(|d| d.device.is_some()) {
            let est = blind
                .devices
                .iter()
                .find(|d| d.pid == m.pid && d.node == m.node)
                .unwrap_or_else(|| panic!("{}: {:#?}", f.display(), blind.devices));
            assert!(est.device.is_none(), "the device timeline was deleted");
            // The estimate does not read the device timeline.
            assert_eq!(
                (est.gpu_idle_estimated_pct, est.gpu_idle_estimated_max_pct),
                (m.gpu_idle_estimated_pct, m.gpu_idle_estimated_max_pct)
            );
            let measured = m.gpu_idle_measured_pct.unwrap();
            let (lo, hi) = (est.gpu_idle_estimated_pct, est.gpu_idle_estimated_max_pct);
            assert!(
                lo - 0.1 <= measured && measured <= hi + 0.1,
                "{}: measured {measured}% outside the host-side range {lo}%..{hi}%",
                f.display()
            );
            if est.estimate_known {
                assert!(
                    (lo - measured).abs() <= 5.0,
                    "{}: measured {measured}%, estimated {lo}%",
                    f.display()
                );
            }
            let name = f.file_name().unwrap().to_string_lossy();
            table.push(format!(
                "{:<44} {:>4} {:>9.1}% {:>7.1}% .. {:>5.1}% {:>+5.1}  {}",
                name.trim_end_matches(".pt.trace.json.gz")
                    .trim_end_matches(".sqlite"),
                m.rank.map_or("-".into(), |r| r.to_string()),
                measured,
                lo,
                hi,
                lo - measured,
                if est.estimate_known {
                    "yes".to_string()
                } else {
                    format!("no: its waits for the device prove {:.1}% busy", 100.0 - hi)
                }
            ));
        }
    }
    println!("{}", table.join("\n"));
}

/// On the Kineto traces, every `device_idle` finding's evidence runs through the guard and
/// gives back the figures of its summary, and its reasons add up to the measured idle.
#[test]
fn device_idle_findings_come_back_from_their_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for (i, f) in kineto_traces().iter().enumerate() {
        let db = dir.path().join(format!("k{i}.duckdb"));
        import(f, &db);
        let r = Reader::open(&db).unwrap();
        let e = explain(&r, &ChainQuery::default()).unwrap();
        for d in e.devices.iter().filter(|d| d.device.is_some()) {
            let sum: i64 = d.idle.iter().map(|r| r.ns).sum();
            assert_eq!(Some(sum), d.idle_ns(), "{}", f.display());
        }
        for c in e.chains.iter().filter(|c| c.detector == "device_idle") {
            seen += 1;
            let missing = crate::figures_missing(&r, c);
            assert!(
                missing.is_empty(),
                "{}: {missing:?} {}",
                f.display(),
                c.summary
            );
        }
    }
    assert!(seen >= 5, "{seen} device_idle findings");
}

/// Issue 52: where the device waits for the host in the DataLoader, the finding says the
/// DataLoader's share of the mean step, and the figures come back from its evidence rows. Four
/// steps of 1000 µs (pid 100, tid 1), each spending its first 400 µs in the DataLoader, then
/// launching one kernel that runs [410, 990] of the step: 40% of the mean step.
#[test]
fn the_dataloaders_share_of_the_step_comes_back_from_the_evidence() {
    let mut events = Vec::new();
    for i in 0..4 {
        let s = i * 1000;
        events.push(x(
            "user_annotation",
            &format!("ProfilerStep#{i}"),
            100,
            1,
            s,
            1000,
            "",
        ));
        events.push(x(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            100,
            1,
            s,
            400,
            "",
        ));
        let corr = format!(r#""correlation": {}"#, i + 1);
        events.push(x(
            "cuda_runtime",
            "cudaLaunchKernel",
            100,
            1,
            s + 400,
            5,
            &corr,
        ));
        events.push(x(
            "kernel",
            "gemm",
            0,
            7,
            s + 410,
            580,
            &format!(r#""device": 0, "stream": 7, {corr}"#),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("input.pt.trace.json");
    std::fs::write(
        &src,
        format!(
            r#"{{"schemaVersion": 1, "traceEvents": [{}]}}"#,
            events.join(",\n")
        ),
    )
    .unwrap();
    let db = dir.path().join("input.duckdb");
    import(&src, &db);
    let r = Reader::open(&db).unwrap();
    let e = explain(&r, &ChainQuery::default()).unwrap();
    let c = e
        .chains
        .iter()
        .find(|c| c.detector == "device_idle")
        .expect("a device_idle finding");
    let d = causeway_analysis::detectors::d;
    let want = format!(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ took 40.0% of the mean step, {} of {}",
        d(400_000),
        d(1_000_000)
    );
    assert!(c.summary.ends_with(&want), "{}", c.summary);
    let g = causeway_sqlguard::guard(&c.evidence_sql, r.policy(), None)
        .unwrap_or_else(|e| panic!("{e}\n{}", c.evidence_sql));
    let rows = r
        .query(&g, &causeway_store::QueryLimits::default())
        .unwrap();
    let missing = causeway_analysis::detectors::figures_not_in_rows(&c.summary, &rows.rows);
    assert!(missing.is_empty(), "{missing:?} {}", c.summary);
    let share: Vec<_> = rows
        .rows
        .iter()
        .filter(|row| row[2] == "step")
        .map(|row| (row[5].as_i64(), row[6].as_i64(), row[7].as_i64()))
        .collect();
    assert_eq!(share, [(Some(4), Some(400_000), Some(1_000_000))]);
}
