//! The engine's floor plan holds: the ground floor (`src/base`) imports nothing from the floors
//! above it, and no import circle among the engine's modules is larger than a handful of files.
//! Read from the sources (`crate::...` paths outside `#[cfg(test)]`), as a newcomer would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules of the ground floor, also reachable at the crate root (`crate::window`).
const BASE: [&str; 10] = [
    "counts",
    "cursor",
    "errors",
    "fmt",
    "intervals",
    "opsets",
    "query",
    "scan",
    "switches",
    "window",
];

/// Every module file under `src`, by its path (`budget::pass`), with its non-test source.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let mut name = rel.to_string_lossy().replace('/', "::");
        if let Some(parent) = name.strip_suffix("::mod") {
            name = parent.to_string();
        }
        if name == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        out.insert(name, code);
    }
    out
}

/// The module paths `code` names after `crate::`, groups (`crate::{a, b::c}`) included.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for part in inner.split(',') {
                let p: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                out.push(p);
            }
        } else {
            let p: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(p);
        }
    }
    out
}

/// The module a path names: its longest prefix that is a module (base modules by either path).
fn resolve(path: &str, mods: &BTreeMap<String, String>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    if segs.first().is_some_and(|s| BASE.contains(s)) {
        segs.insert(0, "base");
    }
    (1..=segs.len())
        .rev()
        .map(|k| segs[..k].join("::"))
        .find(|c| mods.contains_key(c))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    mods.iter()
        .map(|(m, code)| {
            let to = paths(code)
                .iter()
                .filter_map(|p| resolve(p, &mods))
                .filter(|t| t != m)
                .collect();
            (m.clone(), to)
        })
        .collect()
}

#[test]
fn the_ground_floor_imports_nothing_from_above() {
    let g = graph();
    assert!(g.len() > 40, "found only {} modules", g.len());
    let up: Vec<String> = g
        .iter()
        .filter(|(m, _)| m.starts_with("base"))
        .flat_map(|(m, to)| {
            to.iter()
                .filter(|t| !t.starts_with("base"))
                .map(move |t| format!("{m} -> {t}"))
        })
        .collect();
    assert!(up.is_empty(), "arrows up from the ground floor: {up:?}");
}

#[test]
fn no_import_circle_is_larger_than_a_handful_of_modules() {
    let g = graph();
    // A module's circle: every module it reaches that reaches it back.
    let reach = |from: &str, g: &BTreeMap<String, BTreeSet<String>>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for t in g.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let mut worst: BTreeSet<String> = BTreeSet::new();
    for m in g.keys() {
        let circle: BTreeSet<String> = reach(m, &g)
            .into_iter()
            .filter(|t| reach(t, &g).contains(m))
            .collect();
        if circle.len() > worst.len() {
            worst = circle;
        }
    }
    assert!(
        worst.len() <= 5,
        "an import circle of {} modules: {worst:?}",
        worst.len()
    );
}
