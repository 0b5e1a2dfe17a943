//! Library discovery on real files and processes: a command's search path, /proc/PID/maps, and
//! executables that link the runtime statically. Needs no BPF.

use std::process::Command;
use std::time::Duration;

use causeway_bpf::probes::Library;
use causeway_collector::discover::{command_libs, file_id, libs_in_maps, links_cudart_statically};

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
