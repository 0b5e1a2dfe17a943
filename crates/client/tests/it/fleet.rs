//! The fleet fan-out against fake nodes: answers in the order the nodes were given, each
//! node's clock offset within its stated uncertainty, refusals with the node's error and hint,
//! dead, silent and oversized nodes as warnings, and HTTPS with and without client
//! certificates.

use std::sync::Arc;
use std::time::Duration;

use causeway_client::fleet::{self, Fleet};
use serde_json::{Value, json};

use crate::common::{Answer, Node, Pki, Seen, dead_addr};

const TOKEN: &str = "fleet-token";

/// A node whose clock reads `offset_ns` ahead of ours and whose tools echo their arguments.
fn node(name: &'static str, offset_ns: i64) -> Node {
    Node::start(move |req: &Seen| match req.path.as_str() {
        "/api/v1/time" => {
            Answer::json(200, json!({"now_ns": causeway_store::now_ns() + offset_ns}))
        }
        p if p.starts_with("/api/v1/tools/") => {
            let args: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            Answer::json(
                200,
                json!({"structured": {"node": name, "args": args}, "text": "answered"}),
            )
        }
        _ => Answer::Reply(404, Vec::new()),
    })
}

fn fleet(nodes: Vec<String>, timeout: Duration) -> Fleet {
    Fleet {
        nodes,
        token: Some(TOKEN.into()),
        tls: None,
        timeout,
    }
}

#[test]
fn answers_come_in_node_order_with_each_node_s_clock_offset() {
    const AHEAD: i64 = 3_600_000_000_000;
    const BEHIND: i64 = -5_000_000_000;
    let (a, b) = (node("a", AHEAD), node("b", BEHIND));
    let dead = dead_addr();
    // The three spellings of a node: a URL, host:port, and a URL with a trailing slash.
    let nodes = vec![a.url(), dead.to_string(), format!("{}/", b.url())];
    let f = fleet(nodes.clone(), Duration::from_secs(60));
    let args = json!({"sql": "SELECT 1"});
    let (answers, wall_ms) = fleet::run_blocking(&f, "run_sql", &args).unwrap();
    assert_eq!(
        answers.iter().map(|a| a.node.clone()).collect::<Vec<_>>(),
        nodes
    );
    for (answer, name, offset) in [(&answers[0], "a", AHEAD), (&answers[2], "b", BEHIND)] {
        assert!(answer.ok, "{answer:?}");
        assert_eq!(answer.warning, None);
        assert_eq!(
            answer.result,
            Some(json!({"node": name, "args": args})),
            "the structured result, as sent"
        );
        // The node's clock was read between the request's send and its answer: the estimate
        // is off by at most half the round trip (plus rounding).
        let est = answer.clock_offset_ns.unwrap();
        let uncertainty = answer.clock_uncertainty_ns.unwrap();
        assert!(uncertainty >= 0);
        assert!(
            (est - offset).abs() <= uncertainty + 1,
            "{name}: estimated {est}, true {offset}, ± {uncertainty}"
        );
        assert!(answer.ms <= wall_ms, "{} > {wall_ms}", answer.ms);
    }
    let d = &answers[1];
    assert!(!d.ok);
    assert_eq!(d.result, None);
    assert_eq!(d.clock_offset_ns, None);
    let w = d.warning.as_deref().unwrap();
    assert!(
        w.starts_with(&format!("unreachable: cannot connect to {dead}")),
        "{w}"
    );

    // What a node was sent: the tool call with the token, then the clock samples.
    let seen = a.seen();
    let call = &seen[0];
    assert_eq!(
        (call.method.as_str(), call.path.as_str()),
        ("POST", "/api/v1/tools/run_sql")
    );
    assert_eq!(call.header("authorization"), Some("Bearer fleet-token"));
    assert_eq!(call.header("content-type"), Some("application/json"));
    assert_eq!(call.header("host"), Some(a.addr.to_string().as_str()));
    assert_eq!(serde_json::from_slice::<Value>(&call.body).unwrap(), args);
    let clock: Vec<_> = seen[1..]
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(clock, vec![("GET", "/api/v1/time"); 4]);
}

#[test]
fn a_node_s_refusal_is_a_warning_with_its_error_and_hint() {
    let refusing = Node::start(|req: &Seen| match req.path.as_str() {
        "/api/v1/time" => Answer::json(200, json!({"now_ns": causeway_store::now_ns()})),
        _ => Answer::json(
            422,
            json!({"error": "query refused: writes are not allowed", "hint": "run a SELECT"}),
        ),
    });
    let unauthorized = Node::start(|_: &Seen| Answer::Reply(401, Vec::new()));
    let forbidden = Node::start(|_: &Seen| Answer::Reply(403, Vec::new()));
    let broken = Node::start(|_: &Seen| Answer::Reply(500, b"<html>oops</html>".to_vec()));
    let f = fleet(
        vec![
            refusing.url(),
            unauthorized.url(),
            forbidden.url(),
            broken.url(),
        ],
        Duration::from_secs(60),
    );
    let (answers, _) = fleet::run_blocking(&f, "run_sql", &json!({"sql": "DROP TABLE x"})).unwrap();
    let r = &answers[0];
    assert!(!r.ok);
    assert_eq!(
        r.warning.as_deref(),
        Some("422: query refused: writes are not allowed (hint: run a SELECT)")
    );
    let refusal = r.refusal.as_ref().unwrap();
    assert_eq!(refusal.status, 422);
    assert_eq!(refusal.message, "query refused: writes are not allowed");
    assert_eq!(refusal.hint, "run a SELECT");
    assert!(
        r.clock_offset_ns.is_some(),
        "a refusing node still has a clock"
    );
    for a in &answers[1..3] {
        let status = if a.node == unauthorized.url() {
            401
        } else {
            403
        };
        assert_eq!(
            a.warning.as_deref(),
            Some(format!("refused ({status}): check the token and --allow-host").as_str())
        );
        assert_eq!(a.refusal, None, "the node did not run anything to refuse");
    }
    // An answer that is not the API's JSON still says its status.
    let b = &answers[3];
    assert_eq!(b.warning.as_deref(), Some("500: error (hint: )"));
    assert_eq!(b.refusal.as_ref().map(|r| r.status), Some(500));
}

#[test]
fn a_silent_node_times_out_without_holding_back_the_others() {
    let silent = Node::start(|_: &Seen| Answer::Silent);
    let fast = node("fast", 0);
    let timeout = Duration::from_millis(500);
    let f = fleet(vec![silent.url(), fast.url()], timeout);
    let (answers, _) = fleet::run_blocking(&f, "get_trace_stats", &json!({})).unwrap();
    let s = &answers[0];
    assert!(!s.ok);
    assert_eq!(s.warning.as_deref(), Some("no answer within 500ms"));
    assert!(s.ms >= 500.0, "{}", s.ms);
    assert!(answers[1].ok, "{:?}", answers[1]);
}

#[test]
fn an_answer_over_the_size_cap_is_not_taken() {
    let huge = Node::start(|_: &Seen| Answer::Reply(200, vec![b' '; 9 << 20]));
    let f = fleet(vec![huge.url()], Duration::from_secs(60));
    let (answers, _) = fleet::run_blocking(&f, "run_sql", &json!({"sql": "SELECT 1"})).unwrap();
    let w = answers[0].warning.as_deref().unwrap();
    assert!(w.starts_with("unreachable: reading the answer:"), "{w}");
    assert!(!answers[0].ok);
}

#[test]
fn https_nodes_need_the_ca_and_with_mutual_tls_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let answer = |_: &Seen| {
        Answer::json(
            200,
            json!({"structured": {"tls": true}, "now_ns": causeway_store::now_ns()}),
        )
    };
    let node = Node::start_tls(pki.server_config(false), answer);
    let mtls = Node::start_tls(pki.server_config(true), answer);
    let url = |n: &Node| format!("https://{}", n.addr);
    let ask = |tls: Option<rustls::ClientConfig>, n: &Node| {
        let mut f = fleet(vec![url(n)], Duration::from_secs(60));
        f.tls = tls.map(Arc::new);
        fleet::run_blocking(&f, "get_trace_stats", &json!({}))
            .unwrap()
            .0
            .remove(0)
    };
    let trusted = || fleet::tls_config(&pki.ca, None).unwrap();
    let a = ask(Some(trusted()), &node);
    assert!(a.ok, "{a:?}");
    assert_eq!(a.result, Some(json!({"tls": true})));
    // No CA given: refused before connecting, with what to pass.
    let received = node.seen().len();
    let a = ask(None, &node);
    assert!(
        a.warning
            .as_deref()
            .unwrap()
            .contains("is https but no CA was given"),
        "{a:?}"
    );
    assert_eq!(node.seen().len(), received, "nothing was sent");
    // A CA that did not sign the node's certificate.
    let other = tempfile::tempdir().unwrap();
    let stranger = Pki::new(other.path());
    let a = ask(Some(fleet::tls_config(&stranger.ca, None).unwrap()), &node);
    let w = a.warning.as_deref().unwrap();
    assert!(
        w.contains(&format!("TLS handshake with {} failed", node.addr)),
        "{w}"
    );
    // Mutual TLS: without a client certificate no answer, with one the node answers.
    let a = ask(Some(trusted()), &mtls);
    assert!(
        !a.ok && a.warning.as_deref().unwrap().starts_with("unreachable:"),
        "{a:?}"
    );
    assert!(mtls.seen().is_empty(), "no request got through");
    let with_cert = fleet::tls_config(&pki.ca, Some((&pki.client_cert, &pki.client_key))).unwrap();
    let a = ask(Some(with_cert), &mtls);
    assert!(a.ok, "{a:?}");
}

#[test]
fn tls_configuration_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let missing = dir.path().join("missing.pem");
    let message = |r: anyhow::Result<rustls::ClientConfig>| format!("{:#}", r.err().unwrap());
    let m = message(fleet::tls_config(&missing, None));
    assert!(
        m.contains("missing.pem: cannot read the CA certificates (PEM)"),
        "{m}"
    );
    let m = message(fleet::tls_config(
        &pki.ca,
        Some((&missing, &pki.client_key)),
    ));
    assert!(
        m.contains("missing.pem: cannot read the client certificate"),
        "{m}"
    );
    let m = message(fleet::tls_config(
        &pki.ca,
        Some((&pki.client_cert, &missing)),
    ));
    assert!(m.contains("missing.pem: cannot read the client key"), "{m}");
    // The node's key with the client's certificate.
    let m = message(fleet::tls_config(
        &pki.ca,
        Some((&pki.client_cert, &pki.server_key)),
    ));
    assert!(
        m.contains("the client certificate and key do not match"),
        "{m}"
    );
}

#[test]
fn the_handle_fans_out_from_a_plain_thread_and_from_the_blocking_pool() {
    let n = node("n", 0);
    let h = fleet::handle(fleet(vec![n.url()], Duration::from_secs(60)));
    assert_eq!(h.nodes, vec![n.url()]);
    // The CLI: no runtime on this thread, the handle starts one.
    let answers = (h.fan_out)("get_trace_stats", &json!({}));
    assert!(answers[0].ok, "{answers:?}");
    // A server: a tool call's blocking-pool thread, inside the server's runtime.
    let rt = causeway_client::runtime().unwrap();
    let fan_out = h.fan_out.clone();
    let answers = rt
        .block_on(async move {
            tokio::task::spawn_blocking(move || fan_out("get_trace_stats", &json!({"k": 1}))).await
        })
        .unwrap();
    assert!(answers[0].ok, "{answers:?}");
    assert_eq!(
        answers[0].result,
        Some(json!({"node": "n", "args": {"k": 1}}))
    );
}

#[test]
fn the_token_never_reaches_a_debug_line() {
    let f = fleet(vec!["127.0.0.1:1".into()], Duration::from_secs(1));
    let text = format!("{f:?}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("(set)"), "{text}");
}
