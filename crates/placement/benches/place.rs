//! Placement bench (`cargo bench -p causeway-placement --bench place`): what placing a process
//! costs the recorder's poll thread, once per process, against the /proc reads it already makes
//! for every new process (comm, cmdline, environ), measured in the same run on live processes;
//! and what the event path pays for it (nothing: events carry the kernel's cgroup id).

// A benchmark's figures are its output: printing them to stdout is the point.
#![allow(clippy::print_stdout)]

use std::process::{Child, Command};
use std::time::Instant;

use causeway_placement::Placer;

const PROCESSES: usize = 200;
const ROUNDS: usize = 5;

/// The /proc reads the recorder makes for a new process before placement existed.
fn baseline(pid: u32) -> usize {
    ["comm", "cmdline", "environ", "stat"]
        .iter()
        .map(|f| std::fs::read(format!("/proc/{pid}/{f}")).map_or(0, |b| b.len()))
        .sum()
}

fn main() {
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|_| {
            Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("spawning sleep")
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    // Let every child reach its exec (spawn can return before it).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut best_base = f64::MAX;
    let mut best_place = f64::MAX;
    let mut best_cached = f64::MAX;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let mut sink = 0usize;
        for &pid in &pids {
            sink += baseline(pid);
        }
        best_base = best_base.min(t.elapsed().as_secs_f64() * 1e6 / PROCESSES as f64);
        // A fresh placer: every cgroup is new to it (the first process of each container).
        let mut placer = Placer::new();
        let t = Instant::now();
        for &pid in &pids {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            sink += placer.place(pid, &env).0.cgroup_id as usize;
        }
        best_place = best_place.min(t.elapsed().as_secs_f64() * 1e6 / PROCESSES as f64);
        // The same placer again: cgroups already described (later processes of a container).
        let t = Instant::now();
        for &pid in &pids {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            sink += placer.place(pid, &env).0.cgroup_id as usize;
        }
        best_cached = best_cached.min(t.elapsed().as_secs_f64() * 1e6 / PROCESSES as f64);
        std::hint::black_box(sink);
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    println!("per new process, best of {ROUNDS} rounds over {PROCESSES} live processes:");
    println!("  /proc reads the recorder already made (baseline): {best_base:.1} us");
    println!(
        "  placement, cgroup new to the placer:              {best_place:.1} us ({:.2}x baseline)",
        best_place / best_base
    );
    println!(
        "  placement, cgroup already described:              {best_cached:.1} us ({:.2}x baseline)",
        best_cached / best_base
    );
    println!(
        "  per event: 0 (events carry the kernel's cgroup id; placement runs once per process)"
    );
}
