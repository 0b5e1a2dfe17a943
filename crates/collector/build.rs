//! Gives the collector's test and benchmark binaries an rpath to the prebuilt DuckDB library
//! (scripts/deps.sh), so they run without LD_LIBRARY_PATH (cargo sets its own for test runs),
//! and compiles the NVTX injection library (nvtx/inject.c) that the binary embeds (nvtx.rs).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if let Ok(dir) = std::env::var("DUCKDB_LIB_DIR")
        && let Ok(abs) = std::fs::canonicalize(&dir)
    {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", abs.display());
        println!("cargo:rustc-link-arg-benches=-Wl,-rpath,{}", abs.display());
    }
    build_nvtx();
}

/// A shared object, not a static library: it is loaded into the traced command by NVTX's own
/// loader, so `cc::Build::compile` (an archive linked into us) is not what is wanted; only
/// its choice of compiler is.
fn build_nvtx() {
    const SRC: &str = "nvtx/inject.c";
    println!("cargo:rerun-if-changed={SRC}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let so = out.join("libcauseway_nvtx.so");
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler();
    let status = compiler
        .to_command()
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-pthread",
            "-Wall",
            "-Wl,-soname,libcauseway_nvtx.so",
            "-o",
        ])
        .arg(&so)
        .arg(SRC)
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!(
            "compiling {SRC} failed ({other:?})\nhint: install a C compiler (bash scripts/deps.sh)"
        ),
    }
}
