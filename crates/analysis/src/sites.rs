//! Call sites of findings: where in the program a finding's GPU calls come from, when the trace
//! has stacks (`trace --stacks`). One post-step over the engine's chains: each chain that names
//! its calls (a [`Scope`]: node, process, thread, classes of calls) gets an evidence query that
//! counts those calls per site (the innermost Python frame; else the innermost native frame
//! outside the CUDA libraries, demangled), and a sentence built from that query's rows:
//! "300 of 400 syncs come from train.py:87 in train_step". Chains of traces without stacks are
//! left as they were.

use causeway_sqlguard::guard;
use causeway_store::catalog::{self, Class};
use causeway_store::sanitize::sanitize_with;
use causeway_store::{QueryLimits, Reader, StoreError};
use serde::{Deserialize, Serialize};

use crate::budget::CallClass;
use crate::chains::Chain;
use crate::counts::lit;
use crate::window::Window;

/// Sites listed in a chain's `call_sites` (the evidence query returns up to [`ROWS`]).
pub const MAX_SITES: usize = 5;

/// Sites named in the explanation's sentence.
const SENTENCE_SITES: usize = 3;

/// Rows the site query returns, busiest first.
const ROWS: usize = 20;

/// Start times a scope names its calls by, at most (they are written into the query).
pub const MAX_AT: usize = 64;

/// The calls a finding is about: what its detector examined.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Thread, where the finding is about one.
    pub tid: Option<u32>,
    /// Classes of GPU calls (empty: every GPU call).
    pub classes: Vec<CallClass>,
    /// Part of the engine's window the finding is about (ns), where narrower.
    pub during: Option<(i64, i64)>,
    /// Only the calls that started at these times (ns), where not empty: the calls that ended
    /// a feeding thread's stalls.
    pub at: Vec<i64>,
    /// Only the calls that took at least this long (ns): a cold start's slow calls.
    pub min_ns: i64,
    /// What the calls are called in the sentence ("syncs").
    pub noun: &'static str,
}

impl Scope {
    /// The calls of `classes` made by one thread.
    pub fn thread(
        node: &str,
        pid: u32,
        tid: u32,
        classes: &[CallClass],
        noun: &'static str,
    ) -> Scope {
        Scope {
            node: node.to_string(),
            pid,
            tid: Some(tid),
            classes: classes.to_vec(),
            during: None,
            at: Vec::new(),
            min_ns: 0,
            noun,
        }
    }

    /// Only the calls made between `from_ns` and `until_ns`.
    pub fn during(self, from_ns: i64, until_ns: i64) -> Scope {
        Scope {
            during: Some((from_ns, until_ns)),
            ..self
        }
    }

    /// Only the calls that started at `times` (the first [`MAX_AT`]).
    pub fn at_times(self, mut times: Vec<i64>) -> Scope {
        times.truncate(MAX_AT);
        Scope { at: times, ..self }
    }

    /// Only the calls that took at least `ns`.
    pub fn slower_than(self, ns: i64) -> Scope {
        Scope { min_ns: ns, ..self }
    }

    /// The calls of `classes` made by one process.
    pub fn process(node: &str, pid: u32, classes: &[CallClass], noun: &'static str) -> Scope {
        Scope {
            tid: None,
            ..Scope::thread(node, pid, 0, classes, noun)
        }
    }
}

/// Where a finding's calls come from, counted by its evidence query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSites {
    /// The query whose rows these are: one row per site, busiest first (`none`: calls without
    /// a stack); on every row `scope_calls` counts the finding's calls in the window and
    /// `scope_calls_with_stack` those with a stack.
    pub evidence_sql: String,
    /// The finding's stored calls in the window.
    pub calls: u64,
    /// Of which with a recorded stack.
    pub calls_with_stack: u64,
    /// The busiest sites, most calls first.
    pub sites: Vec<Site>,
}

/// One place in the program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// `python` (innermost Python frame) or `native` (innermost frame outside the CUDA
    /// libraries, where the stack has no Python frame).
    pub kind: String,
    /// file:line of a Python frame; the function (demangled) of a native one.
    pub site: String,
    /// The Python function; the native frame's module.
    pub detail: String,
    /// Calls from it.
    pub calls: u64,
    /// Their time (ns).
    pub total_ns: i64,
}

impl Site {
    /// "train.py:87 in train_step", "at::native::foo (libtorch.so)".
    pub fn words(&self) -> String {
        if self.kind == "python" {
            format!("{} in {}", self.site, self.detail)
        } else if !self.resolved() {
            let module = self.detail.trim();
            if module.is_empty() {
                "code with no symbol (stripped or JIT)".to_string()
            } else {
                format!("code with no symbol in {module} (stripped or JIT)")
            }
        } else {
            format!("{} ({})", self.site, self.detail)
        }
    }

    /// Whether a native site names a function, not only an address ("0x0", "0x7f3a...").
    pub fn resolved(&self) -> bool {
        let s = self.site.trim();
        self.kind == "python"
            || !(s.is_empty()
                || s.strip_prefix("0x")
                    .is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit())))
    }
}

// Whether the trace has stacks at all: files without them pay nothing more.
const HAS_NATIVE_SQL: &str = "SELECT count(*)::BIGINT FROM (SELECT 1 FROM stack_frames LIMIT 1)";
const HAS_PYTHON_SQL: &str = "SELECT count(*)::BIGINT FROM (SELECT 1 FROM python_frames LIMIT 1)";

/// First schema with the `python_frames` table.
const PYTHON_SCHEMA: u32 = 10;

/// Adds call sites to every chain with a [`Scope`], where the trace has stacks.
pub fn cite(r: &Reader, window: &Window, chains: &mut [Chain]) -> Result<(), StoreError> {
    if chains.iter().all(|c| c.scope.is_none()) {
        return Ok(());
    }
    let count = |sql: &'static str| -> Result<i64, StoreError> {
        r.prepare_trusted(sql)?
            .query_row([], |row| row.get(0))
            .map_err(crate::base::errors::duck(r, "looking for call stacks"))
    };
    let python = r.schema_version() >= PYTHON_SCHEMA && count(HAS_PYTHON_SQL)? > 0;
    if !python && count(HAS_NATIVE_SQL)? == 0 {
        return Ok(());
    }
    for c in chains.iter_mut() {
        let Some(scope) = &c.scope else { continue };
        let sql = site_sql(scope, window, python);
        let Some(sites) = run(r, sql)? else { continue };
        if sites.calls_with_stack == 0 {
            continue;
        }
        c.explanation.push(' ');
        c.explanation.push_str(&sentence(&sites, scope.noun));
        c.call_sites = Some(sites);
    }
    Ok(())
}

/// "Call sites: 300 of 400 syncs come from a.py:3 in f, 90 from a.py:9 in g; 10 had no stack."
pub fn sentence(s: &CallSites, noun: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (i, site) in s.sites.iter().take(SENTENCE_SITES).enumerate() {
        parts.push(if i == 0 {
            format!(
                "{} of {} {noun} come from {}",
                site.calls,
                s.calls,
                site.words()
            )
        } else {
            format!("{} from {}", site.calls, site.words())
        });
    }
    let shown: u64 = s.sites.iter().take(SENTENCE_SITES).map(|x| x.calls).sum();
    let elsewhere = s.calls_with_stack.saturating_sub(shown);
    if elsewhere > 0 {
        parts.push(format!("{elsewhere} from other places"));
    }
    let mut out = format!("Call sites (stacks): {}", parts.join(", "));
    let without = s.calls.saturating_sub(s.calls_with_stack);
    if without > 0 {
        out.push_str(&format!("; {without} had no stack"));
    }
    out.push('.');
    out
}

/// The scope's GPU calls as a predicate on `events`.
fn op_predicate(classes: &[CallClass]) -> String {
    if classes.is_empty() {
        return "source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL')".into();
    }
    // A copy's class depends on its direction (arg1); every other op (peer copies too) has one.
    let is_copy = |o: &catalog::OpInfo| o.class == Class::Copy && !o.name.contains("Peer");
    let names = |keep: &dyn Fn(&catalog::OpInfo) -> bool| -> Vec<String> {
        catalog::OPS
            .iter()
            .filter(|o| o.source.is_call() && keep(o))
            .map(|o| lit(o.name))
            .collect()
    };
    let plain = names(&|o| !is_copy(o) && classes.contains(&CallClass::of(o.id, 0)));
    let dirs: Vec<String> = classes
        .iter()
        .filter_map(|c| match c {
            CallClass::CopyH2d => Some("1"),
            CallClass::CopyD2h => Some("2"),
            CallClass::CopyD2d => Some("3"),
            _ => None,
        })
        .map(str::to_string)
        .collect();
    let mut parts = Vec::new();
    if !plain.is_empty() {
        parts.push(format!("op IN ({})", plain.join(", ")));
    }
    if !dirs.is_empty() {
        parts.push(format!(
            "(op IN ({}) AND arg1 IN ({}))",
            names(&|o| is_copy(o)).join(", "),
            dirs.join(", ")
        ));
    }
    match parts.len() {
        0 => "FALSE".into(),
        1 => parts.remove(0),
        _ => format!("({})", parts.join(" OR ")),
    }
}

/// The evidence query: the scope's calls in the window per site.
pub fn site_sql(s: &Scope, window: &Window, python: bool) -> String {
    let (from, until) = s
        .during
        .map_or((window.from_ns, window.until_ns), |(a, b)| {
            (a.max(window.from_ns), b.min(window.until_ns))
        });
    let mut only = s.tid.map_or(String::new(), |t| format!(" AND tid = {t}"));
    if s.min_ns > 0 {
        only.push_str(&format!(" AND duration >= {}", s.min_ns));
    }
    if !s.at.is_empty() {
        let at: Vec<String> = s.at.iter().map(i64::to_string).collect();
        only.push_str(&format!(" AND timestamp IN ({})", at.join(", ")));
    }
    // The innermost native frame outside the CUDA libraries: the caller of the probed function.
    let native = "native AS (SELECT stack_hash, arg_min(CASE WHEN symbol = '' THEN printf('0x%x', ip) ELSE symbol END, depth) AS symbol, arg_min(module, depth) AS module FROM stack_frames WHERE stack_hash IN (SELECT stack_hash FROM calls) AND NOT regexp_matches(module, '(^|/)lib(cudart|cuda|nccl)[.]') GROUP BY stack_hash)";
    let (py_cte, py_join, kind, site, detail) = if python {
        (
            ", py AS (SELECT stack_hash, file, line, function FROM python_frames WHERE depth = 0 AND stack_hash IN (SELECT stack_hash FROM calls))",
            " LEFT JOIN py USING (stack_hash)",
            "CASE WHEN py.stack_hash IS NOT NULL THEN 'python' WHEN native.stack_hash IS NOT NULL THEN 'native' ELSE 'none' END",
            "coalesce(py.file || ':' || py.line::VARCHAR, native.symbol, '')",
            "coalesce(py.function, native.module, '')",
        )
    } else {
        (
            "",
            "",
            "CASE WHEN native.stack_hash IS NOT NULL THEN 'native' ELSE 'none' END",
            "coalesce(native.symbol, '')",
            "coalesce(native.module, '')",
        )
    };
    format!(
        "WITH calls AS (SELECT stack_hash, duration FROM events WHERE node = {node} AND pid = {pid}{only} AND {ops} AND timestamp BETWEEN {from} AND {until}), {native}{py_cte}, \
         sites AS (SELECT {kind} AS kind, {site} AS site, {detail} AS detail, count(*)::BIGINT AS calls, sum(duration)::BIGINT AS total_ns FROM calls LEFT JOIN native USING (stack_hash){py_join} GROUP BY ALL) \
         SELECT kind, site, detail, calls, total_ns, (sum(calls) OVER ())::BIGINT AS scope_calls, (sum(CASE WHEN kind = 'none' THEN 0 ELSE calls END) OVER ())::BIGINT AS scope_calls_with_stack \
         FROM sites ORDER BY calls DESC, site LIMIT {ROWS}",
        node = lit(&s.node),
        pid = s.pid,
        ops = op_predicate(&s.classes),
    )
}

/// Runs the site query through the guard (as an agent's `run_sql` would) and reads its rows.
/// None when the query does not run (a file the guard or DuckDB refuses): no sentence then.
fn run(r: &Reader, sql: String) -> Result<Option<CallSites>, StoreError> {
    let g = match guard(&sql, r.policy(), Some(ROWS as u64)) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e.reason, "call-site query refused by the guard");
            return Ok(None);
        }
    };
    let res = r.query(&g, &QueryLimits::default())?;
    let int = |row: &[serde_json::Value], i: usize| {
        row.get(i)
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0)
            .max(0)
    };
    let Some(first) = res.rows.first() else {
        return Ok(None);
    };
    let (calls, with_stack) = (int(first, 5) as u64, int(first, 6) as u64);
    let mut sites = Vec::new();
    for row in &res.rows {
        let text = |i: usize| {
            row.get(i)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let kind = text(0);
        if kind == "none" || sites.len() == MAX_SITES {
            continue;
        }
        let site = if kind == "native" {
            causeway_store::symbols::demangle(&text(1))
        } else {
            text(1)
        };
        sites.push(Site {
            kind,
            site: sanitize_with(&site, 200),
            detail: sanitize_with(&text(2), 160),
            calls: int(row, 3) as u64,
            total_ns: int(row, 4),
        });
    }
    Ok(Some(CallSites {
        evidence_sql: sql,
        calls,
        calls_with_stack: with_stack,
        sites,
    }))
}

#[cfg(test)]
mod tests {
    use causeway_store::catalog::op_by_name;
    use causeway_store::{Event, Frame, PythonFrame, PythonStack, Writer, WriterOptions};

    use super::*;
    use crate::chains::Severity;
    use crate::detectors::Finding;

    const PID: u32 = 40;

    /// Issue 50: "296 of 296 copies come from 0x0 ()" named an address as a place.
    #[test]
    fn an_address_without_a_symbol_is_not_shown_as_a_site() {
        let site = |s: &str, d: &str| Site {
            kind: "native".into(),
            site: s.into(),
            detail: d.into(),
            calls: 296,
            total_ns: 1,
        };
        assert_eq!(
            site("0x0", "").words(),
            "code with no symbol (stripped or JIT)"
        );
        assert_eq!(
            site("0x7f3a00c0", "libfoo.so").words(),
            "code with no symbol in libfoo.so (stripped or JIT)"
        );
        assert_eq!(site("train_step", "a.out").words(), "train_step (a.out)");
        let s = sentence(
            &CallSites {
                evidence_sql: String::new(),
                calls: 296,
                calls_with_stack: 296,
                sites: vec![site("0x0", "")],
            },
            "copies",
        );
        assert!(!s.contains("0x0"), "{s}");
    }

    fn native(symbol: &str, module: &str) -> Frame {
        Frame {
            ip: 0x1000,
            symbol: symbol.into(),
            module: module.into(),
            offset: 0,
        }
    }

    /// A trace of one thread: 5 syncs from a Python line, 3 from a native function (no
    /// Python frames), 2 without a stack; launches from the Python line and a sync on another
    /// thread, which the scope leaves out. `stacks: false` writes the same calls, no stacks.
    fn trace(dir: &std::path::Path, stacks: bool) -> Reader {
        let p = dir.join(format!("s{stacks}.duckdb"));
        let mut w = Writer::create(
            &p,
            WriterOptions {
                node: "n".into(),
                ..Default::default()
            },
        )
        .unwrap();
        let runtime = native("cudaStreamSynchronize", "/opt/cuda/libcudart.so.12");
        if stacks {
            w.add_stack(
                1,
                &[runtime.clone(), native("_ZN5train4stepEv", "libtrain.so")],
            )
            .unwrap();
            let f = |function: &str, line| PythonFrame {
                file: "train.py".into(),
                function: function.into(),
                line,
                entry: true,
            };
            w.add_python_stack(
                1,
                &PythonStack {
                    tid: PID,
                    status: "ok",
                    frames: vec![f("step", 87), f("<module>", 100)],
                },
            )
            .unwrap();
            w.add_stack(2, &[runtime, native("_ZN5train3logEv+0x10", "libtrain.so")])
                .unwrap();
        }
        let sync = op_by_name("cudaStreamSynchronize").unwrap().id;
        let launch = op_by_name("cudaLaunchKernel").unwrap().id;
        let calls = [(sync, 1, 5, PID), (sync, 2, 3, PID), (sync, 0, 2, PID)]
            .into_iter()
            .chain([(launch, 1, 4, PID), (sync, 1, 1, PID + 1)]);
        let mut t = 1_000_000i64;
        for (op_id, hash, n, tid) in calls {
            for _ in 0..n {
                t += 1_000;
                w.append(&Event {
                    timestamp: t,
                    duration: 100,
                    pid: PID,
                    tid,
                    comm: "python".into(),
                    op_id,
                    stack_hash: if stacks { hash } else { 0 },
                    ..Default::default()
                })
                .unwrap();
            }
        }
        w.finish().unwrap();
        Reader::open(&p).unwrap()
    }

    fn chain() -> Chain {
        Finding {
            detector: "sync_storm",
            node: "n".into(),
            time_lost_ns: 1,
            severity: Severity::Low,
            summary: "syncs".into(),
            root_cause: String::new(),
            explanation: "Many syncs.".into(),
            timeline: Vec::new(),
            recommendations: Vec::new(),
            evidence_sql: String::new(),
        }
        .into_chain()
        .at(Scope::thread("n", PID, PID, &[CallClass::Sync], "syncs"))
    }

    const WINDOW: Window = Window {
        from_ns: 0,
        until_ns: i64::MAX,
    };

    #[test]
    fn a_scope_narrows_its_calls_by_start_time_and_by_length() {
        let dir = tempfile::tempdir().unwrap();
        let r = trace(dir.path(), true);
        let scope = || Scope::thread("n", PID, PID, &[CallClass::Sync], "syncs");
        // The first sync from each stack: 1.001 ms (Python) and 1.006 ms (native); a time no
        // call started at counts nothing.
        let mut chains = vec![chain()];
        chains[0].scope = Some(scope().at_times(vec![1_001_000, 1_006_000, 1_006_500]));
        cite(&r, &WINDOW, &mut chains).unwrap();
        let cs = chains[0].call_sites.clone().expect("call sites");
        assert_eq!((cs.calls, cs.calls_with_stack), (2, 2));
        assert!(
            chains[0].explanation.ends_with(
                "1 of 2 syncs come from train::log+0x10 (libtrain.so), 1 from train.py:87 in step."
            ),
            "{}",
            chains[0].explanation
        );
        // Every call took 100 ns: none of 101 ns or more, so no sentence.
        let mut chains = vec![chain()];
        chains[0].scope = Some(scope().slower_than(101));
        cite(&r, &WINDOW, &mut chains).unwrap();
        assert_eq!(chains[0].call_sites, None);
        assert_eq!(chains[0].explanation, "Many syncs.");
        chains[0].scope = Some(scope().slower_than(100));
        cite(&r, &WINDOW, &mut chains).unwrap();
        assert_eq!(chains[0].call_sites.as_ref().map(|c| c.calls), Some(10));
    }

    #[test]
    fn a_finding_cites_python_lines_then_native_functions_with_counts_from_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let r = trace(dir.path(), true);
        let mut chains = vec![chain()];
        cite(&r, &WINDOW, &mut chains).unwrap();
        let cs = chains[0].call_sites.clone().expect("call sites");
        assert_eq!((cs.calls, cs.calls_with_stack), (10, 8));
        let got: Vec<(&str, &str, &str, u64)> = cs
            .sites
            .iter()
            .map(|s| (s.kind.as_str(), s.site.as_str(), s.detail.as_str(), s.calls))
            .collect();
        assert_eq!(
            got,
            [
                ("python", "train.py:87", "step", 5),
                ("native", "train::log+0x10", "libtrain.so", 3)
            ]
        );
        assert_eq!(
            chains[0].explanation,
            "Many syncs. Call sites (stacks): 5 of 10 syncs come from train.py:87 in step, 3 from train::log+0x10 (libtrain.so); 2 had no stack."
        );
        // The query runs as an agent's run_sql would, and carries the totals on its rows.
        let g = guard(&cs.evidence_sql, r.policy(), None).unwrap();
        let res = r.query(&g, &QueryLimits::default()).unwrap();
        assert_eq!(res.rows.len(), 3);
        assert!(res.rows.iter().all(|row| row[5] == 10 && row[6] == 8));
    }

    #[test]
    fn findings_on_a_trace_without_stacks_are_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let r = trace(dir.path(), false);
        let mut chains = vec![chain()];
        cite(&r, &WINDOW, &mut chains).unwrap();
        assert_eq!(chains[0].call_sites, None);
        assert_eq!(chains[0].explanation, "Many syncs.");
    }

    #[test]
    fn copies_are_selected_by_direction() {
        let p = op_predicate(&[CallClass::Sync, CallClass::CopyD2h]);
        assert!(p.contains("'cudaDeviceSynchronize'"), "{p}");
        assert!(
            p.contains("'cudaMemcpyAsync'") && p.contains("arg1 IN (2)"),
            "{p}"
        );
        assert!(!op_predicate(&[CallClass::Alloc]).contains("Memcpy"));
        assert!(op_predicate(&[]).contains("source IN"));
    }

    #[test]
    fn the_sentence_counts_the_rest_and_the_calls_without_a_stack() {
        let site = |n: u64, line: u32| Site {
            kind: "python".into(),
            site: format!("a.py:{line}"),
            detail: "f".into(),
            calls: n,
            total_ns: 0,
        };
        let s = CallSites {
            evidence_sql: String::new(),
            calls: 100,
            calls_with_stack: 90,
            sites: vec![site(50, 1), site(20, 2), site(10, 3), site(6, 4)],
        };
        assert_eq!(
            sentence(&s, "copies"),
            "Call sites (stacks): 50 of 100 copies come from a.py:1 in f, 20 from a.py:2 in f, 10 from a.py:3 in f, 10 from other places; 10 had no stack."
        );
    }
}
