//! The adversarial-corpus file format (`crates/sqlguard/tests/corpus/*.txt`), parsed here so that
//! other crates (the store's end-to-end test) load the same entries the guard is tested with.
//!
//! Format, version 1:
//!
//! - A line whose first character is `#` is a comment, anywhere in the file.
//! - A line starting with `=== ` opens an entry: `=== <name>` or
//!   `=== <name> | <expected reason substring>` (reject files use the second form: the
//!   rejection's reason must contain the substring, case-insensitively).
//! - The entry's SQL is every other line up to the next `=== ` line or the end of the file,
//!   joined with `\n` and trimmed of surrounding whitespace. It may span several lines; tabs,
//!   unicode whitespace and comments inside it are kept as written.
//!
//! `accept.txt` holds queries the guard must accept (and the store must run without changing
//! anything); `reject.txt` holds queries it must refuse.

/// One corpus entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorpusEntry {
    /// The entry's name (unique within a file).
    pub name: String,
    /// For rejections: a substring the rejection's reason must contain (case-insensitive).
    pub expected_reason: Option<String>,
    /// The SQL text.
    pub sql: String,
    /// The 1-based line of the entry's `=== ` header.
    pub line: usize,
}

/// A malformed corpus file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorpusError {
    /// Text that is neither a comment nor inside an entry.
    #[error("line {line}: text before the first `=== ` entry header")]
    OutsideEntry {
        /// The offending line.
        line: usize,
    },
    /// An entry without SQL.
    #[error("line {line}: entry {name} has no SQL")]
    EmptyEntry {
        /// The entry's name.
        name: String,
        /// Its header line.
        line: usize,
    },
    /// Two entries with one name.
    #[error("line {line}: entry name {name} is used twice")]
    DuplicateName {
        /// The repeated name.
        name: String,
        /// The second header's line.
        line: usize,
    },
}

/// The header prefix that opens an entry.
const HEADER: &str = "=== ";

/// Parses a corpus file.
pub fn parse_corpus(text: &str) -> Result<Vec<CorpusEntry>, CorpusError> {
    let mut entries: Vec<CorpusEntry> = Vec::new();
    let mut body: Vec<&str> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix(HEADER) {
            finish(&mut entries, &mut body)?;
            let (name, expected) = match header.split_once(" | ") {
                Some((name, expected)) => (name.trim(), Some(expected.trim().to_string())),
                None => (header.trim(), None),
            };
            if entries.iter().any(|e| e.name == name) {
                return Err(CorpusError::DuplicateName {
                    name: name.to_string(),
                    line: number,
                });
            }
            entries.push(CorpusEntry {
                name: name.to_string(),
                expected_reason: expected,
                sql: String::new(),
                line: number,
            });
        } else if entries.is_empty() {
            if !line.trim().is_empty() {
                return Err(CorpusError::OutsideEntry { line: number });
            }
        } else {
            body.push(line);
        }
    }
    finish(&mut entries, &mut body)?;
    Ok(entries)
}

/// Moves the collected body lines into the last entry.
fn finish(entries: &mut [CorpusEntry], body: &mut Vec<&str>) -> Result<(), CorpusError> {
    let Some(entry) = entries.last_mut() else {
        return Ok(());
    };
    entry.sql = body.join("\n").trim().to_string();
    body.clear();
    if entry.sql.is_empty() {
        return Err(CorpusError::EmptyEntry {
            name: entry.name.clone(),
            line: entry.line,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entries_with_comments_and_multiline_sql() {
        let text = "# header\n\n=== one\nSELECT 1\n# note\n=== two | not allowed\nSELECT\n\t2;\n\n";
        let entries = parse_corpus(text).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name, "one");
        assert_eq!(entries[0].sql, "SELECT 1");
        assert_eq!(entries[0].expected_reason, None);
        assert_eq!(entries[1].sql, "SELECT\n\t2;");
        assert_eq!(entries[1].expected_reason.as_deref(), Some("not allowed"));
        assert_eq!(entries[1].line, 6);
    }

    #[test]
    fn malformed_files_are_errors() {
        assert_eq!(
            parse_corpus("SELECT 1\n"),
            Err(CorpusError::OutsideEntry { line: 1 })
        );
        assert_eq!(
            parse_corpus("=== a\n\n=== b\nSELECT 1"),
            Err(CorpusError::EmptyEntry {
                name: "a".into(),
                line: 1
            })
        );
        assert_eq!(
            parse_corpus("=== a\nSELECT 1\n=== a\nSELECT 2"),
            Err(CorpusError::DuplicateName {
                name: "a".into(),
                line: 3
            })
        );
    }
}
