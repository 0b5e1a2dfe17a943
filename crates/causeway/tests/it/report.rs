//! `causeway report` and the live page at `/`, opened in headless Chromium: no console errors,
//! no network from the file, charts holding what `stats --json` says the trace has, findings
//! in `explain --json`'s order, no critical accessibility violations (axe-core), and the live
//! page behind the same token as the rest of the server. Screenshots land in the target dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use causeway_analysis::opsets::{is_gpu_source, is_sync};
use serde_json::{Value, json};

use crate::browser::Browser;
use crate::common::{Http, listening_addr, ok, raw, scratch, shared, vllm_store};

const BIN: &str = env!("CARGO_BIN_EXE_causeway");

/// axe-core, vendored for these tests only (crates/report/vendor/README.md).
const AXE: &str = include_str!("../../../report/vendor/axe-core/axe.min.js");

/// What the page's charts and lists hold, read from their data attributes.
const READ_PAGE: &str = r#"(() => {
  const d = (e) => Object.assign({}, e.dataset);
  return {
    findings: [...document.querySelectorAll('li.finding')].map((e) => e.dataset.id),
    timeline: d(document.getElementById('timeline-chart')),
    histograms: [...document.querySelectorAll('.chart.hist')].map(d),
    budgets: [...document.querySelectorAll('.budget')].map((e) => ({
      pid: Number(e.dataset.pid), tid: e.dataset.tid,
      sum: [...e.querySelectorAll('.seg')].reduce((a, s) => a + Number(s.dataset.ns), 0) })),
    canvases: document.querySelectorAll('canvas').length,
    updates: Number(document.body.dataset.updates),
    generated: document.body.dataset.generatedNs,
    paint: performance.getEntriesByType('paint').map((p) => [p.name, p.startTime]),
  };
})()"#;

/// Where screenshots go: the target dir, kept after the run.
fn artifact(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("report-screenshots")
        .join(name)
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).unwrap()
}

/// The sum of a budget's buckets as `explain --json` gives them.
fn bucket_sum(b: &Value) -> i64 {
    let inside: i64 = b["inside"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            ["on_cpu_ns", "preempted_ns", "blocked_ns", "unknown_ns"]
                .iter()
                .map(|k| i[k].as_i64().unwrap_or(0))
                .sum::<i64>()
        })
        .sum();
    let o = &b["outside"];
    inside
        + [
            "on_cpu_ns",
            "preempted_ns",
            "blocked_net_ns",
            "blocked_io_ns",
            "blocked_other_ns",
            "unknown_ns",
        ]
        .iter()
        .map(|k| o[k].as_i64().unwrap_or(0))
        .sum::<i64>()
}

/// The page against `stats --json` and `explain --json` of the same store and window.
fn check_page(page: &Value, db: &Path, window: &[&str]) {
    let db = db.to_str().unwrap();
    let mut args = vec!["stats", "--db", db, "--json"];
    args.extend_from_slice(window);
    let stats = json_of(&args);
    args[0] = "explain";
    let explain = json_of(&args);

    let want: Vec<&str> = explain["chains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let got: Vec<&str> = page["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(got, want, "findings in explain --json's order");

    let ops = stats["ops"].as_array().unwrap();
    let sum_of = |keep: &dyn Fn(&Value) -> bool, field: &str| -> i64 {
        ops.iter()
            .filter(|o| keep(o))
            .map(|o| o[field].as_i64().unwrap())
            .sum()
    };
    let attr = |k: &str| -> i64 {
        page["timeline"][k]
            .as_str()
            .unwrap_or_else(|| panic!("timeline has no {k}: {}", page["timeline"]))
            .parse()
            .unwrap()
    };
    let gpu = |o: &Value| is_gpu_source(o["source"].as_str().unwrap());
    assert_eq!(attr("gpuCalls"), sum_of(&gpu, "count"), "GPU calls charted");
    let sync = |o: &Value| is_sync(o["op"].as_str().unwrap());
    assert_eq!(
        attr("syncNs"),
        sum_of(&sync, "total_ns"),
        "sync time charted"
    );
    let io = |o: &Value| o["source"] == "IO";
    assert_eq!(attr("ioNs"), sum_of(&io, "total_ns"), "block I/O charted");
    assert_eq!(
        attr("offCpuNs"),
        stats["off_cpu"]["total_ns"].as_i64().unwrap(),
        "off-CPU charted"
    );
    let (from, until) = (
        stats["window"]["from_ns"].as_i64().unwrap(),
        stats["window"]["until_ns"].as_i64().unwrap(),
    );
    let width = causeway_report::series::bucket_ns(from, until);
    assert_eq!(
        attr("points"),
        (until - from) / width + 1,
        "a point per bucket of the window"
    );

    let timed: Vec<&Value> = ops
        .iter()
        .filter(|o| o["percentiles"] != "none" && o["max_ns"].as_i64().unwrap() > 0)
        .collect();
    let hists = page["histograms"].as_array().unwrap();
    assert_eq!(
        hists.len(),
        timed.len().min(causeway_report::series::MAX_HISTOGRAMS),
        "a histogram per op with durations"
    );
    for h in hists {
        let op = h["op"].as_str().unwrap();
        let o = timed.iter().find(|o| o["op"] == op).expect("a listed op");
        let total: u64 = h["total"].as_str().unwrap().parse().unwrap();
        assert!(h["buckets"].as_str().unwrap().parse::<u64>().unwrap() >= 1);
        if h["from"] == "exact" {
            assert_eq!(
                total,
                o["count"].as_u64().unwrap(),
                "{op}: every stored call"
            );
        } else {
            assert_eq!(h["from"], "kernel_histogram");
        }
    }
    assert!(
        page["canvases"].as_u64().unwrap() as usize > hists.len(),
        "uPlot drew the timeline and every histogram"
    );

    let budgets = explain["budgets"].as_array().unwrap();
    let shown = page["budgets"].as_array().unwrap();
    assert_eq!(shown.len(), budgets.len(), "a bar per budget");
    for (s, b) in shown.iter().zip(budgets) {
        assert_eq!(s["pid"], b["pid"]);
        assert_eq!(
            s["sum"].as_i64().unwrap(),
            bucket_sum(b),
            "the bar's segments are the budget's buckets"
        );
    }
}

/// axe-core's violations on the open page, as (id, impact, nodes), and how many rules passed.
fn axe_violations(b: &mut Browser) -> (Vec<(String, String, u64)>, u64) {
    b.eval(&format!("{AXE};0"));
    let v = b.eval(
        "axe.run(document).then((r) => ({passes: r.passes.length, violations: r.violations.map((v) => [v.id, v.impact || '', v.nodes.length])}))",
    );
    let violations = v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x[0].as_str().unwrap().to_string(),
                x[1].as_str().unwrap().to_string(),
                x[2].as_u64().unwrap(),
            )
        })
        .collect();
    (violations, v["passes"].as_u64().unwrap())
}

fn assert_accessible(b: &mut Browser, what: &str) {
    let (v, passes) = axe_violations(b);
    eprintln!("{what}: axe: {passes} rules passed, violations {v:?}");
    assert!(passes > 10, "{what}: axe ran only {passes} rules");
    let critical: Vec<_> = v.iter().filter(|x| x.1 == "critical").collect();
    assert!(
        critical.is_empty(),
        "{what}: critical accessibility violations {critical:?}"
    );
}

#[test]
fn report_file_opens_offline_with_every_chart_and_finding() {
    let db = vllm_store();
    let out = scratch().join("vllm-report.html");
    let started = Instant::now();
    let run = Command::new(BIN)
        .args(["report", "--db"])
        .arg(&db)
        .arg("-o")
        .arg(&out)
        .args(["--force"])
        .output()
        .unwrap();
    let wall = started.elapsed();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let size = std::fs::metadata(&out).unwrap().len();
    eprintln!("causeway report (vLLM trace): {size} bytes in {wall:?} (whole command)");
    assert!(size < 1_000_000, "{size} bytes");

    let mut b = Browser::start();
    let url = format!("file://{}", out.display());
    b.open(&url, "document.body && document.body.dataset.ready === '1'");
    let page = b.eval(READ_PAGE);
    check_page(&page, &db, &[]);
    assert!(b.seen.errors.is_empty(), "errors: {:?}", b.seen.errors);
    assert!(
        b.seen
            .requests
            .iter()
            .all(|r| *r == url || r.starts_with("data:")),
        "the file made requests: {:?}",
        b.seen.requests
    );
    b.screenshot(&artifact("report-file-vllm.png"));
    assert_accessible(&mut b, "report file");
    // Drag-zoom: a mouse drag over a third of the timeline narrows its x range to about that.
    let full = b.eval("[Number(document.getElementById('timeline-chart').dataset.xMin), Number(document.getElementById('timeline-chart').dataset.xMax)]");
    let r = b.eval("(() => { const o = document.querySelector('#timeline-chart .u-over'); o.scrollIntoView(); const r = o.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()");
    let (left, top, w, h) = (
        r[0].as_f64().unwrap(),
        r[1].as_f64().unwrap(),
        r[2].as_f64().unwrap(),
        r[3].as_f64().unwrap(),
    );
    let y = top + h / 2.0;
    for (kind, x) in [
        ("mousePressed", left + w * 0.2),
        ("mouseMoved", left + w * 0.35),
        ("mouseMoved", left + w * 0.5),
        ("mouseReleased", left + w * 0.5),
    ] {
        b.call("Input.dispatchMouseEvent", json!({"type": kind, "x": x, "y": y, "button": "left", "buttons": if kind == "mouseReleased" { 0 } else { 1 }, "clickCount": 1}));
    }
    let span = |v: &Value| v[1].as_f64().unwrap() - v[0].as_f64().unwrap();
    b.wait_for(
        &format!("(() => {{ const d = document.getElementById('timeline-chart').dataset; return Number(d.xMax) - Number(d.xMin) < {}; }})()", 0.5 * span(&full)),
        Duration::from_secs(10),
    );
    let zoomed = b.eval("[Number(document.getElementById('timeline-chart').dataset.xMin), Number(document.getElementById('timeline-chart').dataset.xMax)]");
    assert!(
        span(&zoomed) < 0.5 * span(&full),
        "zoomed {zoomed} from {full}"
    );
    assert!(
        b.seen.errors.is_empty(),
        "errors after zooming: {:?}",
        b.seen.errors
    );
}

#[test]
fn report_with_window_and_process_filter_agrees_with_stats() {
    let db = vllm_store();
    let explain = json_of(&["explain", "--db", db.to_str().unwrap(), "--json"]);
    let pid = explain["budgets"][0]["pid"].as_u64().unwrap().to_string();
    let out = scratch().join("vllm-report-window.html");
    let window = ["--since", "20s", "--pid", pid.as_str()];
    let mut args = vec![
        "report",
        "--db",
        db.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--force",
    ];
    args.extend_from_slice(&window);
    let run = Command::new(BIN).args(&args).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut b = Browser::start();
    b.open(
        &format!("file://{}", out.display()),
        "document.body && document.body.dataset.ready === '1'",
    );
    let page = b.eval(READ_PAGE);
    check_page(&page, &db, &window);
    assert!(b.seen.errors.is_empty(), "errors: {:?}", b.seen.errors);
}

#[test]
fn multi_node_report_shows_every_node() {
    let db = scratch().join("sample-cluster.duckdb");
    if !db.exists() {
        ok(&[
            "import",
            shared("sample-cluster.db").to_str().unwrap(),
            "-o",
            db.to_str().unwrap(),
        ]);
    }
    let out = scratch().join("cluster-report.html");
    ok(&[
        "report",
        "--db",
        db.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--force",
    ]);
    let stats = json_of(&["stats", "--db", db.to_str().unwrap(), "--json"]);
    let mut b = Browser::start();
    b.open(
        &format!("file://{}", out.display()),
        "document.body && document.body.dataset.ready === '1'",
    );
    let page = b.eval(READ_PAGE);
    check_page(&page, &db, &[]);
    let rows = b.eval(
        "[...document.querySelectorAll('#node-rows tbody tr')].map((r) => r.cells[0].textContent)",
    );
    assert_eq!(rows, stats["nodes"], "a row per node in the per-node view");
    assert!(b.seen.errors.is_empty(), "errors: {:?}", b.seen.errors);
    b.screenshot(&artifact("report-file-cluster.png"));
}

#[test]
fn refused_report_says_why() {
    let db = vllm_store();
    let out = scratch().join("never.html");
    let run = Command::new(BIN)
        .args(["report", "--db"])
        .arg(&db)
        .args(["--pid", "4000000", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("4000000") && err.contains("hint:"), "{err}");
    assert!(!out.exists(), "nothing is written on failure");
}

/// `serve` off loopback: the page and its data need the token; with it the page comes with a
/// strict policy, renders in the browser without errors, and polls its data endpoint.
#[test]
fn live_page_needs_the_token_and_refreshes_under_its_policy() {
    let db = vllm_store();
    let token = "report-test-token-0123456789";
    let mut child = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(&db)
        .args(["--listen", "0.0.0.0:0"])
        .env("CAUSEWAY_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listening_addr(&mut child);
    let port = addr.rsplit(':').next().unwrap().to_string();
    let srv = Http {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let bearer = format!("Bearer {token}");

    for path in ["/", "/api/v1/report"] {
        let (code, _) = raw(&srv.addr, &format!("GET {path}"), &srv.addr, &[], "");
        assert_eq!(code, 401, "{path} without the token");
        let (code, _) = raw(
            &srv.addr,
            &format!("GET {path}"),
            &srv.addr,
            &[("Authorization", "Bearer wrong-token-wrong-token")],
            "",
        );
        assert_eq!(code, 401, "{path} with a wrong token");
    }
    let (code, resp) = raw(
        &srv.addr,
        "GET /",
        &srv.addr,
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(code, 200, "{resp}");
    let head = resp.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    let csp = head
        .lines()
        .find_map(|l| l.strip_prefix("content-security-policy: "))
        .expect("a Content-Security-Policy header");
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert!(
        csp.contains("connect-src 'self'") && csp.contains("script-src 'sha256-"),
        "{csp}"
    );
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    let (code, body) = raw(
        &srv.addr,
        "GET /api/v1/report?since=10s",
        &srv.addr,
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(code, 200);
    let data: Value = serde_json::from_str(body.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(data["query"]["since"], "10s");
    // The store is unchanged: the next poll gets the same build, current as of that poll.
    let (code, body) = raw(
        &srv.addr,
        "GET /api/v1/report?since=10s",
        &srv.addr,
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(code, 200);
    let cached: Value = serde_json::from_str(body.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        cached["build_ms"], data["build_ms"],
        "answered from the cache"
    );
    assert_eq!(cached["findings"], data["findings"]);
    assert!(
        cached["generated_ns"].as_i64().unwrap() > data["generated_ns"].as_i64().unwrap(),
        "stamped when it was found current"
    );
    let (code, _) = raw(
        &srv.addr,
        "GET /?sql=select",
        &srv.addr,
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(code, 400, "unknown parameters are refused");

    let mut b = Browser::start();
    b.set_headers(json!({"Authorization": bearer}));
    let url = format!("http://{}/", srv.addr);
    let started = Instant::now();
    b.open(&url, "document.body && document.body.dataset.ready === '1'");
    let ready = started.elapsed();
    let page = b.eval(READ_PAGE);
    eprintln!(
        "live page on loopback: paint entries {} (ms after navigation), data rendered {ready:?} after navigating",
        page["paint"]
    );
    check_page(&page, &db, &[]);
    // The page asks its endpoint again and renders fresh data.
    b.wait_for(
        "Number(document.body.dataset.updates) >= 2",
        Duration::from_secs(30),
    );
    let again = b.eval(READ_PAGE);
    assert!(
        again["generated"].as_str().unwrap() > page["generated"].as_str().unwrap(),
        "fresh data after a poll"
    );
    check_page(&again, &db, &[]);
    assert!(b.seen.errors.is_empty(), "errors: {:?}", b.seen.errors);
    let origin = format!("http://{}/", srv.addr);
    assert!(
        b.seen
            .requests
            .iter()
            .all(|r| r.starts_with(&origin) || r.starts_with("data:")),
        "requests leave the origin: {:?}",
        b.seen.requests
    );
    assert!(
        b.seen.requests.iter().any(|r| r.contains("/api/v1/report")),
        "the page polled its data: {:?}",
        b.seen.requests
    );
    b.screenshot(&artifact("report-live-vllm.png"));
    assert_accessible(&mut b, "live page");
}

/// The live page follows a store as it grows: `collect` serves an empty cluster store, a node
/// pushes its OTLP metrics, and the open page shows the new ops' histograms (labelled as the
/// kernel's) on its next poll, without a reload.
#[test]
fn live_page_follows_a_growing_cluster_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cluster.duckdb");
    let token = "report-collect-token-0123456789";
    let tf = dir.path().join("token");
    std::fs::write(&tf, token).unwrap();
    let server = crate::collect_server::start(&db, token, false);
    let mut b = Browser::start();
    b.set_headers(json!({"Authorization": format!("Bearer {token}")}));
    b.open(
        &format!("http://{}/", server.http),
        "document.body && document.body.dataset.ready === '1'",
    );
    let before = b.eval(READ_PAGE);
    assert_eq!(
        before["histograms"],
        json!([]),
        "an empty store has no histograms"
    );
    ok(&[
        "export",
        "--db",
        vllm_store().to_str().unwrap(),
        "--format",
        "otlp",
        "--endpoint",
        &format!("http://{}", server.http),
        "--token-file",
        tf.to_str().unwrap(),
    ]);
    b.wait_for(
        "document.querySelectorAll('.chart.hist').length > 0",
        Duration::from_secs(60),
    );
    b.wait_for(
        "document.body.dataset.ready === '1'",
        Duration::from_secs(10),
    );
    let after = b.eval(READ_PAGE);
    assert!(
        after["updates"].as_u64().unwrap() >= 2,
        "rendered again: {after}"
    );
    let hists = after["histograms"].as_array().unwrap();
    assert!(
        hists.iter().all(|h| h["from"] == "kernel_histogram"),
        "a collected store has the kernel's histograms only: {hists:?}"
    );
    let launches = hists
        .iter()
        .find(|h| h["op"] == "cudaLaunchKernel")
        .expect("the pushed launches");
    let stats = json_of(&["stats", "--db", vllm_store().to_str().unwrap(), "--json"]);
    let sent = stats["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "cudaLaunchKernel")
        .map(|o| {
            o["counted_calls"]
                .as_u64()
                .unwrap_or(o["count"].as_u64().unwrap())
        })
        .unwrap();
    assert_eq!(
        launches["total"],
        json!(sent.to_string()),
        "every cudaLaunchKernel call the node counted"
    );
    assert!(b.seen.errors.is_empty(), "errors: {:?}", b.seen.errors);
    b.screenshot(&artifact("report-live-collect.png"));
    drop(b);
    crate::collect_server::stop(server);
}

/// A PyTorch profiler trace's report shows the GPU time measured on its device timeline, the
/// figures `explain --json` gives (one function per answer), in a real browser.
#[test]
fn kineto_report_shows_the_measured_device_time() {
    let db = scratch().join("kineto-nccl.duckdb");
    if !db.exists() {
        ok(&[
            "import",
            shared("kineto/a100-rank0-of-2-nccl.pt.trace.json.gz")
                .to_str()
                .unwrap(),
            "-o",
            db.to_str().unwrap(),
        ]);
    }
    let explain = json_of(&["explain", "--db", db.to_str().unwrap(), "--json"]);
    let dev = &explain["devices"][0];
    assert_eq!(dev["device"], 0, "{dev}");
    let out = scratch().join("kineto-report.html");
    ok(&[
        "report",
        "--db",
        db.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--force",
    ]);
    let mut b = Browser::start();
    b.open(
        &format!("file://{}", out.display()),
        "document.body && document.body.dataset.ready === '1'",
    );
    let page = b.eval(
        "[...document.querySelectorAll('#devices .device')].map((e) => ({ busy: e.dataset.busyNs, idle: e.dataset.idleNs, text: e.textContent, rows: e.querySelectorAll('.idle-reasons tbody tr').length }))",
    );
    let shown = &page[0];
    let busy = dev["busy_ns"].as_i64().unwrap();
    let idle = dev["window_ns"].as_i64().unwrap() - busy;
    assert_eq!(shown["busy"], busy.to_string(), "{page}");
    assert_eq!(shown["idle"], idle.to_string(), "{page}");
    assert_eq!(
        shown["rows"].as_u64().unwrap() as usize,
        dev["idle"].as_array().unwrap().len()
    );
    let text = shown["text"].as_str().unwrap();
    let pct = format!(
        "{:.1}% measured",
        dev["gpu_idle_measured_pct"].as_f64().unwrap()
    );
    assert!(text.contains(&pct), "{text}");
    assert!(text.contains("host cannot tell"), "{text}");
    // Steps: the chart's series and the slowest steps' budgets are `steps --json`'s, and each
    // budget bar's segments sum to its step's time.
    let steps = json_of(&["steps", "--db", db.to_str().unwrap(), "--json"]);
    let series = &steps["series"][0];
    let page = b.eval(
        "[...document.querySelectorAll('#steps .steps')].map((e) => ({ count: e.dataset.count, p50: e.dataset.p50Ns, charts: e.querySelectorAll('.chart canvas').length, slow: [...e.querySelectorAll('.step')].map((x) => ({ step: x.dataset.step, ns: x.dataset.durationNs, sum: [...x.querySelectorAll('.seg')].reduce((a, g) => a + Number(g.dataset.ns), 0) })) }))",
    );
    let shown = &page[0];
    assert_eq!(shown["count"], series["count"].to_string(), "{page}");
    assert_eq!(shown["p50"], series["p50_ns"].to_string(), "{page}");
    assert_eq!(shown["charts"], 1, "{page}");
    let slow = shown["slow"].as_array().unwrap();
    assert_eq!(
        slow.len(),
        series["slowest"].as_array().unwrap().len(),
        "{page}"
    );
    for (x, want) in slow.iter().zip(series["slowest"].as_array().unwrap()) {
        assert_eq!(x["step"], want["step"].to_string(), "{page}");
        assert_eq!(x["ns"], want["duration_ns"].to_string(), "{page}");
        assert_eq!(x["sum"], want["duration_ns"], "{page}");
    }
    assert!(b.seen.errors.is_empty(), "errors: {:?}", b.seen.errors);
}
