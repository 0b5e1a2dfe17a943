//! Compiles src/bpf/causeway.bpf.c with clang and generates its libbpf-rs skeleton into OUT_DIR.
//!
//! Needs clang (scripts/deps.sh installs it). vmlinux.h is a small committed CO-RE header, so
//! neither bpftool nor the build machine's kernel BTF is needed at build time. Before that, the
//! op ids events.h defines are checked against the op table (causeway-ops).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const EVENTS_H: &str = "src/bpf/events.h";
/// The collector's own calibration probe: an id the kernel uses that is never recorded.
const NOT_OPS: &[&str] = &["OP_CALIBRATE"];

/// Checks every `#define OP_* <id>` of events.h against the op table, and that every op the
/// table says the kernel emits is defined. The header stays hand-written C (rather than
/// generated) so that clang reads only committed files and C readers see the ids in place.
fn check_op_ids() -> Result<(), String> {
    let header =
        std::fs::read_to_string(EVENTS_H).map_err(|e| format!("reading {EVENTS_H}: {e}"))?;
    let mut seen = Vec::new();
    for line in header.lines() {
        let mut words = line.split_whitespace();
        let (Some("#define"), Some(define), Some(value)) =
            (words.next(), words.next(), words.next())
        else {
            continue;
        };
        if !define.starts_with("OP_") || NOT_OPS.contains(&define) {
            continue;
        }
        let id: u16 = value
            .parse()
            .map_err(|_| format!("{EVENTS_H}: {define} is {value}, not an op id"))?;
        let Some(op) = causeway_ops::OPS.iter().find(|o| o.abi == define) else {
            return Err(format!(
                "{EVENTS_H}: {define} {id} is not in the op table (crates/ops/src/lib.rs)"
            ));
        };
        if op.id != id {
            return Err(format!(
                "{EVENTS_H}: {define} is {id}, but the op table gives {} id {}",
                op.name, op.id
            ));
        }
        seen.push(define);
    }
    match causeway_ops::OPS
        .iter()
        .find(|o| !o.abi.is_empty() && !seen.contains(&o.abi))
    {
        Some(o) => Err(format!(
            "{EVENTS_H} does not define {} ({} {})",
            o.abi, o.name, o.id
        )),
        None => Ok(()),
    }
}

const SRC_DIR: &str = "src/bpf";
const MAIN: &str = "src/bpf/causeway.bpf.c";

fn main() {
    if let Err(err) = check_op_ids() {
        panic!("{err}\nhint: events.h and crates/ops/src/lib.rs must give every op the same id");
    }
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
