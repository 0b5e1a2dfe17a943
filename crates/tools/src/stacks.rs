//! `get_stacks` (CLI `causeway stacks`): the call stacks that cost the most time for an op,
//! process and window, with resolved frames from `stack_frames` joined on `events.stack_hash`,
//! and the CPython frames of `python_frames` (file, function, line) where the collector recorded
//! them. Python frames take the place of the `_PyEval_EvalFrameDefault` frame that ran them
//! where the native frames reach it; otherwise they come first, then the native frames. Within
//! max_frames, Python frames are kept first (they are what a program's author reads), then the
//! innermost native ones, in stack order (raise it for every native frame).

use causeway_store::duckdb::params;
use causeway_store::sanitize::sanitize_with;
use causeway_store::{Reader, StoreError};
use schemars::JsonSchema;
use serde::Serialize;

use crate::context::Context;
use crate::error::ToolError;
use crate::params::{StacksParams, page, parse_cursor};

/// Default stacks per page.
pub const DEFAULT_LIMIT: usize = 5;
/// Default frames per stack.
pub const DEFAULT_FRAMES: usize = 12;

/// Output of `get_stacks`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StacksResult {
    /// Ranked by total time of the calls made from the stack.
    pub stacks: Vec<StackOut>,
    /// Distinct stacks matching the filters.
    pub total_stacks: usize,
    /// Matching calls that had no stack recorded.
    pub calls_without_stack: u64,
    /// Window used (ns epoch).
    pub window: [i64; 2],
    /// Pass as cursor for more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One call stack and what was called from it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StackOut {
    /// events.stack_hash.
    pub stack_hash: i64,
    /// Ops called from it.
    pub ops: Vec<String>,
    /// Calls.
    pub calls: u64,
    /// Sum of durations.
    pub total_ns: i64,
    /// Median duration.
    pub p50_ns: i64,
    /// Longest.
    pub max_ns: i64,
    /// Frames, innermost first (data from the traced machine); a Python frame's symbol is its
    /// function, module its file:line.
    pub frames: Vec<FrameOut>,
    /// Frames left out (max_frames).
    pub more_frames: usize,
}

/// One resolved frame.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FrameOut {
    /// Symbol+offset, or the address when unresolved.
    pub symbol: String,
    /// File the frame is in.
    pub module: String,
}

// These read the physical `event_rows` (a node name is looked up once): the `event_data` view
// joined node and thread names onto every event first.
const STACKS_SQL: &str = "
SELECT d.stack_hash, count(*)::BIGINT, (CASE WHEN sum(d.duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(d.duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(d.duration) END)::BIGINT, quantile_disc(d.duration, 0.5),
       max(d.duration), string_agg(DISTINCT o.op, ',' ORDER BY o.op)
FROM event_rows d JOIN ops o ON o.op_id = d.op_id
WHERE d.stack_hash <> 0 AND d.timestamp BETWEEN ? AND ?
  AND (?::BIGINT < 0 OR d.pid = ?::BIGINT)
  AND (?::INTEGER < 0 OR d.op_id = ?::INTEGER)
  AND (?::VARCHAR = '' OR d.node_id = (SELECT max(node_id) FROM nodes WHERE node = ?::VARCHAR))
GROUP BY d.stack_hash
ORDER BY 3 DESC, 1";

const NO_STACK_SQL: &str = "
SELECT count(*)::BIGINT FROM event_rows d
WHERE d.stack_hash = 0 AND d.timestamp BETWEEN ? AND ?
  AND (?::BIGINT < 0 OR d.pid = ?::BIGINT)
  AND (?::INTEGER < 0 OR d.op_id = ?::INTEGER)
  AND (?::VARCHAR = '' OR d.node_id = (SELECT max(node_id) FROM nodes WHERE node = ?::VARCHAR))";

const FRAMES_SQL: &str = "
SELECT CASE WHEN symbol = '' THEN printf('0x%x', ip) ELSE symbol END, module
FROM stack_frames WHERE stack_hash = ? ORDER BY depth";

const HAS_PYTHON_SQL: &str =
    "SELECT count(*)::BIGINT FROM duckdb_tables() WHERE table_name = 'python_frames'";

const PY_STATUS_SQL: &str = "SELECT status FROM python_stacks WHERE stack_hash = ?";

const PY_FRAMES_SQL: &str =
    "SELECT function, file, line, entry FROM python_frames WHERE stack_hash = ? ORDER BY depth";

/// Files before schema 12 do not know where their Python frames sit among native ones.
const PY_FRAMES_OLD_SQL: &str = "SELECT function, file, line, NULL::BOOLEAN FROM python_frames WHERE stack_hash = ? ORDER BY depth";

const HAS_ENTRY_SQL: &str = "SELECT count(*)::BIGINT FROM duckdb_columns()
    WHERE table_name = 'python_frames' AND column_name = 'entry'";

/// The native frame of CPython's eval loop: one C-level call of it runs one group of Python
/// frames (3.10: one frame).
const EVAL_FRAME: &str = "_PyEval_EvalFrameDefault";

/// One frame of a stack before display: its text, whether it is a Python frame, and for a
/// Python frame whether it ends its eval call's group (None: not recorded).
#[derive(Debug, Clone)]
struct Item {
    frame: FrameOut,
    python: bool,
    entry: Option<bool>,
}

/// Places each group of Python frames (innermost first, a group ending at its `entry` frame) at
/// the native `_PyEval_EvalFrameDefault` frame that ran it, in order; groups left over (the
/// native walk stopped short) go after the last native frame. Without an eval frame among the
/// native ones, or without entry marks, Python frames come first.
fn interleave(native: Vec<Item>, python: Vec<Item>) -> Vec<Item> {
    let evals = native
        .iter()
        .filter(|n| n.frame.symbol.starts_with(EVAL_FRAME))
        .count();
    let marked = python.iter().any(|p| p.entry.is_some());
    if evals == 0 || !marked || python.is_empty() {
        return python.into_iter().chain(native).collect();
    }
    let mut groups: Vec<Vec<Item>> = vec![Vec::new()];
    for p in python {
        let ends = p.entry == Some(true);
        groups.last_mut().expect("one group").push(p);
        if ends {
            groups.push(Vec::new());
        }
    }
    // A note (cut or partial walk) and an unmarked tail belong to the outermost group.
    if groups.last().is_some_and(Vec::is_empty) {
        groups.pop();
    }
    let mut groups = groups.into_iter();
    let mut out = Vec::new();
    for n in native {
        if n.frame.symbol.starts_with(EVAL_FRAME)
            && let Some(g) = groups.next()
        {
            out.extend(g);
            continue;
        }
        out.push(n);
    }
    out.extend(groups.flatten());
    out
}

/// Python frames first, then the innermost native ones, up to `max`, in stack order; and how
/// many were left out.
fn select(items: Vec<Item>, max: usize) -> (Vec<FrameOut>, usize) {
    let py = items.iter().filter(|i| i.python).count();
    let (mut py_left, mut native_left) = (max.min(py), max.saturating_sub(py));
    let total = items.len();
    let mut out = Vec::new();
    for i in items {
        let left = if i.python {
            &mut py_left
        } else {
            &mut native_left
        };
        if *left > 0 {
            *left -= 1;
            out.push(i.frame);
        }
    }
    let more = total - out.len();
    (out, more)
}

/// What a stack's python_stacks.status tells a reader (as a frame of its own, after the Python
/// frames), None when nothing needs saying.
fn python_note(status: &str) -> Option<String> {
    Some(
        match status {
            "ok" => return None,
            "truncated" => "Python frames cut at the walk limit of 32: the outermost are missing",
            "partial" => "a Python frame could not be read: the outer ones are missing",
            "no_thread" => {
                "Python frames not recorded: the thread's interpreter state was not found"
            }
            "rejected" => "Python frames not recorded: they did not read as code objects",
            "unreadable" => {
                "Python frames not recorded: the process was gone before they were read"
            }
            _ => "Python frames: unknown status",
        }
        .to_string(),
    )
}

fn duck(r: &Reader, action: &'static str) -> impl Fn(causeway_store::duckdb::Error) -> ToolError {
    let path = r.path().to_path_buf();
    move |source| {
        ToolError::from(StoreError::Duck {
            path: path.clone(),
            action,
            source,
        })
    }
}

/// Top stacks of one trace: the function `causeway stacks` and `get_stacks` share.
pub fn stacks_for(reader: &Reader, p: &StacksParams) -> Result<StacksResult, ToolError> {
    let spec = p.window.spec()?;
    let op_id: i32 = match p.op.as_deref().filter(|o| !o.is_empty()) {
        None => -1,
        Some(name) => causeway_store::catalog::op_by_name(name)
            .map(|o| i32::from(o.id))
            .ok_or_else(|| ToolError::InvalidArgument {
                field: "/op".into(),
                rule: format!("unknown op '{}'", sanitize_with(name, 80)),
                hint: "the ops table lists every op: SELECT op, source, description FROM ops"
                    .into(),
            })?,
    };
    let offset = parse_cursor(&p.cursor)?;
    let limit = p.limit.map_or(DEFAULT_LIMIT, |n| n as usize);
    let max_frames = p.max_frames.map_or(DEFAULT_FRAMES, |n| n as usize);
    let pid: i64 = p.window.pid.map_or(-1, i64::from);
    causeway_analysis::check_filter(reader, spec, p.window.pid, p.window.node.as_deref())?;
    let node = p.window.node.clone().unwrap_or_default();

    let (_, first, last) = causeway_analysis::window::trace_span(reader)?;
    let w = spec.resolve(first, last);
    let args = params![w.from_ns, w.until_ns, pid, pid, op_id, op_id, node, node];
    let rows: Vec<(i64, i64, i64, i64, i64, String)> = reader
        .prepare_trusted(STACKS_SQL)?
        .query_map(args, causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(reader, "ranking stacks"))?;
    let calls_without_stack: i64 = reader
        .prepare_trusted(NO_STACK_SQL)?
        .query_row(args, |r| r.get(0))
        .map_err(duck(reader, "counting calls without stacks"))?;
    let total_stacks = rows.len();
    let (rows, next_cursor) = page(rows, offset, limit);
    let mut frames_stmt = reader.prepare_trusted(FRAMES_SQL)?;
    // Files written before schema 10 have no Python tables.
    let has_python = reader
        .prepare_trusted(HAS_PYTHON_SQL)?
        .query_row([], |r| r.get::<_, i64>(0))
        .map_err(duck(reader, "looking for the Python frames table"))?
        > 0;

    let has_entry = has_python
        && reader
            .prepare_trusted(HAS_ENTRY_SQL)?
            .query_row([], |r| r.get::<_, i64>(0))
            .map_err(duck(reader, "looking for python_frames.entry"))?
            > 0;

    let mut stacks = Vec::with_capacity(rows.len());
    for (hash, calls, total, p50, max, ops) in rows {
        let native: Vec<Item> = frames_stmt
            .query_map(params![hash], |r| {
                Ok(Item {
                    frame: FrameOut {
                        symbol: sanitize_with(
                            &causeway_store::symbols::demangle(&r.get::<_, String>(0)?),
                            160,
                        ),
                        module: sanitize_with(&r.get::<_, String>(1)?, 80),
                    },
                    python: false,
                    entry: None,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(reader, "reading stack frames"))?;
        let python = if has_python {
            python_frames(reader, hash, has_entry)?
        } else {
            Vec::new()
        };
        let (frames, more_frames) = select(interleave(native, python), max_frames);
        stacks.push(StackOut {
            stack_hash: hash,
            ops: ops.split(',').map(str::to_string).collect(),
            calls: calls as u64,
            total_ns: total,
            p50_ns: p50,
            max_ns: max,
            frames,
            more_frames,
        });
    }
    Ok(StacksResult {
        stacks,
        total_stacks,
        calls_without_stack: calls_without_stack.max(0) as u64,
        window: [w.from_ns, w.until_ns],
        next_cursor,
    })
}

/// The Python frames of one stack as frames (function; file:line), with a note frame after them
/// when they were cut or are missing.
fn python_frames(reader: &Reader, hash: i64, has_entry: bool) -> Result<Vec<Item>, ToolError> {
    let status: Option<String> = reader
        .prepare_trusted(PY_STATUS_SQL)?
        .query_map(params![hash], |r| r.get(0))
        .and_then(|mut rows| rows.next().transpose())
        .map_err(duck(reader, "reading a Python stack"))?;
    let Some(status) = status else {
        return Ok(Vec::new());
    };
    let sql = if has_entry {
        PY_FRAMES_SQL
    } else {
        PY_FRAMES_OLD_SQL
    };
    let mut frames: Vec<Item> = reader
        .prepare_trusted(sql)?
        .query_map(params![hash], |r| {
            let file = r.get::<_, String>(1)?;
            Ok(Item {
                frame: FrameOut {
                    symbol: sanitize_with(&r.get::<_, String>(0)?, 160),
                    module: sanitize_with(&format!("{file}:{}", r.get::<_, u32>(2)?), 200),
                },
                python: true,
                entry: r.get(3)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(reader, "reading Python frames"))?;
    if let Some(note) = python_note(&status) {
        frames.push(Item {
            frame: FrameOut {
                symbol: format!("({note})"),
                module: "python".into(),
            },
            python: true,
            entry: None,
        });
    }
    Ok(frames)
}

/// `get_stacks`.
pub fn get_stacks(ctx: &Context, p: &StacksParams) -> Result<StacksResult, ToolError> {
    ctx.with_reader(p.trace.as_deref(), |r| stacks_for(r, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(symbol: &str) -> Item {
        Item {
            frame: FrameOut {
                symbol: symbol.into(),
                module: "lib.so".into(),
            },
            python: false,
            entry: None,
        }
    }

    fn py(function: &str, entry: Option<bool>) -> Item {
        Item {
            frame: FrameOut {
                symbol: function.into(),
                module: "train.py:1".into(),
            },
            python: true,
            entry,
        }
    }

    fn names(items: &[FrameOut]) -> Vec<&str> {
        items.iter().map(|f| f.symbol.as_str()).collect()
    }

    #[test]
    fn python_frames_take_the_place_of_the_eval_call_that_ran_them() {
        // leaf was called from C (map), outer and <module> ran in one eval call.
        let n = vec![
            native("cudaDeviceSynchronize"),
            native("ffi_call"),
            native("_PyEval_EvalFrameDefault+0x12"),
            native("map_next"),
            native("_PyEval_EvalFrameDefault+0x99"),
            native("PyEval_EvalCode"),
            native("main"),
        ];
        let p = vec![
            py("leaf", Some(true)),
            py("outer", Some(false)),
            py("<module>", Some(true)),
        ];
        let items = interleave(n.clone(), p.clone());
        let (all, more) = select(items.clone(), 100);
        assert_eq!(
            names(&all),
            [
                "cudaDeviceSynchronize",
                "ffi_call",
                "leaf",
                "map_next",
                "outer",
                "<module>",
                "PyEval_EvalCode",
                "main"
            ]
        );
        assert_eq!(more, 0);
        // Within 4 frames: the 3 Python ones and the innermost native one, in stack order.
        let (few, more) = select(items, 4);
        assert_eq!(
            names(&few),
            ["cudaDeviceSynchronize", "leaf", "outer", "<module>"]
        );
        assert_eq!(more, 4);
        // A native walk that stopped before the second eval frame: the rest go after it.
        let (short, _) = select(interleave(n[..4].to_vec(), p.clone()), 100);
        assert_eq!(
            names(&short),
            [
                "cudaDeviceSynchronize",
                "ffi_call",
                "leaf",
                "map_next",
                "outer",
                "<module>"
            ]
        );
    }

    #[test]
    fn without_eval_frames_or_entry_marks_python_frames_come_first() {
        let p = vec![py("leaf", Some(true)), py("<module>", Some(true))];
        let fp_only = vec![native("cudaDeviceSynchronize"), native("ffi_call")];
        let (f, _) = select(interleave(fp_only, p), 100);
        assert_eq!(
            names(&f),
            ["leaf", "<module>", "cudaDeviceSynchronize", "ffi_call"]
        );
        // Recorded before schema 12: no marks.
        let old = vec![py("leaf", None), py("<module>", None)];
        let n = vec![
            native("cudaDeviceSynchronize"),
            native("_PyEval_EvalFrameDefault"),
        ];
        let (f, _) = select(interleave(n, old), 100);
        assert_eq!(
            names(&f),
            [
                "leaf",
                "<module>",
                "cudaDeviceSynchronize",
                "_PyEval_EvalFrameDefault"
            ]
        );
    }
}
