//! Sanitises strings that come from traced processes (comm, symbols, paths, kernel names)
//! before they reach a person's terminal or an agent: control and bidi characters are removed
//! and the length is capped, so a process cannot inject terminal escapes or instructions that
//! render differently from what they are.

/// Longest string handed out, in characters; longer ones end with an ellipsis.
pub const MAX_CHARS: usize = 512;

/// Whether `c` is a bidirectional-formatting character (Trojan Source class).
fn is_bidi(c: char) -> bool {
    matches!(c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` is invisible formatting that can hide text (zero-width and similar).
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}')
}

/// Strips control, bidi and invisible characters and caps the length at `max_chars`.
pub fn sanitize_with(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars * 4));
    let mut n = 0;
    for c in s.chars() {
        if c.is_control() || is_bidi(c) || is_invisible(c) {
            continue;
        }
        if n == max_chars {
            out.push('…');
            break;
        }
        out.push(c);
        n += 1;
    }
    out
}

/// [`sanitize_with`] at the default cap.
pub fn sanitize(s: &str) -> String {
    sanitize_with(s, MAX_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_and_bidi() {
        assert_eq!(
            sanitize("py\x1b[31mthon\u{202E}gnp.exe\u{200B}"),
            "py[31mthongnp.exe"
        );
        assert_eq!(sanitize("a\nb\tc\0d"), "abcd");
    }

    #[test]
    fn caps_length() {
        let s = "x".repeat(600);
        let out = sanitize_with(&s, 10);
        assert_eq!(out, format!("{}…", "x".repeat(10)));
        assert_eq!(sanitize_with("short", 10), "short");
    }

    #[test]
    fn keeps_ordinary_unicode() {
        assert_eq!(
            sanitize("VLLM::EngineCor ünïcødé 模型"),
            "VLLM::EngineCor ünïcødé 模型"
        );
    }
}
