//! Rendering for people: aligned tables, durations and counts, colour only on a terminal with
//! NO_COLOR unset. Everything here writes to stdout (data); logs go to stderr via tracing.

use std::io::IsTerminal;

/// Whether to use ANSI colour on stdout.
pub fn color_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

pub use causeway_analysis::fmt::{dur as human_duration, thousands};

/// ns -> microseconds with one decimal and thousands separators: 5079382 -> "5,079.4".
pub fn micros(ns: i64) -> String {
    let tenths = (ns as f64 / 100.0).round() as i64;
    let sign = if tenths < 0 { "-" } else { "" };
    let t = tenths.unsigned_abs();
    format!("{sign}{}.{}", thousands(t / 10), t % 10)
}

/// A file name as a summary shows it: names are data (a file may be named with escape
/// sequences, which the terminal pass below would keep as colour codes).
pub fn path(p: &std::path::Path) -> String {
    causeway_store::sanitize::sanitize(&p.display().to_string())
}

/// Names read from a trace (nodes), sanitised, comma-separated.
pub fn names(names: &[String]) -> String {
    let clean: Vec<String> = names
        .iter()
        .map(|n| causeway_store::sanitize::sanitize(n))
        .collect();
    clean.join(", ")
}

/// ns since the Unix epoch -> RFC 3339 with milliseconds.
pub fn timestamp(ns: i64) -> String {
    if ns <= 0 {
        return "-".into();
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The sanitiser's final pass over text for a terminal: keeps the colour codes (SGR: `ESC [`
/// digits and `;` then `m`) that [`table`] adds, and cleans everything else.
pub fn sanitize_terminal(s: &str) -> String {
    use causeway_store::sanitize::sanitize_text;
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('\x1b') {
        out.push_str(&sanitize_text(&rest[..at]));
        let tail = &rest[at..];
        let sgr_len = tail
            .strip_prefix("\x1b[")
            .and_then(|t| {
                t.find(|c: char| !(c.is_ascii_digit() || c == ';'))
                    .map(|i| (t, i))
            })
            .filter(|(t, i)| t[*i..].starts_with('m'))
            .map(|(_, i)| 2 + i + 1);
        match sgr_len {
            Some(n) => {
                out.push_str(&tail[..n]);
                rest = &tail[n..];
            }
            None => {
                out.push_str(&sanitize_text("\x1b"));
                rest = &tail[1..];
            }
        }
    }
    out.push_str(&sanitize_text(rest));
    out
}

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// Renders rows under headers with two spaces between columns.
pub fn table(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| width(h)).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(width(c));
            }
        }
    }
    let bold = color_enabled();
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(width(c));
            if i > 0 {
                l.push_str("  ");
            }
            match headers[i].1 {
                Align::Left => {
                    l.push_str(c);
                    if i + 1 < cells.len() {
                        l.push_str(&" ".repeat(pad));
                    }
                }
                Align::Right => {
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    let head: Vec<&str> = headers.iter().map(|(h, _)| *h).collect();
    if bold {
        out.push_str("\x1b[1m");
    }
    line(head, &mut out);
    if bold {
        out.insert_str(out.len() - 1, "\x1b[0m");
    }
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(micros(20_300), "20.3");
        assert_eq!(micros(5_079_382), "5,079.4");
        assert_eq!(human_duration(8_935_952_000), "8.94 s");
        assert_eq!(human_duration(950), "950 ns");
    }

    #[test]
    fn terminal_text_keeps_colour_only() {
        assert_eq!(
            sanitize_terminal("\x1b[1mOP\x1b[0m\n"),
            "\x1b[1mOP\x1b[0m\n"
        );
        assert_eq!(
            sanitize_terminal("a\x1b]0;title\x07b\u{202E}c\x1b[2J"),
            "a\u{FFFD}]0;title\u{FFFD}b\u{FFFD}c\u{FFFD}[2J"
        );
    }

    #[test]
    fn table_aligns() {
        let t = table(
            &[("OP", Align::Left), ("N", Align::Right)],
            &[
                vec!["a".into(), "1".into()],
                vec!["long".into(), "100".into()],
            ],
        );
        assert_eq!(t, "OP      N\na       1\nlong  100\n");
    }
}
