//! Output budgets: an agent's context window is the scarce resource, so every tool response is
//! bounded. A response carries its structured content and a text rendering; together they stay
//! under [`RESPONSE_CHARS`] (about 8,000 tokens at 4 characters per token).

/// Characters per token used for every estimate.
pub const CHARS_PER_TOKEN: usize = 4;
/// Token budget of one tool response.
pub const RESPONSE_TOKENS: usize = 8_000;
/// Character budget of one tool response (structured + text).
pub const RESPONSE_CHARS: usize = RESPONSE_TOKENS * CHARS_PER_TOKEN;
/// Byte cap on `run_sql` rows (they appear twice: structured and as text).
pub const SQL_MAX_BYTES: usize = 12_000;
/// Character cap of the text rendering of one response.
pub const TEXT_CHARS: usize = 12_000;
/// Token budget of the whole `tools/list` response.
pub const TOOLS_LIST_TOKENS: usize = 3_000;

/// Estimated tokens of a text.
pub fn tokens(s: &str) -> usize {
    s.len().div_ceil(CHARS_PER_TOKEN)
}

/// Cuts a text rendering at a line boundary under [`TEXT_CHARS`], with a note saying so. The
/// closing [`crate::DATA_NOTE`] of an agent's text stays: the cut never drops it.
pub fn cap_text(s: String) -> String {
    cap_text_to(s, TEXT_CHARS)
}

/// The least text a response keeps, however large its structured content.
pub const MIN_TEXT_CHARS: usize = 2_000;

/// The text's share of a response whose structured content takes `structured` characters: what
/// the response budget leaves, at most [`TEXT_CHARS`], at least [`MIN_TEXT_CHARS`].
pub fn text_share(structured: usize) -> usize {
    RESPONSE_CHARS
        .saturating_sub(structured)
        .clamp(MIN_TEXT_CHARS, TEXT_CHARS)
}

/// [`cap_text`] under `limit` characters.
pub fn cap_text_to(mut s: String, limit: usize) -> String {
    if s.len() <= limit {
        return s;
    }
    let keep = s
        .trim_end()
        .ends_with(crate::DATA_NOTE)
        .then_some(crate::DATA_NOTE);
    let mut cut = limit.saturating_sub(120 + keep.map_or(0, |n| n.len() + 1));
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = s[..cut].rfind('\n').map_or(cut, |i| i + 1);
    s.truncate(cut);
    s.push_str("[text cut to fit the response budget; the structured result has every field]\n");
    if let Some(n) = keep {
        s.push_str(n);
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_long_text_with_a_note() {
        let long = "line of text\n".repeat(2_000);
        let out = cap_text(long);
        assert!(out.len() <= TEXT_CHARS);
        assert!(out.ends_with("response budget; the structured result has every field]\n"));
        assert_eq!(cap_text("short\n".into()), "short\n");
        assert_eq!(tokens("abcdefgh"), 2);
    }

    #[test]
    fn the_text_gets_what_the_structured_content_leaves() {
        assert_eq!(text_share(0), TEXT_CHARS);
        assert_eq!(text_share(RESPONSE_CHARS - 5_000), 5_000);
        assert_eq!(text_share(RESPONSE_CHARS + 1), MIN_TEXT_CHARS);
        let long = "line of text\n".repeat(2_000);
        assert!(cap_text_to(long, 5_000).len() <= 5_000);
    }

    #[test]
    fn the_data_note_survives_the_cut() {
        let long = format!("{}{}\n", "line of text\n".repeat(2_000), crate::DATA_NOTE);
        let out = cap_text(long);
        assert!(out.len() <= TEXT_CHARS, "{}", out.len());
        assert!(
            out.ends_with(&format!("every field]\n{}\n", crate::DATA_NOTE)),
            "{}",
            &out[out.len() - 300..]
        );
    }
}
