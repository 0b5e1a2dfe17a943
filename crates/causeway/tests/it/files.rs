//! The files commands read and write, when they are not what a command expects: outputs that
//! are FIFOs (or links to them) are never replaced, even with --force; a FIFO given as a trace
//! is refused at once instead of hanging; and what a SIGKILLed import left is removed by the
//! next run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{causeway, shared, vllm_store};

fn mkfifo(p: &Path) {
    let made = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(made.success(), "mkfifo {}", p.display());
}

fn is_fifo(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_fifo())
}

/// Runs `causeway ARGS`, killed after `limit`: its output, or None when it was still running.
fn within(args: &[&str], limit: Duration) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CAUSEWAY_LOG")
        .env_remove("CAUSEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while t.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// As root, `import ... -o /dev/null --force` replaced /dev/null with a trace: every command
/// that writes a file refuses to replace anything but a regular file (a FIFO here, directly or
/// through a symbolic link), and says so in one line with a hint.
#[test]
fn force_never_replaces_a_fifo_or_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.fifo");
    mkfifo(&fifo);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let db = vllm_store();
    let (db, src) = (
        db.to_str().unwrap().to_string(),
        shared("vllm-37343-logprobs-amplification.db"),
    );
    let src = src.to_str().unwrap();
    let nodes = [
        shared("sample-gpu-node-01.db"),
        shared("sample-gpu-node-02.db"),
    ];
    let stores: Vec<PathBuf> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let out = dir.path().join(format!("n{i}.duckdb"));
            let run = causeway(&["import", n.to_str().unwrap(), "-o", out.to_str().unwrap()]);
            assert!(run.status.success(), "{run:?}");
            out
        })
        .collect();
    for target in [&fifo, &link] {
        let t = target.to_str().unwrap();
        let commands: [Vec<&str>; 5] = [
            vec!["import", src, "-o", t, "--force"],
            vec!["demo", "-o", t, "--force"],
            vec![
                "merge",
                stores[0].to_str().unwrap(),
                stores[1].to_str().unwrap(),
                "-o",
                t,
                "--force",
            ],
            vec!["report", "--db", &db, "-o", t, "--force"],
            vec![
                "export", "--db", &db, "--format", "perfetto", "-o", t, "--force",
            ],
        ];
        for args in commands {
            let run = within(&args, Duration::from_secs(120)).expect("finished");
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(!run.status.success(), "{args:?} succeeded: {err}");
            assert!(
                err.contains("a FIFO, not a regular file") && err.contains("\nhint: "),
                "{args:?}: {err}"
            );
            assert!(is_fifo(&fifo), "{args:?} replaced the FIFO");
            assert!(
                std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
                "{args:?} replaced the link"
            );
        }
    }
    // Nothing half-written beside them.
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `query --db FIFO` and `serve --db FIFO` hung forever in open(2): every command that opens a
/// trace refuses a FIFO before opening it.
#[test]
fn a_fifo_given_as_the_trace_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("t.duckdb");
    mkfifo(&fifo);
    let f = fifo.to_str().unwrap();
    for args in [
        vec!["query", "--db", f, "SELECT 1"],
        vec!["stats", "--db", f],
        vec!["serve", "--db", f, "--listen", "127.0.0.1:0"],
        vec!["mcp", "--db", f, "--listen", "127.0.0.1:0"],
        vec!["report", "--db", f, "-o", "/nonexistent/r.html"],
    ] {
        let Some(run) = within(&args, Duration::from_secs(30)) else {
            panic!("{args:?} still ran after 30 s");
        };
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}: {err}");
        assert!(
            err.contains(&format!("error: {f}: a FIFO, not a regular file")),
            "{args:?}: {err}"
        );
        assert!(err.contains("\nhint: "), "{args:?}: {err}");
    }
}

/// A SIGKILLed import (no handler runs) left `.OUT.tmp-PID` and DuckDB's files beside it, and a
/// next run refused for the existing output kept them: the next run to the same output removes
/// them whatever it goes on to do, as that PID is gone, and leaves another live process's files
/// and other names alone.
#[test]
fn what_a_sigkilled_import_left_is_removed_by_the_next_run() {
    let src = shared("vllm-37343-logprobs-amplification.db");
    let mut killed = false;
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.duckdb");
        std::fs::write(&out, "an earlier output").unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_causeway"))
            .arg("import")
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .arg("--force")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let started = Instant::now();
        let caught = loop {
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if names.iter().any(|n| n.ends_with(".wal")) {
                break true;
            }
            if child.try_wait().unwrap().is_some() || started.elapsed() > Duration::from_secs(20) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let _ = child.kill();
        let status = child.wait().unwrap();
        if !caught || status.success() {
            continue;
        }
        killed = true;
        let ours = |n: &str| n.starts_with(&format!(".out.duckdb.tmp-{pid}"));
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.iter().any(|n| ours(n)), "{left:?}");
        // Another live process's temporary file (PID 1 is always alive), and a name that only
        // looks like ours: both kept.
        let alive = dir.path().join(".out.duckdb.tmp-1");
        let foreign = dir.path().join(format!(".out.duckdb.tmp-{pid}.keep"));
        std::fs::write(&alive, "x").unwrap();
        std::fs::write(&foreign, "x").unwrap();
        let refused = causeway(&["import", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(err.contains("already exists"), "{err}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "an earlier output");
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "out.duckdb")
            .collect();
        let mut expected = vec![
            ".out.duckdb.tmp-1".to_string(),
            format!(".out.duckdb.tmp-{pid}.keep"),
        ];
        expected.sort();
        let mut left = left;
        left.sort();
        assert_eq!(left, expected);
        break;
    }
    assert!(killed, "the import was never caught with its files open");
}

/// The import summary printed a source's file name (and the node name taken from it) raw, so
/// a file named with an escape sequence recoloured or rewrote the terminal: names are data.
#[test]
fn an_escape_sequence_in_a_file_name_is_not_printed_raw() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x\u{1b}[31mRED\u{1b}]0;pwned\u{7}.db");
    std::fs::copy(shared("vllm-37343-logprobs-amplification.db"), &src).unwrap();
    let out = dir.path().join("o\u{1b}[2J.duckdb");
    let run = causeway(&["import", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(run.status.success(), "{run:?}");
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    // The visible part of each name is still there.
    assert!(
        stdout.contains("[31mRED") && stdout.contains("[2J.duckdb"),
        "{stdout}"
    );
}
