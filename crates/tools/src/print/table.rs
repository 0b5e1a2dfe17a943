//! Tables and figures for people: aligned columns (bold headers on a terminal with NO_COLOR
//! unset), counts with thousands separators, durations, microseconds and timestamps.

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

/// ns since the Unix epoch -> RFC 3339 with milliseconds.
pub fn timestamp(ns: i64) -> String {
    if ns <= 0 {
        return "-".into();
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns as u64);
    humantime::format_rfc3339_millis(t).to_string()
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
