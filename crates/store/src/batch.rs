//! The writer's event buffer: one growable column per field of `event_rows`, thread names
//! interned to comm ids (strings per row were most of the append cost), and the Arrow batch
//! the Appender takes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use duckdb::arrow::array::{
    ArrayRef, Int16Array, Int32Array, Int64Array, UInt16Array, UInt32Array, UInt64Array,
};
use duckdb::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use duckdb::arrow::record_batch::RecordBatch;

use crate::error::{Result, StoreError};
use crate::rows::Event;

/// FNV-1a for the thread-name map: names are short and looked up once per appended event.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The layout of `event_rows` (crates/store/sql/001_schema.sql), column for column.
pub(crate) fn event_rows_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("node_id", DataType::UInt16, false),
        Field::new("seq", DataType::UInt64, false),
        Field::new("timestamp", DataType::Int64, false),
        Field::new("duration", DataType::Int64, false),
        Field::new("pid", DataType::UInt32, false),
        Field::new("tid", DataType::UInt32, false),
        Field::new("comm_id", DataType::UInt32, false),
        Field::new("op_id", DataType::UInt16, false),
        Field::new("arg0", DataType::Int64, false),
        Field::new("arg1", DataType::Int64, false),
        Field::new("ret_code", DataType::Int32, false),
        Field::new("gpu_id", DataType::Int16, false),
        Field::new("stack_hash", DataType::Int64, false),
        Field::new("cgroup_id", DataType::UInt64, false),
        Field::new("rank", DataType::Int32, true),
    ]))
}

#[derive(Default)]
struct Columns {
    seq: Vec<u64>,
    timestamp: Vec<i64>,
    duration: Vec<i64>,
    pid: Vec<u32>,
    tid: Vec<u32>,
    comm_id: Vec<u32>,
    op_id: Vec<u16>,
    arg0: Vec<i64>,
    arg1: Vec<i64>,
    ret_code: Vec<i32>,
    gpu_id: Vec<i16>,
    stack_hash: Vec<i64>,
    cgroup_id: Vec<u64>,
    rank: Vec<Option<i32>>,
}

/// Buffered events of one node plus the thread names first seen since the last batch.
pub(crate) struct EventBuffer {
    cols: Columns,
    comm_ids: HashMap<String, u32, BuildHasherDefault<Fnv>>,
    next_comm: u32,
    new_comms: Vec<(u32, String)>,
    schema: SchemaRef,
}

impl EventBuffer {
    /// A buffer that knows the names already in the file's `comms` table.
    pub(crate) fn new(known: Vec<(u32, String)>) -> EventBuffer {
        let next_comm = known.iter().map(|(id, _)| id + 1).max().unwrap_or(1);
        EventBuffer {
            cols: Columns::default(),
            comm_ids: known.into_iter().map(|(id, name)| (name, id)).collect(),
            next_comm,
            new_comms: Vec::new(),
            schema: event_rows_schema(),
        }
    }

    /// Events buffered.
    pub(crate) fn len(&self) -> usize {
        self.cols.seq.len()
    }

    /// Whether no event is buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.cols.seq.is_empty()
    }

    /// Buffers one event under sequence number `seq`.
    pub(crate) fn push(&mut self, seq: u64, ev: &Event) {
        let comm_id = match self.comm_ids.get(ev.comm.as_str()) {
            Some(&id) => id,
            None => {
                let id = self.next_comm;
                self.next_comm += 1;
                self.comm_ids.insert(ev.comm.clone(), id);
                self.new_comms.push((id, ev.comm.clone()));
                id
            }
        };
        let c = &mut self.cols;
        c.seq.push(seq);
        c.timestamp.push(ev.timestamp);
        c.duration.push(ev.duration);
        c.pid.push(ev.pid);
        c.tid.push(ev.tid);
        c.comm_id.push(comm_id);
        c.op_id.push(ev.op_id);
        c.arg0.push(ev.arg0);
        c.arg1.push(ev.arg1);
        c.ret_code.push(ev.ret_code);
        c.gpu_id.push(ev.gpu_id);
        c.stack_hash.push(ev.stack_hash);
        c.cgroup_id.push(ev.cgroup_id);
        c.rank.push(ev.rank);
    }

    /// Thread names not yet in the file; they must be stored before the batch that uses them.
    pub(crate) fn new_comms(&self) -> &[(u32, String)] {
        &self.new_comms
    }

    /// Marks the new thread names as stored.
    pub(crate) fn comms_stored(&mut self) {
        self.new_comms.clear();
    }

    /// Empties the buffer into one Arrow batch with every row stamped `node_id`.
    pub(crate) fn take_batch(&mut self, node_id: u16) -> Result<RecordBatch> {
        let c = std::mem::take(&mut self.cols);
        let n = c.seq.len();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vec![node_id; n])),
            Arc::new(UInt64Array::from(c.seq)),
            Arc::new(Int64Array::from(c.timestamp)),
            Arc::new(Int64Array::from(c.duration)),
            Arc::new(UInt32Array::from(c.pid)),
            Arc::new(UInt32Array::from(c.tid)),
            Arc::new(UInt32Array::from(c.comm_id)),
            Arc::new(UInt16Array::from(c.op_id)),
            Arc::new(Int64Array::from(c.arg0)),
            Arc::new(Int64Array::from(c.arg1)),
            Arc::new(Int32Array::from(c.ret_code)),
            Arc::new(Int16Array::from(c.gpu_id)),
            Arc::new(Int64Array::from(c.stack_hash)),
            Arc::new(UInt64Array::from(c.cgroup_id)),
            Arc::new(Int32Array::from(c.rank)),
        ];
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| StoreError::Query {
            message: format!("building an event batch: {e}"),
            hint: "this is a bug in causeway; please report it".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names_are_interned_once_and_continue_after_known_ids() {
        let mut b = EventBuffer::new(vec![(0, String::new()), (7, "python3".into())]);
        for comm in ["python3", "worker", "", "worker"] {
            b.push(
                0,
                &Event {
                    comm: comm.into(),
                    ..Event::default()
                },
            );
        }
        assert_eq!(b.new_comms(), &[(8, "worker".to_string())]);
        let batch = b.take_batch(3).unwrap();
        assert_eq!(batch.num_rows(), 4);
        let ids = batch
            .column(6)
            .as_any()
            .downcast_ref::<UInt32Array>()
            .unwrap();
        assert_eq!(ids.values().to_vec(), vec![7, 8, 0, 8]);
        assert_eq!(b.len(), 0);
    }
}
