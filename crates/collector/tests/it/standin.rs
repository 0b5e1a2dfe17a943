//! Builds the stand-in CUDA runtime/driver and the workload programs from C, once per test run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The built stand-in: a directory holding libcudart.so.12, libcuda.so.1, `workload`,
/// `workload-static`, `loader` and an extension module in `site-packages`.
#[derive(Debug)]
pub struct Standin {
    /// Where everything lies.
    pub dir: PathBuf,
    /// The workload executable (RUNPATH=$ORIGIN, linked against both libraries).
    pub workload: PathBuf,
    /// An executable linking no CUDA library that loads one with dlopen (loader.c).
    pub loader: PathBuf,
    /// The workload with the stand-in runtime and driver compiled in (as nvcc links the CUDA
    /// runtime statically by default): it maps no CUDA library.
    pub static_workload: PathBuf,
    /// A Python extension module with the runtime linked in and its functions local, as CuPy's
    /// are (extension.c), in a `site-packages` directory.
    pub extension: PathBuf,
}

/// Builds (once, only for the tests that use it: 1,000 functions take a while to compile) a
/// module of [`KERNELS`] kernel host stubs with C++ mangled names (`standin::kernel<I>(float*)`)
/// next to the stand-in runtime, linked against it; its entry `standinLaunchKernels` launches
/// kernel I [`launches_of`]`(I)` times by its stub, and `standinLaunchKernelsByHandle` as CUDA
/// 13's stubs do, through a handle.
pub fn kernels_module() -> &'static Path {
    static K: OnceLock<PathBuf> = OnceLock::new();
    K.get_or_init(|| {
        let dir = &get().dir;
        let c = dir.join("kernels.c");
        let so = dir.join("libstandin_kernels.so");
        std::fs::write(&c, kernels_source()).unwrap();
        cc(&[
            "-O1",
            "-shared",
            "-fPIC",
            "-o",
            so.to_str().unwrap(),
            c.to_str().unwrap(),
            "-L",
            dir.to_str().unwrap(),
            "-lcudart",
            "-Wl,-rpath,$ORIGIN",
        ]);
        so
    })
}

/// Distinct kernels in the stand-in kernel module.
pub const KERNELS: usize = 1000;

/// Launches of kernel `i` made by the kernel module's entry.
pub fn launches_of(i: usize) -> usize {
    100 + i % 7
}

/// C source of the kernel module: host stubs named as nvcc names them (the device kernel's
/// mangled name), each with its own body so that no two are folded into one.
fn kernels_source() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n\
         typedef struct dim3 { unsigned int x, y, z; } dim3;\n\
         int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);\n\
         int __cudaGetKernel(void **kernel, const void *entry);\n\
         int __cudaLaunchKernel(void *kernel, dim3 g, dim3 b, void **args, size_t shmem, void *stream);\n",
    );
    for i in 0..KERNELS {
        c.push_str(&format!(
            "void k{i}(float *p) __asm__(\"_ZN7standin6kernelILi{i}EEEvPf\");\n\
             void k{i}(float *p) {{ if (p) p[0] = {i}; }}\n"
        ));
    }
    c.push_str("static void (*const kernels[])(float *) = {");
    for i in 0..KERNELS {
        c.push_str(&format!("k{i},"));
    }
    c.push_str(&format!(
        "}};\nint standinLaunchKernels(void)\n{{\n\tdim3 g = {{ 1, 1, 1 }}, b = {{ 32, 1, 1 }};\n\
         \tfor (int i = 0; i < {KERNELS}; i++)\n\
         \t\tfor (int n = 0; n < 100 + i % 7; n++)\n\
         \t\t\tcudaLaunchKernel((const void *)kernels[i], g, b, NULL, 0, NULL);\n\
         \treturn 0;\n}}\n"
    ));
    // CUDA 13's stubs: a handle per kernel, got once, then launches with the handle.
    c.push_str(&format!(
        "static void *handles[{KERNELS}];\n\
         int standinLaunchKernelsByHandle(void)\n{{\n\tdim3 g = {{ 1, 1, 1 }}, b = {{ 32, 1, 1 }};\n\
         \tfor (int i = 0; i < {KERNELS}; i++) {{\n\
         \t\tif (!handles[i] && __cudaGetKernel(&handles[i], (const void *)kernels[i]))\n\
         \t\t\treturn 1;\n\
         \t\tfor (int n = 0; n < 100 + i % 7; n++)\n\
         \t\t\t__cudaLaunchKernel(handles[i], g, b, NULL, 0, NULL);\n\
         \t}}\n\
         \treturn 0;\n}}\n"
    ));
    c
}

fn cc(args: &[&str]) {
    let out = Command::new("cc")
        .args(args)
        .output()
        .expect("running cc (install build-essential)");
    assert!(
        out.status.success(),
        "cc {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new directory for a stand-in, under Cargo's temporary directory for tests: the stand-in
/// lives as long as the process (a static), so nothing removes it at the end; instead the
/// directories of processes that are gone are removed here.
fn fresh_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("causeway-standin-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    tempfile::Builder::new()
        .prefix(&format!("causeway-standin-{}-", std::process::id()))
        .tempdir_in(root)
        .unwrap()
        .keep()
}

/// Builds (once) and returns the stand-in.
pub fn get() -> &'static Standin {
    static S: OnceLock<Standin> = OnceLock::new();
    S.get_or_init(|| build(&[]))
}

/// The extension module's path in the stand-in's directory.
const EXTENSION: &str = "site-packages/standin_runtime.cpython-311-x86_64-linux-gnu.so";

/// Builds a stand-in into a new directory; `lib_flags` go to the library builds (the benchmark
/// builds one with frame pointers, whose functions then start with `push rbp`).
pub fn build(lib_flags: &[&str]) -> Standin {
    // Also included by the causeway binary's tests: a path that holds from either crate.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../collector/tests/standin");
    let dir = fresh_dir();
    let s = |n: &str| src.join(n).to_string_lossy().into_owned();
    let o = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let lib = |soname: &str, map: &str, c: &str| {
        let mut args = vec!["-O1".to_string()];
        args.extend(lib_flags.iter().map(|f| f.to_string()));
        args.extend([
            "-shared".into(),
            "-fPIC".into(),
            format!("-Wl,-soname,{soname}"),
            format!("-Wl,--version-script,{}", s(map)),
            "-o".into(),
            o(soname),
            s(c),
            // dlsym, for the runtime's calls into the driver (in libc itself from glibc 2.34).
            "-ldl".into(),
        ]);
        cc(&args.iter().map(String::as_str).collect::<Vec<_>>());
    };
    lib("libcudart.so.12", "cudart.map", "cudart.c");
    lib("libcuda.so.1", "cuda.map", "cuda.c");
    std::os::unix::fs::symlink("libcudart.so.12", dir.join("libcudart.so")).unwrap();
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    // Frame pointers, so that user stacks can be walked (--stacks).
    cc(&[
        "-O1",
        "-fno-omit-frame-pointer",
        "-Wall",
        "-o",
        &o("workload"),
        &s("workload.c"),
        "-L",
        &o(""),
        "-lcudart",
        "-lcuda",
        "-lpthread",
        "-Wl,-rpath,$ORIGIN",
    ]);
    cc(&["-O1", "-Wall", "-o", &o("loader"), &s("loader.c"), "-ldl"]);
    std::fs::create_dir(dir.join("site-packages")).unwrap();
    cc(&[
        "-O1",
        "-shared",
        "-fPIC",
        &format!("-Wl,--version-script,{}", s("extension.map")),
        "-o",
        &o(EXTENSION),
        &s("extension.c"),
        &s("cudart.c"),
        "-ldl",
    ]);
    cc(&[
        "-O1",
        "-o",
        &o("workload-static"),
        &s("workload.c"),
        &s("cudart.c"),
        &s("cuda.c"),
        "-lpthread",
    ]);
    Standin {
        workload: dir.join("workload"),
        loader: dir.join("loader"),
        static_workload: dir.join("workload-static"),
        extension: dir.join(EXTENSION),
        dir,
    }
}

impl Standin {
    /// The workload path as a string.
    pub fn exe(&self) -> &str {
        self.workload.to_str().unwrap()
    }
}
