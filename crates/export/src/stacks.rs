//! Call stacks for the Perfetto export: the frames of every stack the exported events name,
//! read once before the events stream (one query per table, not one per slice), as the args a
//! GPU-call slice carries: `python_frames` ("file:line function", innermost first, from
//! `python_frames`, schema 10) and `native_frames` ("symbol (module)", demangled, innermost
//! first), with `python_note` where the Python frames were cut or not recorded.

use std::collections::BTreeMap;

use causeway_store::sanitize::sanitize_with;
use causeway_store::symbols::demangle;
use causeway_store::{Reader, StoreError};
use serde_json::{Map, Value, json};

use crate::duck;

/// Frames per stack and kind carried as args (the collector walks at most 32 Python frames).
pub const MAX_FRAMES: usize = 32;

/// First schema with the Python tables.
const PYTHON_SCHEMA: u32 = 10;

// The stacks of the first `?` events in export order (the events query's window).
const NATIVE_SQL: &str = "
SELECT stack_hash, CASE WHEN symbol = '' THEN printf('0x%x', ip) ELSE symbol END, module
FROM stack_frames
WHERE stack_hash IN (SELECT stack_hash FROM (SELECT stack_hash FROM event_data ORDER BY timestamp, node, seq LIMIT ?) WHERE stack_hash <> 0)
ORDER BY stack_hash, depth";

const PY_FRAMES_SQL: &str = "
SELECT stack_hash, file, line, function
FROM python_frames
WHERE stack_hash IN (SELECT stack_hash FROM (SELECT stack_hash FROM event_data ORDER BY timestamp, node, seq LIMIT ?) WHERE stack_hash <> 0)
ORDER BY stack_hash, depth";

const PY_STATUS_SQL: &str = "
SELECT stack_hash, status
FROM python_stacks
WHERE status <> 'ok' AND stack_hash IN (SELECT stack_hash FROM (SELECT stack_hash FROM event_data ORDER BY timestamp, node, seq LIMIT ?) WHERE stack_hash <> 0)";

/// What a python_stacks.status other than ok means, for the slice's `python_note`.
fn note(status: &str) -> &'static str {
    match status {
        "truncated" => "Python frames cut at the walk limit of 32: the outermost are missing",
        "partial" => "a Python frame could not be read: the outer ones are missing",
        "no_thread" => "Python frames not recorded: the thread's interpreter state was not found",
        "rejected" => "Python frames not recorded: they did not read as code objects",
        "unreadable" => "Python frames not recorded: the process was gone before they were read",
        _ => "Python frames: unknown status",
    }
}

/// stack_hash -> the args its slices carry.
pub fn stack_args(r: &Reader, limit: i64) -> Result<BTreeMap<i64, Map<String, Value>>, StoreError> {
    let mut out: BTreeMap<i64, Map<String, Value>> = BTreeMap::new();
    let mut push = |hash: i64, key: &str, frame: String| {
        let args = out.entry(hash).or_default();
        let list = args.entry(key).or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut()
            && list.len() < MAX_FRAMES
        {
            list.push(Value::String(frame));
        }
    };
    if r.schema_version() >= PYTHON_SCHEMA {
        let rows: Vec<(i64, String, u32, String)> = r
            .prepare_trusted(PY_FRAMES_SQL)?
            .query_map([limit], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading Python frames"))?;
        for (hash, file, line, function) in rows {
            let f = format!(
                "{}:{line} {}",
                sanitize_with(&file, 200),
                sanitize_with(&function, 160)
            );
            push(hash, "python_frames", f);
        }
    }
    let rows: Vec<(i64, String, String)> = r
        .prepare_trusted(NATIVE_SQL)?
        .query_map([limit], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading stack frames"))?;
    for (hash, symbol, module) in rows {
        let f = format!(
            "{} ({})",
            sanitize_with(&demangle(&symbol), 160),
            sanitize_with(&module, 80)
        );
        push(hash, "native_frames", f);
    }
    if r.schema_version() >= PYTHON_SCHEMA {
        let rows: Vec<(i64, String)> = r
            .prepare_trusted(PY_STATUS_SQL)?
            .query_map([limit], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading Python stacks"))?;
        for (hash, status) in rows {
            out.entry(hash)
                .or_default()
                .insert("python_note".into(), json!(note(&status)));
        }
    }
    Ok(out)
}
