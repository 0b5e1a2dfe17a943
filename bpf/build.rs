//! Compiles src/bpf/causeway.bpf.c with clang and generates its libbpf-rs skeleton into OUT_DIR.
//!
//! Needs clang (scripts/deps.sh installs it). vmlinux.h is a small committed CO-RE header, so
//! neither bpftool nor the build machine's kernel BTF is needed at build time.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC_DIR: &str = "src/bpf";
const MAIN: &str = "src/bpf/causeway.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let skel = out.join("causeway.skel.rs");
    let obj = out.join("causeway.bpf.o");
    if let Err(err) = SkeletonBuilder::new()
        .source(MAIN)
        .obj(&obj)
        // cpu v3 (kernels >= 5.1): atomics that return the old value (statistics slots).
        .clang_args([
            "-I",
            SRC_DIR,
            "-O2",
            "-g",
            "-mcpu=v3",
            "-Wall",
            "-Wno-unused-function",
        ])
        .build_and_generate(&skel)
    {
        panic!(
            "building the BPF programs failed: {err:#}\nhint: install clang (bash scripts/deps.sh) \
             and check the compiler output above"
        );
    }
    println!("cargo:rerun-if-changed={SRC_DIR}");
}
