//! The live web report at `/` and its data at `/api/v1/report`: served with its policy, never
//! cached by the browser, answered again from the report cache while the store is unchanged,
//! and refusing a malformed window with what to send instead.

use crate::common::{Server, options};

#[test]
fn the_page_comes_with_its_security_policy_and_is_not_cached() {
    let srv = Server::demo(options());
    let r = srv.get("/", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let csp = r
        .header("content-security-policy")
        .expect("a policy header");
    assert!(csp.contains("default-src"), "{csp}");
    assert!(r.text().starts_with("<!doctype html>"));
    // HEAD has the GET's headers.
    let h = srv.send("HEAD", "/", &[], b"");
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-security-policy"), Some(csp));
}

#[test]
fn an_unchanged_store_is_answered_with_the_same_report_generated_anew() {
    let srv = Server::demo(options());
    let first = srv.get("/api/v1/report?since=1h", &[]);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("cache-control"), Some("no-store"));
    let second = srv.get("/api/v1/report?since=1h", &[]);
    assert_eq!(second.status, 200);
    let (mut a, mut b) = (first.json(), second.json());
    let (ga, gb) = (
        a["generated_ns"].as_i64().unwrap(),
        b["generated_ns"].as_i64().unwrap(),
    );
    assert!(gb >= ga, "the answer is current as of the second request");
    a["generated_ns"] = 0.into();
    b["generated_ns"] = 0.into();
    assert_eq!(a, b);
}

#[test]
fn a_malformed_window_is_refused_with_what_to_send() {
    let srv = Server::demo(options());
    for path in [
        "/?pid=abc",
        "/api/v1/report?sql=SELECT",
        "/api/v1/report?node=%zz",
    ] {
        let r = srv.get(path, &[]);
        assert_eq!(r.status, 400, "{path}");
        let v = r.json();
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("invalid argument /"),
            "{path}: {v}"
        );
        assert!(
            v["hint"].as_str().unwrap().contains("?since=5m"),
            "{path}: {v}"
        );
    }
    // The data is read with GET only.
    let r = srv.send("POST", "/api/v1/report", &[], b"");
    assert_eq!(r.status, 405);
}
