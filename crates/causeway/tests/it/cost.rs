//! What findings cost, with a price configured (`[cost]` in the file `CAUSEWAY_CONFIG` names):
//! on the demo sync storm, its process given two GPUs (CUDA_VISIBLE_DEVICES=0,1) on an H100
//! node, `explain --json`, the MCP server's get_causal_chains and the report give the same
//! cost, equal to time lost x 2 GPUs at the H100 price; a bad price is refused in one line.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::mcp::StdioServer;

const CONFIG: &str = "[cost]\ngpu_hour = 2.0\n[cost.models]\n\"H100\" = 4.0\n";

fn with_config(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CAUSEWAY_LOG")
        .env("CAUSEWAY_CONFIG", config)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The demo sync storm with its processes on GPUs 0 and 1 of an H100 node.
fn two_gpu_trace(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("storm.duckdb");
    crate::common::ok(&["demo", "sync-storm", "-o", db.to_str().unwrap(), "--json"]);
    let c = causeway_store::duckdb::Connection::open(&db).unwrap();
    c.execute_batch(
        "UPDATE processes SET gpu_visible = 'CUDA_VISIBLE_DEVICES=0,1';
         INSERT INTO sessions (session_id, node, started_ns, gpu_model, origin)
           SELECT 1, 'demo-node', min(timestamp), 'NVIDIA H100 80GB HBM3', 'recorded' FROM event_data;",
    )
    .unwrap();
    db
}

#[test]
fn a_finding_costs_its_time_lost_times_its_gpus_at_the_configured_price() {
    let dir = tempfile::tempdir().unwrap();
    let db = two_gpu_trace(dir.path());
    let config = dir.path().join("config.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let d = db.to_str().unwrap();

    let cli: Value = serde_json::from_str(&stdout(&with_config(
        &config,
        &["explain", "--db", d, "--json"],
    )))
    .unwrap();
    let chains = cli["chains"].as_array().unwrap();
    assert!(!chains.is_empty());
    for c in chains {
        let k = &c["cost"];
        let lost = c["time_lost_ns"].as_f64().unwrap();
        // The design: 2 GPUs, $4.00 per H100 GPU-hour.
        assert_eq!(k["gpus"], 2, "{c}");
        assert_eq!(k["gpus_from"], "CUDA_VISIBLE_DEVICES");
        assert_eq!(k["gpu_model"], "NVIDIA H100 80GB HBM3");
        assert_eq!(k["price_per_gpu_hour"], 4.0);
        let gpu_hours = lost * 2.0 / 3.6e12;
        // Figures kept to 6 significant digits.
        let near = |got: &Value, want: f64| (got.as_f64().unwrap() - want).abs() <= 1e-5 * want;
        assert!(near(&k["gpu_hours"], gpu_hours), "{k}");
        assert!(near(&k["amount"], 4.0 * gpu_hours), "{k}");
        assert_eq!(k["currency"], "USD");
        let window = (cli["window"]["until_ns"].as_f64().unwrap()
            - cli["window"]["from_ns"].as_f64().unwrap())
        .max(1.0);
        let per_day = gpu_hours * 86_400e9 / window;
        assert!(near(&k["gpu_hours_per_day"], per_day), "{k}");
    }

    // The MCP server started with the same config gives the same chains, cost included.
    let mut s = StdioServer::spawn(
        Command::new(env!("CARGO_BIN_EXE_causeway"))
            .args(["mcp", "--db", d])
            .env("CAUSEWAY_CONFIG", &config),
    );
    s.initialize("2025-11-25");
    let r = s.request(
        "tools/call",
        json!({"name": "get_causal_chains", "arguments": {"top_n": 20}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["chains"], cli["chains"]);
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("GPU-hours (2 GPUs, CUDA_VISIBLE_DEVICES)"),
        "{text}"
    );

    // People read the same line in explain and in the report.
    let people = stdout(&with_config(&config, &["explain", "--db", d]));
    let line = people
        .lines()
        .find(|l| l.trim_start().starts_with("cost: "))
        .expect("explain prints each finding's cost")
        .trim()
        .trim_start_matches("cost: ")
        .to_string();
    assert!(
        line.contains("at $4.00/GPU-hour (NVIDIA H100 80GB HBM3)"),
        "{line}"
    );
    assert!(line.contains("(estimate)"), "{line}");
    let html = dir.path().join("r.html");
    stdout(&with_config(
        &config,
        &["report", "--db", d, "-o", html.to_str().unwrap()],
    ));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(&line),
        "the report carries explain's cost line"
    );
}

#[test]
fn a_bad_price_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.duckdb");
    crate::common::ok(&["demo", "healthy", "-o", db.to_str().unwrap(), "--json"]);
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[cost]\ngpu_hour = -2.5\n").unwrap();
    let o = with_config(&config, &["explain", "--db", db.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("gpu_hour = -2.5"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    // A config file the user named must exist.
    let o = with_config(
        &dir.path().join("missing.toml"),
        &["explain", "--db", db.to_str().unwrap()],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.toml"));
}
