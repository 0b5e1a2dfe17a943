//! NVTX ranges of a traced command: an NVTX v3 caller (tests/nvtx/prog.c, built here) runs under
//! the collector, which hands it the injection library; the store must hold exactly the ranges
//! the program makes, nested as designed, with its steps, and nothing lost.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{args, bpf_test, db_path, open, q, trace};

/// Builds the NVTX caller into `dir`.
pub fn build_prog(dir: &Path) -> PathBuf {
    let exe = dir.join("nvtx-prog");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nvtx/prog.c");
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(src)
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("running cc (install build-essential)");
    assert!(
        out.status.success(),
        "cc {src}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// (name, kind, depth, count) of the stored ranges.
fn ranges(db: &Path) -> Vec<(String, String, i64, i64)> {
    let c = open(db);
    let mut st = c
        .prepare(
            "SELECT name, kind, depth::BIGINT, count(*)::BIGINT FROM ranges \
             GROUP BY ALL ORDER BY 3, 1",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_traced_commands_nvtx_ranges_are_stored_as_designed() {
    let Some(_g) = bpf_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let prog = build_prog(dir.path());
    let db = db_path(&dir);
    let s = trace(&args(&db, &[prog.to_str().unwrap(), "run"]));
    assert_eq!(
        s.command_exit,
        Some(0),
        "the program checks the depths it is given"
    );
    assert_eq!(s.ringbuf_drops, 0);
    assert_eq!(s.channel_drops, 0);
    assert_eq!(s.nvtx_ranges, 20);

    let owned = |v: &[(&str, &str, i64, i64)]| -> Vec<(String, String, i64, i64)> {
        v.iter()
            .map(|(n, k, d, c)| (n.to_string(), k.to_string(), *d, *c))
            .collect()
    };
    assert_eq!(
        ranges(&db),
        owned(&[
            ("checkpoint", "nvtx_mark", 0, 1),
            ("load", "nvtx", 0, 1),
            ("train_step", "nvtx", 0, 3),
            ("backward", "nvtx", 1, 3),
            ("forward", "nvtx", 1, 3),
            ("io:read_shard", "nvtx", 1, 3),
            ("wide_\u{e9}", "nvtx", 1, 3),
            ("allreduce", "nvtx", 2, 3),
        ])
    );
    // Nesting: every inner range lies in a train_step of its thread, and every allreduce in a
    // backward; start/end "load" ended on another thread and spans them all.
    let nested = |inner: &str, outer: &str| {
        q(
            &db,
            &format!(
                "SELECT count(*) FROM ranges i JOIN ranges o ON i.tid = o.tid \
                 AND o.start_ns <= i.start_ns AND i.end_ns <= o.end_ns \
                 WHERE i.name = '{inner}' AND o.name = '{outer}'"
            ),
        )
    };
    for inner in [
        "forward",
        "backward",
        "allreduce",
        "io:read_shard",
        "wide_\u{e9}",
    ] {
        assert_eq!(nested(inner, "train_step"), 3, "{inner}");
    }
    assert_eq!(nested("allreduce", "backward"), 3);
    assert_eq!(nested("forward", "backward"), 0);
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM ranges l, ranges t WHERE l.name = 'load' \
             AND t.name = 'train_step' AND l.start_ns <= t.start_ns AND t.end_ns <= l.end_ns \
             AND l.tid <> t.tid AND t.tid = t.pid"
        ),
        3
    );
    // Durations: at least the designed sleeps, and not absurdly more.
    for (name, ms) in [
        ("forward", 2),
        ("allreduce", 1),
        ("io:read_shard", 1),
        ("train_step", 4),
    ] {
        let (min, max) = {
            let c = open(&db);
            c.query_row(
                &format!(
                    "SELECT min(end_ns - start_ns), max(end_ns - start_ns) FROM ranges \
                     WHERE name = '{name}'"
                ),
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .unwrap()
        };
        assert!(min >= ms * 1_000_000, "{name}: {min} ns");
        assert!(max < 2_000_000_000, "{name}: {max} ns");
    }
    // Times are in the recording's clock: inside its session.
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM ranges WHERE start_ns < (SELECT min(started_ns) FROM sessions) \
             OR end_ns > (SELECT max(stopped_ns) FROM sessions)"
        ),
        0
    );
    // The three train_step ranges (one name, repeated, outermost) are the steps.
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM steps s JOIN ranges r ON r.name = 'train_step' \
             AND r.start_ns = s.start_ns AND r.end_ns = s.end_ns AND r.tid = s.tid \
             WHERE s.source = 'nvtx'"
        ),
        3
    );
    assert_eq!(
        q(
            &db,
            "SELECT count(DISTINCT step) FROM steps WHERE step BETWEEN 0 AND 2"
        ),
        3
    );
    assert_eq!(
        q(&db, "SELECT count(*) FROM drops WHERE detail LIKE '%NVTX%'"),
        0
    );
}

#[test]
fn a_command_that_names_its_own_injection_library_keeps_it() {
    let Some(_g) = bpf_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let prog = build_prog(dir.path());
    let prog = prog.to_str().unwrap();
    let seen = dir.path().join("seen.txt");
    let seen_s = seen.to_str().unwrap();

    // Given nothing: the command is handed causeway's library.
    let db = db_path(&dir);
    let s = trace(&args(&db, &[prog, "env", seen_s]));
    assert_eq!(s.command_exit, Some(0));
    let given = std::fs::read_to_string(&seen).unwrap();
    assert!(given.contains("libcauseway_nvtx-"), "{given}");
    assert_eq!(s.nvtx_ranges, 1, "its one range is recorded");

    // Naming its own (here through env(1), as a launcher script would): it keeps it, and no
    // range is recorded.
    let db2 = dir.path().join("own.duckdb");
    let own = "/nonexistent/own-nvtx-injection.so";
    let var = format!("NVTX_INJECTION64_PATH={own}");
    let s = trace(&args(&db2, &["env", &var, prog, "env", seen_s]));
    assert_eq!(s.command_exit, Some(0));
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), own);
    assert_eq!(s.nvtx_ranges, 0);
    assert_eq!(q(&db2, "SELECT count(*) FROM ranges"), 0);
}

/// What one NVTX push/pop pair costs the program: without an injection library (NVTX's no-op),
/// with causeway's library but no recording, and recorded. Prints the figures
/// (docs/benchmarks.md); asserts only that every range was recorded or counted as dropped.
#[test]
fn nvtx_range_cost_with_and_without_recording() {
    let Some(_g) = bpf_test() else { return };
    // CAUSEWAY_NVTX_BENCH_PAIRS: fewer pairs than the ring holds time the probe without the
    // consumer draining beside it.
    let pairs: u64 = std::env::var("CAUSEWAY_NVTX_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let prog = build_prog(dir.path());
    let prog_s = prog.to_str().unwrap();
    let out = dir.path().join("ns.txt");
    let out_s = out.to_str().unwrap();
    let n = pairs.to_string();
    let read = || -> f64 {
        std::fs::read_to_string(&out)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };

    // Recorded first: it also installs the library and says where (the `env` mode).
    let db = db_path(&dir);
    let s = trace(&args(&db, &[prog_s, "bench", &n, out_s]));
    assert_eq!(s.command_exit, Some(0));
    let recorded = read();
    let dropped = q(
        &db,
        "SELECT coalesce(sum(count), 0)::BIGINT FROM drops WHERE detail LIKE '%NVTX%'",
    );
    let stored = q(&db, "SELECT count(*) FROM ranges");
    assert_eq!(
        stored + dropped,
        pairs as i64 + 1,
        "every range stored or counted"
    );

    let seen = dir.path().join("seen.txt");
    let db2 = dir.path().join("env.duckdb");
    trace(&args(&db2, &[prog_s, "env", seen.to_str().unwrap()]));
    let lib = std::fs::read_to_string(&seen).unwrap();

    let run = |inject: Option<&str>| -> f64 {
        let mut c = Command::new(&prog);
        c.args(["bench", &n, out_s])
            .env_remove("NVTX_INJECTION64_PATH");
        if let Some(l) = inject {
            c.env("NVTX_INJECTION64_PATH", l);
        }
        assert!(c.status().unwrap().success());
        read()
    };
    let bare = run(None);
    let injected = run(Some(&lib));
    eprintln!(
        "NVTX push+pop pair, {pairs} pairs: no injection {bare:.1} ns, causeway's library \
         not recorded {injected:.1} ns, recorded {recorded:.1} ns ({:.1}x the unrecorded \
         library); stored {stored}, dropped {dropped}",
        recorded / injected
    );
}
