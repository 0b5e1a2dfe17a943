//! CPython frames (`--stacks`): finds the interpreter of a process (libpython or a python
//! executable with it linked in), gives the kernel its layout (bpf python.h `py_procs`), and
//! turns the (code object, instruction) pairs the kernel records into file, function and line
//! by reading the code objects from the live process, cached per code object.
//!
//! Layouts: 3.13 publishes its struct offsets in `_PyRuntime.debug_offsets` (`_Py_DebugOffsets`,
//! read from the file); 3.10, 3.11 and 3.12 use the tables below, measured with `offsetof` on
//! each version's headers and checked end to end by the collector's integration tests. Other
//! versions are refused (counted), never guessed.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use causeway_bpf::abi::PyProc;
use causeway_store::PythonFrame;
use goblin::elf::{Elf, program_header::PT_LOAD};

use crate::elfsyms::map_elf;

/// An offset a version does not have (`CW_PY_NONE`).
const NONE: u16 = 0xffff;
/// Longest string read from a code object (file names, function names).
const MAX_STR: usize = 1024;
/// Largest line table read.
const MAX_LINETABLE: usize = 1 << 20;
/// `_Py_DebugOffsets.cookie`.
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// Where a code object keeps what a frame is named by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLayout {
    filename: u64,
    name: u64,
    /// `co_qualname` (3.11+); 3.10 names a frame by `co_name`.
    qualname: Option<u64>,
    linetable: u64,
    firstlineno: u64,
    /// `co_code_adaptive` (3.11+): frames hold instruction pointers into it; 3.10 frames hold
    /// `f_lasti`, an instruction index.
    code_adaptive: Option<u64>,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' characters start.
    compact_size: u64,
}

/// One CPython version's layout: what the kernel walks and what user space reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// (major, minor).
    pub version: (u8, u8),
    /// The kernel's part (its `runtime` is filled per process).
    pub walk: PyProc,
    /// The code objects'.
    pub code: CodeLayout,
}

/// The kernel's layout; a frame is read up to the end of its furthest field.
/// `frame`: code, previous, instruction, owner. 3.11 keeps `is_entry` in the byte before `owner`;
/// 3.12+ put a shim frame below an entered one instead (the kernel sees those by their owner).
fn walk(interpreters_head: u16, threads_head: u16, tstate: [u16; 4], frame: [u16; 4]) -> PyProc {
    let owner_end = if frame[3] == NONE { 0 } else { frame[3] + 1 };
    let frame_read = frame[..3]
        .iter()
        .map(|f| f + 8)
        .max()
        .unwrap_or(0)
        .max(owner_end);
    PyProc {
        runtime: 0,
        interpreters_head,
        threads_head,
        tstate_next: tstate[0],
        tstate_thread_id: tstate[1],
        tstate_frame: tstate[2],
        cframe_current: tstate[3],
        frame_code: frame[0],
        frame_previous: frame[1],
        frame_instr: frame[2],
        frame_owner: frame[3],
        frame_read,
        frame_entry: NONE,
    }
}

/// The tested table of a version without `_Py_DebugOffsets` (and 3.13's, which the file's own
/// offsets replace when present). Measured with offsetof on each version's headers (x86-64).
pub fn table(minor: u8) -> Option<Layout> {
    // 3.12 dropped PyASCIIObject.wstr (8 bytes) and PyCompactUnicodeObject.wstr_length.
    let code = |adaptive, firstlineno, ascii: u64| CodeLayout {
        filename: 112,
        name: 120,
        qualname: Some(128),
        linetable: 136,
        firstlineno,
        code_adaptive: Some(adaptive),
        ascii_size: ascii,
        compact_size: if ascii == 48 { 72 } else { 56 },
    };
    Some(match minor {
        10 => Layout {
            version: (3, 10),
            walk: walk(32, 8, [8, 176, 24, NONE], [32, 24, 96, NONE]),
            code: CodeLayout {
                filename: 104,
                name: 112,
                qualname: None,
                linetable: 120,
                firstlineno: 40,
                code_adaptive: None,
                ascii_size: 48,
                compact_size: 72,
            },
        },
        11 => Layout {
            version: (3, 11),
            walk: PyProc {
                frame_entry: 68,
                ..walk(40, 16, [8, 152, 56, 8], [32, 48, 56, 69])
            },
            code: code(184, 72, 48),
        },
        12 => Layout {
            version: (3, 12),
            walk: walk(40, 72, [8, 136, 56, 0], [0, 8, 56, 70]),
            code: code(192, 68, 40),
        },
        13 => Layout {
            version: (3, 13),
            walk: walk(632, 7344, [8, 152, 72, NONE], [0, 8, 56, 70]),
            code: code(200, 68, 40),
        },
        _ => return None,
    })
}

/// The layout 3.13 publishes at the start of `_PyRuntime` (`_Py_DebugOffsets`), from the bytes
/// of the file at that symbol; None if the cookie or version does not match.
pub fn from_debug_offsets(b: &[u8]) -> Option<Layout> {
    if b.get(..8)? != DEBUG_COOKIE {
        return None;
    }
    let u = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            b.get(8 * i..8 * i + 8)?.try_into().ok()?,
        ))
    };
    let version = u(1)?;
    let (major, minor) = ((version >> 24) as u8, (version >> 16) as u8);
    // 3.14 reordered the struct: only the 3.13 layout of it is read.
    if (major, minor) != (3, 13) || u(2)? != 0 {
        return None;
    }
    let h = |i: usize| -> Option<u16> { u16::try_from(u(i)?).ok() };
    // Fields (in u64 units): 3 runtime_state {size, finalizing, interpreters_head},
    // 6 interpreter_state {size, id, next, threads_head, ...13}, 19 thread_state {size, prev,
    // next, interp, current_frame, thread_id, ...9}, 28 interpreter_frame {size, previous,
    // executable, instr_ptr, localsplus, owner}, 34 code_object {size, filename, name,
    // qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
    // co_code_adaptive}, 44 pyobject {2}, 46 type_object {4}, 50 tuple {3}, 53 list {3},
    // 56 dict {3}, 59 float {2}, 61 long {3}, 64 bytes {3}, 67 unicode {size, state, length,
    // asciiobject_size}.
    let (previous, executable, instr, owner) = (h(29)?, h(30)?, h(31)?, h(33)?);
    let ascii = u(70)?;
    Some(Layout {
        version: (3, 13),
        walk: walk(
            h(5)?,
            h(9)?,
            [h(21)?, h(24)?, h(23)?, NONE],
            [executable, previous, instr, owner],
        ),
        code: CodeLayout {
            filename: u(35)?,
            name: u(36)?,
            qualname: Some(u(37)?),
            linetable: u(38)?,
            firstlineno: u(39)?,
            code_adaptive: Some(u(43)?),
            ascii_size: ascii,
            compact_size: ascii + 16,
        },
    })
}

/// Why a process's Python frames cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No file the process maps defines `_PyRuntime`.
    #[error("no CPython interpreter in the process")]
    NotPython,
    /// A CPython this build has no tested layout for.
    #[error("CPython {0}.{1} has no tested layout (3.10 to 3.13 are supported)")]
    Unsupported(u8, u8),
    /// The interpreter's file could not be read or understood.
    #[error("the interpreter file {0} could not be read")]
    Unreadable(PathBuf),
}

/// The interpreter of one process.
#[derive(Debug, Clone)]
pub struct Interp {
    /// The file defining `_PyRuntime` (libpython, or the python executable).
    pub path: PathBuf,
    /// Its layout, with `walk.runtime` set.
    pub layout: Layout,
    /// Address of `PyCode_Type` in the process: a code object's type must be it.
    pub code_type: u64,
}

/// A file-backed mapping (start, file offset, path) from /proc/PID/maps.
fn mappings(pid: u32) -> Vec<(u64, u64, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = f.get(5)?;
            if !path.starts_with('/') {
                return None;
            }
            let start = u64::from_str_radix(f.first()?.split_once('-')?.0, 16).ok()?;
            let off = u64::from_str_radix(f.get(2)?, 16).ok()?;
            Some((start, off, (*path).to_string()))
        })
        .collect()
}

/// (major, minor) from a file name such as libpython3.11.so.1.0 or python3.10.
fn version_in_name(path: &Path) -> Option<(u8, u8)> {
    let name = path.file_name()?.to_str()?;
    let rest = &name[name.find("python")? + 6..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Looks at one file: its layout and the addresses (relative to its load bias) of `_PyRuntime`
/// and `PyCode_Type`; Ok(None) when it does not define `_PyRuntime`.
fn inspect(path: &Path) -> Result<Option<(Layout, u64, u64, u64)>, Refusal> {
    let unreadable = || Refusal::Unreadable(path.to_path_buf());
    let bytes = map_elf(path).ok_or_else(unreadable)?;
    let elf = Elf::parse(&bytes).map_err(|_| unreadable())?;
    let mut found: HashMap<&str, u64> = HashMap::new();
    for (syms, strtab) in [(&elf.dynsyms, &elf.dynstrtab), (&elf.syms, &elf.strtab)] {
        for s in syms.iter() {
            if s.st_value == 0 || s.st_shndx == 0 {
                continue;
            }
            if let Some(n @ ("_PyRuntime" | "PyCode_Type" | "Py_Version")) =
                strtab.get_at(s.st_name)
            {
                found.entry(n).or_insert(s.st_value);
            }
        }
    }
    let Some(&runtime) = found.get("_PyRuntime") else {
        return Ok(None);
    };
    let code_type = *found.get("PyCode_Type").ok_or_else(unreadable)?;
    let loads: Vec<_> = elf
        .program_headers
        .iter()
        .filter(|ph| ph.p_type == PT_LOAD)
        .collect();
    let file_bytes = |vaddr: u64, len: usize| {
        let ph = loads
            .iter()
            .find(|ph| (ph.p_vaddr..ph.p_vaddr + ph.p_filesz).contains(&vaddr))?;
        let off = (vaddr - ph.p_vaddr + ph.p_offset) as usize;
        bytes.get(off..off + len)
    };
    let layout = match file_bytes(runtime, 8 * 72).and_then(from_debug_offsets) {
        Some(l) => l,
        None => {
            let version = match found.get("Py_Version").and_then(|&v| file_bytes(v, 4)) {
                Some(b) => {
                    let hex = u32::from_le_bytes(b.try_into().map_err(|_| unreadable())?);
                    ((hex >> 24) as u8, (hex >> 16) as u8)
                }
                None => version_in_name(path).ok_or_else(unreadable)?,
            };
            match version {
                (3, minor) if minor < 13 => table(minor),
                _ => None,
            }
            .ok_or(Refusal::Unsupported(version.0, version.1))?
        }
    };
    // Load bias from the first loadable segment (page-aligned, as the loader maps it).
    let first = loads.first().ok_or_else(unreadable)?;
    let seg_base = (first.p_vaddr & !0xfff).wrapping_sub(first.p_offset & !0xfff);
    Ok(Some((layout, runtime, code_type, seg_base)))
}

/// Finds the CPython interpreter of a running process; `force` (tests) puts the table of
/// another 3.x version in place of its own layout.
pub fn find(pid: u32, force: Option<u8>) -> Result<Interp, Refusal> {
    let maps = mappings(pid);
    // The lowest mapping of each file: its start minus its offset is where the file's first
    // byte would be.
    let mut files: Vec<(String, u64)> = Vec::new();
    for (start, off, path) in &maps {
        if !files.iter().any(|(p, _)| p == path) {
            files.push((path.clone(), start.wrapping_sub(*off)));
        }
    }
    // The program itself first, then files named like libpython: the interpreter is in one
    // of them (an embedding program links libpython; python executables have it linked in).
    let candidates = files.iter().enumerate().filter(|(i, (p, _))| {
        *i == 0
            || Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains("python"))
    });
    for (_, (path, file_start)) in candidates {
        let here = crate::discover::path_here(pid, path);
        if let Some((mut layout, runtime, code_type, seg_base)) = inspect(&here)? {
            if let Some(forced) = force.and_then(table) {
                layout = forced;
            }
            let bias = file_start.wrapping_sub(seg_base);
            layout.walk.runtime = runtime.wrapping_add(bias);
            return Ok(Interp {
                path: here,
                layout,
                code_type: code_type.wrapping_add(bias),
            });
        }
    }
    Err(Refusal::NotPython)
}

/// What is kept of a code object.
#[derive(Clone)]
struct Code {
    file: String,
    function: String,
    firstlineno: i32,
    linetable: Vec<u8>,
    /// Code units (3.11+: `ob_size`), to check an instruction pointer against.
    units: u64,
    /// Type, file name and name objects: what a cached code object is checked against.
    identity: [u64; 3],
}

/// Reads the memory of one process.
struct Mem(std::fs::File);

impl Mem {
    fn open(pid: u32) -> Option<Mem> {
        std::fs::File::open(format!("/proc/{pid}/mem"))
            .ok()
            .map(Mem)
    }
    fn bytes(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut b = vec![0u8; len];
        self.0.read_exact_at(&mut b, addr).ok()?;
        Some(b)
    }
    fn u64(&self, addr: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(addr, 8)?.try_into().ok()?))
    }
    fn i32(&self, addr: u64) -> Option<i32> {
        Some(i32::from_le_bytes(self.bytes(addr, 4)?.try_into().ok()?))
    }
    /// A compact str object's text (the only kind code objects hold).
    fn string(&self, obj: u64, l: &CodeLayout) -> Option<String> {
        let len = usize::try_from(self.u64(obj + 16)?).ok()?.min(MAX_STR);
        let state = u32::from_le_bytes(self.bytes(obj + 32, 4)?.try_into().ok()?);
        let (kind, compact, ascii) = ((state >> 2) & 7, state & 0x20 != 0, state & 0x40 != 0);
        if !compact {
            return None;
        }
        let data = obj + if ascii { l.ascii_size } else { l.compact_size };
        let raw = self.bytes(data, len * kind as usize)?;
        let chars: Option<String> = match kind {
            1 => Some(raw.iter().map(|&c| char::from(c)).collect()),
            2 => raw
                .chunks_exact(2)
                .map(|c| char::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]]))))
                .collect(),
            4 => raw
                .chunks_exact(4)
                .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            _ => None,
        };
        chars
    }
    /// A bytes object's contents.
    fn bytes_obj(&self, obj: u64) -> Option<Vec<u8>> {
        let len = usize::try_from(self.u64(obj + 16)?).ok()?;
        if len > MAX_LINETABLE {
            return None;
        }
        self.bytes(obj + 32, len)
    }
}

/// Why a stack's Python frames were not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// A recorded code object is not one (wrong layout, or freed meanwhile), or an instruction
    /// lies outside its code: no frame of the stack is kept rather than a wrong one.
    Invalid,
    /// The process's memory could not be read (it exited).
    Unreadable,
}

/// Symbolises Python frames per process, caching code objects.
#[derive(Debug, Default)]
pub struct Symbols {
    codes: HashMap<(u32, u64), Option<Code>>,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} {}", self.file, self.firstlineno, self.function)
    }
}

impl Symbols {
    /// Forgets a process's code objects (it exited or exec'd).
    pub fn forget(&mut self, pid: u32) {
        self.codes.retain(|(p, _), _| *p != pid);
    }

    fn code(&mut self, mem: &Mem, pid: u32, interp: &Interp, addr: u64) -> Option<&Code> {
        let l = &interp.layout.code;
        let name_at = l.qualname.unwrap_or(l.name);
        // A code object freed and another allocated at its address: the cached one is stale
        // when the type or the string objects it points at changed.
        let identity = || -> Option<[u64; 3]> {
            if addr == 0 {
                return None;
            }
            Some([
                mem.u64(addr + 8)?,
                mem.u64(addr + l.filename)?,
                mem.u64(addr + name_at)?,
            ])
        };
        let now = identity();
        if self
            .codes
            .get(&(pid, addr))
            .is_some_and(|c| c.as_ref().map(|c| c.identity) != now)
        {
            self.codes.remove(&(pid, addr));
        }
        self.codes
            .entry((pid, addr))
            .or_insert_with(|| {
                let id = now?;
                if id[0] != interp.code_type {
                    return None;
                }
                Some(Code {
                    file: mem.string(id[1], l)?,
                    function: mem.string(id[2], l)?,
                    firstlineno: mem.i32(addr + l.firstlineno)?,
                    linetable: mem.bytes_obj(mem.u64(addr + l.linetable)?)?,
                    units: mem.u64(addr + 16)?,
                    identity: id,
                })
            })
            .as_ref()
    }

    /// File, function and line of each (code, instruction) pair, innermost first.
    pub fn frames(
        &mut self,
        pid: u32,
        interp: &Interp,
        raw: &[(u64, u64)],
    ) -> Result<Vec<PythonFrame>, Rejected> {
        let mem = Mem::open(pid).ok_or(Rejected::Unreadable)?;
        let mut out = Vec::with_capacity(raw.len());
        for &(code_addr, instr) in raw {
            let adaptive = interp.layout.code.code_adaptive;
            let code = self
                .code(&mem, pid, interp, code_addr)
                .ok_or(Rejected::Invalid)?;
            let line = match adaptive {
                Some(a) => {
                    let first = code_addr + a;
                    let unit = instr.checked_sub(first).ok_or(Rejected::Invalid)? / 2;
                    if unit >= code.units.max(1) {
                        return Err(Rejected::Invalid);
                    }
                    line_311(&code.linetable, code.firstlineno, unit as usize)
                }
                None => line_310(&code.linetable, code.firstlineno, instr as i32),
            };
            out.push(PythonFrame {
                file: code.file.clone(),
                function: code.function.clone(),
                line: line.map_or(0, |l| l.max(0) as u32),
                entry: false,
            });
        }
        Ok(out)
    }
}

/// The line of instruction `lasti` (an index in code units; -1 before the first) in a 3.10
/// line table: (bytecode bytes, signed line delta) pairs, -128 meaning no line.
pub fn line_310(table: &[u8], firstlineno: i32, lasti: i32) -> Option<i32> {
    if lasti < 0 {
        return Some(firstlineno);
    }
    let addr = lasti * 2;
    let (mut end, mut line) = (0i32, firstlineno);
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i32::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i32::from(delta);
            Some(line)
        };
        if (start..end).contains(&addr) {
            return this;
        }
    }
    None
}

/// The line of code unit `unit` in a 3.11+ location table (Objects/locations.md).
pub fn line_311(table: &[u8], firstlineno: i32, unit: usize) -> Option<i32> {
    let mut it = table.iter().copied();
    let varint = |it: &mut std::iter::Copied<std::slice::Iter<'_, u8>>| {
        let (mut v, mut shift) = (0u32, 0);
        for b in it.by_ref() {
            v |= u32::from(b & 63) << shift;
            shift += 6;
            if b & 64 == 0 || shift > 30 {
                break;
            }
        }
        v
    };
    let svarint = |it: &mut _| {
        let v = varint(it);
        if v & 1 != 0 {
            -((v >> 1) as i32)
        } else {
            (v >> 1) as i32
        }
    };
    let (mut start, mut line) = (0usize, firstlineno);
    while let Some(b) = it.next() {
        if b & 0x80 == 0 {
            return None; // not at an entry's first byte: a damaged table
        }
        let code = (b >> 3) & 15;
        let len = usize::from(b & 7) + 1;
        let this = match code {
            15 => None,
            14 => {
                line += svarint(&mut it);
                for _ in 0..3 {
                    varint(&mut it);
                }
                Some(line)
            }
            13 => {
                line += svarint(&mut it);
                Some(line)
            }
            10..=12 => {
                line += i32::from(code) - 10;
                it.next();
                it.next();
                Some(line)
            }
            _ => {
                it.next();
                Some(line)
            }
        };
        if (start..start + len).contains(&unit) {
            return this;
        }
        start += len;
    }
    None
}

/// Per process: its interpreter, or why it has none.
#[derive(Debug, Default)]
pub struct Interpreters {
    procs: HashMap<u32, Result<Interp, Refusal>>,
    /// Code objects read.
    pub symbols: Symbols,
    /// Fault injection (`TraceArgs::python_layout`): this 3.x version's table for every process.
    pub force: Option<u8>,
    /// Processes ever found running a supported CPython, and ever refused as unsupported
    /// (kept when a process is forgotten: the trace summary counts them).
    found: std::collections::HashSet<u32>,
    unsupported: std::collections::HashSet<u32>,
}

impl Interpreters {
    /// Looks at a process unless it was found to run CPython already (a refusal is looked at
    /// again: the interpreter's library may be mapped later); returns the kernel's layout for
    /// it when it is newly found.
    pub fn look(&mut self, pid: u32) -> Option<PyProc> {
        if matches!(self.procs.get(&pid), Some(Ok(_))) {
            return None;
        }
        let found = find(pid, self.force);
        let walk = found.as_ref().ok().map(|i| i.layout.walk);
        match &found {
            Ok(_) => {
                self.found.insert(pid);
            }
            Err(r @ Refusal::Unsupported(..)) => {
                if self.unsupported.insert(pid) {
                    tracing::info!(pid, reason = %r, "no Python frames for this process");
                }
            }
            Err(_) => {}
        }
        self.procs.insert(pid, found);
        walk
    }

    /// The interpreter of a process found earlier.
    pub fn get(&self, pid: u32) -> Option<&Interp> {
        self.procs.get(&pid).and_then(|r| r.as_ref().ok())
    }

    /// Whether a process was looked at.
    pub fn looked_at(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// Processes found running a supported CPython.
    pub fn found(&self) -> u64 {
        self.found.len() as u64
    }

    /// Whether a process was ever found running a supported CPython.
    pub fn was_found(&self, pid: u32) -> bool {
        self.found.contains(&pid)
    }

    /// Processes whose CPython version is refused.
    pub fn unsupported(&self) -> u64 {
        self.unsupported.len() as u64
    }

    /// Forgets a process (it exited or exec'd another program).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.symbols.forget(pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_310_line_table_gives_each_instruction_its_line() {
        // f's table from CPython 3.10.13 (first line 2), with its co_lines() ranges in bytes.
        let t = hex("080108010601060106ff04020401");
        let want = [
            (0, 8, 3),
            (8, 16, 4),
            (16, 22, 5),
            (22, 28, 6),
            (28, 34, 5),
            (34, 38, 7),
            (38, 42, 8),
        ];
        for (start, end, line) in want {
            for b in (start..end).step_by(2) {
                assert_eq!(line_310(&t, 2, b / 2), Some(line), "byte {b}");
            }
        }
        assert_eq!(line_310(&t, 2, -1), Some(2));
        assert_eq!(line_310(&t, 2, 21), None);
    }

    #[test]
    fn a_312_location_table_gives_each_code_unit_its_line() {
        // The same f from CPython 3.12.1: co_positions() line of each code unit.
        let t = hex(
            "8000d80809884189058041d8070888318275e4161b98419368f603010d20d81112f203000e0ff000010d20\
             8801f000010d20e00f108808d80b0ff9f207010d20",
        );
        let lines: [Option<i32>; 43] = [
            Some(2),
            Some(3),
            Some(3),
            Some(3),
            Some(3),
            Some(3),
            Some(4),
            Some(4),
            Some(4),
            Some(4),
            Some(4),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(6),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(6),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(5),
            Some(7),
            Some(7),
            Some(8),
            None,
            None,
            Some(5),
            Some(5),
            Some(5),
        ];
        for (unit, want) in lines.iter().enumerate() {
            assert_eq!(line_311(&t, 2, unit), *want, "unit {unit}");
        }
        assert_eq!(line_311(&t, 2, 43), None);
    }

    #[test]
    fn versions_come_from_interpreter_file_names() {
        let v = |p: &str| version_in_name(Path::new(p));
        assert_eq!(v("/x/libpython3.11.so.1.0"), Some((3, 11)));
        assert_eq!(v("/usr/bin/python3.10"), Some((3, 10)));
        assert_eq!(v("/usr/bin/python3"), None);
        assert!(table(9).is_none() && table(14).is_none());
    }

    #[test]
    fn the_313_table_matches_what_313_publishes() {
        // A _Py_DebugOffsets as CPython 3.13.0 lays it out (values from its headers).
        let mut f = vec![0u64; 72];
        f[1] = 0x030d00f0;
        f[5] = 632;
        f[9] = 7344;
        (f[21], f[23], f[24]) = (8, 72, 152);
        (f[29], f[30], f[31], f[33]) = (8, 0, 56, 70);
        (f[35], f[36], f[37], f[38], f[39], f[43]) = (112, 120, 128, 136, 68, 200);
        f[70] = 40;
        let mut b: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        b[..8].copy_from_slice(DEBUG_COOKIE);
        assert_eq!(from_debug_offsets(&b), table(13));
        b[0] = b'y';
        assert_eq!(from_debug_offsets(&b), None);
    }
}
