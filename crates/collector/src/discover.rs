//! Finding the CUDA libraries to probe: in processes' /proc/PID/maps (site-packages and conda
//! copies included), in a command's library search path, in standard locations, and executables
//! that link the CUDA runtime statically.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use causeway_bpf::probes::Library;
use serde::Serialize;

use crate::elfsyms::map_elf;

/// One library file (or statically linked executable) to attach probes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct LibFile {
    /// Which library's functions it exports.
    #[serde(serialize_with = "library_name")]
    pub library: Library,
    /// A path valid in the collector's mount namespace (possibly through /proc/PID/root).
    pub path: PathBuf,
}

fn library_name<S: serde::Serializer>(l: &Library, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(l.name())
}

/// Identity of a file on disk (uprobes are per inode, so two paths to one file attach once).
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// One file a process has mapped, as /proc/PID/maps lists it.
struct MappedFile {
    /// The path in the process's mount namespace.
    path: String,
    /// The mapping's device (kernel encoding, MAJOR << 20 | MINOR) and inode: the file's identity
    /// as the maps list gives it, which stays the same from one reading to the next (a path
    /// through an overlay can stat differently).
    key: (u64, u64),
    /// Whether some mapping of it is executable.
    exec: bool,
}

/// The files mapped by `pid`, one entry per path.
fn mapped_files(pid: u32) -> Vec<MappedFile> {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out: Vec<MappedFile> = Vec::new();
    let mut at = HashMap::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let mut f = line.split_whitespace();
        let (Some(_), Some(perms), Some(_), Some(dev), Some(ino), Some(path)) =
            (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        let exec = perms.as_bytes().get(2) == Some(&b'x');
        if let Some(&i) = at.get(path) {
            let m: &mut MappedFile = &mut out[i];
            m.exec |= exec;
            continue;
        }
        let key = dev
            .split_once(':')
            .and_then(|(major, minor)| {
                let major = u64::from_str_radix(major, 16).ok()?;
                let minor = u64::from_str_radix(minor, 16).ok()?;
                Some(major << 20 | minor)
            })
            .zip(ino.parse::<u64>().ok())
            .unwrap_or_default();
        at.insert(path, out.len());
        out.push(MappedFile {
            path: path.to_string(),
            key,
            exec,
        });
    }
    out
}

/// A path to the file `pid` maps as `path`, valid in the collector's mount namespace.
pub(crate) fn path_here(pid: u32, path: &str) -> PathBuf {
    let direct = PathBuf::from(path);
    let via_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
    // Same inode through the process's root means the same file in our namespace too.
    if file_id(&direct).is_some() && file_id(&direct) == file_id(&via_root) {
        direct
    } else {
        via_root
    }
}

/// The CUDA/NCCL libraries mapped by a process (by file name).
pub fn libs_in_maps(pid: u32) -> Vec<LibFile> {
    named_libs(pid, &mapped_files(pid)).collect()
}

fn named_libs(pid: u32, files: &[MappedFile]) -> impl Iterator<Item = LibFile> {
    files.iter().filter_map(move |m| {
        let name = Path::new(&m.path).file_name()?.to_str()?;
        let library = Library::from_file_name(name)?;
        Some(LibFile {
            library,
            path: path_here(pid, &m.path),
        })
    })
}

/// The CUDA/NCCL libraries mapped by a process, and the other files it maps executable that
/// carry the CUDA runtime linked in, read from one listing of its maps.
///
/// CuPy links the runtime statically into five of its Python extension modules
/// (`cupy_backends/cuda/api/runtime.*.so` and others) with its functions as local symbols, so
/// no `libcudart` is ever mapped. Each such file (by its maps identity) is looked at once per
/// `checked`. Files named as CUDA libraries are only what their name says: NCCL carries a
/// runtime of its own too, but it is attached as NCCL (its driver calls must stay its own, not
/// be taken for a runtime's).
pub fn cuda_files_in_maps(pid: u32, checked: &mut HashSet<(u64, u64)>) -> Vec<LibFile> {
    let files = mapped_files(pid);
    let mut out: Vec<LibFile> = named_libs(pid, &files).collect();
    for m in &files {
        let named = Path::new(&m.path)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| Library::from_file_name(n).is_some());
        if named || !m.exec || !checked.insert(m.key) {
            continue;
        }
        let path = path_here(pid, &m.path);
        if links_cudart_statically(&path) {
            out.push(LibFile {
                library: Library::Cudart,
                path,
            });
        }
    }
    out
}

/// Whether an executable or shared object carries the CUDA runtime itself (nvcc links it into
/// programs by default, CuPy into its extension modules).
pub fn links_cudart_statically(exe: &Path) -> bool {
    const NAME: &str = "cudaLaunchKernel";
    let Some(bytes) = map_elf(exe) else {
        return false;
    };
    // Most files looked at (every shared object of a traced Python process) never name the
    // function: their symbol names are searched first, reading nothing else of the file.
    if symbol_names_mention(&bytes, NAME) == Some(false) {
        return false;
    }
    let Ok(elf) = goblin::elf::Elf::parse(&bytes) else {
        return false;
    };
    let defined = |syms: &goblin::elf::Symtab, strtab: &goblin::strtab::Strtab| {
        syms.iter()
            .any(|s| s.st_value != 0 && s.st_shndx != 0 && strtab.get_at(s.st_name) == Some(NAME))
    };
    defined(&elf.dynsyms, &elf.dynstrtab) || defined(&elf.syms, &elf.strtab)
}

/// Whether the string table of a symbol table of the ELF file `bytes` holds `name` (defined or
/// not); `None` when the file's section headers cannot be read.
fn symbol_names_mention(bytes: &[u8], name: &str) -> Option<bool> {
    use goblin::elf::section_header::{SHT_DYNSYM, SHT_SYMTAB, SectionHeader};
    let header = goblin::elf::Elf::parse_header(bytes).ok()?;
    let ctx = goblin::container::Ctx::new(header.container().ok()?, header.endianness().ok()?);
    let sections =
        SectionHeader::parse(bytes, header.e_shoff as usize, header.e_shnum.into(), ctx).ok()?;
    // A name ends with a NUL; it need not follow one (linkers store a name that ends another
    // as that one's tail).
    let needle = format!("{name}\0");
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    Some(
        sections
            .iter()
            .filter(|s| s.sh_type == SHT_SYMTAB || s.sh_type == SHT_DYNSYM)
            .filter_map(|s| sections.get(s.sh_link as usize))
            .any(|strtab| {
                let start = strtab.sh_offset as usize;
                let end = start.saturating_add(strtab.sh_size as usize);
                bytes
                    .get(start..end.min(bytes.len()))
                    .is_some_and(|t| finder.find(t).is_some())
            }),
    )
}

const STANDARD_DIRS: &[&str] = &[
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/lib/wsl/lib",
    "/opt/conda/lib",
];

fn libs_in_dir(dir: &Path, out: &mut Vec<LibFile>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(library) = name.to_str().and_then(Library::from_file_name) else {
            continue;
        };
        out.push(LibFile {
            library,
            path: entry.path(),
        });
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// CUDA libraries in standard locations: CUDA toolkits, the distribution's library directories,
/// conda, and pip's `nvidia/*/lib` packages in every Python site-packages/dist-packages.
pub fn standard_libs() -> Vec<LibFile> {
    let mut dirs: Vec<PathBuf> = STANDARD_DIRS.iter().map(PathBuf::from).collect();
    for p in subdirs(Path::new("/usr/local")) {
        if p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("cuda-"))
        {
            dirs.push(p.join("lib64"));
        }
    }
    for root in ["/usr/lib", "/usr/local/lib", "/opt/conda/lib"] {
        for py in subdirs(Path::new(root)) {
            if !py
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
            {
                continue;
            }
            for pkgs in ["site-packages", "dist-packages"] {
                for nv in subdirs(&py.join(pkgs).join("nvidia")) {
                    dirs.push(nv.join("lib"));
                }
            }
        }
    }
    let mut out = Vec::new();
    for d in &dirs {
        libs_in_dir(d, &mut out);
    }
    dedupe(out)
}

/// Keeps one path per file (symlinks such as libcuda.so -> libcuda.so.1 collapse).
pub fn dedupe(libs: Vec<LibFile>) -> Vec<LibFile> {
    let mut seen = HashSet::new();
    libs.into_iter()
        .filter(|l| file_id(&l.path).is_some_and(|id| seen.insert(id)))
        .collect()
}

/// Processes that have a CUDA library mapped, with those libraries.
pub fn cuda_processes() -> Vec<(u32, Vec<LibFile>)> {
    let me = std::process::id();
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<(u32, Vec<LibFile>)> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let libs = libs_in_maps(pid);
            (!libs.is_empty()).then_some((pid, libs))
        })
        .collect();
    out.sort_by_key(|(pid, _)| *pid);
    out
}

/// Looks at the program `pid` runs unless a process ran that file before (`checked`, by file
/// identity): `Some(lib)` when it carries the CUDA runtime linked statically (nvcc's default),
/// which no library mapping reveals. `None` when the process is gone (or has no program).
pub fn static_runtime_of(pid: u32, checked: &mut HashSet<(u64, u64)>) -> Option<Option<LibFile>> {
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let id = file_id(&exe)?;
    if !checked.insert(id) || !links_cudart_statically(&exe) {
        return Some(None);
    }
    // The program's own path when it names the same file here (not another mount namespace).
    let path = fs::read_link(&exe)
        .ok()
        .filter(|p| file_id(p) == Some(id))
        .unwrap_or(exe);
    Some(Some(LibFile {
        library: Library::Cudart,
        path,
    }))
}

/// The running programs (other than this one) that carry the CUDA runtime linked statically.
pub fn static_runtime_programs() -> Vec<LibFile> {
    let me = std::process::id();
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut checked = HashSet::new();
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| static_runtime_of(pid, &mut checked).flatten())
        .collect()
}

/// Looks a command up in PATH (or takes it as a path when it contains a slash).
pub fn find_in_path(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// The interpreter of a script (`#!/path/python`, `#!/usr/bin/env python3`), looked up in PATH
/// for `env`. torchrun, accelerate and deepspeed are such scripts.
fn script_interpreter(script: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line);
    let mut words = line.lines().next()?.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if interp.file_name().is_some_and(|n| n == "env") {
        let mut cmd = words.next()?;
        if cmd == "-S" {
            cmd = words.next()?;
        }
        return find_in_path(cmd);
    }
    Some(interp)
}

/// The CUDA libraries of the Python environment a Python interpreter belongs to, where PyTorch
/// loads them from: `PREFIX/lib/python3*/site-packages/nvidia/*/lib` (pip's CUDA wheels) and
/// `PREFIX/lib` (a conda environment's CUDA packages), PREFIX being the directory above the
/// interpreter's `bin` as the command names it (a virtual environment's `bin/python` is a link
/// to the system interpreter: following it would find the wrong environment).
fn python_env_libs(python: &Path, out: &mut Vec<LibFile>) {
    if !python
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("python"))
    {
        return;
    }
    let Some(prefix) = python.parent().and_then(Path::parent) else {
        return;
    };
    let lib = prefix.join("lib");
    libs_in_dir(&lib, out);
    for py in subdirs(&lib) {
        if py
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("python3"))
        {
            for nv in subdirs(&py.join("site-packages").join("nvidia")) {
                libs_in_dir(&nv.join("lib"), out);
            }
        }
    }
}

/// The CUDA libraries a command will load at start, found the way the dynamic loader would:
/// DT_NEEDED entries, searched in RPATH/RUNPATH ($ORIGIN expanded), LD_LIBRARY_PATH and the
/// standard directories, a few levels deep. Also reports the executable itself when it links
/// the runtime statically, and, for a Python interpreter or a script run by one (torchrun), the
/// CUDA libraries of its environment, which PyTorch loads later: probes attached before the
/// program maps a file are in place from its first call. Other libraries loaded later (dlopen,
/// a program exec'd by a wrapper) are attached when mapped (the library-load hook,
/// recorder.rs), else at the periodic rescan.
pub fn command_libs(exe: &Path) -> Vec<LibFile> {
    let mut out = Vec::new();
    python_env_libs(exe, &mut out);
    if let Some(interp) = script_interpreter(exe) {
        python_env_libs(&interp, &mut out);
    }
    if links_cudart_statically(exe) {
        out.push(LibFile {
            library: Library::Cudart,
            path: exe.to_path_buf(),
        });
    }
    let ld_path: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut queue = VecDeque::from([(exe.to_path_buf(), 0u8)]);
    let mut visited = HashSet::new();
    while let Some((file, depth)) = queue.pop_front() {
        if depth > 4 || visited.len() > 256 || !visited.insert(file.clone()) {
            continue;
        }
        let Some(bytes) = map_elf(&file) else {
            continue;
        };
        let Ok(elf) = goblin::elf::Elf::parse(&bytes) else {
            continue;
        };
        let origin = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let expand = |s: &str| -> Vec<PathBuf> {
            s.split(':')
                .filter(|d| !d.is_empty())
                .map(|d| {
                    PathBuf::from(
                        d.replace("$ORIGIN", &origin.to_string_lossy())
                            .replace("${ORIGIN}", &origin.to_string_lossy()),
                    )
                })
                .collect()
        };
        let mut search: Vec<PathBuf> = Vec::new();
        if elf.runpaths.is_empty() {
            elf.rpaths.iter().for_each(|r| search.extend(expand(r)));
        }
        search.extend(ld_path.iter().cloned());
        elf.runpaths.iter().for_each(|r| search.extend(expand(r)));
        search.extend(STANDARD_DIRS.iter().map(PathBuf::from));
        for needed in &elf.libraries {
            let Some(found) = search.iter().map(|d| d.join(needed)).find(|p| p.is_file()) else {
                continue;
            };
            match Library::from_file_name(needed) {
                Some(library) => out.push(LibFile {
                    library,
                    path: found,
                }),
                None => queue.push_back((found, depth + 1)),
            }
        }
    }
    dedupe(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_maps_have_no_cuda_library() {
        assert!(libs_in_maps(std::process::id()).is_empty());
    }

    #[test]
    fn a_plain_executable_does_not_link_cudart() {
        let exe = std::env::current_exe().unwrap();
        assert!(!links_cudart_statically(&exe));
    }

    #[test]
    fn finds_commands_in_path() {
        assert!(find_in_path("sh").is_some_and(|p| p.is_file()));
        assert_eq!(find_in_path("./x"), Some(PathBuf::from("./x")));
    }
}
