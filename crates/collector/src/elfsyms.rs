//! File offsets of functions in an ELF file (the dynamic and the full symbol table), for
//! attaching uprobe.multi links by offset: libbpf refuses a whole link when one name is missing,
//! so names are resolved here and only those present are attached.

use std::collections::HashMap;
use std::path::Path;

use goblin::elf::{Elf, sym};

use crate::cost::FirstInsn;

/// A read-only mapping of the ELF file `path`: the parser then reads only the pages it touches
/// (headers, symbol and string tables, the first bytes of the functions looked up), where
/// reading the file whole took NCCL's 473 MB libnccl.so.2 into memory at every attach.
pub fn map_elf(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    #[allow(unsafe_code)]
    // SAFETY (unsafe_code allowed for this call only): a private read-only mapping of a library
    // or program file. Its bytes could change under us only if the file were rewritten in place
    // while traced (installers replace files by rename, which leaves this mapping intact); a
    // truncation would raise SIGBUS, which is the same risk every process mapping it runs.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    Some(map)
}

/// File offset and kind of first instruction of each of `names` defined as a function in `path`
/// (names not found are absent).
pub fn function_offsets(path: &Path, names: &[&str]) -> HashMap<String, (usize, FirstInsn)> {
    let mut out = HashMap::new();
    let Some(bytes) = map_elf(path) else {
        return out;
    };
    let Ok(elf) = Elf::parse(&bytes) else {
        return out;
    };
    // A virtual address to its file offset through the loadable segment that holds it.
    let to_file = |vaddr: u64| {
        elf.program_headers
            .iter()
            .filter(|ph| ph.p_type == goblin::elf::program_header::PT_LOAD)
            .find(|ph| (ph.p_vaddr..ph.p_vaddr + ph.p_filesz).contains(&vaddr))
            .map(|ph| (vaddr - ph.p_vaddr + ph.p_offset) as usize)
    };
    let tables = [(&elf.dynsyms, &elf.dynstrtab), (&elf.syms, &elf.strtab)];
    for (syms, strtab) in tables {
        for s in syms.iter() {
            let is_func = matches!(s.st_type(), sym::STT_FUNC | sym::STT_GNU_IFUNC);
            if !is_func || s.st_value == 0 || s.st_shndx == 0 {
                continue;
            }
            let Some(name) = strtab.get_at(s.st_name) else {
                continue;
            };
            if names.contains(&name)
                && !out.contains_key(name)
                && let Some(off) = to_file(s.st_value)
            {
                let code = bytes
                    .get(off..(off + 8).min(bytes.len()))
                    .unwrap_or_default();
                out.insert(name.to_string(), (off, FirstInsn::of(code)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_functions_are_found_and_missing_names_are_absent() {
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("a libc");
        let offs = function_offsets(libc, &["malloc", "free", "no_such_function_here"]);
        assert!(
            offs.contains_key("malloc") && offs.contains_key("free"),
            "{offs:?}"
        );
        assert!(!offs.contains_key("no_such_function_here"));
        assert_ne!(offs["malloc"].0, offs["free"].0);
    }
}
