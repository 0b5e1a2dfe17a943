//! The probes on NVIDIA's real CUDA runtime (libcudart.so.12 12.9 and libcudart_static.a) and
//! NCCL (libnccl.so.2 2.32) from the PyPI wheels PyTorch installs (scripts/deps.sh installs them
//! into .deps/pyenv, so they sit in site-packages/nvidia/*/lib as PyTorch's do): every call of a
//! known pattern is counted and stored with its arguments and the return code the program saw,
//! through the shared runtime, through a program with the runtime linked statically (exec'd by
//! a wrapper), through NCCL with `--nccl`, from Python loading the runtime out of
//! site-packages the way PyTorch does, and through CuPy's extension module, which carries the
//! runtime linked in (CuPy 14.2's wheel, also from PyPI). No GPU is needed: without
//! a driver each runtime call fails with cudaErrorInsufficientDriver (35), each NCCL call
//! without a communicator with ncclInvalidArgument (4), after entering and leaving the real
//! function.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::{args, bpf_test, db_path, op_totals, q, ret_codes, rows, trace};

/// Launches per run.
const LAUNCHES: usize = 100;

struct Real {
    dir: PathBuf,
    dynamic: PathBuf,
    static_exe: PathBuf,
}

/// The virtual environment scripts/deps.sh installs NVIDIA's wheels into.
pub fn pyenv_python() -> PathBuf {
    let env = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps/pyenv");
    let py = env.join("bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/deps.sh (it installs NVIDIA's PyPI wheels there)",
        py.display()
    );
    // The environment's directory without `..`, its `bin/python` link kept as it is.
    env.canonicalize().unwrap().join("bin/python")
}

/// The `lib` directory of an installed NVIDIA package (`nvidia.cuda_runtime`, `nvidia.nccl`) in
/// site-packages, where PyTorch's copies live, checked to hold `files`.
pub fn package_lib(module: &str, files: &[&str]) -> PathBuf {
    let out = Command::new(pyenv_python())
        .args([
            "-c",
            &format!("import {module} as m; print(list(m.__path__)[0])"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{module} is not installed: run scripts/deps.sh ({})",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("lib");
    for f in files {
        assert!(dir.join(f).is_file(), "{} lacks {f}", dir.display());
    }
    dir.canonicalize().unwrap()
}

/// The CUDA runtime installed by scripts/deps.sh.
fn runtime_dir() -> PathBuf {
    package_lib(
        "nvidia.cuda_runtime",
        &["libcudart.so.12", "libcudart_static.a"],
    )
}

/// Compiles with cc, failing the test with the compiler's message.
fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("running cc");
    assert!(
        out.status.success(),
        "cc {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds (once) the test program against the shared runtime and against the static one.
fn real() -> &'static Real {
    static R: OnceLock<Real> = OnceLock::new();
    R.get_or_init(|| {
        let lib = runtime_dir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/real.c");
        let dir = tempfile::Builder::new()
            .prefix("causeway-real")
            .tempdir()
            .unwrap()
            .keep();
        let (s, l) = (src.to_str().unwrap(), lib.to_str().unwrap());
        let dynamic = dir.join("real");
        let static_exe = dir.join("real-static");
        cc(&[
            "-O1",
            "-o",
            dynamic.to_str().unwrap(),
            s,
            "-L",
            l,
            "-l:libcudart.so.12",
            &format!("-Wl,-rpath,{l}"),
        ]);
        cc(&[
            "-O1",
            "-o",
            static_exe.to_str().unwrap(),
            s,
            &format!("{l}/libcudart_static.a"),
            "-ldl",
            "-lrt",
            "-lpthread",
        ]);
        Real {
            dir,
            dynamic,
            static_exe,
        }
    })
}

/// What the program wrote: op -> return codes in call order.
fn codes(out: &Path) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for line in std::fs::read_to_string(out).unwrap().lines() {
        let (op, code) = line.split_once(' ').unwrap();
        m.entry(op.to_string())
            .or_default()
            .push(code.parse().unwrap());
    }
    m
}

/// The store holds every call with its arguments and the code the program saw.
fn assert_recorded(db: &Path, out: &Path) {
    let seen = codes(out);
    let want = [
        ("cudaMalloc", 3),
        ("cudaMemcpy", 2),
        ("cudaLaunchKernel", LAUNCHES),
        ("cudaStreamSynchronize", 1),
        ("cudaDeviceSynchronize", 1),
        ("cudaFree", 1),
    ];
    for (op, n) in want {
        assert_eq!(seen[op].len(), n, "{op}: calls the program made");
        assert_eq!(
            op_totals(db, op),
            (n as i64, n as i64),
            "{op}: (events, kernel count)"
        );
        let stored = ret_codes(db, op);
        assert_eq!(stored, seen[op], "{op}: return codes");
    }
    // Without a driver the runtime says so (cudaErrorInsufficientDriver), and we saw it.
    assert!(seen["cudaMalloc"].iter().all(|&c| c != 0), "{seen:?}");
    assert_eq!(
        rows(
            db,
            "SELECT arg0 FROM events WHERE op = 'cudaMalloc' ORDER BY timestamp",
            1
        ),
        [[1 << 20], [2 << 20], [3 << 20]]
    );
    assert_eq!(
        rows(
            db,
            "SELECT DISTINCT arg0, arg1 FROM events WHERE op = 'cudaMemcpy'",
            2
        ),
        [[4096, 1]],
        "bytes and direction (host to device)"
    );
    assert_eq!(
        rows(
            db,
            "SELECT DISTINCT arg0, arg1 FROM events WHERE op = 'cudaLaunchKernel'",
            2
        ),
        [[0x1234, 24]],
        "kernel function and grid size (2x3x4)"
    );
    // Every other probed runtime function, once: (op, arg0, arg1) as the catalogue defines them.
    let once: [(&str, i64, i64); 12] = [
        ("cudaMallocManaged", 5 << 20, 0),
        ("cudaMemcpyAsync", 4096, 2),
        ("cudaMemcpy2D", 64 * 8, 1),
        ("cudaMemcpy2DAsync", 32 * 4, 3),
        ("cudaMemcpyPeer", 65536, 1),
        ("cudaMemcpyPeerAsync", 1024, 2),
        ("cudaMemsetAsync", 2048, 7),
        ("cudaEventSynchronize", 0x7171, 0),
        ("cudaGraphLaunch", 0x6161, 0x5151),
        ("cudaStreamBeginCapture", 0x5151, 2),
        ("cudaStreamEndCapture", 0x5151, 0),
        ("cudaGraphInstantiate", 0x6161, 0),
    ];
    for (op, arg0, arg1) in once {
        let got = rows(
            db,
            &format!("SELECT arg0, arg1, ret_code FROM events WHERE op = '{op}'"),
            3,
        );
        assert_eq!(
            got,
            [[arg0, arg1, seen[op][0]]],
            "{op}: (arg0, arg1, return code)"
        );
    }
}

#[test]
fn the_real_shared_runtime_is_probed_exactly() {
    let Some(_g) = bpf_test() else { return };
    let r = real();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("codes.txt");
    let n = LAUNCHES.to_string();
    let summary = trace(&args(
        &db,
        &[
            r.dynamic.to_str().unwrap(),
            out.to_str().unwrap(),
            n.as_str(),
        ],
    ));
    assert_eq!(summary.command_exit, Some(0));
    assert!(
        summary
            .libraries
            .iter()
            .any(|l| l.starts_with(runtime_dir()) && l.ends_with("libcudart.so.12")),
        "{:?}",
        summary.libraries
    );
    assert_recorded(&db, &out);
}

#[test]
fn a_program_with_the_real_runtime_linked_statically_is_probed_when_execd() {
    let Some(_g) = bpf_test() else { return };
    let r = real();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("codes.txt");
    // Its first call 100 ms after the exec, as in the stand-in's exec test (mapped.rs): the
    // program file is checked and attached in ~12 ms.
    let script = format!(
        "exec {} {} {LAUNCHES} 100",
        r.static_exe.display(),
        out.display()
    );
    let summary = trace(&args(&db, &["sh", "-c", &script]));
    assert_eq!(summary.command_exit, Some(0));
    let attached = summary
        .map_hook
        .attached
        .iter()
        .find(|a| a.library == r.static_exe || a.library.ends_with("real-static"))
        .unwrap_or_else(|| panic!("{:?} (built in {})", summary.map_hook, r.dir.display()));
    eprintln!("exec to probes attached: {} us", attached.latency_us);
    assert_recorded(&db, &out);
}

/// NCCL's collectives and point-to-point calls on the real libnccl.so.2 (473 MB: its symbols are
/// read through a mapping, not by reading the file): counts, bytes from count and data type,
/// the communicator or peer, and the return codes.
#[test]
fn the_real_nccl_is_probed_with_bytes_and_peers() {
    let Some(_g) = bpf_test() else { return };
    let lib = package_lib("nvidia.nccl", &["libnccl.so.2"]);
    let l = lib.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("nccl");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/nccl.c");
    cc(&[
        "-O1",
        "-o",
        exe.to_str().unwrap(),
        src.to_str().unwrap(),
        "-L",
        l,
        "-l:libnccl.so.2",
        &format!("-Wl,-rpath,{l}"),
    ]);
    let db = db_path(&dir);
    let out = dir.path().join("codes.txt");
    let mut a = args(&db, &[exe.to_str().unwrap(), out.to_str().unwrap()]);
    a.nccl = true;
    let started = std::time::Instant::now();
    let summary = trace(&a);
    eprintln!(
        "trace with libnccl.so.2 attached: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(summary.command_exit, Some(0));
    let seen = codes(&out);
    // (op, bytes = count x size of the data type, communicator (0 here) or peer)
    let want: [(&str, i64, i64); 8] = [
        ("ncclAllReduce", 1024 * 4, 0),
        ("ncclBroadcast", 256, 0),
        ("ncclReduce", 512 * 2, 0),
        ("ncclAllGather", 128 * 8, 0),
        ("ncclReduceScatter", 64 * 2, 0),
        ("ncclSend", 100 * 4, 3),
        ("ncclRecv", 50, 5),
        ("ncclGroupEnd", 0, 0),
    ];
    for (op, bytes, arg1) in want {
        let got = rows(
            &db,
            &format!("SELECT arg0, arg1, ret_code FROM events WHERE op = '{op}'"),
            3,
        );
        assert_eq!(
            got,
            [[bytes, arg1, seen[op][0]]],
            "{op}: (bytes, comm or peer, return code)"
        );
        let (_, counted) = op_totals(&db, op);
        assert_eq!(counted, 1, "{op}: kernel count");
    }
    assert_eq!(
        seen["ncclAllReduce"],
        [4],
        "no communicator: ncclInvalidArgument"
    );
}

/// Traces `script`, run by the environment's Python through a shell that execs it (so the
/// environment is not known at the start), with `out` as its argument.
fn trace_python(db: &Path, script: &str, out: &Path) -> causeway_collector::TraceSummary {
    let py = pyenv_python();
    trace(&args(
        db,
        &[
            "sh",
            "-c",
            "exec \"$0\" -c \"$1\" \"$2\"",
            py.to_str().unwrap(),
            script,
            out.to_str().unwrap(),
        ],
    ))
}

/// Traces `script`, run by the environment's Python through a shell that execs it (so the
/// environment is not known at the start), with the codes file as its argument. Checks that a
/// file passing `runtime` was attached when mapped, and that its 3 cudaMalloc and 50
/// cudaDeviceSynchronize calls were all counted and stored with the codes the script saw (each
/// cudaErrorInsufficientDriver). Returns the sizes of the stored cudaMalloc calls, in order.
fn python_calls_recorded(script: &str, runtime: impl Fn(&Path) -> bool) -> Vec<i64> {
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("codes.txt");
    let summary = trace_python(&db, script, &out);
    assert_eq!(summary.command_exit, Some(0));
    let attached = summary
        .map_hook
        .attached
        .iter()
        .find(|a| runtime(&a.library))
        .unwrap_or_else(|| panic!("{:?}", summary.map_hook));
    eprintln!(
        "{} attached {} us after its mmap",
        attached.library.display(),
        attached.latency_us
    );
    let seen = codes(&out);
    for (op, n) in [("cudaMalloc", 3), ("cudaDeviceSynchronize", 50)] {
        assert_eq!(seen[op].len(), n);
        assert_eq!(
            op_totals(&db, op),
            (n as i64, n as i64),
            "{op}: (events, kernel count)"
        );
        assert_eq!(
            ret_codes(&db, op),
            seen[op],
            "{op}: every call, with its return code"
        );
    }
    // Without a driver the runtime says so (cudaErrorInsufficientDriver).
    assert!(seen["cudaMalloc"].iter().all(|&c| c == 35), "{seen:?}");
    rows(
        &db,
        "SELECT arg0 FROM events WHERE op = 'cudaMalloc' ORDER BY timestamp",
        1,
    )
    .into_iter()
    .map(|r| r[0])
    .collect()
}

/// Python loads the runtime from site-packages/nvidia/cuda_runtime/lib as PyTorch does (here
/// with ctypes), started by a shell that execs it, so the environment is not known at the start:
/// the library-load hook attaches that copy, and every call made 100 ms later (PyTorch's first
/// CUDA call comes long after its import) is recorded.
#[test]
fn python_loading_the_runtime_from_site_packages_is_probed() {
    let Some(_g) = bpf_test() else { return };
    let lib = runtime_dir();
    let script = r#"
import ctypes, os, sys, time
import nvidia.cuda_runtime as m
rt = ctypes.CDLL(os.path.join(m.__path__[0], "lib", "libcudart.so.12"))
time.sleep(0.1)
p = ctypes.c_void_p()
with open(sys.argv[1], "w") as out:
    for _ in range(3):
        out.write("cudaMalloc %d\n" % rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20)))
    for _ in range(50):
        out.write("cudaDeviceSynchronize %d\n" % rt.cudaDeviceSynchronize())
"#;
    let sizes = python_calls_recorded(script, |l| l.starts_with(&lib));
    assert_eq!(sizes, [1 << 20; 3]);
}

/// Started as the command, the Python interpreter's environment is searched before it runs:
/// the site-packages copy of the runtime is attached before Python maps it, so even calls made
/// right after the load (no wait at all) are recorded, and the load needs no hook.
#[test]
fn the_runtime_of_the_commands_python_environment_is_attached_before_it_starts() {
    let Some(_g) = bpf_test() else { return };
    let lib = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let script = r#"
import ctypes, os
import nvidia.cuda_runtime as m
rt = ctypes.CDLL(os.path.join(m.__path__[0], "lib", "libcudart.so.12"))
for _ in range(20):
    rt.cudaDeviceSynchronize()
"#;
    let py = pyenv_python();
    let summary = trace(&args(&db, &[py.to_str().unwrap(), "-c", script]));
    assert_eq!(summary.command_exit, Some(0));
    assert!(
        summary.libraries.iter().any(|l| l.starts_with(&lib)),
        "attached at the start: {:?}",
        summary.libraries
    );
    assert!(
        summary.map_hook.attached.is_empty(),
        "{:?}",
        summary.map_hook
    );
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaDeviceSynchronize'"
        ),
        20
    );
}

/// CuPy links the real runtime into its Python extension modules
/// (`cupy_backends/cuda/api/runtime.*.so` and four more) with its functions as local symbols: no
/// libcudart is ever mapped. The library-load hook reports the module when Python imports it,
/// its symbol table shows the runtime, and every call CuPy makes through it 100 ms later is
/// recorded with the code CuPy saw.
#[test]
fn cupy_calls_into_the_runtime_linked_into_its_extension_module_are_probed() {
    let Some(_g) = bpf_test() else { return };
    let script = r#"
import sys, time
import cupy_backends.cuda.api.runtime as rt

def code(call, *args):
    try:
        call(*args)
        return 0
    except rt.CUDARuntimeError as e:
        return e.status

time.sleep(0.1)
with open(sys.argv[1], "w") as out:
    for size in (1 << 20, 2 << 20, 3 << 20):
        out.write("cudaMalloc %d\n" % code(rt.malloc, size))
    for _ in range(50):
        out.write("cudaDeviceSynchronize %d\n" % code(rt.deviceSynchronize))
"#;
    let sizes = python_calls_recorded(script, |l| {
        l.parent()
            .is_some_and(|p| p.ends_with("cupy_backends/cuda/api"))
            && l.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("runtime.cpython"))
    });
    assert_eq!(sizes, [1 << 20, 2 << 20, 3 << 20]);
}

/// The jump target of a thunk `push rbp; mov rbp, rsp; pop rbp; jmp rel32` at `sym` in `lib`
/// (what `__cudaLaunchKernel` is in NVIDIA's runtimes), as a virtual address.
fn thunk_target(bytes: &[u8], elf: &goblin::elf::Elf<'_>, vaddr: u64) -> Option<u64> {
    let seg = elf.program_headers.iter().find(|p| {
        p.p_type == goblin::elf::program_header::PT_LOAD
            && (p.p_vaddr..p.p_vaddr + p.p_filesz).contains(&vaddr)
    })?;
    let off = (vaddr - seg.p_vaddr + seg.p_offset) as usize;
    let code = bytes.get(off..off + 10)?;
    if code[..6] != [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xe9] {
        return None;
    }
    let rel = i32::from_le_bytes(code[6..10].try_into().unwrap());
    Some((vaddr as i64 + 10 + i64::from(rel)) as u64)
}

/// What kernel naming and counting rest on, checked on NVIDIA's own 12.9 and 13.5 runtimes:
/// CUDA 13's stubs launch through `__cudaLaunchKernel(handle, ...)`, a thunk that jumps to
/// `cudaLaunchKernel` (so the probe on cudaLaunchKernel counts each launch once, and
/// `__cudaLaunchKernel` must not be probed too), and both export `__cudaGetKernel` and
/// `cudaGetKernel`, whose handles name the launches.
#[test]
fn the_real_runtimes_launch_through_handles_by_a_thunk_into_cuda_launch_kernel() {
    let r12 = runtime_dir().join("libcudart.so.12");
    let r13 = package_lib("nvidia.cu13", &["libcudart.so.13"]).join("libcudart.so.13");
    for lib in [r12, r13] {
        let bytes = std::fs::read(&lib).unwrap();
        let elf = goblin::elf::Elf::parse(&bytes).unwrap();
        let addr = |name: &str| {
            elf.dynsyms
                .iter()
                .find(|s| elf.dynstrtab.get_at(s.st_name) == Some(name) && s.st_value != 0)
                .map(|s| s.st_value)
                .unwrap_or_else(|| panic!("{} does not export {name}", lib.display()))
        };
        for (thunk, target) in [
            ("__cudaLaunchKernel", "cudaLaunchKernel"),
            ("__cudaLaunchKernel_ptsz", "cudaLaunchKernel_ptsz"),
        ] {
            assert_eq!(
                thunk_target(&bytes, &elf, addr(thunk)),
                Some(addr(target)),
                "{}: {thunk} is not a jump to {target}",
                lib.display()
            );
        }
        for name in ["__cudaGetKernel", "cudaGetKernel"] {
            addr(name);
        }
        // The probe table agrees: launches are counted at cudaLaunchKernel only.
        let probed: Vec<&str> = causeway_bpf::probes::PROBES
            .iter()
            .map(|p| p.symbol)
            .collect();
        assert!(!probed.contains(&"__cudaLaunchKernel"));
        assert!(probed.contains(&"__cudaGetKernel") && probed.contains(&"cudaGetKernel"));
    }
}

/// Python calling NVIDIA's CUDA 13 runtime the way CUDA 13 stubs do: a handle from
/// `__cudaGetKernel`, then 20 launches through `__cudaLaunchKernel`. Without a driver each call
/// fails after entering the real functions; every launch is counted exactly once (at
/// cudaLaunchKernel, with the handle as its arg0) and the handle's cudaGetKernel is recorded.
#[test]
fn launches_through_the_real_cuda_13_runtime_s_handles_are_counted_once() {
    let Some(_g) = bpf_test() else { return };
    let lib = package_lib("nvidia.cu13", &["libcudart.so.13"]);
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let out = dir.path().join("codes.txt");
    let script = r#"
import ctypes, os, sys
import nvidia.cu13 as m
rt = ctypes.CDLL(os.path.join(list(m.__path__)[0], "lib", "libcudart.so.13"))
class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
stub = ctypes.cast(rt.cudaGetDeviceCount, ctypes.c_void_p)  # any function address will do
h = ctypes.c_void_p()
with open(sys.argv[1], "w") as out:
    out.write("cudaGetKernel %d\n" % rt.__cudaGetKernel(ctypes.byref(h), stub))
    f = rt.__cudaLaunchKernel
    f.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    for _ in range(20):
        out.write("cudaLaunchKernel %d\n" % f(h or stub, dim3(1, 1, 1), dim3(32, 1, 1), None, 0, None))
"#;
    let summary = trace_python(&db, script, &out);
    assert_eq!(summary.command_exit, Some(0));
    assert!(
        summary.libraries.iter().any(|l| l.starts_with(&lib)),
        "{:?}",
        summary.libraries
    );
    let seen = codes(&out);
    assert_eq!(seen["cudaLaunchKernel"].len(), 20);
    assert_eq!(
        op_totals(&db, "cudaLaunchKernel"),
        (20, 20),
        "(events, kernel count)"
    );
    assert_eq!(ret_codes(&db, "cudaLaunchKernel"), seen["cudaLaunchKernel"]);
    assert_eq!(op_totals(&db, "cudaGetKernel"), (1, 1));
    assert_eq!(ret_codes(&db, "cudaGetKernel"), seen["cudaGetKernel"]);
}
