//! The adversarial corpus: every entry of `tests/corpus/accept.txt` is accepted (and stays
//! accepted, unchanged, when guarded again), every entry of `reject.txt` is refused for the
//! expected reason.

use causeway_sqlguard::corpus::{CorpusEntry, parse_corpus};
use causeway_sqlguard::guard;

use crate::support::{check_safe, store_policy};

/// The accepted-queries corpus.
pub const ACCEPT: &str = include_str!("../corpus/accept.txt");
/// The rejected-queries corpus.
pub const REJECT: &str = include_str!("../corpus/reject.txt");

/// Every entry of both files.
pub fn all_entries() -> Vec<CorpusEntry> {
    let mut entries = parse_corpus(ACCEPT).expect("accept.txt parses");
    entries.extend(parse_corpus(REJECT).expect("reject.txt parses"));
    entries
}

#[test]
fn corpus_sizes() {
    let accept = parse_corpus(ACCEPT).unwrap();
    let reject = parse_corpus(REJECT).unwrap();
    assert!(accept.len() >= 50, "{} accepted queries", accept.len());
    assert!(reject.len() >= 300, "{} rejected queries", reject.len());
    assert!(accept.iter().all(|e| e.expected_reason.is_none()));
    assert!(reject.iter().all(|e| e.expected_reason.is_some()));
}

#[test]
fn accepted_queries_pass_and_are_idempotent() {
    let policy = store_policy();
    let mut failures = Vec::new();
    for entry in parse_corpus(ACCEPT).unwrap() {
        let guarded = match guard(&entry.sql, &policy, None) {
            Ok(g) => g,
            Err(rejection) => {
                failures.push(format!("{} (line {}): {rejection}", entry.name, entry.line));
                continue;
            }
        };
        match guard(guarded.as_str(), &policy, Some(guarded.row_limit())) {
            Ok(again) if again == guarded => {}
            Ok(again) => failures.push(format!(
                "{}: not idempotent:\n  {}\n  {}",
                entry.name, guarded, again
            )),
            Err(rejection) => failures.push(format!(
                "{}: re-guarding the output failed: {rejection}\n  output: {guarded}",
                entry.name
            )),
        }
        if let Err(rejection) = guard(guarded.as_str(), &policy, None) {
            failures.push(format!(
                "{}: re-guard without limit: {rejection}",
                entry.name
            ));
        }
        if let Err(problem) = check_safe(guarded.as_str(), &policy) {
            failures.push(format!("{}: independent re-check: {problem}", entry.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn rejected_queries_fail_for_the_expected_reason() {
    let policy = store_policy();
    let mut failures = Vec::new();
    for entry in parse_corpus(REJECT).unwrap() {
        let expected = entry.expected_reason.clone().unwrap_or_default();
        match guard(&entry.sql, &policy, None) {
            Ok(guarded) => failures.push(format!(
                "{} (line {}): ACCEPTED as {guarded}",
                entry.name, entry.line
            )),
            Err(rejection) => {
                if !rejection
                    .reason
                    .to_lowercase()
                    .contains(&expected.to_lowercase())
                {
                    failures.push(format!(
                        "{} (line {}): expected reason containing {expected:?}, got {:?}",
                        entry.name, entry.line, rejection.reason
                    ));
                }
                if rejection.hint.trim().is_empty() {
                    failures.push(format!("{}: empty hint", entry.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
