//! The page: one HTML document with uPlot, the page script and the styles inlined, the report
//! data as a JSON block, and a Content-Security-Policy that allows exactly those inline scripts
//! and styles by hash (no eval, no network from a file; the live page may fetch its own origin).

use std::sync::LazyLock;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::data::ReportData;

/// uPlot (crates/report/vendor/uplot, see its README): the charts.
const UPLOT_JS: &str = include_str!("../vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../vendor/uplot/uPlot.min.css");
/// The page script: renders the data block, and on the live page polls for fresh data.
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// Where the live page fetches fresh data (same origin, same auth as the rest of the API).
pub const LIVE_DATA_PATH: &str = "/api/v1/report";

/// How the page is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A file opened from disk: no network at all (the policy travels in a meta tag).
    File,
    /// Served at `/`: polls [`LIVE_DATA_PATH`] every `poll_ms` (the policy is a header).
    Live {
        /// Milliseconds between polls.
        poll_ms: u32,
    },
}

fn sha256_source(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The one `<style>` element's text.
static STYLE: LazyLock<String> = LazyLock::new(|| format!("{UPLOT_CSS}\n{APP_CSS}"));

/// Hash sources of the two inline scripts and the style element, computed once.
static HASHES: LazyLock<(String, String)> = LazyLock::new(|| {
    (
        format!("{} {}", sha256_source(UPLOT_JS), sha256_source(APP_JS)),
        sha256_source(&STYLE),
    )
});

/// The Content-Security-Policy of a page in `mode`: scripts and styles only by hash, no
/// other resource; a file may connect nowhere, the live page only to its own origin.
pub fn content_security_policy(mode: Mode) -> String {
    let (scripts, style) = &*HASHES;
    let common = format!(
        "default-src 'none'; script-src {scripts}; style-src {style}; img-src data:; base-uri 'none'; form-action 'none'"
    );
    match mode {
        Mode::File => format!("{common}; connect-src 'none'"),
        // frame-ancestors only works as a header (a meta tag with it logs an error).
        Mode::Live { .. } => format!("{common}; connect-src 'self'; frame-ancestors 'none'"),
    }
}

/// JSON safe inside a `<script type="application/json">` element: no `<`, `>` or `&` (so no
/// `</script>` or comment can end it early) and no line separators.
fn json_for_script(v: &serde_json::Value) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + 64);
    for ch in s.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Text escaped for HTML element content and double-quoted attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// The report data as the page and the live endpoint carry it: through the sanitiser's final
/// pass, since trace strings (comm, kernels, symbols) come from the traced machine.
pub fn data_json(data: &ReportData) -> serde_json::Value {
    let mut v = serde_json::to_value(data).unwrap_or(serde_json::Value::Null);
    causeway_store::sanitize::sanitize_json(&mut v);
    v
}

/// The whole page.
pub fn render(data: &ReportData, mode: Mode) -> String {
    let json = json_for_script(&data_json(data));
    let (meta, live, poll) = match mode {
        Mode::File => (
            format!(
                "<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n",
                escape(&content_security_policy(mode))
            ),
            "file",
            0,
        ),
        Mode::Live { poll_ms } => (String::new(), "live", poll_ms),
    };
    let title = escape(&causeway_store::sanitize::sanitize_with(&data.trace, 120));
    let mut page = String::with_capacity(json.len() + UPLOT_JS.len() + APP_JS.len() + 8192);
    page.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str(&meta);
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    // An empty icon, so the browser does not ask the server (or the disk) for /favicon.ico.
    page.push_str("<link rel=\"icon\" href=\"data:,\">\n");
    page.push_str(&format!("<title>causeway report: {title}</title>\n"));
    page.push_str(&format!("<style>{}</style>\n</head>\n", &*STYLE));
    page.push_str(&format!(
        "<body data-mode=\"{live}\" data-poll-ms=\"{poll}\" data-live-path=\"{LIVE_DATA_PATH}\">\n"
    ));
    page.push_str(&format!(
        "<header><h1>causeway report: {title}</h1><p id=\"status\" role=\"status\"></p></header>\n<main id=\"app\"></main>\n"
    ));
    page.push_str(&format!(
        "<script type=\"application/json\" id=\"causeway-data\">{json}</script>\n"
    ));
    page.push_str(&format!("<script>{UPLOT_JS}</script>\n"));
    page.push_str(&format!("<script>{APP_JS}</script>\n</body>\n</html>\n"));
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_block_cannot_close_its_script_element() {
        let v = serde_json::json!({"comm": "</script><script>alert(1)</script>", "x": "a\u{2028}b & c"});
        let s = json_for_script(&v);
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v, "the escaped JSON parses back to the same value");
    }

    #[test]
    fn policy_allows_only_the_inlined_scripts_and_style_by_hash() {
        let file = content_security_policy(Mode::File);
        assert!(file.starts_with("default-src 'none'"));
        assert!(file.contains("connect-src 'none'"));
        assert!(!file.contains("unsafe-inline") && !file.contains("unsafe-eval"));
        assert!(file.contains(&sha256_source(APP_JS)));
        assert!(file.contains(&sha256_source(UPLOT_JS)));
        assert!(file.contains(&sha256_source(&STYLE)));
        let live = content_security_policy(Mode::Live { poll_ms: 1000 });
        assert!(live.contains("connect-src 'self'"));
        assert!(live.contains("frame-ancestors 'none'"));
    }

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
