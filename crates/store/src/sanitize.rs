//! Sanitises strings that come from traced processes (comm, symbols, paths, kernel names, chain
//! text of imported files) before they reach a person's terminal or an agent: every control,
//! format, private-use, unassigned, line/paragraph-separator and default-ignorable character is
//! removed (a run of them leaves one U+FFFD, so the reader sees that something was there), other
//! spaces become plain spaces, and the length is capped. A process cannot inject terminal
//! escapes, bidi reordering (Trojan Source), or instructions spelled in invisible characters
//! (Unicode tags, variation selectors, fillers).

use serde_json::Value;
use unicode_general_category::{GeneralCategory as G, get_general_category};

/// Longest string handed out, in characters; longer ones end with an ellipsis.
pub const MAX_CHARS: usize = 512;

/// What stands for a run of removed characters.
pub const REMOVED: char = '\u{FFFD}';

/// Unicode's `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt, Unicode 16): characters
/// that render as nothing. Written out because no well-kept crate exposes the property; the
/// categories Cc/Cf/Co/Cn/Zl/Zp cover most of it, these ranges add the letters and marks that
/// are invisible (Hangul fillers, variation selectors, Khmer inherent vowels, ...).
const DEFAULT_IGNORABLE: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

/// Blank-looking symbols outside the ranges above (Braille pattern blank, interlinear
/// annotation marks are Cf already).
const BLANK_SYMBOLS: &[char] = &['\u{2800}'];

/// What happens to one character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Keep,
    /// Shown as a plain space (tabs, newlines and every other space separator).
    Space,
    Remove,
}

fn class(c: char) -> Class {
    if c.is_ascii_graphic() || c == ' ' {
        return Class::Keep;
    }
    if matches!(c, '\t' | '\n' | '\r') {
        return Class::Space;
    }
    let cp = u32::from(c);
    if DEFAULT_IGNORABLE
        .iter()
        .any(|&(lo, hi)| (lo..=hi).contains(&cp))
        || BLANK_SYMBOLS.contains(&c)
    {
        return Class::Remove;
    }
    match get_general_category(c) {
        G::Control
        | G::Format
        | G::PrivateUse
        | G::Surrogate
        | G::Unassigned
        | G::LineSeparator
        | G::ParagraphSeparator => Class::Remove,
        G::SpaceSeparator => Class::Space,
        _ => Class::Keep,
    }
}

/// Whether `c` survives [`sanitize`] unchanged.
pub fn is_safe(c: char) -> bool {
    class(c) == Class::Keep
}

/// Removes unsafe characters (a run of them becomes one [`REMOVED`]), turns tabs, newlines and
/// other spaces into plain spaces, and caps the length at `max_chars` characters.
pub fn sanitize_with(s: &str, max_chars: usize) -> String {
    clean(s, max_chars, false)
}

/// [`sanitize_with`] at the default cap.
pub fn sanitize(s: &str) -> String {
    sanitize_with(s, MAX_CHARS)
}

/// The final pass over text that leaves the process (a tool's text rendering, a CLI table, an
/// export): like [`sanitize`], but newlines stay (the text has lines) and nothing is capped
/// (the caller bounds its own output).
pub fn sanitize_text(s: &str) -> String {
    if s.chars().all(|c| c == '\n' || is_safe(c)) {
        return s.to_string();
    }
    clean(s, usize::MAX, true)
}

/// Whether [`sanitize_json`] would leave `v` as it is (a cheap check before cloning a value).
pub fn json_is_clean(v: &Value) -> bool {
    let ok = |s: &str| s.chars().all(|c| c == '\n' || is_safe(c));
    match v {
        Value::String(s) => ok(s),
        Value::Array(items) => items.iter().all(json_is_clean),
        Value::Object(map) => map
            .iter()
            .all(|(k, v)| k.chars().all(is_safe) && json_is_clean(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
    }
}

/// [`sanitize_text`] on every string (and object key) of a JSON value, in place.
pub fn sanitize_json(v: &mut Value) {
    match v {
        Value::String(s) => {
            if !s.chars().all(|c| c == '\n' || is_safe(c)) {
                *s = clean(s, usize::MAX, true);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sanitize_json),
        Value::Object(map) => {
            if map.keys().any(|k| !k.chars().all(is_safe)) {
                let old = std::mem::take(map);
                for (k, mut item) in old {
                    sanitize_json(&mut item);
                    map.insert(clean(&k, usize::MAX, false), item);
                }
            } else {
                map.values_mut().for_each(sanitize_json);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn clean(s: &str, max_chars: usize, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(4)));
    let mut n = 0;
    let mut in_removed_run = false;
    for c in s.chars() {
        let shown = match class(c) {
            Class::Keep => c,
            Class::Space if keep_newlines && c == '\n' => '\n',
            Class::Space => ' ',
            Class::Remove => {
                if in_removed_run {
                    continue;
                }
                in_removed_run = true;
                REMOVED
            }
        };
        if shown != REMOVED {
            in_removed_run = false;
        }
        if n == max_chars {
            out.push('…');
            break;
        }
        out.push(shown);
        n += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_and_bidi() {
        assert_eq!(
            sanitize("py\x1b[31mthon\u{202E}gnp.exe\u{200B}"),
            "py\u{FFFD}[31mthon\u{FFFD}gnp.exe\u{FFFD}"
        );
        assert_eq!(sanitize("a\nb\tc\0d"), "a b c\u{FFFD}d");
        assert_eq!(sanitize_text("a\nb\tc"), "a\nb c");
    }

    #[test]
    fn a_run_of_hidden_characters_leaves_one_mark() {
        // "ignore previous" spelled in Unicode tag characters.
        let hidden: String = "ignore previous"
            .chars()
            .map(|c| char::from_u32(0xE0000 + u32::from(c)).unwrap())
            .collect();
        assert_eq!(sanitize(&format!("ok{hidden}done")), "ok\u{FFFD}done");
    }

    /// Every range the hardening issue names, and Unicode's other invisible or format classes,
    /// written from the standard (not from the code above): none survives.
    const MUST_GO: &[(u32, u32, &str)] = &[
        (0x0000, 0x0008, "C0 controls"),
        (0x000B, 0x000C, "C0 controls"),
        (0x000E, 0x001F, "C0 controls"),
        (0x007F, 0x009F, "DEL and C1 controls"),
        (0x00AD, 0x00AD, "soft hyphen"),
        (0x034F, 0x034F, "combining grapheme joiner"),
        (0x061C, 0x061C, "Arabic letter mark"),
        (0x115F, 0x1160, "Hangul fillers"),
        (0x17B4, 0x17B5, "Khmer inherent vowels"),
        (
            0x180B,
            0x180F,
            "Mongolian variation selectors and vowel separator",
        ),
        (0x200B, 0x200F, "zero-width and directional marks"),
        (0x2028, 0x2029, "line and paragraph separators"),
        (0x202A, 0x202E, "bidi embeddings and overrides"),
        (
            0x2060,
            0x206F,
            "word joiner, invisible operators, bidi isolates",
        ),
        (0x2800, 0x2800, "Braille pattern blank"),
        (0x3164, 0x3164, "Hangul filler"),
        (0xD7FC, 0xD7FF, "unassigned"),
        (0xE000, 0xF8FF, "private use"),
        (0xFDD0, 0xFDEF, "noncharacters"),
        (0xFE00, 0xFE0F, "variation selectors"),
        (0xFEFF, 0xFEFF, "byte order mark"),
        (0xFFA0, 0xFFA0, "halfwidth Hangul filler"),
        (0xFFF0, 0xFFFB, "specials and interlinear annotation"),
        (0xFFFE, 0xFFFF, "noncharacters"),
        (0x110BD, 0x110BD, "Kaithi number sign"),
        (0x13430, 0x1343F, "Egyptian hieroglyph format controls"),
        (0x1BCA0, 0x1BCA3, "shorthand format controls"),
        (0x1D173, 0x1D17A, "musical symbol format controls"),
        (0xE0000, 0xE007F, "tags"),
        (0xE0100, 0xE01EF, "variation selectors supplement"),
        (0xE01F0, 0xE0FFF, "unassigned ignorable"),
        (0xF0000, 0xFFFFD, "supplementary private use A"),
        (0x100000, 0x10FFFD, "supplementary private use B"),
    ];

    #[test]
    fn every_hidden_range_is_removed_on_every_path() {
        let mut every = String::new();
        for &(lo, hi, what) in MUST_GO {
            for cp in lo..=hi {
                let Some(c) = char::from_u32(cp) else {
                    continue;
                };
                assert!(!is_safe(c), "U+{cp:04X} ({what}) is kept");
                let one = format!("a{c}b");
                for out in [sanitize(&one), sanitize_text(&one)] {
                    assert_eq!(out, "a\u{FFFD}b", "U+{cp:04X} ({what})");
                }
                every.push(c);
            }
        }
        assert_eq!(sanitize_with(&every, usize::MAX), "\u{FFFD}");
        let mut v = Value::String(every);
        sanitize_json(&mut v);
        assert_eq!(v, Value::String("\u{FFFD}".into()));
    }

    #[test]
    fn spaces_are_plain_and_nothing_kept_is_a_separator_or_format() {
        for c in ['\u{00A0}', '\u{2003}', '\u{3000}', '\u{202F}', '\u{1680}'] {
            assert_eq!(sanitize(&format!("a{c}b")), "a b");
        }
        for cp in 0..=0x10FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            if is_safe(c) {
                let cat = get_general_category(c);
                assert!(
                    !matches!(
                        cat,
                        G::Control
                            | G::Format
                            | G::PrivateUse
                            | G::Unassigned
                            | G::LineSeparator
                            | G::ParagraphSeparator
                            | G::SpaceSeparator
                    ) || c == ' ',
                    "U+{cp:04X} ({cat:?}) is kept"
                );
            }
        }
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
        for s in [
            "VLLM::EngineCor ünïcødé 模型",
            "at::native::masked_fill_kernel<float>",
            "Ünïcode — “quotes” …",
            "ﾄﾚｰﾆﾝｸﾞ 한국어 العربية עברית",
        ] {
            assert_eq!(sanitize(s), s);
        }
    }

    #[test]
    fn json_strings_and_keys_are_cleaned() {
        let mut v = serde_json::json!({"a\u{2028}b": ["x\u{E0041}y", 3, {"k": "\u{1b}]0;t\u{7}"}]});
        sanitize_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a\u{FFFD}b": ["x\u{FFFD}y", 3, {"k": "\u{FFFD}]0;t\u{FFFD}"}]})
        );
    }
}
