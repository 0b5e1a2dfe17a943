//! Every op id written as a literal into the workspace's SQL is checked against the op table
//! by a `causeway_ops::sql_id!` in the same file (a renumbered op then fails the build).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The literal ids compared with `op_id` in `code`: `op_id = 3`, `op_id <> 100`,
/// `op_id IN (3, 50)`, `op_id BETWEEN 1 AND 14`.
fn literal_ids(code: &str) -> BTreeSet<u16> {
    let digits = |s: &str| -> Option<u16> {
        let n: String = s.chars().take_while(char::is_ascii_digit).collect();
        n.parse().ok()
    };
    let mut ids = BTreeSet::new();
    for (at, _) in code.match_indices("op_id") {
        let rest = code[at + 5..].trim_start();
        if let Some(r) = rest.strip_prefix("<>").or(rest.strip_prefix('=')) {
            ids.extend(digits(r.trim_start()));
        } else if let Some(list) = rest
            .strip_prefix("IN")
            .and_then(|r| r.trim_start().strip_prefix('('))
            .and_then(|r| r.split(')').next())
            .filter(|l| {
                l.chars()
                    .all(|c| c.is_ascii_digit() || c == ',' || c == ' ')
            })
        {
            ids.extend(list.split(',').filter_map(|n| n.trim().parse::<u16>().ok()));
        } else if let Some(r) = rest.strip_prefix("BETWEEN ") {
            let w: Vec<&str> = r.splitn(4, ' ').collect();
            if let [a, "AND", b, ..] = w.as_slice() {
                ids.extend(digits(a));
                ids.extend(digits(b));
            }
        }
    }
    ids
}

/// The ids a file checks with `sql_id!("name", id)`.
fn checked_ids(code: &str) -> BTreeSet<u16> {
    code.match_indices("sql_id!(")
        .filter_map(|(at, _)| {
            let args = code[at + 8..].split(')').next()?;
            args.rsplit(',').next()?.trim().parse().ok()
        })
        .collect()
}

#[test]
fn literal_op_ids_in_sql_are_checked_against_the_op_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&root).expect("the workspace").flatten() {
        let src = e.path().join("src");
        if e.path().join("Cargo.toml").is_file() && src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} sources", files.len());
    let mut unchecked = Vec::new();
    let mut seen = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a source file");
        // the code, not its unit tests (they assert rendered SQL) nor its comments
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let ids = literal_ids(&code);
        seen += ids.len();
        let checked = checked_ids(&code);
        let missing: Vec<_> = ids.difference(&checked).collect();
        if !missing.is_empty() {
            unchecked.push(format!("{}: {missing:?}", f.display()));
        }
    }
    assert!(seen > 0, "no literal op id found: the scan is broken");
    assert!(
        unchecked.is_empty(),
        "op ids written into SQL without a causeway_ops::sql_id! check in the file:\n{}",
        unchecked.join("\n")
    );
}

#[test]
fn the_scan_reads_every_form_of_comparison() {
    assert_eq!(
        literal_ids(
            "WHERE op_id = 100 AND x OR op_id <> 7 OR op_id IN (3, 50) OR op_id BETWEEN 1 AND 14"
        ),
        [1, 3, 7, 14, 50, 100].into_iter().collect()
    );
    assert_eq!(
        checked_ids("causeway_ops::sql_id!(\"sched_switch\", 100);"),
        [100].into_iter().collect()
    );
    assert!(literal_ids("op_id = ? AND op_id IN (SELECT 1)").len() <= 1);
}
