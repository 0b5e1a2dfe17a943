//! Library discovery on real files and processes: a command's search path, /proc/PID/maps, and
//! executables and shared objects that carry the runtime linked in. Needs no BPF.

use std::process::Command;
use std::time::Duration;

use causeway_bpf::probes::Library;
use causeway_collector::discover::{
    command_libs, cuda_files_in_maps, file_id, libs_in_maps, links_cudart_statically,
};

use crate::standin;

#[test]
fn a_commands_runpath_libraries_are_found_before_it_runs() {
    let s = standin::get();
    let libs = command_libs(&s.workload);
    let mut found: Vec<(Library, Option<(u64, u64)>)> =
        libs.iter().map(|l| (l.library, file_id(&l.path))).collect();
    found.sort();
    let mut want = vec![
        (Library::Cudart, file_id(&s.dir.join("libcudart.so.12"))),
        (Library::Cuda, file_id(&s.dir.join("libcuda.so.1"))),
    ];
    want.sort();
    assert_eq!(found, want, "{libs:?}");
    assert!(!links_cudart_statically(&s.workload));
}

#[test]
fn a_running_process_maps_are_scanned() {
    let s = standin::get();
    let mut child = Command::new(&s.workload)
        .args(["hold", "1500"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let libs = libs_in_maps(child.id());
    child.wait().unwrap();
    let kinds: Vec<Library> = libs.iter().map(|l| l.library).collect();
    assert!(
        kinds.contains(&Library::Cudart) && kinds.contains(&Library::Cuda),
        "{libs:?}"
    );
    assert!(
        libs.iter()
            .all(|l| l.path.starts_with(&s.dir) || l.path.starts_with("/proc")),
        "{libs:?}"
    );
}

#[test]
fn a_statically_linked_runtime_is_recognised() {
    let exe = &standin::get().static_workload;
    assert!(links_cudart_statically(exe));
    let libs = command_libs(exe);
    assert!(
        libs.iter()
            .any(|l| l.library == Library::Cudart && &l.path == exe),
        "{libs:?}"
    );
}

/// A shared object with the runtime linked in is recognised from its local symbols, once per
/// file: a second look at the same process with the same record of checked files finds only
/// the libraries named as CUDA's.
#[test]
fn a_runtime_linked_into_a_shared_object_is_found_in_the_maps_once() {
    let s = standin::get();
    assert!(links_cudart_statically(&s.extension));
    assert!(!links_cudart_statically(&s.dir.join("libcuda.so.1")));
    assert!(!links_cudart_statically(&s.loader));
    let mut child = Command::new(&s.loader)
        .args([s.extension.to_str().unwrap(), "1500", "standinExtensionRun"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut checked = std::collections::HashSet::new();
    let first = cuda_files_in_maps(child.id(), &mut checked);
    let again = cuda_files_in_maps(child.id(), &mut checked);
    child.kill().unwrap();
    child.wait().unwrap();
    let ids = |libs: &[causeway_collector::discover::LibFile]| -> Vec<_> {
        libs.iter().map(|l| (l.library, file_id(&l.path))).collect()
    };
    assert_eq!(
        ids(&first),
        [(Library::Cudart, file_id(&s.extension))],
        "{first:?}"
    );
    assert!(again.is_empty(), "{again:?}");
    // libc, the loader and the dynamic loader were looked at too.
    assert!(checked.len() >= 3, "{checked:?}");
}

/// A Python interpreter's environment (here the virtual environment scripts/deps.sh installs
/// NVIDIA's wheels into) and a script run by it (`#!` line, as torchrun is) bring the CUDA
/// libraries in its site-packages, found without following the environment's `bin/python`
/// link to the system interpreter.
#[test]
fn a_python_commands_environment_libraries_are_found() {
    let py = crate::real_runtime::pyenv_python();
    let cudart = crate::real_runtime::package_lib("nvidia.cuda_runtime", &["libcudart.so.12"]);
    let nccl = crate::real_runtime::package_lib("nvidia.nccl", &["libnccl.so.2"]);
    let want = |libs: &[causeway_collector::discover::LibFile]| {
        let ids: Vec<_> = libs.iter().map(|l| (l.library, file_id(&l.path))).collect();
        assert!(
            ids.contains(&(Library::Cudart, file_id(&cudart.join("libcudart.so.12"))))
                && ids.contains(&(Library::Nccl, file_id(&nccl.join("libnccl.so.2")))),
            "{libs:?}"
        );
    };
    want(&command_libs(&py));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("launcher");
    std::fs::write(&script, format!("#!{}\nprint('hi')\n", py.display())).unwrap();
    want(&command_libs(&script));
}
