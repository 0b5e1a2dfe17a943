//! A small Chrome DevTools-protocol client for the report's browser tests: starts the system's
//! headless Chromium, opens one page, and records what the page logged, threw and requested,
//! so a test can assert on console errors and network traffic, read the DOM and take
//! screenshots. Only what the tests use; one page per browser.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// The Chromium binary: $CAUSEWAY_CHROMIUM, else `chromium` or `chromium-browser` on PATH.
fn chromium_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("CAUSEWAY_CHROMIUM").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "no chromium on PATH: install it with `bash scripts/deps.sh` (apt-get install chromium), or set CAUSEWAY_CHROMIUM"
    )
}

/// What a page did while it was open.
#[derive(Debug, Default)]
pub struct Seen {
    /// Console errors and assertions, uncaught exceptions, and browser log errors (CSP
    /// violations, failed loads).
    pub errors: Vec<String>,
    /// Every URL the page requested.
    pub requests: Vec<String>,
}

/// A headless Chromium with one page attached.
pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    /// Recorded since the page was opened.
    pub seen: Seen,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium (no network of its own: no component updates, sync or metrics) and
    /// attaches to a blank page with console, log, network and page events on.
    pub fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium_binary())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-default-apps",
                "--disable-extensions",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                "--metrics-recording-only",
                "--hide-scrollbars",
                "--window-size=1400,2400",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let url = loop {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "chromium exited before it listened for DevTools"
            );
            if let Some(u) = line.trim().strip_prefix("DevTools listening on ") {
                break u.to_string();
            }
        };
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let (ws, _) = tungstenite::connect(url.as_str()).expect("connect to DevTools");
        let mut b = Browser {
            child,
            ws,
            session: String::new(),
            next_id: 0,
            seen: Seen::default(),
            _profile: profile,
        };
        let target = b.call_browser("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().unwrap().to_string();
        let attached = b.call_browser(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        for domain in [
            "Runtime.enable",
            "Log.enable",
            "Network.enable",
            "Page.enable",
        ] {
            b.call(domain, json!({}));
        }
        b
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .expect("send to DevTools");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(
                Instant::now() < deadline,
                "{method}: no answer from DevTools"
            );
            let v = self.read();
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method} failed: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// Reads one message, recording the events the tests look at.
    fn read(&mut self) -> Value {
        let text = match self.ws.read().expect("read from DevTools") {
            Message::Text(t) => t.to_string(),
            Message::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => return Value::Null,
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let p = &v["params"];
        match v["method"].as_str().unwrap_or("") {
            "Runtime.consoleAPICalled" => {
                let kind = p["type"].as_str().unwrap_or("");
                if matches!(kind, "error" | "assert") {
                    let args: Vec<String> = p["args"]
                        .as_array()
                        .map(|a| a.iter().map(|x| x["value"].to_string()).collect())
                        .unwrap_or_default();
                    self.seen
                        .errors
                        .push(format!("console.{kind}: {}", args.join(" ")));
                }
            }
            "Runtime.exceptionThrown" => self.seen.errors.push(format!(
                "uncaught: {}",
                p["exceptionDetails"]["exception"]["description"]
                    .as_str()
                    .or(p["exceptionDetails"]["text"].as_str())
                    .unwrap_or("")
            )),
            "Log.entryAdded" if p["entry"]["level"] == "error" => self.seen.errors.push(format!(
                "log: {} {}",
                p["entry"]["text"].as_str().unwrap_or(""),
                p["entry"]["url"].as_str().unwrap_or("")
            )),
            "Network.requestWillBeSent" => self
                .seen
                .requests
                .push(p["request"]["url"].as_str().unwrap_or("").to_string()),
            _ => {}
        }
        v
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// A command to the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(&session))
    }

    /// Sends these headers with every request of the page (e.g. a bearer token).
    pub fn set_headers(&mut self, headers: Value) {
        self.call("Network.setExtraHTTPHeaders", json!({"headers": headers}));
    }

    /// The value of a JavaScript expression (awaited when it is a promise), as JSON.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("evaluating `{}` threw: {e}", &expr[..expr.len().min(80)]);
        }
        r["result"]["value"].clone()
    }

    /// Opens `url` and waits until `ready` (a JavaScript expression) is true.
    pub fn open(&mut self, url: &str, ready: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(ready, Duration::from_secs(60));
    }

    /// Waits until `expr` is true, reading events meanwhile.
    pub fn wait_for(&mut self, expr: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.eval(&format!("!!({expr})")) == json!(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "`{expr}` was not true within {limit:?}; errors: {:?}",
                self.seen.errors
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves a PNG of the page as it is now.
    pub fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}
