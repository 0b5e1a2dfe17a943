//! Native stacks through code built without frame pointers (libtorch_cuda, libpython, libffi):
//! the kernel sends a new stack's registers and stack memory (bpf `cw_stack_bytes`), and this
//! unwinds them with the unwind tables (`.eh_frame`) of the files the process maps, using
//! framehop, samply's unwinder. Files are mapped once and shared; a process's unwinder is built
//! from its mappings snapshot and built again when the snapshot changes.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use causeway_bpf::abi::RawStackBytes;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use goblin::container::{Container, Ctx, Endian};
use goblin::elf::program_header::PT_LOAD;
use goblin::elf::{Elf, ProgramHeader, SectionHeader};
use goblin::strtab::Strtab;
use memmap2::Mmap;

use crate::elfsyms::map_elf;
use crate::stacks::Mapping;

/// Most frames one unwind yields.
const MAX_FRAMES: usize = 128;

/// A section's bytes inside a mapped file (what framehop reads unwind tables from).
#[derive(Clone)]
pub struct Section {
    map: Arc<Mmap>,
    range: Range<usize>,
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// What an unwinder needs of one file: its mapping, sections (address and file ranges) and
/// load segments (file offset, address, file size).
struct FileInfo {
    map: Arc<Mmap>,
    sections: HashMap<String, (Range<u64>, Range<usize>)>,
    loads: Vec<(u64, u64, u64)>,
}

impl FileInfo {
    fn read(path: &Path) -> Option<FileInfo> {
        let map = Arc::new(map_elf(path)?);
        let h = Elf::parse_header(&map).ok()?;
        let ctx = Ctx::new(Container::Big, Endian::Little);
        let shdrs = SectionHeader::parse(&map, h.e_shoff as usize, h.e_shnum as usize, ctx).ok()?;
        let phdrs = ProgramHeader::parse(&map, h.e_phoff as usize, h.e_phnum as usize, ctx).ok()?;
        let names = shdrs
            .get(h.e_shstrndx as usize)
            .and_then(|s| Strtab::parse(&map, s.sh_offset as usize, s.sh_size as usize, 0).ok());
        let mut sections = HashMap::new();
        if let Some(names) = names {
            for s in &shdrs {
                let Some(name) = names.get_at(s.sh_name) else {
                    continue;
                };
                if matches!(name, ".text" | ".eh_frame" | ".eh_frame_hdr" | ".got") {
                    let file = s.sh_offset as usize..(s.sh_offset + s.sh_size) as usize;
                    // Only .got's address is used; other sections must lie inside the file.
                    if name != ".got" && file.end > map.len() {
                        continue;
                    }
                    sections.insert(name.to_string(), (s.sh_addr..s.sh_addr + s.sh_size, file));
                }
            }
        }
        let loads = (phdrs.iter())
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| (p.p_offset, p.p_vaddr, p.p_filesz))
            .collect();
        Some(FileInfo {
            map,
            sections,
            loads,
        })
    }

    /// The load bias of a mapping of this file at `start` from file offset `offset`.
    fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        let &(p_off, p_vaddr, _) = self
            .loads
            .iter()
            .find(|(o, _, sz)| (o & !0xfff) <= offset && offset < o + sz)?;
        let svma = p_vaddr.wrapping_add(offset).wrapping_sub(p_off);
        Some(start.wrapping_sub(svma))
    }

    fn section(&self, name: &str) -> (Option<Range<u64>>, Option<Section>) {
        match self.sections.get(name) {
            Some((svma, file)) => (
                Some(svma.clone()),
                Some(Section {
                    map: self.map.clone(),
                    range: file.clone(),
                }),
            ),
            None => (None, None),
        }
    }

    fn module(&self, name: String, m: &Mapping) -> Option<Module<Section>> {
        let bias = self.bias(m.start, m.offset)?;
        let (text_svma, text) = self.section(".text");
        let (eh_frame_svma, eh_frame) = self.section(".eh_frame");
        let (eh_frame_hdr_svma, eh_frame_hdr) = self.section(".eh_frame_hdr");
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            text,
            got_svma: self.section(".got").0,
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Some(Module::new(name, m.start..m.end, bias, info))
    }
}

/// One process's unwinder and the mappings it was built from.
struct ProcUnwinder {
    maps: Arc<Vec<Mapping>>,
    unwinder: UnwinderX86_64<Section>,
}

/// Unwinds copied stacks of the traced processes.
#[derive(Default)]
pub struct Unwinding {
    files: HashMap<PathBuf, Option<Arc<FileInfo>>>,
    procs: HashMap<u32, ProcUnwinder>,
    cache: Option<Box<CacheX86_64>>,
}

impl std::fmt::Debug for Unwinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinding")
            .field("files", &self.files.len())
            .field("procs", &self.procs.len())
            .finish()
    }
}

impl Unwinding {
    fn file(&mut self, path: &Path) -> Option<Arc<FileInfo>> {
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| FileInfo::read(path).map(Arc::new))
            .clone()
    }

    fn build(&mut self, maps: &Arc<Vec<Mapping>>) -> UnwinderX86_64<Section> {
        let mut unwinder = UnwinderX86_64::new();
        for m in maps.iter().filter(|m| m.exec) {
            let Some(file) = self.file(&m.path) else {
                continue;
            };
            if let Some(module) = file.module(m.path.display().to_string(), m) {
                unwinder.add_module(module);
            }
        }
        unwinder
    }

    /// Return addresses of the copied stack, innermost first (starting at the call's own
    /// instruction), as far as the unwind tables and the copied memory reach.
    pub fn unwind(&mut self, maps: &Arc<Vec<Mapping>>, b: &RawStackBytes) -> Vec<u64> {
        let stale = self
            .procs
            .get(&b.pid)
            .is_none_or(|p| !Arc::ptr_eq(&p.maps, maps));
        if stale {
            let unwinder = self.build(maps);
            self.procs.insert(
                b.pid,
                ProcUnwinder {
                    maps: maps.clone(),
                    unwinder,
                },
            );
        }
        let Some(p) = self.procs.get(&b.pid) else {
            return Vec::new();
        };
        let cache = self
            .cache
            .get_or_insert_with(|| Box::new(CacheX86_64::new()));
        let mut read = |addr: u64| -> Result<u64, ()> {
            let at = usize::try_from(addr.checked_sub(b.sp).ok_or(())?).map_err(|_| ())?;
            let w = b.bytes.get(at..at + 8).ok_or(())?;
            Ok(u64::from_le_bytes(w.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(b.ip, b.sp, b.bp);
        let mut frames = p.unwinder.iter_frames(b.ip, regs, cache, &mut read);
        let mut out = Vec::new();
        while let Ok(Some(f)) = frames.next() {
            out.push(f.address());
            if out.len() >= MAX_FRAMES {
                break;
            }
        }
        out
    }

    /// Forgets a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }
}
