//! `causeway agent` end to end (root, real eBPF): its config file checked, rolling segments that
//! lose and repeat nothing while programs run across rotations, one timeline served over HTTP
//! and read from the data directory, retention, SIGTERM, and a restart after SIGKILL.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::ok;
use crate::trace::is_root;

const BIN: &str = env!("CARGO_BIN_EXE_causeway");

/// Launches of one `late` run of the stand-in workload (crates/collector/tests/standin/mix.h).
const LAUNCHES_PER_RUN: u64 = 200;

/// One agent at a time: each traces every CUDA process on the machine and would record the
/// other tests' programs too (two agents side by side each record every run: docs/agent.md).
static ONE_AGENT: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bpf_tests() -> Option<std::sync::MutexGuard<'static, ()>> {
    if std::env::var("CAUSEWAY_SKIP_BPF_TESTS").as_deref() == Ok("1") {
        return None;
    }
    assert!(
        is_root(),
        "the agent needs root (CI is root); set CAUSEWAY_SKIP_BPF_TESTS=1 to skip explicitly"
    );
    Some(ONE_AGENT.lock().unwrap_or_else(|p| p.into_inner()))
}

fn write_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let data = dir.join("data");
    let text = format!(
        "data_dir = \"{}\"\nnode = \"agent-test\"\n\n[segments]\nperiod = \"2s\"\n\n\
         [retention]\nmax_age = \"1h\"\nmax_total_size = \"10GiB\"\n\n\
         [trace]\noverhead_budget = 100.0\n{extra}",
        data.display()
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(config: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["agent", "--check-config", "--config"])
        .arg(config)
        .output()
        .unwrap()
}

#[test]
fn check_config_prints_the_effective_file_or_one_line_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_config(dir.path(), "");
    let out = check(&good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    // Defaults filled in, and the printed file is itself a valid configuration.
    assert!(printed.contains("max_size = \"1GiB\""), "{printed}");
    assert!(printed.contains("period = \"2s\""), "{printed}");
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &printed).unwrap();
    let out2 = check(&again);
    assert!(out2.status.success());
    assert_eq!(String::from_utf8(out2.stdout).unwrap(), printed);

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "data_dir = \"/x\"\n[segments]\nperiod = \"often\"\n").unwrap();
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains("segments.period"),
        "{err}"
    );
    assert!(lines[1].starts_with("hint: "), "{err}");
    assert!(out.stdout.is_empty());
}

fn start(config: &Path) -> Child {
    Command::new(BIN)
        .args(["agent", "--config"])
        .arg(config)
        .env("CAUSEWAY_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the static stand-in workload `runs` times, `gap` apart (all-process mode finds it
/// when it is exec'd).
/// Returns their pids: the agent traces every CUDA process on the machine, other tests' too.
fn run_workload(runs: u32, gap: Duration) -> Vec<u32> {
    let s = crate::trace::standin_static();
    let mut pids = Vec::new();
    for _ in 0..runs {
        let mut c = Command::new(&s).args(["late", "300"]).spawn().unwrap();
        pids.push(c.id());
        assert!(c.wait().unwrap().success());
        std::thread::sleep(gap);
    }
    pids
}

/// The launches of `pids` in the trace `args` name (`--db ...` or `--nodes ...`), as rows of
/// `select` (its columns by name: fleet answers lead with the node's column).
fn launch_rows(
    args: &[&str],
    pids: &[u32],
    select: &str,
    group: &str,
) -> Vec<HashMap<String, u64>> {
    let list = pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!(
        "SELECT {select} FROM events WHERE op = 'cudaLaunchKernel' AND pid IN ({list}) {group}"
    );
    let mut a = vec!["query"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--json", &sql]);
    let v: Value = serde_json::from_str(&ok(&a)).unwrap();
    let names: Vec<String> = v["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            names
                .iter()
                .zip(r.as_array().unwrap())
                .filter_map(|(n, x)| x.as_u64().map(|x| (n.clone(), x)))
                .collect()
        })
        .collect()
}

/// Launches of `pids` in the trace `args` name; with `unique`, also that no event is there
/// twice (one recording: sequence numbers are unique).
fn launches_at(args: &[&str], pids: &[u32], unique: bool) -> u64 {
    let rows = launch_rows(args, pids, "count(*) AS n, count(DISTINCT seq) AS d", "");
    let (n, d) = (rows[0]["n"], rows[0]["d"]);
    if unique {
        assert_eq!(n, d, "an event repeated across segments: {rows:?}");
    }
    n
}

/// Runs the workload until the agent records it. Tracing every process, the agent attaches a
/// program's probes when it first sees it exec'd, without holding it (nothing it did not start
/// is stopped): a run that calls sooner than that is not recorded (library_attach says when
/// tracing began). Later runs of the attached file are recorded from their first call.
fn warm_up(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pids = run_workload(1, Duration::ZERO);
        let seen = Instant::now();
        while seen.elapsed() < Duration::from_secs(3) {
            if launches_at(&["--nodes", addr], &pids, false) > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            Instant::now() < deadline,
            "the agent never recorded the workload"
        );
    }
}

/// Launches recorded of each of `pids`, in their order, from the trace `args` name.
fn per_run(args: &[&str], pids: &[u32]) -> Vec<u64> {
    let got: HashMap<u64, u64> = launch_rows(
        args,
        pids,
        "pid::BIGINT AS p, count(*) AS n",
        "GROUP BY pid",
    )
    .into_iter()
    .map(|r| (r["p"], r["n"]))
    .collect();
    pids.iter()
        .map(|pid| got.get(&u64::from(*pid)).copied().unwrap_or(0))
        .collect()
}

/// Every run is recorded whole (rotations split none): once a program's file is attached, its
/// later runs trap from their first call (an agent that sampled the launches at a 100% budget
/// once missed whole runs).
fn whole_runs(counts: &[u64]) {
    assert!(
        counts.iter().all(|&n| n == LAUNCHES_PER_RUN),
        "a run not recorded whole: {counts:?}"
    );
}

fn closed_segments(data: &Path) -> usize {
    std::fs::read_dir(data)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "duckdb"))
        .count()
}

fn signal(child: &Child, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn sigterm(child: &Child) {
    signal(child, "-TERM");
}

#[test]
fn the_agent_rolls_segments_and_serves_them_as_one_trace() {
    let Some(_one) = bpf_tests() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "\n[serve]\nlisten = \"127.0.0.1:0\"\nwindow = \"1h\"\n",
    );
    let data = dir.path().join("data");
    let mut agent = start(&config);
    let addr = crate::common::listening_addr(&mut agent);
    warm_up(&addr);
    let runs = 8usize;
    // Runs spread over ~4 rotations: some calls fall in every segment.
    let pids = run_workload(runs as u32, Duration::from_millis(900));
    // Served: the closed segments and the open one, as one trace (the writer commits within
    // its flush bound: the answer stops changing).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut served = per_run(&["--nodes", &addr], &pids);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let again = per_run(&["--nodes", &addr], &pids);
        if again == served || Instant::now() > deadline {
            break;
        }
        served = again;
    }
    whole_runs(&served);
    let unique = served.iter().sum::<u64>();
    assert_eq!(
        launches_at(&["--nodes", &addr], &pids, true),
        unique,
        "no event served twice"
    );
    assert!(
        closed_segments(&data) >= 2,
        "segments closed while the workload ran"
    );
    // The agent serves the same live page as every other address, over all its segments.
    let (status, page) = crate::common::raw(&addr, "GET /", &addr, &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.to_ascii_lowercase()
            .contains("content-security-policy: default-src 'none'")
            && page.contains("<html"),
        "the report page with its CSP: {}",
        &page[..page.len().min(600)]
    );
    let (status, report) = crate::common::raw(&addr, "GET /api/v1/report", &addr, &[], "");
    assert_eq!(status, 200, "{report}");
    assert!(
        report.contains("\"budgets\""),
        "the page's data: {}",
        &report[..report.len().min(600)]
    );
    sigterm(&agent);
    let out = agent.wait_with_output().unwrap();
    assert!(out.status.success(), "the agent ends cleanly on SIGTERM");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let closed = summary["segments"]["closed"].as_u64().unwrap();
    assert!(closed >= 3, "{summary}");
    assert_eq!(summary["ringbuf_drops"], 0);
    assert_eq!(summary["channel_drops"], 0);
    // Every segment closed, none left open; the directory reads as one trace.
    assert_eq!(closed_segments(&data) as u64, closed);
    assert_eq!(std::fs::read_dir(data.join("open")).unwrap().count(), 0);
    let d = data.to_str().unwrap();
    assert_eq!(
        per_run(&["--db", d], &pids),
        served,
        "the directory holds what was served"
    );
    assert_eq!(launches_at(&["--db", d], &pids, true), unique);
    // Each segment alone names the processes of its events.
    for e in std::fs::read_dir(&data).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "duckdb") {
            continue;
        }
        let v: Value = serde_json::from_str(&ok(&[
            "query",
            "--db",
            p.to_str().unwrap(),
            "--json",
            "SELECT count(*) FROM events e WHERE e.pid <> 0 AND NOT EXISTS \
             (SELECT 1 FROM processes p WHERE p.pid = e.pid)",
        ]))
        .unwrap();
        assert_eq!(
            v["rows"][0][0],
            0,
            "{}: events without their process",
            p.display()
        );
    }
}

#[test]
fn after_sigkill_the_next_start_recovers_the_open_segment_and_retention_applies() {
    let Some(_one) = bpf_tests() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "\n[serve]\nlisten = \"127.0.0.1:0\"\n");
    let data = dir.path().join("data");
    // Long period: everything is in the open segment when the agent is killed.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("period = \"2s\"", "period = \"1h\"");
    std::fs::write(&config, text).unwrap();
    let mut agent = start(&config);
    let addr = crate::common::listening_addr(&mut agent);
    warm_up(&addr);
    let pids = run_workload(3, Duration::from_millis(100));
    // Past the writer's flush bound (collector SIGKILL_LOSS_BOUND): what is served now is
    // committed, and a SIGKILL must not lose it.
    std::thread::sleep(Duration::from_secs(2));
    let committed = per_run(&["--nodes", &addr], &pids);
    whole_runs(&committed);
    agent.kill().unwrap();
    agent.wait().unwrap();
    assert_eq!(closed_segments(&data), 0);

    // The next start seals the killed agent's segment, closes it, and records into a new one.
    let mut agent = start(&config);
    wait_ready(&mut agent);
    assert_eq!(
        closed_segments(&data),
        1,
        "the killed segment was recovered"
    );
    sigterm(&agent);
    let out = agent.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(closed_segments(&data), 2);
    let d = data.to_str().unwrap();
    assert_eq!(
        per_run(&["--db", d], &pids),
        committed,
        "nothing committed before the SIGKILL is lost"
    );

    // Retention by age: segments closed longer ago than max_age are deleted at the start.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("max_total_size = \"10GiB\"", "max_total_size = \"1GiB\"")
        .replace("max_age = \"1h\"", "max_age = \"1s\"");
    std::fs::write(&config, text).unwrap();
    std::thread::sleep(Duration::from_millis(1_100));
    let mut agent = start(&config);
    wait_ready(&mut agent);
    assert_eq!(
        closed_segments(&data),
        0,
        "segments past max_age deleted at start"
    );
    // SIGHUP applies a new period (and retention) without a restart.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("period = \"1h\"", "period = \"1s\"")
        .replace("max_age = \"1s\"", "max_age = \"1h\"");
    std::fs::write(&config, text).unwrap();
    signal(&agent, "-HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while closed_segments(&data) < 2 {
        assert!(
            Instant::now() < deadline,
            "no rotation after SIGHUP shortened the period"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&agent);
    let out = agent.wait_with_output().unwrap();
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        summary["segments"]["closed"].as_u64().unwrap() >= 3,
        "{summary}"
    );
}

/// Waits for the agent's line saying that its probes are attached (stderr), then keeps
/// draining stderr.
fn wait_ready(agent: &mut Child) {
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(agent.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    while !line.contains("causeway agent: recording") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the agent exited before recording"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
}

#[test]
fn the_agent_pushes_otlp_from_all_its_segments() {
    let Some(_one) = bpf_tests() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (url, log, _rt) = crate::otlp::http_receiver(crate::otlp::Answer(200, ""));
    let token = dir.path().join("push-token");
    std::fs::write(&token, crate::otlp::TOKEN).unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "\n[serve]\nlisten = \"127.0.0.1:0\"\n\n[otlp]\nendpoint = \"{url}\"\n\
             interval = \"300ms\"\ntoken_file = \"{}\"\n",
            token.display()
        ),
    );
    let data = dir.path().join("data");
    let mut agent = start(&config);
    let addr = crate::common::listening_addr(&mut agent);
    warm_up(&addr);
    let pids = run_workload(4, Duration::from_millis(900));
    sigterm(&agent);
    let out = agent.wait_with_output().unwrap();
    assert!(out.status.success());
    let got = log.take();
    let metrics: Vec<_> = got.iter().filter(|g| g.path == "/v1/metrics").collect();
    assert!(metrics.len() >= 3, "{} metric pushes", metrics.len());
    assert_eq!(
        got.last().unwrap().path,
        "/v1/logs",
        "the findings go last; the agent said: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        got.iter()
            .all(|g| g.auth == format!("Bearer {}", crate::otlp::TOKEN))
    );
    // The last push counts every launch of every segment, as the directory does.
    let pushed = crate::otlp::launch_calls(&metrics.last().unwrap().body);
    let v: Value = serde_json::from_str(&ok(&[
        "query",
        "--db",
        data.to_str().unwrap(),
        "--json",
        "SELECT sum(calls)::BIGINT FROM op_counts c JOIN ops o USING (op_id) \
         WHERE o.op = 'cudaLaunchKernel'",
    ]))
    .unwrap();
    assert_eq!(Some(pushed), v["rows"][0][0].as_i64(), "pushed vs stored");
    whole_runs(&per_run(&["--db", data.to_str().unwrap()], &pids));
    assert!(closed_segments(&data) >= 2, "the push spanned rotations");
}
