//! Discovery cost benchmark (`cargo bench -p causeway-collector --bench discover`; needs
//! scripts/deps.sh's .deps/pyenv, no root).
//!
//! Every file a traced process maps executable is looked at once for a CUDA runtime linked in
//! (CuPy's extension modules). A Python process that has imported CuPy's runtime module is
//! started, and each file it maps executable (plus NCCL's 473 MB libnccl.so.2 and DuckDB's
//! 70 MB library, as large files) is checked two ways, interleaved, best of the rounds, page
//! cache warm: `links_cudart_statically` (the symbol names searched first, symbols read only
//! when one names cudaLaunchKernel) against the whole-ELF parse and symbol walk it replaced (the
//! baseline). Then the whole first look at the process (`cuda_files_in_maps` with nothing
//! checked yet) and a rescan's (everything checked).
//!
//! Environment: CAUSEWAY_BENCH_ROUNDS (default 20).

#![allow(clippy::print_stdout)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use causeway_collector::discover::{cuda_files_in_maps, links_cudart_statically};
use causeway_collector::elfsyms::map_elf;

/// The check before: parse the whole ELF file, walk both symbol tables.
fn baseline(path: &Path) -> bool {
    let Some(bytes) = map_elf(path) else {
        return false;
    };
    let Ok(elf) = goblin::elf::Elf::parse(&bytes) else {
        return false;
    };
    let defined = |syms: &goblin::elf::Symtab, strtab: &goblin::strtab::Strtab| {
        syms.iter().any(|s| {
            s.st_value != 0
                && s.st_shndx != 0
                && strtab.get_at(s.st_name) == Some("cudaLaunchKernel")
        })
    };
    defined(&elf.dynsyms, &elf.dynstrtab) || defined(&elf.syms, &elf.strtab)
}

fn best(rounds: u64, mut f: impl FnMut()) -> Duration {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let rounds = std::env::var("CAUSEWAY_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let py = root.join(".deps/pyenv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/deps.sh",
        py.display()
    );
    let mut child = Command::new(&py)
        .args([
            "-c",
            "import sys, cupy_backends.cuda.api.runtime; print(1, flush=True); sys.stdin.read()",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Read;
        let mut b = [0u8; 2];
        child.stdout.as_mut().unwrap().read_exact(&mut b).unwrap();
    }
    let pid = child.id();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && f[1].contains('x') && f[5].starts_with('/') {
            let p = PathBuf::from(f[5]);
            if !files.contains(&p) {
                files.push(p);
            }
        }
    }
    let process_files = files.len();
    files.push(root.join(".deps/duckdb/libduckdb.so"));
    let nccl = std::fs::read_dir(root.join(".deps/pyenv/lib"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("site-packages/nvidia/nccl/lib/libnccl.so.2"))
        .find(|p| p.exists());
    files.extend(nccl);

    println!(
        "## Checking a file for a CUDA runtime linked in ({rounds} rounds, best, warm page cache)\n"
    );
    println!("| file | size | runtime | searched first | whole parse (baseline) | ratio |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let (mut new_total, mut old_total) = (Duration::ZERO, Duration::ZERO);
    for (i, f) in files.iter().enumerate() {
        let (mut a, mut b) = (false, false);
        let new = best(rounds, || a = links_cudart_statically(f));
        let old = best(rounds, || b = baseline(f));
        assert_eq!(a, b, "{}: the two checks disagree", f.display());
        if i < process_files {
            new_total += new;
            old_total += old;
        }
        let size = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        println!(
            "| {} | {:.1} MB | {} | {:.1} us | {:.1} us | {:.2} |",
            f.file_name().unwrap().to_string_lossy(),
            size as f64 / 1e6,
            if a { "yes" } else { "no" },
            new.as_secs_f64() * 1e6,
            old.as_secs_f64() * 1e6,
            new.as_secs_f64() / old.as_secs_f64(),
        );
    }
    println!(
        "\nThe {process_files} files the Python process maps executable: {:.2} ms searched first, {:.2} ms whole parse (ratio {:.2}).",
        new_total.as_secs_f64() * 1e3,
        old_total.as_secs_f64() * 1e3,
        new_total.as_secs_f64() / old_total.as_secs_f64()
    );
    let first = best(rounds, || {
        let found = cuda_files_in_maps(pid, &mut HashSet::new());
        assert_eq!(found.len(), 1, "{found:?}");
    });
    let mut checked = HashSet::new();
    cuda_files_in_maps(pid, &mut checked);
    let again = best(rounds, || {
        assert!(cuda_files_in_maps(pid, &mut checked).is_empty());
    });
    println!(
        "Looking at the process: first look {:.2} ms (finds CuPy's runtime module), a rescan {:.1} us.",
        first.as_secs_f64() * 1e3,
        again.as_secs_f64() * 1e6
    );
    drop(child.stdin.take());
    let _ = child.wait();
}
