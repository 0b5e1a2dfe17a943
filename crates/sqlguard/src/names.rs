//! Names and literals: plain identifiers only, ASCII function names, and the tests for
//! URL-like strings and path-like relation names (DuckDB reads `FROM 'x.csv'`,
//! `FROM "data.csv"` and URLs as files).

use sqlparser::ast::{Ident, ObjectName, Value};

use crate::rejection::{Rejection, excerpt};

/// The plain identifiers of a name; computed name parts (`IDENTIFIER('x')`) are refused.
pub(crate) fn identifiers(name: &ObjectName) -> Result<Vec<&Ident>, Rejection> {
    name.0
        .iter()
        .map(|part| {
            part.as_ident().ok_or_else(|| {
                Rejection::unsupported(
                    format!("the computed name {}", excerpt(name)),
                    "write names as plain identifiers",
                )
            })
        })
        .collect()
}

/// The function's own name (its last part), refusing computed and non-ASCII names.
pub(crate) fn function_name(name: &ObjectName) -> Result<String, Rejection> {
    let idents = identifiers(name)?;
    let Some(last) = idents.last() else {
        return Err(Rejection::internal("a function without a name"));
    };
    if !last.value.is_ascii() {
        return Err(Rejection::new(
            format!(
                "function name {} contains non-ASCII characters (a look-alike such as a \
                 Cyrillic letter?)",
                excerpt(name)
            ),
            "DuckDB's functions have ASCII names; retype the name in plain ASCII",
        ));
    }
    Ok(last.value.clone())
}

/// Literals: strings that are URLs are refused wherever they appear.
pub(crate) fn check_value(value: &Value) -> Result<(), Rejection> {
    let Some(text) = value.clone().into_string() else {
        return Ok(());
    };
    if looks_like_url(&text) {
        return Err(Rejection::new(
            format!(
                "the string '{}' is a URL; URLs are refused anywhere in a query because DuckDB \
                 can read them as files",
                excerpt(&text)
            ),
            "only the trace store's own tables can be read; drop the URL",
        ));
    }
    Ok(())
}

/// Whether `text` starts like a URL (`s3://`, `https://`, `hf://`, `file:`): any non-empty
/// scheme of letters, digits, `+`, `-` or `.` before `://` counts, valid or not (fail-closed).
pub(crate) fn looks_like_url(text: &str) -> bool {
    let text = text.trim_start().to_ascii_lowercase();
    if text.starts_with("file:") {
        return true;
    }
    match text.split_once("://") {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }
        None => false,
    }
}

/// Whether a relation or CTE name looks like a file path (DuckDB replacement scans read
/// `FROM "data.csv"` as a file) or a URL.
pub(crate) fn looks_like_path(name: &str) -> bool {
    looks_like_url(name) || name.contains(['/', '\\', '.', ':', '*', '?']) || name.starts_with('~')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        for url in [
            "0ttp://x",
            "3s://x",
            "s3://b/k",
            "HTTPS://x",
            " http://x",
            "hf://d",
            "file:/etc/passwd",
            "gcs://b",
        ] {
            assert!(looks_like_url(url), "{url}");
        }
        for text in ["%http://%", "abc", "://x", "a b://x"] {
            assert!(!looks_like_url(text), "{text}");
        }
        assert!(looks_like_path("/etc/passwd"));
        assert!(looks_like_path("x.csv"));
        assert!(looks_like_path("~/x"));
        assert!(!looks_like_path("events"));
    }
}
