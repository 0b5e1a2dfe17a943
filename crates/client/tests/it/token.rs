//! Reading the bearer token from a file: trimmed, and an empty file refused (a server started
//! with one would otherwise run without authentication) with how to make a token.

use causeway_client::fleet::read_token;

use crate::common::hint_of;

#[test]
fn a_token_file_is_read_without_its_surrounding_blanks() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "  0123abcd\n").unwrap();
    assert_eq!(
        read_token(Some(&file)).unwrap().as_deref(),
        Some("0123abcd")
    );
}

#[test]
fn an_empty_token_file_is_refused_with_how_to_write_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    for blank in ["", "\n", " \t\n\n"] {
        std::fs::write(&file, blank).unwrap();
        let e = read_token(Some(&file)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: the token file is empty", file.display())
        );
        assert!(
            hint_of(&e).contains("openssl rand -hex 32"),
            "{}",
            hint_of(&e)
        );
    }
}

#[test]
fn an_unreadable_token_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-token");
    let e = read_token(Some(&missing)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: cannot read the token file", missing.display())
    );
    // A directory is not a token file either.
    let e = read_token(Some(dir.path())).unwrap_err();
    assert!(e.to_string().ends_with("cannot read the token file"), "{e}");
}
