//! The event ABI shared with the BPF programs (src/bpf/events.h), decoded safely from bytes.
//!
//! Records are read with explicit little-endian field reads at fixed offsets (no transmutes),
//! and a unit test pins the offsets to the layout the compiler gave the generated skeleton types.

use thiserror::Error;

use crate::probes::Library;

/// Size in bytes of one `struct cw_event` ring-buffer record.
pub const EVENT_SIZE: usize = 80;
/// Deepest user stack the BPF side records (`CW_MAX_FRAMES`).
pub const MAX_FRAMES: usize = 32;
/// Most Python frames the BPF side records per stack (`CW_MAX_PY_FRAMES`).
pub const MAX_PY_FRAMES: usize = 32;
/// Offset of the Python part (`npy`) of a `struct cw_stack_event`.
const STACK_PY: usize = 16 + 8 * MAX_FRAMES;
/// Size in bytes of one `struct cw_stack_event` ring-buffer record.
pub const STACK_EVENT_SIZE: usize = STACK_PY + 8 + 16 * MAX_PY_FRAMES + 8;
/// Bytes of stack memory a `struct cw_stack_bytes` holds at most.
pub const STACK_COPY: usize = 1024 * 16;
/// Size in bytes of one `struct cw_stack_bytes` ring-buffer record.
pub const STACK_BYTES_SIZE: usize = 40 + STACK_COPY;
/// Size in bytes of one `struct cw_py_proc` (a `py_procs` map value).
pub const PY_PROC_SIZE: usize = 32;
/// Slots of the per-CPU `py_counts` array (`CW_PYC_*`): walked, thread state not found, cut at
/// the limit, a frame unreadable.
pub const PY_COUNT_SLOTS: u32 = 4;
/// Size in bytes of one `struct cw_lib_event` ring-buffer record.
pub const LIB_EVENT_SIZE: usize = 32;
/// Bytes of the name in a `struct cw_name_event`.
pub const NAME_LEN: usize = 4096;
/// Size in bytes of one `struct cw_name_event` ring-buffer record.
pub const NAME_EVENT_SIZE: usize = 16 + NAME_LEN;
/// Size in bytes of one `struct cw_task_event` ring-buffer record.
pub const TASK_EVENT_SIZE: usize = 40;
/// Size in bytes of one `struct cw_file_key` (the `lib_files_seen` map key).
pub const FILE_KEY_SIZE: usize = 16;
/// `library` tag of a `struct cw_lib_event` reporting an exec'd program file (CW_LIB_EXEC).
const LIB_EXEC: u8 = 4;
/// Number of log2 duration buckets in `struct cw_stat`.
pub const HIST_BUCKETS: usize = 40;
/// Size in bytes of one `struct cw_stat` map value.
pub const STAT_SIZE: usize = 40 + 8 * HIST_BUCKETS;
/// Size in bytes of one `struct cw_stat_key` map key.
pub const STAT_KEY_SIZE: usize = 8;
/// Number of op slots in the `drops` and `op_mode` arrays.
pub const MAX_OPS: u32 = 256;
/// Op id of the collector's own calibration probe (`OP_CALIBRATE`): never recorded.
pub const OP_CALIBRATE: u16 = 255;
/// Slots of the call probes' `threads` array (`CW_THREAD_SLOTS`): a traced thread keeps its
/// in-flight calls in slot `tid % THREAD_SLOTS` unless another live thread holds it.
pub const THREAD_SLOTS: u32 = 4096;
/// Full-mode call events per batch (`CW_BATCH`): a ring record of a thread's batch holds up to
/// this many events back to back.
pub const BATCH: usize = 8;
/// Size in bytes of one `struct cw_batch` (a `batches` map value).
pub const BATCH_SIZE: usize = BATCH_EVENTS + EVENT_SIZE * BATCH;
/// Kind tag of a call event (`CW_KIND_CALL`).
const KIND_CALL: u8 = 1;
/// Offset of the events in a `struct cw_batch`.
pub const BATCH_EVENTS: usize = 48;
/// Slot of the `drops` array that counts lost stack records (`CW_DROP_STACK`).
pub const DROP_STACK: u32 = 0;
/// Slot of the `drops` array that counts lost NVTX range records (`CW_DROP_NVTX`).
pub const DROP_NVTX: u32 = 254;
/// Bytes of the name in a `struct cw_range_event`.
pub const RANGE_NAME_LEN: usize = 256;
/// Bytes of the domain in a `struct cw_range_event`.
pub const RANGE_DOMAIN_LEN: usize = 64;
/// Size in bytes of one `struct cw_range_event` ring-buffer record.
pub const RANGE_EVENT_SIZE: usize = 32 + RANGE_NAME_LEN + RANGE_DOMAIN_LEN;

/// What the kernel records for an op's calls (the `op_mode` map values, `CW_MODE_*`). Calls are
/// counted at entry in every mode, so counts stay exact across switches between them. Whether
/// the probes are attached at all (the collector's sampling) is not the kernel's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpMode {
    /// Entry and return probes: duration histogram and one event per call (`CW_MODE_FULL`).
    Full,
    /// Entry and return probes: duration histogram only, no ring-buffer events.
    Aggregate,
    /// Entry probe only (the return probe is detached): calls and bytes counted, no durations.
    EntryOnly,
    /// Probes attached but ignored: a sampled op's links coming or going, so that its calls
    /// are counted exactly over the slice the collector times as attached.
    Off,
}

impl OpMode {
    /// The mode's code (`CW_MODE_*`), the low byte of an `op_mode` map value.
    pub fn value(self) -> u32 {
        match self {
            OpMode::Full => 0,
            OpMode::Aggregate => 1,
            OpMode::EntryOnly => 2,
            OpMode::Off => 3,
        }
    }

    /// An `op_mode` map value: `mode` and the op's return-probe generation (`CW_GEN_SHIFT`,
    /// events.h), which wraps.
    pub fn word(mode: OpMode, generation: u32) -> u32 {
        mode.value() | (generation & GENERATION_MASK) << GENERATION_SHIFT
    }

    /// The return-probe generation of an `op_mode` map value.
    pub fn generation(word: u32) -> u32 {
        word >> GENERATION_SHIFT
    }
}

/// Where the return-probe generation sits in an `op_mode` value (`CW_GEN_SHIFT`).
const GENERATION_SHIFT: u32 = 8;
const GENERATION_MASK: u32 = u32::MAX >> GENERATION_SHIFT;

/// What produced a record (the leading kind tag of `struct cw_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A paired uprobe/uretprobe call (CUDA runtime, driver, graph, NCCL).
    Call,
    /// An off-CPU interval or wakeup of a traced thread.
    Sched,
    /// A fork, exec or exit of a traced process.
    Proc,
    /// A block I/O request.
    Io,
    /// A TCP retransmit.
    Tcp,
    /// A socket send/recv syscall.
    Net,
    /// An OOM kill.
    Oom,
    /// A user stack sent once per hash (`struct cw_stack_event`).
    Stack,
    /// A traced process mapped a CUDA library (`struct cw_lib_event`).
    Lib,
    /// Memory reclaim a traced thread did itself.
    Mem,
}

impl Kind {
    fn from_tag(tag: u8) -> Option<Kind> {
        Some(match tag {
            1 => Kind::Call,
            2 => Kind::Sched,
            3 => Kind::Proc,
            4 => Kind::Io,
            5 => Kind::Tcp,
            6 => Kind::Net,
            7 => Kind::Oom,
            8 => Kind::Stack,
            9 => Kind::Lib,
            12 => Kind::Mem,
            _ => return None,
        })
    }
}

/// A record that could not be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The record is shorter than the ABI says.
    #[error("event record of {0} bytes, expected {EVENT_SIZE}")]
    Short(usize),
    /// The leading kind tag is unknown (kernel and user space built from different sources).
    #[error("unknown event kind tag {0}")]
    UnknownKind(u8),
}

/// One decoded `struct cw_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    /// Kind tag.
    pub kind: Kind,
    /// Catalogue op id.
    pub op: u16,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Return code of the call (0 for host events).
    pub ret: i32,
    /// CLOCK_MONOTONIC ns of the start.
    pub ts_mono_ns: u64,
    /// Duration in ns (meaning per op).
    pub duration_ns: u64,
    /// First op-specific argument.
    pub arg0: i64,
    /// Second op-specific argument.
    pub arg1: i64,
    /// cgroup v2 id.
    pub cgroup_id: u64,
    /// Task comm, lossily decoded up to the first NUL.
    pub comm: String,
    /// User stack at the call (see [`RawStack`]), 0 = none.
    pub stack_hash: u64,
}

/// One decoded `struct cw_stack_event`: the frames of a stack the BPF side saw first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStack {
    /// Process (tgid) whose address space the addresses belong to.
    pub pid: u32,
    /// The hash call events refer to (never 0).
    pub hash: u64,
    /// Instruction pointers, innermost first.
    pub ips: Vec<u64>,
    /// The calling thread (the Python frames are its own).
    pub tid: u32,
    /// CPython frames, innermost first: (code object address, instruction pointer or, 3.10,
    /// instruction index).
    pub py: Vec<(u64, u64)>,
    /// `CW_PY_*` flags of the Python walk ([`PyFlags`]).
    pub py_flags: PyFlags,
    /// Bit i: Python frame i is the first frame its C-level eval call ran (the one a native
    /// caller entered): where the Python frames go among the native ones.
    pub py_entry: u32,
}

/// One decoded `struct cw_stack_bytes`: the registers at a call whose stack is new and the stack
/// memory above its stack pointer, for unwinding in user space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStackBytes {
    /// Process (tgid).
    pub pid: u32,
    /// The [`RawStack::hash`] of the stack.
    pub hash: u64,
    /// Instruction pointer (the probed function's first instruction).
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer register.
    pub bp: u64,
    /// Stack memory from `sp` up, as much as was readable.
    pub bytes: Vec<u8>,
}

/// How the Python frames of a stack were walked (`CW_PY_*` of `struct cw_stack_event`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyFlags(pub u16);

impl PyFlags {
    /// The process runs a known CPython and the thread's state was found.
    pub fn walked(self) -> bool {
        self.0 & 1 != 0
    }
    /// More frames than [`MAX_PY_FRAMES`]: the outermost are cut.
    pub fn truncated(self) -> bool {
        self.0 & 2 != 0
    }
    /// A known CPython, but the calling thread's state was not found (no frames recorded).
    pub fn no_thread(self) -> bool {
        self.0 & 4 != 0
    }
    /// A frame could not be read: the frames before it are kept.
    pub fn bad_read(self) -> bool {
        self.0 & 8 != 0
    }
}

/// A `struct cw_py_proc` (a `py_procs` map value): where one process's interpreter keeps the
/// thread list and how its structs are laid out. Offsets a version lacks are `0xffff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PyProc {
    /// Address of `_PyRuntime` in the process.
    pub runtime: u64,
    /// `_PyRuntimeState.interpreters.head`.
    pub interpreters_head: u16,
    /// `PyInterpreterState.threads.head` (3.10: `tstate_head`).
    pub threads_head: u16,
    /// `PyThreadState.next`.
    pub tstate_next: u16,
    /// `PyThreadState.thread_id`.
    pub tstate_thread_id: u16,
    /// `PyThreadState.frame` (3.10), `.cframe` (3.11, 3.12), `.current_frame` (3.13+).
    pub tstate_frame: u16,
    /// `_PyCFrame.current_frame` (3.11, 3.12), else `0xffff`.
    pub cframe_current: u16,
    /// The frame's code object field.
    pub frame_code: u16,
    /// The frame's caller field.
    pub frame_previous: u16,
    /// The frame's instruction field.
    pub frame_instr: u16,
    /// `_PyInterpreterFrame.owner` (3.11+), else `0xffff`.
    pub frame_owner: u16,
    /// Bytes of a frame to read (the furthest field's end, at most 104).
    pub frame_read: u16,
    /// `_PyInterpreterFrame.is_entry` (3.11), else `0xffff`.
    pub frame_entry: u16,
}

impl PyProc {
    /// The map value's bytes.
    pub fn to_bytes(&self) -> [u8; PY_PROC_SIZE] {
        let mut b = [0u8; PY_PROC_SIZE];
        b[..8].copy_from_slice(&self.runtime.to_le_bytes());
        let fields = [
            self.interpreters_head,
            self.threads_head,
            self.tstate_next,
            self.tstate_thread_id,
            self.tstate_frame,
            self.cframe_current,
            self.frame_code,
            self.frame_previous,
            self.frame_instr,
            self.frame_owner,
            self.frame_read,
            self.frame_entry,
        ];
        for (i, f) in fields.iter().enumerate() {
            b[8 + 2 * i..10 + 2 * i].copy_from_slice(&f.to_le_bytes());
        }
        b
    }
}

/// One decoded `struct cw_lib_event`: a traced process mapped a CUDA library (or another file)
/// executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawLib {
    /// Process (tgid) that mapped it.
    pub pid: u32,
    /// Which library, from the file name; `None` for a file of another name (CW_LIB_OBJECT: it
    /// may carry the CUDA runtime linked in) or a tag this build does not know.
    pub library: Option<Library>,
    /// CLOCK_MONOTONIC ns when the mapping existed.
    pub ts_mono_ns: u64,
    /// The file's kernel dev_t (MAJOR << 20 | MINOR) and inode number: the `lib_files_seen` key.
    pub file: (u64, u64),
    /// The descriptor it was mapped from, where known (still open while the process is held).
    pub fd: Option<u32>,
}

impl RawLib {
    /// The `lib_files_seen` map key of the file (`struct cw_file_key`).
    pub fn file_key(&self) -> [u8; FILE_KEY_SIZE] {
        file_key(self.file)
    }
}

/// One `struct cw_lib_event` tagged CW_LIB_EXEC: in all-process mode, a process exec'd a program
/// file user space has not looked at (it may carry the CUDA runtime linked statically).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawExec {
    /// Process (tgid) that exec'd it.
    pub pid: u32,
    /// CLOCK_MONOTONIC ns of the exec.
    pub ts_mono_ns: u64,
    /// The program file's kernel dev_t and inode number: the `lib_files_seen` key.
    pub file: (u64, u64),
}

impl RawExec {
    /// The `lib_files_seen` map key of the program file.
    pub fn file_key(&self) -> [u8; FILE_KEY_SIZE] {
        file_key(self.file)
    }
}

/// `struct cw_file_key` of (dev, ino).
fn file_key(file: (u64, u64)) -> [u8; FILE_KEY_SIZE] {
    let mut k = [0u8; FILE_KEY_SIZE];
    k[..8].copy_from_slice(&file.0.to_le_bytes());
    k[8..].copy_from_slice(&file.1.to_le_bytes());
    k
}

/// One ring-buffer record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A call or host event.
    Event(RawEvent),
    /// A new user stack.
    Stack(RawStack),
    /// The registers and stack memory of a new user stack.
    StackBytes(RawStackBytes),
    /// A CUDA library mapped by a traced process.
    Lib(RawLib),
    /// A program file exec'd by a process (all-process mode).
    Exec(RawExec),
    /// The name a driver function or kernel handle was got by.
    Name(RawName),
    /// A task not traced that took a traced thread's CPU.
    Task(RawTask),
    /// An NVTX range or mark that ended in a traced process.
    Range(RawRange),
}

/// What kind of NVTX annotation a `struct cw_range_event` reports (`CW_RANGE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeKind {
    /// nvtxRangePush/Pop: nested on its thread.
    PushPop,
    /// nvtxRangeStart/End: may end on another thread.
    StartEnd,
    /// nvtxMark: an instant.
    Mark,
}

/// One decoded `struct cw_range_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRange {
    /// The process.
    pub pid: u32,
    /// The thread that ended it.
    pub tid: u32,
    /// Push/pop, start/end or mark.
    pub kind: RangeKind,
    /// Ranges open around it on its thread (0 = outermost).
    pub depth: u16,
    /// CLOCK_MONOTONIC ns.
    pub start_mono_ns: u64,
    /// CLOCK_MONOTONIC ns (a mark: its start).
    pub end_mono_ns: u64,
    /// Its message (lossy UTF-8, cut at [`RANGE_NAME_LEN`] - 1 bytes).
    pub name: String,
    /// Its domain, empty for the default one.
    pub domain: String,
}

fn c_string(raw: &[u8]) -> String {
    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

fn decode_range(b: &[u8]) -> Result<Record, DecodeError> {
    if b.len() < RANGE_EVENT_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let kind = match b[1] {
        1 => RangeKind::PushPop,
        2 => RangeKind::StartEnd,
        3 => RangeKind::Mark,
        k => return Err(DecodeError::UnknownKind(k)),
    };
    Ok(Record::Range(RawRange {
        pid: u32_at(b, 4),
        tid: u32_at(b, 8),
        kind,
        depth: u16_at(b, 2),
        start_mono_ns: u64_at(b, 16),
        end_mono_ns: u64_at(b, 24),
        name: c_string(&b[32..32 + RANGE_NAME_LEN]),
        domain: c_string(&b[32 + RANGE_NAME_LEN..RANGE_EVENT_SIZE]),
    }))
}

/// One decoded `struct cw_task_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTask {
    /// Thread id (sched_switch events' arg0).
    pub tid: u32,
    /// Its process.
    pub tgid: u32,
    /// Boot-time ns of the switch it was first seen at.
    pub ts: u64,
    /// Its thread name (lossy UTF-8).
    pub comm: String,
}

fn decode_task(b: &[u8]) -> Result<Record, DecodeError> {
    if b.len() < TASK_EVENT_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let raw = &b[24..40];
    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    Ok(Record::Task(RawTask {
        tid: u32_at(b, 4),
        tgid: u32_at(b, 8),
        ts: u64_at(b, 16),
        comm: String::from_utf8_lossy(&raw[..end]).into_owned(),
    }))
}

/// One decoded `struct cw_name_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawName {
    /// The process.
    pub pid: u32,
    /// The call's op id (cuModuleGetFunction or cuLibraryGetKernel).
    pub op: u16,
    /// The CUfunction or CUkernel returned.
    pub handle: u64,
    /// The name (lossy UTF-8; empty where it could not be read).
    pub name: String,
}

fn decode_name(b: &[u8]) -> Result<Record, DecodeError> {
    if b.len() < NAME_EVENT_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let raw = &b[16..16 + NAME_LEN];
    let end = raw.iter().position(|&c| c == 0).unwrap_or(NAME_LEN);
    Ok(Record::Name(RawName {
        pid: u32_at(b, 4),
        op: u16_at(b, 2),
        handle: u64_at(b, 8),
        name: String::from_utf8_lossy(&raw[..end]).into_owned(),
    }))
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decodes one ring-buffer record: a single event, stack or library record, or a thread's batch
/// of call events back to back (calls.h `cw_flush`).
pub fn decode_records(b: &[u8]) -> Vec<Result<Record, DecodeError>> {
    if b.first() == Some(&KIND_CALL) && b.len() > EVENT_SIZE && b.len().is_multiple_of(EVENT_SIZE) {
        return b.chunks(EVENT_SIZE).map(decode_record).collect();
    }
    vec![decode_record(b)]
}

/// The events left in one `batches` map value (read at the end of a trace, when no program
/// runs any more): its count, bounded by [`BATCH`], then as many events.
pub fn decode_batch(b: &[u8]) -> Result<Vec<RawEvent>, DecodeError> {
    if b.len() < BATCH_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let n = (u32_at(b, 0) as usize).min(BATCH);
    b[BATCH_EVENTS..BATCH_EVENTS + n * EVENT_SIZE]
        .chunks(EVENT_SIZE)
        .map(decode_event)
        .collect()
}

/// Decodes one ring-buffer record of either kind.
pub fn decode_record(b: &[u8]) -> Result<Record, DecodeError> {
    match b.first() {
        Some(&8) => decode_stack(b).map(Record::Stack),
        Some(&9) => decode_lib(b),
        Some(&10) => decode_name(b),
        Some(&11) => decode_task(b),
        Some(&13) => decode_stack_bytes(b).map(Record::StackBytes),
        Some(&14) => decode_range(b),
        _ => decode_event(b).map(Record::Event),
    }
}

fn decode_lib(b: &[u8]) -> Result<Record, DecodeError> {
    if b.len() < LIB_EVENT_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let (pid, ts_mono_ns, file) = (u32_at(b, 4), u64_at(b, 8), (u64_at(b, 16), u64_at(b, 24)));
    if b[1] == LIB_EXEC {
        return Ok(Record::Exec(RawExec {
            pid,
            ts_mono_ns,
            file,
        }));
    }
    Ok(Record::Lib(RawLib {
        pid,
        library: match b[1] {
            1 => Some(Library::Cudart),
            2 => Some(Library::Cuda),
            3 => Some(Library::Nccl),
            _ => None,
        },
        ts_mono_ns,
        file,
        fd: u32::from(u16::from_le_bytes([b[2], b[3]])).checked_sub(1),
    }))
}

fn decode_stack(b: &[u8]) -> Result<RawStack, DecodeError> {
    if b.len() < STACK_EVENT_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let n = usize::from(u16_at(b, 2)).min(MAX_FRAMES);
    let npy = usize::from(u16_at(b, STACK_PY)).min(MAX_PY_FRAMES);
    let py_at = |i: usize| STACK_PY + 8 + 16 * i;
    Ok(RawStack {
        pid: u32_at(b, 4),
        hash: u64_at(b, 8),
        ips: (0..n).map(|i| u64_at(b, 16 + 8 * i)).collect(),
        tid: u32_at(b, STACK_PY + 4),
        py: (0..npy)
            .map(|i| (u64_at(b, py_at(i)), u64_at(b, py_at(i) + 8)))
            .collect(),
        py_flags: PyFlags(u16_at(b, STACK_PY + 2)),
        py_entry: u32_at(b, STACK_PY + 8 + 16 * MAX_PY_FRAMES),
    })
}

fn decode_stack_bytes(b: &[u8]) -> Result<RawStackBytes, DecodeError> {
    if b.len() < STACK_BYTES_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let len = (usize::from(u16_at(b, 2)) * 1024).min(STACK_COPY);
    Ok(RawStackBytes {
        pid: u32_at(b, 4),
        hash: u64_at(b, 8),
        ip: u64_at(b, 16),
        sp: u64_at(b, 24),
        bp: u64_at(b, 32),
        bytes: b[40..40 + len].to_vec(),
    })
}

/// Decodes one call/host event record.
pub fn decode_event(b: &[u8]) -> Result<RawEvent, DecodeError> {
    if b.len() < EVENT_SIZE {
        return Err(DecodeError::Short(b.len()));
    }
    let kind = Kind::from_tag(b[0]).ok_or(DecodeError::UnknownKind(b[0]))?;
    if matches!(kind, Kind::Stack | Kind::Lib) {
        return Err(DecodeError::UnknownKind(b[0]));
    }
    let comm_bytes = &b[56..72];
    let end = comm_bytes.iter().position(|&c| c == 0).unwrap_or(16);
    Ok(RawEvent {
        kind,
        op: u16_at(b, 2),
        pid: u32_at(b, 4),
        tid: u32_at(b, 8),
        ret: u32_at(b, 12) as i32,
        ts_mono_ns: u64_at(b, 16),
        duration_ns: u64_at(b, 24),
        arg0: u64_at(b, 32) as i64,
        arg1: u64_at(b, 40) as i64,
        cgroup_id: u64_at(b, 48),
        comm: String::from_utf8_lossy(&comm_bytes[..end]).into_owned(),
        stack_hash: u64_at(b, 72),
    })
}

/// Key of the per-(process, op) statistics map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatKey {
    /// Process id (tgid).
    pub pid: u32,
    /// Catalogue op id.
    pub op: u16,
}

impl StatKey {
    /// Decodes a map key; `None` when the size is wrong.
    pub fn decode(b: &[u8]) -> Option<StatKey> {
        (b.len() == STAT_KEY_SIZE).then(|| StatKey {
            pid: u32_at(b, 0),
            op: u16_at(b, 4),
        })
    }
}

/// Value of the per-(process, op) statistics map: exact in-kernel counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Calls entered / events seen in the kernel.
    pub calls: u64,
    /// Of which submitted to the ring buffer.
    pub stored: u64,
    /// Sum of measured durations (ns).
    pub total_ns: u64,
    /// Sum of byte arguments.
    pub bytes: u64,
    /// log2 histogram of durations (bucket i counts [2^i, 2^(i+1)) ns).
    pub hist: [u64; HIST_BUCKETS],
    /// Driver entries made by the CUDA runtime itself (not calls, not in `calls`): their probes
    /// trapped all the same.
    pub nested: u64,
}

impl Stat {
    /// Decodes a map value; `None` when the size is wrong.
    pub fn decode(b: &[u8]) -> Option<Stat> {
        if b.len() != STAT_SIZE {
            return None;
        }
        let mut hist = [0u64; HIST_BUCKETS];
        for (i, h) in hist.iter_mut().enumerate() {
            *h = u64_at(b, 32 + 8 * i);
        }
        Some(Stat {
            calls: u64_at(b, 0),
            stored: u64_at(b, 8),
            total_ns: u64_at(b, 16),
            bytes: u64_at(b, 24),
            hist,
            nested: u64_at(b, 32 + 8 * HIST_BUCKETS),
        })
    }

    /// Calls whose duration was measured (the histogram's total).
    pub fn timed(&self) -> u64 {
        self.hist.iter().sum()
    }
}

/// Sums one per-CPU counter value (as returned by a per-CPU array lookup).
pub fn sum_percpu(values: &[Vec<u8>]) -> u64 {
    values
        .iter()
        .filter(|v| v.len() >= 8)
        .map(|v| u64_at(v, 0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skel::types;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_the_compiled_structs() {
        assert_eq!(size_of::<types::cw_event>(), EVENT_SIZE);
        assert_eq!(size_of::<types::cw_stat>(), STAT_SIZE);
        assert_eq!(size_of::<types::cw_stat_key>(), STAT_KEY_SIZE);
        assert_eq!(offset_of!(types::cw_event, op), 2);
        assert_eq!(offset_of!(types::cw_event, pid), 4);
        assert_eq!(offset_of!(types::cw_event, tid), 8);
        assert_eq!(offset_of!(types::cw_event, ret), 12);
        assert_eq!(offset_of!(types::cw_event, ts), 16);
        assert_eq!(offset_of!(types::cw_event, duration), 24);
        assert_eq!(offset_of!(types::cw_event, arg0), 32);
        assert_eq!(offset_of!(types::cw_event, arg1), 40);
        assert_eq!(offset_of!(types::cw_event, cgroup_id), 48);
        assert_eq!(offset_of!(types::cw_event, comm), 56);
        assert_eq!(offset_of!(types::cw_event, stack_hash), 72);
        assert_eq!(offset_of!(types::cw_stat, hist), 32);
        assert_eq!(size_of::<types::cw_stack_event>(), STACK_EVENT_SIZE);
        assert_eq!(offset_of!(types::cw_stack_event, nframes), 2);
        assert_eq!(offset_of!(types::cw_stack_event, pid), 4);
        assert_eq!(offset_of!(types::cw_stack_event, hash), 8);
        assert_eq!(offset_of!(types::cw_stack_event, ips), 16);
        assert_eq!(offset_of!(types::cw_stack_event, npy), STACK_PY);
        assert_eq!(offset_of!(types::cw_stack_event, py_flags), STACK_PY + 2);
        assert_eq!(offset_of!(types::cw_stack_event, tid), STACK_PY + 4);
        assert_eq!(offset_of!(types::cw_stack_event, py), STACK_PY + 8);
        assert_eq!(
            offset_of!(types::cw_stack_event, py_entry),
            STACK_PY + 8 + 16 * MAX_PY_FRAMES
        );
        assert_eq!(size_of::<types::cw_stack_bytes>(), STACK_BYTES_SIZE);
        assert_eq!(offset_of!(types::cw_stack_bytes, chunks), 2);
        assert_eq!(offset_of!(types::cw_stack_bytes, hash), 8);
        assert_eq!(offset_of!(types::cw_stack_bytes, bp), 32);
        assert_eq!(offset_of!(types::cw_stack_bytes, bytes), 40);
        assert_eq!(size_of::<types::cw_py_frame>(), 16);
        assert_eq!(size_of::<types::cw_py_proc>(), PY_PROC_SIZE);
        assert_eq!(offset_of!(types::cw_py_proc, interpreters_head), 8);
        assert_eq!(offset_of!(types::cw_py_proc, frame_read), 28);
        assert_eq!(offset_of!(types::cw_py_proc, frame_entry), 30);
        assert_eq!(size_of::<types::cw_batch>(), BATCH_SIZE);
        assert_eq!(offset_of!(types::cw_batch, ev), BATCH_EVENTS);
        assert_eq!(size_of::<types::cw_lib_event>(), LIB_EVENT_SIZE);
        assert_eq!(size_of::<types::cw_file_key>(), FILE_KEY_SIZE);
        assert_eq!(offset_of!(types::cw_lib_event, library), 1);
        assert_eq!(offset_of!(types::cw_lib_event, pid), 4);
        assert_eq!(offset_of!(types::cw_lib_event, ts), 8);
        assert_eq!(offset_of!(types::cw_lib_event, file), 16);
        assert_eq!(offset_of!(types::cw_file_key, ino), 8);
        assert_eq!(size_of::<types::cw_name_event>(), NAME_EVENT_SIZE);
        assert_eq!(offset_of!(types::cw_name_event, op), 2);
        assert_eq!(offset_of!(types::cw_name_event, pid), 4);
        assert_eq!(offset_of!(types::cw_name_event, handle), 8);
        assert_eq!(offset_of!(types::cw_name_event, name), 16);
        assert_eq!(size_of::<types::cw_range_event>(), RANGE_EVENT_SIZE);
        assert_eq!(offset_of!(types::cw_range_event, range), 1);
        assert_eq!(offset_of!(types::cw_range_event, depth), 2);
        assert_eq!(offset_of!(types::cw_range_event, pid), 4);
        assert_eq!(offset_of!(types::cw_range_event, tid), 8);
        assert_eq!(offset_of!(types::cw_range_event, start), 16);
        assert_eq!(offset_of!(types::cw_range_event, end), 24);
        assert_eq!(offset_of!(types::cw_range_event, name), 32);
        assert_eq!(
            offset_of!(types::cw_range_event, domain),
            32 + RANGE_NAME_LEN
        );
        assert_eq!(size_of::<types::cw_task_event>(), TASK_EVENT_SIZE);
        assert_eq!(offset_of!(types::cw_task_event, tid), 4);
        assert_eq!(offset_of!(types::cw_task_event, tgid), 8);
        assert_eq!(offset_of!(types::cw_task_event, ts), 16);
        assert_eq!(offset_of!(types::cw_task_event, comm), 24);
    }

    #[test]
    fn decodes_a_task_record() {
        let mut b = vec![0u8; TASK_EVENT_SIZE];
        b[0] = 11;
        b[4..8].copy_from_slice(&2165u32.to_le_bytes());
        b[8..12].copy_from_slice(&2160u32.to_le_bytes());
        b[16..24].copy_from_slice(&99u64.to_le_bytes());
        b[24..28].copy_from_slice(b"gzip");
        assert_eq!(
            decode_record(&b),
            Ok(Record::Task(RawTask {
                tid: 2165,
                tgid: 2160,
                ts: 99,
                comm: "gzip".into()
            }))
        );
        assert_eq!(decode_record(&b[..30]), Err(DecodeError::Short(30)));
    }

    #[test]
    fn decodes_a_name_record() {
        let mut b = vec![0u8; NAME_EVENT_SIZE];
        b[0] = 10;
        b[2..4].copy_from_slice(&59u16.to_le_bytes());
        b[4..8].copy_from_slice(&77u32.to_le_bytes());
        b[8..16].copy_from_slice(&0xabcu64.to_le_bytes());
        b[16..22].copy_from_slice(b"triton");
        assert_eq!(
            decode_record(&b),
            Ok(Record::Name(RawName {
                pid: 77,
                op: 59,
                handle: 0xabc,
                name: "triton".into()
            }))
        );
        assert_eq!(decode_record(&b[..40]), Err(DecodeError::Short(40)));
    }

    #[test]
    fn decodes_a_range_record() {
        let mut b = vec![0u8; RANGE_EVENT_SIZE];
        b[0] = 14;
        b[1] = 1;
        b[2..4].copy_from_slice(&2u16.to_le_bytes());
        b[4..8].copy_from_slice(&77u32.to_le_bytes());
        b[8..12].copy_from_slice(&78u32.to_le_bytes());
        b[16..24].copy_from_slice(&100u64.to_le_bytes());
        b[24..32].copy_from_slice(&250u64.to_le_bytes());
        b[32..37].copy_from_slice(b"step1");
        b[32 + RANGE_NAME_LEN..32 + RANGE_NAME_LEN + 5].copy_from_slice(b"train");
        assert_eq!(
            decode_record(&b),
            Ok(Record::Range(RawRange {
                pid: 77,
                tid: 78,
                kind: RangeKind::PushPop,
                depth: 2,
                start_mono_ns: 100,
                end_mono_ns: 250,
                name: "step1".into(),
                domain: "train".into(),
            }))
        );
        assert_eq!(decode_record(&b[..40]), Err(DecodeError::Short(40)));
        b[1] = 9;
        assert_eq!(decode_record(&b), Err(DecodeError::UnknownKind(9)));
    }

    #[test]
    fn decodes_stack_memory_as_far_as_it_was_read() {
        let mut b = vec![0u8; STACK_BYTES_SIZE];
        b[0] = 13;
        b[2..4].copy_from_slice(&2u16.to_le_bytes());
        b[4..8].copy_from_slice(&42u32.to_le_bytes());
        b[8..16].copy_from_slice(&0xfeedu64.to_le_bytes());
        b[16..24].copy_from_slice(&0x1000u64.to_le_bytes());
        b[24..32].copy_from_slice(&0x7ff0u64.to_le_bytes());
        b[32..40].copy_from_slice(&0x7ff8u64.to_le_bytes());
        b[40] = 0xab;
        let Ok(Record::StackBytes(s)) = decode_record(&b) else {
            panic!("not stack bytes")
        };
        assert_eq!(
            (s.pid, s.hash, s.ip, s.sp, s.bp),
            (42, 0xfeed, 0x1000, 0x7ff0, 0x7ff8)
        );
        assert_eq!((s.bytes.len(), s.bytes[0]), (2048, 0xab));
        assert_eq!(decode_record(&b[..100]), Err(DecodeError::Short(100)));
    }

    #[test]
    fn decodes_a_library_record() {
        let mut b = vec![0u8; LIB_EVENT_SIZE];
        b[0] = 9;
        b[1] = 1;
        b[4..8].copy_from_slice(&77u32.to_le_bytes());
        b[8..16].copy_from_slice(&5_000u64.to_le_bytes());
        b[16..24].copy_from_slice(&((8u64 << 20) | 1).to_le_bytes());
        b[24..32].copy_from_slice(&1234u64.to_le_bytes());
        let want = RawLib {
            pid: 77,
            library: Some(Library::Cudart),
            ts_mono_ns: 5_000,
            file: ((8 << 20) | 1, 1234),
            fd: None,
        };
        assert_eq!(decode_record(&b), Ok(Record::Lib(want)));
        b[2] = 4;
        assert!(matches!(
            decode_record(&b),
            Ok(Record::Lib(RawLib { fd: Some(3), .. }))
        ));
        b[2] = 0;
        assert_eq!(&want.file_key()[..], &b[16..32]);
        assert_eq!(decode_record(&b[..20]), Err(DecodeError::Short(20)));
        b[1] = 4;
        let exec = RawExec {
            pid: 77,
            ts_mono_ns: 5_000,
            file: ((8 << 20) | 1, 1234),
        };
        assert_eq!(decode_record(&b), Ok(Record::Exec(exec)));
        assert_eq!(&exec.file_key()[..], &b[16..32]);
        assert_eq!(
            decode_event(&[9u8; EVENT_SIZE]),
            Err(DecodeError::UnknownKind(9))
        );
    }

    #[test]
    fn decodes_a_record() {
        let mut b = vec![0u8; EVENT_SIZE];
        b[0] = 1;
        b[2..4].copy_from_slice(&3u16.to_le_bytes());
        b[4..8].copy_from_slice(&4242u32.to_le_bytes());
        b[8..12].copy_from_slice(&4243u32.to_le_bytes());
        b[12..16].copy_from_slice(&(-2i32).to_le_bytes());
        b[16..24].copy_from_slice(&1_000u64.to_le_bytes());
        b[24..32].copy_from_slice(&50u64.to_le_bytes());
        b[32..40].copy_from_slice(&(-7i64).to_le_bytes());
        b[40..48].copy_from_slice(&9i64.to_le_bytes());
        b[56..60].copy_from_slice(b"work");
        b[72..80].copy_from_slice(&77u64.to_le_bytes());
        let e = decode_event(&b).unwrap();
        assert_eq!(e.stack_hash, 77);
        assert_eq!(decode_record(&b), Ok(Record::Event(e.clone())));
        assert_eq!(e.kind, Kind::Call);
        assert_eq!((e.op, e.pid, e.tid, e.ret), (3, 4242, 4243, -2));
        assert_eq!(
            (e.ts_mono_ns, e.duration_ns, e.arg0, e.arg1),
            (1_000, 50, -7, 9)
        );
        assert_eq!(e.comm, "work");
    }

    /// A call event record with `tid` (and kind, op, pid set).
    fn call_event(tid: u32) -> Vec<u8> {
        let mut b = vec![0u8; EVENT_SIZE];
        b[0] = KIND_CALL;
        b[2..4].copy_from_slice(&3u16.to_le_bytes());
        b[4..8].copy_from_slice(&42u32.to_le_bytes());
        b[8..12].copy_from_slice(&tid.to_le_bytes());
        b
    }

    #[test]
    fn decodes_a_batch_record_into_its_events() {
        let one = call_event(7);
        assert_eq!(decode_records(&one), vec![decode_record(&one)]);
        let three: Vec<u8> = [7, 8, 9].iter().flat_map(|&t| call_event(t)).collect();
        let tids: Vec<u32> = decode_records(&three)
            .into_iter()
            .map(|r| match r {
                Ok(Record::Event(e)) => e.tid,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(tids, [7, 8, 9]);
        // Not a whole number of events: one record, decoded (and rejected) as before.
        assert_eq!(decode_records(&three[..EVENT_SIZE + 8]).len(), 1);
        assert_eq!(decode_records(&[]), vec![Err(DecodeError::Short(0))]);
    }

    #[test]
    fn decodes_the_events_left_in_a_batch() {
        let mut v = vec![0u8; BATCH_SIZE];
        v[0..4].copy_from_slice(&2u32.to_le_bytes());
        for (i, tid) in [5u32, 6, 99].iter().enumerate() {
            let at = BATCH_EVENTS + i * EVENT_SIZE;
            v[at..at + EVENT_SIZE].copy_from_slice(&call_event(*tid));
        }
        let tids: Vec<u32> = decode_batch(&v).unwrap().iter().map(|e| e.tid).collect();
        assert_eq!(tids, [5, 6], "only the first n");
        // A count beyond the batch is bounded by it.
        v[0..4].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            decode_batch(&v).map(|e| e.len()),
            Err(DecodeError::UnknownKind(0))
        );
        assert_eq!(decode_batch(&v[..10]), Err(DecodeError::Short(10)));
        v[0..4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode_batch(&v), Ok(Vec::new()));
    }

    #[test]
    fn decodes_a_stack_record() {
        let mut b = vec![0u8; STACK_EVENT_SIZE];
        b[0] = 8;
        b[2..4].copy_from_slice(&3u16.to_le_bytes());
        b[4..8].copy_from_slice(&42u32.to_le_bytes());
        b[8..16].copy_from_slice(&0xfeedu64.to_le_bytes());
        for (i, ip) in [0x1000u64, 0x2000, 0x3000].iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&ip.to_le_bytes());
        }
        b[STACK_PY..STACK_PY + 2].copy_from_slice(&1u16.to_le_bytes());
        b[STACK_PY + 2..STACK_PY + 4].copy_from_slice(&3u16.to_le_bytes());
        b[STACK_PY + 4..STACK_PY + 8].copy_from_slice(&43u32.to_le_bytes());
        b[STACK_PY + 8..STACK_PY + 16].copy_from_slice(&0xc0deu64.to_le_bytes());
        b[STACK_PY + 16..STACK_PY + 24].copy_from_slice(&7u64.to_le_bytes());
        let entry = STACK_PY + 8 + 16 * MAX_PY_FRAMES;
        b[entry..entry + 4].copy_from_slice(&1u32.to_le_bytes());
        let want = RawStack {
            pid: 42,
            hash: 0xfeed,
            ips: vec![0x1000, 0x2000, 0x3000],
            tid: 43,
            py: vec![(0xc0de, 7)],
            py_flags: PyFlags(3),
            py_entry: 1,
        };
        assert!(want.py_flags.walked() && want.py_flags.truncated());
        assert!(!want.py_flags.no_thread() && !want.py_flags.bad_read());
        assert_eq!(decode_record(&b), Ok(Record::Stack(want)));
        assert_eq!(decode_record(&b[..40]), Err(DecodeError::Short(40)));
    }

    #[test]
    fn op_modes_are_the_kernels_values() {
        // CW_MODE_FULL, CW_MODE_AGGREGATE, CW_MODE_ENTRY_ONLY, CW_MODE_OFF in
        // crates/bpf/src/bpf/events.h.
        let values = [
            OpMode::Full,
            OpMode::Aggregate,
            OpMode::EntryOnly,
            OpMode::Off,
        ]
        .map(OpMode::value);
        assert_eq!(values, [0, 1, 2, 3]);
        // The generation above the mode's byte, as the kernel reads it; it wraps.
        let header = include_str!("bpf/events.h");
        assert!(header.contains(&format!("#define CW_GEN_SHIFT {GENERATION_SHIFT}\n")));
        assert!(header.contains("#define CW_MODE_MASK 0xff\n"));
        let w = OpMode::word(OpMode::Off, 2);
        assert_eq!((w & 0xff, OpMode::generation(w)), (3, 2));
        let wrapped = OpMode::word(OpMode::Full, GENERATION_MASK + 1);
        assert_eq!((wrapped & 0xff, OpMode::generation(wrapped)), (0, 0));
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert_eq!(decode_event(&[1u8; 10]), Err(DecodeError::Short(10)));
        let mut b = vec![0u8; EVENT_SIZE];
        b[0] = 99;
        assert_eq!(decode_event(&b), Err(DecodeError::UnknownKind(99)));
    }

    #[test]
    fn decodes_stats() {
        let mut v = vec![0u8; STAT_SIZE];
        v[0..8].copy_from_slice(&5u64.to_le_bytes());
        v[32 + 8 * 3..32 + 8 * 4].copy_from_slice(&2u64.to_le_bytes());
        v[STAT_SIZE - 8..].copy_from_slice(&7u64.to_le_bytes());
        let s = Stat::decode(&v).unwrap();
        assert_eq!(s.calls, 5);
        assert_eq!(s.nested, 7);
        assert_eq!(s.hist[3], 2);
        assert_eq!(s.timed(), 2);
        assert!(Stat::decode(&v[..10]).is_none());
        assert_eq!(
            StatKey::decode(&[1, 0, 0, 0, 3, 0, 0, 0]),
            Some(StatKey { pid: 1, op: 3 })
        );
        assert_eq!(
            sum_percpu(&[5u64.to_le_bytes().to_vec(), 6u64.to_le_bytes().to_vec()]),
            11
        );
    }
}
