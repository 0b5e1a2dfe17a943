//! What reaches the terminal: file and node names as data, and the sanitiser's last pass over
//! every text the CLI prints (the renderings themselves are `causeway_tools::print`).

pub use causeway_tools::print::table::thousands;

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

/// The sanitiser's final pass over text for a terminal: keeps the colour codes (SGR: `ESC [`
/// digits and `;` then `m`) that `causeway_tools::print::table` adds, and cleans everything else.
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
