//! The `Rejection` error: why a query was refused (`reason`) and what to send instead (`hint`).
//!
//! Every refusal in the crate is built here or from these helpers, so reasons name the offending
//! construct and hints stay phrased for the reader that acts on them: an AI agent or a person.

/// Why a query was refused, and what to do instead.
///
/// `reason` names the offending construct ("table function read_csv reads files and is not
/// allowed"); `hint` says what is allowed instead. Display is the reason; the hint is data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Rejection {
    /// The construct that was refused.
    pub reason: String,
    /// What is allowed instead.
    pub hint: String,
}

impl causeway_hint::Hint for Rejection {
    fn hint(&self) -> Option<String> {
        Some(self.hint.clone())
    }
}

causeway_hint::register!(Rejection);

/// The hint for anything that is not a single read-only query.
pub(crate) const QUERY_HINT: &str = "send exactly one read-only query: SELECT, WITH ... SELECT, \
     FROM-first (FROM events SELECT ...), VALUES, a set operation (UNION ALL, ...), or EXPLAIN \
     of one of these, over the trace store's tables";

impl Rejection {
    /// A rejection with this reason and hint.
    pub(crate) fn new(reason: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            hint: hint.into(),
        }
    }

    /// A state the guard should never reach; refusing is the safe answer.
    pub(crate) fn internal(what: &str) -> Self {
        Self::new(
            format!("the SQL guard could not check this query ({what})"),
            "simplify the query; if it is an ordinary read-only query, report it as a guard bug",
        )
    }

    /// A construct the guard does not support at all (fail-closed refusals).
    pub(crate) fn unsupported(what: impl std::fmt::Display, hint: impl Into<String>) -> Self {
        Self::new(
            format!("{what} is not supported by the SQL guard and is refused"),
            hint,
        )
    }
}

/// The longest excerpt of SQL quoted in a reason.
const EXCERPT_CHARS: usize = 80;

/// `node` rendered as SQL, cut to a readable length for a reason.
pub(crate) fn excerpt(node: &impl std::fmt::Display) -> String {
    let text = node.to_string();
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_cut_on_char_boundaries() {
        assert_eq!(excerpt(&"short"), "short");
        let long = "é".repeat(100);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 3);
        assert!(cut.ends_with("..."));
    }

    #[test]
    fn display_is_the_reason_and_the_hint_is_a_field() {
        let r = Rejection::new("COPY statements are not allowed", "send a SELECT");
        assert_eq!(r.to_string(), "COPY statements are not allowed");
        assert_eq!(r.hint, "send a SELECT");
    }

    #[test]
    fn unsupported_names_the_construct() {
        let r = Rejection::unsupported("FOR UPDATE", "drop the clause");
        assert_eq!(
            r.reason,
            "FOR UPDATE is not supported by the SQL guard and is refused"
        );
        assert_eq!(r.hint, "drop the clause");
    }
}
