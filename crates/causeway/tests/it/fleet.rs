//! Fleet fan-out end to end: three `causeway serve` agents on loopback with TLS, client
//! certificates (mTLS) and a bearer token, plus one address where nothing listens.
//! `causeway query --nodes` merges the rows with a node column, estimates each node's clock
//! offset, and reports the dead node as a warning; without a client certificate no node answers.
//! `causeway fleet` and the `query_fleet` MCP tool of `causeway mcp --nodes` (no local trace)
//! answer over the same agents.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::Value;

use crate::common::vllm_store;

const BIN: &str = env!("CARGO_BIN_EXE_causeway");
const TOKEN: &str = "fleet-token-0123456789abcdef";

struct Agent {
    child: Child,
    url: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CA, server certificate for 127.0.0.1 and a client certificate, as PEM files in `dir`.
pub fn pki(dir: &Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, sans) in [
        ("server", vec!["127.0.0.1".to_string(), "localhost".into()]),
        ("client", vec!["fleet-client".into()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

fn agent(dir: &Path) -> Agent {
    let p = |n: &str| dir.join(n);
    let mut child = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(vllm_store())
        .args(["--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(p("server.pem"))
        .arg("--tls-key")
        .arg(p("server.key"))
        .arg("--tls-client-ca")
        .arg(p("ca.pem"))
        .env("CAUSEWAY_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::common::listening_addr(&mut child);
    Agent {
        child,
        url: format!("https://{addr}"),
    }
}

fn query(dir: &Path, nodes: &str, with_client_cert: bool) -> (bool, Value, String) {
    query_sql(
        dir,
        nodes,
        with_client_cert,
        "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'",
    )
}

/// `causeway query --nodes NODES --json SQL`: (success, JSON, stderr).
fn query_sql(dir: &Path, nodes: &str, with_client_cert: bool, sql: &str) -> (bool, Value, String) {
    let mut c = Command::new(BIN);
    c.args(["query", "--nodes", nodes, "--ca-cert"])
        .arg(dir.join("ca.pem"))
        .args(["--node-timeout", "5s", "--json"]);
    if with_client_cert {
        c.arg("--client-cert")
            .arg(dir.join("client.pem"))
            .arg("--client-key")
            .arg(dir.join("client.key"));
    }
    let out = c.arg(sql).env("CAUSEWAY_TOKEN", TOKEN).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.success(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `causeway ARGS --nodes NODES` with the CA, the client certificate and the token, and
/// returns its JSON (the command must succeed).
fn client(dir: &Path, args: &[&str], nodes: &[String]) -> Value {
    let out = Command::new(BIN)
        .args(args)
        .args(["--nodes", &nodes.join(","), "--ca-cert"])
        .arg(dir.join("ca.pem"))
        .arg("--client-cert")
        .arg(dir.join("client.pem"))
        .arg("--client-key")
        .arg(dir.join("client.key"))
        .args(["--node-timeout", "5s", "--json"])
        .env("CAUSEWAY_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn query_fans_out_over_mtls_with_partial_results() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let agents: Vec<Agent> = (0..3).map(|_| agent(dir.path())).collect();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("https://{}", l.local_addr().unwrap())
    };
    let mut nodes: Vec<String> = agents.iter().map(|a| a.url.clone()).collect();
    nodes.push(dead.clone());
    let (ok, v, err) = query(dir.path(), &nodes.join(","), true);
    assert!(ok, "{err}");
    assert_eq!(v["columns"][0]["name"], "node");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{v}");
    for (row, a) in rows.iter().zip(&agents) {
        assert_eq!(row[0], a.url.as_str());
        assert_eq!(row[1], 550);
    }
    let answers = v["nodes"].as_array().unwrap();
    for a in &answers[..3] {
        assert_eq!(a["ok"], true, "{a}");
        let off = a["clock_offset_ns"].as_i64().expect("a clock offset");
        assert!(off.abs() < 50_000_000, "same host, offset {off} ns");
        assert!(a["clock_uncertainty_ns"].as_i64().unwrap() >= 0);
    }
    assert_eq!(answers[3]["ok"], false);
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v}");
    assert!(warnings[0].as_str().unwrap().starts_with(&dead), "{v}");

    // explain --nodes: every node's chains ranked together, each with the node that reported it.
    let e = client(dir.path(), &["explain"], &nodes);
    let chains = e["chains"].as_array().unwrap();
    assert!(!chains.is_empty() && chains.len().is_multiple_of(3), "{e}");
    let lost: Vec<i64> = chains
        .iter()
        .map(|c| c["time_lost_ns"].as_i64().unwrap())
        .collect();
    assert!(lost.windows(2).all(|w| w[0] >= w[1]), "ranked by time lost");
    let reporters: std::collections::BTreeSet<&str> = chains
        .iter()
        .map(|c| c["reported_by"].as_str().unwrap())
        .collect();
    assert_eq!(reporters.len(), 3);
    assert_eq!(e["warnings"].as_array().unwrap().len(), 1, "{e}");

    // `causeway fleet`: the CLI twin of query_fleet.
    let fleet = |action: &str, extra: &[&str]| -> Value {
        let mut args = vec!["fleet", action];
        args.extend(extra);
        client(dir.path(), &args, &nodes)
    };
    let o = fleet("overview", &[]);
    assert_eq!(o["columns"][0], "node");
    assert_eq!(o["rows"].as_array().unwrap().len(), 3, "{o}");
    for (row, a) in o["rows"].as_array().unwrap().iter().zip(&agents) {
        assert_eq!(row[0], a.url.as_str());
        assert!(row[1].as_u64().unwrap() > 0, "events: {row:?}");
        assert!(row[4].as_u64().unwrap() > 0, "chains: {row:?}");
        assert!(
            row[5].as_str().unwrap().starts_with('['),
            "worst finding: {row:?}"
        );
    }
    assert_eq!(o["warnings"].as_array().unwrap().len(), 1, "{o}");
    let st = fleet("stats", &[]);
    let launches: Vec<&Value> = st["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r[2] == "cudaLaunchKernel")
        .collect();
    assert_eq!(launches.len(), 3, "{st}");
    assert!(launches.iter().all(|r| r[3] == 550), "{st}");
    // Identical traces: no node stands out.
    assert_eq!(st["outliers"].as_array().unwrap().len(), 0, "{st}");
    let sq = fleet(
        "sql",
        &["SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'"],
    );
    assert_eq!(sq["columns"], serde_json::json!(["node", "n"]));
    assert_eq!(sq["rows"].as_array().unwrap().len(), 3);

    // `causeway mcp --nodes` without a local trace: agents get query_fleet over MCP.
    let mut server = crate::mcp::StdioServer::spawn(
        Command::new(BIN)
            .args(["mcp", "--nodes", &nodes.join(","), "--ca-cert"])
            .arg(dir.path().join("ca.pem"))
            .arg("--client-cert")
            .arg(dir.path().join("client.pem"))
            .arg("--client-key")
            .arg(dir.path().join("client.key"))
            .args(["--node-timeout", "5s"])
            .env("CAUSEWAY_TOKEN", TOKEN),
    );
    server.initialize("2025-11-25");
    let list = server.request("tools/list", serde_json::json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"query_fleet"), "{names:?}");
    let r = server.request(
        "tools/call",
        serde_json::json!({"name": "query_fleet", "arguments": {"action": "chains", "limit": 2}}),
    );
    let sc = &r["result"]["structuredContent"];
    assert_eq!(sc["chains"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(sc["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(sc["warnings"].as_array().unwrap().len(), 1);
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("3 of 4 nodes answered"), "{text}");
    // A tool that needs a local trace says there is none.
    let r = server.request(
        "tools/call",
        serde_json::json!({"name": "get_trace_stats", "arguments": {}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    drop(server);

    // Without a client certificate the agents refuse the TLS handshake: no node answers.
    let (ok, v, err) = query(dir.path(), &nodes[..3].join(","), false);
    assert!(!ok);
    assert!(err.contains("no node of 3 answered"), "{err}");

    // A query every node refuses is the query's fault, and the message says so with the
    // nodes' own hint (not "check the token and TLS").
    let (ok, _, err) = query_sql(dir.path(), &nodes[..3].join(","), true, "DROP TABLE events");
    assert!(!ok);
    assert!(err.contains("every node (3) refused the request"), "{err}");
    let hint = err.lines().find(|l| l.starts_with("hint: ")).unwrap_or("");
    assert!(!hint.contains("token") && hint.len() > 6, "{err}");
    assert_eq!(v["warnings"].as_array().unwrap().len(), 3, "{v}");
}
