//! Probe cost benchmark (`cargo bench -p causeway-collector --bench probe_cost`, as root).
//!
//! 1. CPU time per call (of the workload process) on the stand-in `cudaLaunchKernel`,
//!    interleaved in the same run: no probe, the bare empty uprobe+uretprobe pair (and the bare
//!    uprobe alone), and causeway's probes through a full `run_trace` in full, entry-only and
//!    aggregate mode (`--no-host`), and in full mode with the host programs (the default).
//!    Twice: the stand-in as the tests build it (its first instruction, a `mov`, is
//!    single-stepped by the kernel) and built with frame pointers (a `push rbp`, which the
//!    kernel emulates, as it does for every probed function of NVIDIA's libcudart.so.12). The
//!    bare pair runs before and after ours in each round; ratios are medians of the rounds'.
//! 2. The calibration every trace makes, per kind of first instruction (ours vs bare).
//! 4. (after 1 and 2) What system calls cost under a trace: CPU ns per `getppid` and per
//!    anonymous mmap + munmap pair of a workload traced with `--no-host --no-map-hook`, with
//!    `--no-host` (the library-load hook on the mmap lock's release), by default (the host
//!    programs too; sys_enter/sys_exit only on kernels without the socket tracepoints), and
//!    untraced.
//! 3. Sustained recording: calls paced to CAUSEWAY_BENCH_RATE per second (default 100,000) on
//!    two threads for a few seconds, in full mode: events/s stored, drops, the collector's CPU
//!    (share of one core, sampled while the workload runs, calibration excluded), RSS, and the
//!    size of the store file it wrote.
//!
//! 5. (last) Step time of a launch-bound training loop (the stand-in with frame pointers, 260
//!    launches and 5 ms of CPU work per step, as the H100 mlp of docs/benchmarks.md): untraced,
//!    and traced with the default 1% budget (which samples the launches), with `--exact-counts`
//!    (entry-only at best) and in full mode, interleaved per round; medians of the second half
//!    of each run's steps, once the controller has settled, as ratios to the untraced run of the
//!    same round.
//!
//! 6. (last) What a sampled launch costs the job, measured in situ (the loop of part 5 ending
//!    each step with a sync, its progress), against the calibrated cost: the single-stepped and
//!    the emulated stand-in, then the emulated one with what calibration does not see: a 256 MB
//!    working set walked between launches, and `--stacks` 100 frames deep.
//!
//! 7. (last) Python frames: CPU ns per ctypes call of the stand-in `cudaDeviceSynchronize` made
//!    32 Python frames deep (CPython 3.12), untraced, traced in full mode without `--stacks`,
//!    with `--stacks --no-python-frames` and with `--stacks` (Python frames walked), interleaved
//!    per round; the walk's cost is the difference of the last two.
//!
//! Environment: CAUSEWAY_BENCH_CALLS (default 200,000 per measurement), CAUSEWAY_BENCH_ROUNDS (5),
//! CAUSEWAY_BENCH_ONLY_SUSTAINED / CAUSEWAY_BENCH_SKIP_SUSTAINED (set: only / skip part 3),
//! CAUSEWAY_BENCH_ONLY_STEPS (set: only part 5), CAUSEWAY_BENCH_ONLY_IN_SITU (set: only part 6), CAUSEWAY_BENCH_ONLY_PYTHON (set: only part 7), CAUSEWAY_BENCH_STEPS (steps per run, 1,600),
//! CAUSEWAY_BENCH_NO_MAP_HOOK (set: traces without the library-load hook).
//! Part 3 runs first, so that the process's RSS is the collector's.

#![allow(clippy::print_stdout)]

#[path = "../tests/it/standin.rs"]
#[allow(dead_code)]
mod standin;

use std::mem::MaybeUninit;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use causeway_bpf::libbpf_rs::UprobeMultiOpts;
use causeway_bpf::load::{LoadConfig, open_and_load, uprobe_multi_supported};
use causeway_collector::ProbeMode;
use causeway_collector::{TraceArgs, TraceSummary, run_trace};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// ns per call of the workload's `rate` mode (`extra`: threads and pacing).
fn rate(exe: &str, calls: u64, out: &Path, extra: &[&str]) -> f64 {
    let mut args = vec![
        "rate".to_string(),
        calls.to_string(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let st = Command::new(exe).args(&args).output().unwrap();
    assert!(st.status.success());
    per_call(out)
}

/// CPU time per call of the workload (the probes' cost is CPU time charged to the calling
/// thread; wall time would also count the workload waiting for a core while the collector
/// runs on this two-core machine).
fn per_call(out: &Path) -> f64 {
    let (n, _, cpu) = rate_file(out);
    cpu / n
}

/// (calls, wall ns, CPU ns) written by the workload's `rate` mode.
fn rate_file(out: &Path) -> (f64, f64, f64) {
    let text = std::fs::read_to_string(out).unwrap();
    let f: Vec<f64> = text
        .split_whitespace()
        .map(|v| v.parse::<f64>().unwrap())
        .collect();
    (f[0], f[1], f[2])
}

/// The bare pair (or the bare entry alone) on the stand-in's cudaLaunchKernel, same attach
/// mechanism as causeway's (uprobe.multi where the kernel has it).
fn bare(exe: &str, lib: &Path, calls: u64, out: &Path, with_return: bool) -> f64 {
    let multi = uprobe_multi_supported();
    let mut storage = MaybeUninit::uninit();
    let cfg = LoadConfig {
        bare: true,
        host: false,
        multi,
        ..LoadConfig::default()
    };
    let skel = open_and_load(&mut storage, &cfg).expect("load (run as root)");
    let (entry, exit) = if multi {
        (
            &skel.progs.cw_bare_entry_multi,
            &skel.progs.cw_bare_exit_multi,
        )
    } else {
        (&skel.progs.cw_bare_entry, &skel.progs.cw_bare_exit)
    };
    let attach = |prog: &causeway_bpf::libbpf_rs::ProgramMut<'_>, retprobe| {
        if multi {
            let opts = UprobeMultiOpts {
                syms: vec!["cudaLaunchKernel".into()],
                retprobe,
                ..Default::default()
            };
            prog.attach_uprobe_multi_with_opts(-1, lib, "", opts)
                .unwrap()
        } else {
            let opts = causeway_bpf::libbpf_rs::UprobeOpts {
                retprobe,
                func_name: Some("cudaLaunchKernel".into()),
                ..Default::default()
            };
            prog.attach_uprobe_with_opts(-1, lib, 0, opts).unwrap()
        }
    };
    let _e = attach(entry, false);
    let _x = with_return.then(|| attach(exit, true));
    rate(exe, calls, out, &[])
}

fn args(db: &Path, command: Vec<String>, mode: Option<ProbeMode>) -> TraceArgs {
    let mut a = TraceArgs::with_db(db.to_path_buf());
    a.duration = Some(Duration::from_secs(300));
    a.node = Some("bench".into());
    a.no_host = true;
    // Set: no library-load hook (mmap.h), to see what it costs.
    a.no_map_hook = std::env::var("CAUSEWAY_BENCH_NO_MAP_HOOK").is_ok();
    a.ringbuf_size = env_u64(
        "CAUSEWAY_BENCH_RINGBUF",
        u64::from(causeway_bpf::load::DEFAULT_RINGBUF_BYTES),
    ) as u32;
    // The controller stays out of the measurement: the forced mode holds for the whole run.
    a.overhead_budget = 100.0;
    a.probe_modes = mode.map(|m| vec![(3, m)]).unwrap_or_default();
    a.command = command;
    a
}

/// ns per call under causeway's probes (a whole `run_trace` around the workload).
/// `host`: with the host programs (the default of `causeway trace`), else `--no-host`.
fn ours(
    exe: &str,
    calls: u64,
    out: &Path,
    db: &Path,
    mode: ProbeMode,
    host: bool,
) -> (f64, TraceSummary) {
    let _ = std::fs::remove_file(db);
    let cmd = vec![
        exe.to_string(),
        "rate".into(),
        calls.to_string(),
        out.display().to_string(),
    ];
    let mut a = args(db, cmd, Some(mode));
    a.no_host = !host;
    let s = run_trace(&a).expect("trace (run as root)");
    (per_call(out), s)
}

/// CPU ns per system call of the workload (part 4), medians over `rounds`: getppid (shows any
/// program on sys_enter/sys_exit, which every system call and, where uretprobes return through
/// a system call, every probed return would pay) and an anonymous mmap + munmap pair (the path
/// the library-load hook sits on).
fn syscall_table(s: &standin::Standin, dir: &Path, rounds: usize) {
    let calls = env_u64("CAUSEWAY_BENCH_SYSCALLS", 1_000_000);
    let out = dir.join("syscalls.txt");
    let db = dir.join("syscalls.duckdb");
    // (label, no_host, no_map_hook); None: untraced.
    let setups: [(&str, Option<(bool, bool)>); 4] = [
        ("untraced", None),
        ("traced --no-host, no hook", Some((true, true))),
        ("traced --no-host, library-load hook", Some((true, false))),
        ("traced, host programs and hook", Some((false, false))),
    ];
    // (workload mode, calls): mmap pairs cost ~10x a getppid.
    let workloads = [("syscalls", calls), ("mmaps", calls / 10)];
    let mut m: [[Vec<f64>; 2]; 4] = Default::default();
    for _ in 0..rounds {
        for (i, (_, setup)) in setups.iter().enumerate() {
            for (w, (mode, n)) in workloads.iter().enumerate() {
                let cmd = vec![
                    s.exe().to_string(),
                    mode.to_string(),
                    n.to_string(),
                    out.display().to_string(),
                ];
                match setup {
                    None => {
                        let st = Command::new(&cmd[0]).args(&cmd[1..]).status().unwrap();
                        assert!(st.success());
                    }
                    Some((no_host, no_map_hook)) => {
                        let _ = std::fs::remove_file(&db);
                        let mut a = args(&db, cmd, None);
                        a.no_host = *no_host;
                        a.no_map_hook = *no_map_hook;
                        run_trace(&a).expect("trace (run as root)");
                    }
                }
                m[i][w].push(per_call(&out));
            }
        }
    }
    println!(
        "\nsystem call cost ({calls} getppid, {} anonymous mmap+munmap pairs x {rounds} rounds, medians, CPU ns per call of the workload)",
        calls / 10
    );
    println!("  {:<38} {:>8} {:>12}", "", "getppid", "mmap+munmap");
    for ((label, _), [g, mm]) in setups.iter().zip(m) {
        println!("  {label:<38} {:>8.1} {:>12.1}", median(g), median(mm));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Per-call figures on one stand-in; returns the last trace summary (its calibration).
fn per_call_table(
    label: &str,
    s: &standin::Standin,
    dir: &Path,
    calls: u64,
    rounds: usize,
) -> TraceSummary {
    let (exe, lib) = (s.exe(), s.dir.join("libcudart.so.12"));
    let out = dir.join("rate.txt");
    let db = dir.join("per-call.duckdb");
    let mut m: [Vec<f64>; 7] = Default::default();
    // Per round, the probe costs of ours over the bare ones measured around them: the bare pair
    // before and after ours (their mean), so that a machine drifting within the round shifts
    // both sides alike. Medians of these ratios are the table's ratios, with their range.
    let mut ratios: [Vec<f64>; 4] = Default::default();
    let mut last = None;
    // A full ring makes a call cheaper (the event is dropped, not written): shown with the table.
    let mut full_drops = 0;
    for _ in 0..rounds {
        let none = rate(exe, calls, &out, &[]);
        let pair_before = bare(exe, &lib, calls, &out, true);
        let entry = bare(exe, &lib, calls, &out, false);
        let (full, summary) = ours(exe, calls, &out, &db, ProbeMode::Full, false);
        full_drops += summary.ringbuf_drops;
        let entry_only = ours(exe, calls, &out, &db, ProbeMode::EntryOnly, false).0;
        let aggregate = ours(exe, calls, &out, &db, ProbeMode::Aggregate, false).0;
        let full_host = ours(exe, calls, &out, &db, ProbeMode::Full, true).0;
        let pair_after = bare(exe, &lib, calls, &out, true);
        let pair = (pair_before + pair_after) / 2.0;
        for (i, v) in [none, pair, entry, full, entry_only, aggregate, full_host]
            .into_iter()
            .enumerate()
        {
            m[i].push(v);
        }
        let over = |v: f64, base: f64| (v - none) / (base - none);
        for (i, r) in [
            over(full, pair),
            over(full_host, pair),
            over(aggregate, pair),
            over(entry_only, entry),
        ]
        .into_iter()
        .enumerate()
        {
            ratios[i].push(r);
        }
        last = Some(summary);
    }
    let [none, pair, entry, full, entry_only, aggregate, full_host] = m.map(median);
    let [r_full, r_host, r_aggregate, r_entry] = ratios.map(|v| {
        let (lo, hi) = (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
        format!("{:.2}, rounds {lo:.2}-{hi:.2}", median(v))
    });
    let first = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(&lib)
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let at = text.find("<cudaLaunchKernel>:")?;
            text[at..]
                .lines()
                .nth(1)
                .map(|l| l.split('\t').next_back().unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    println!(
        "\n{label}: cudaLaunchKernel starts with `{first}` ({calls} calls x {rounds} rounds, medians, CPU ns per call of the workload; ratios: medians of each round's ratio)"
    );
    println!("  no probe                     {none:>10.1}");
    println!(
        "  bare uprobe + uretprobe      {:>10.1}  (probe cost {:.1}; measured before and after ours)",
        pair,
        pair - none
    );
    println!(
        "  bare uprobe only             {:>10.1}  (probe cost {:.1})",
        entry,
        entry - none
    );
    println!(
        "  causeway, full mode          {:>10.1}  (probe cost {:.1}; ours/bare pair = {r_full}; ring drops {full_drops})",
        full,
        full - none,
    );
    println!(
        "  causeway, full, host programs{:>10.1}  (probe cost {:.1}; ours/bare pair = {r_host}; the default trace)",
        full_host,
        full_host - none,
    );
    println!(
        "  causeway, aggregate mode     {:>10.1}  (probe cost {:.1}; ours/bare pair = {r_aggregate}; no events)",
        aggregate,
        aggregate - none,
    );
    println!(
        "  causeway, entry-only mode    {:>10.1}  (probe cost {:.1}; ours/bare uprobe = {r_entry}; vs full = {:.2})",
        entry_only,
        entry_only - none,
        (entry_only - none) / (full - none)
    );
    last.expect("one round")
}

/// One traced run of part 5.
struct StepRun {
    /// Median step of the second half (ns).
    step_ns: f64,
    /// Over the untraced step of the same round.
    ratio: f64,
    /// cudaLaunchKernel's probe mode at the end.
    mode: String,
    /// The controller's estimate over the whole trace (%).
    estimated_pct: f64,
    /// Launches counted (estimated where sampled) over those made.
    counted: f64,
}

/// Part 5: step time of a launch-bound loop, untraced and traced under the budget.
fn steps_table(s: &standin::Standin, dir: &Path, rounds: usize) {
    let steps = env_u64("CAUSEWAY_BENCH_STEPS", 1_600);
    let (launches, compute_us) = (260, 5_000);
    let out = dir.join("steps.txt");
    let db = dir.join("steps.duckdb");
    let cmd: Vec<String> = [
        s.exe(),
        "steps",
        &steps.to_string(),
        &launches.to_string(),
        &compute_us.to_string(),
        &out.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let step_ns = || -> f64 {
        let text = std::fs::read_to_string(&out).expect("steps file");
        text.split_whitespace().next().unwrap().parse().unwrap()
    };
    let untraced = || {
        let st = Command::new(s.exe())
            .args(&cmd[1..])
            .status()
            .expect("workload");
        assert!(st.success());
        step_ns()
    };
    // (label, budget, exact counts)
    let configs = [
        ("default (1% budget)", 1.0, false),
        ("--exact-counts (1% budget)", 1.0, true),
        ("full mode (budget 100%)", 100.0, false),
    ];
    let mut base = Vec::new();
    let mut traced: Vec<Vec<StepRun>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        let before = untraced();
        let mut round = Vec::new();
        for (_, budget, exact) in configs {
            let _ = std::fs::remove_file(&db);
            let mut a = args(&db, cmd.clone(), None);
            a.overhead_budget = budget;
            a.exact_counts = exact;
            let summary = run_trace(&a).expect("trace (run as root)");
            let launch = summary.ops.iter().find(|o| o.op == "cudaLaunchKernel");
            // Launches counted (or estimated, sampled) over those made.
            let counted = launch.map_or(0, |o| o.calls) as f64 / (steps * launches) as f64;
            round.push(StepRun {
                step_ns: step_ns(),
                ratio: 0.0,
                mode: launch.and_then(|o| o.mode).unwrap_or("?").to_string(),
                estimated_pct: summary.overhead.estimated_pct,
                counted,
            });
        }
        let after = untraced();
        let none = (before + after) / 2.0;
        base.push(none);
        for (i, run) in round.into_iter().enumerate() {
            traced[i].push(StepRun {
                ratio: run.step_ns / none,
                ..run
            });
        }
    }
    println!(
        "\nstep time of a launch-bound loop ({steps} steps of {launches} launches + {compute_us} us of CPU work; stand-in with frame pointers; medians of the second half of each run, {rounds} rounds)"
    );
    println!(
        "  untraced                      {:>8.3} ms",
        median(base) / 1e6
    );
    for ((label, ..), runs) in configs.iter().zip(traced) {
        let ratios: Vec<f64> = runs.iter().map(|r| r.ratio).collect();
        let (lo, hi) = (
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
        let modes: Vec<&str> = runs.iter().map(|r| r.mode.as_str()).collect();
        let est = median(runs.iter().map(|r| r.estimated_pct).collect());
        let counted = median(runs.iter().map(|r| r.counted).collect());
        println!(
            "  {label:<29} {:>8.3} ms  {:+.2}% (rounds {:+.2}..{:+.2}%)  launch mode at the end: {}  controller's estimate {est:.2}%  launches counted/made {counted:.3}",
            median(runs.iter().map(|r| r.step_ns).collect()) / 1e6,
            100.0 * (median(ratios.clone()) - 1.0),
            100.0 * (lo - 1.0),
            100.0 * (hi - 1.0),
            modes.join(",")
        );
    }
}

/// Part 6: what a sampled launch costs the job, measured in situ, against the calibration.
fn in_situ_table(
    stepped: &standin::Standin,
    emulated: &standin::Standin,
    dir: &Path,
    rounds: usize,
) {
    let steps = env_u64("CAUSEWAY_BENCH_STEPS", 1_600) * 2;
    let out = dir.join("steps.txt");
    let db = dir.join("insitu.duckdb");
    // (label, stand-in, --stacks, frames deep, MB of memory the CPU work walks)
    let configs = [
        ("single-stepped launch (`mov`)", stepped, false, 0, 0),
        ("emulated launch (`push`)", emulated, false, 0, 0),
        ("emulated, 256 MB walked", emulated, false, 0, 256),
        ("emulated, --stacks, 100 frames", emulated, true, 100, 0),
        (
            "emulated, --stacks, 100 frames, 256 MB",
            emulated,
            true,
            100,
            256,
        ),
    ];
    println!(
        "\nin-situ cost of a sampled launch ({steps} steps of 260 launches + 5 ms of CPU work and a sync, launches pinned to sampled at 20% duty; medians of {rounds} rounds)"
    );
    println!(
        "  {:<40} {:>9} {:>10} {:>12} {:>12} {:>9} {:>7}",
        "workload", "slowdown", "std err", "lost / hit", "calibrated", "lost/cal", "factor"
    );
    for (label, s, stacks, depth, mb) in configs {
        let mut runs = Vec::new();
        for _ in 0..rounds {
            let _ = std::fs::remove_file(&db);
            let cmd: Vec<String> = [
                s.exe(),
                "steps",
                &steps.to_string(),
                "260",
                "5000",
                &out.display().to_string(),
                &depth.to_string(),
                &mb.to_string(),
            ]
            .map(String::from)
            .to_vec();
            let mut a = args(&db, cmd, Some(ProbeMode::Sampled));
            a.sample_duty = 20.0;
            a.stacks = stacks;
            let summary = run_trace(&a).expect("trace (run as root)");
            if let Some(m) = summary.overhead.in_situ.first() {
                runs.push(*m);
            }
        }
        if runs.is_empty() {
            println!("  {label:<40} (no measurement)");
            continue;
        }
        let med =
            |f: fn(&causeway_collector::InSituSummary) -> f64| median(runs.iter().map(f).collect());
        println!(
            "  {label:<40} {:>8.2}% {:>9.2}% {:>9.0} ns {:>9.0} ns {:>9.2} {:>6.2}x",
            100.0 * med(|m| m.measured.slowdown),
            100.0 * med(|m| m.measured.slowdown_se),
            med(|m| m.measured.lost_ns_per_hit),
            med(|m| m.measured.calibrated_ns_per_hit),
            med(|m| m.measured.lost_ns_per_hit / m.measured.calibrated_ns_per_hit),
            med(|m| m.measured.factor),
        );
    }
}

/// The process's CPU time (ns) and resident set (KiB), from /proc/self.
fn self_usage() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    let cpu_ns = (f[11] + f[12]) * 1_000_000_000 / hz;
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (cpu_ns, rss)
}

fn sustained(s: &standin::Standin, dir: &Path, per_s: u64, seconds: u64) {
    let out = dir.join("sustained.txt");
    let db = dir.join("sustained.duckdb");
    let _ = std::fs::remove_file(&db);
    let threads = 2u64;
    let calls = per_s * seconds / threads;
    let cmd = vec![
        s.exe().to_string(),
        "rate".into(),
        calls.to_string(),
        out.display().to_string(),
        threads.to_string(),
        per_s.to_string(),
    ];
    // Samples of (time, CPU, RSS) while the trace runs, from a monitor thread.
    let samples = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (samples, stop) = (samples.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (cpu, rss) = self_usage();
                samples.lock().unwrap().push((Instant::now(), cpu, rss));
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let rss_before = self_usage().1 as f64 / 1024.0;
    let t0 = Instant::now();
    let summary = run_trace(&args(&db, cmd, None)).expect("trace (run as root)");
    stop.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    let wall_ns = rate_file(&out).1;
    // CPU share while the workload ran: from 1.5 s in (calibration and attach done) to the end
    // of the workload.
    let samples = samples.lock().unwrap();
    let start = t0 + Duration::from_millis(1500);
    let run_end = t0 + Duration::from_secs_f64(1.0 + wall_ns / 1e9);
    let window: Vec<&(Instant, u64, u64)> = samples
        .iter()
        .filter(|(t, _, _)| *t >= start && *t <= run_end)
        .collect();
    let cpu_pct = match (window.first(), window.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            100.0 * (b.1 - a.1) as f64 / (b.0 - a.0).as_nanos() as f64
        }
        _ => f64::NAN,
    };
    let peak_rss_mib = samples.iter().map(|s| s.2).max().unwrap_or(0) as f64 / 1024.0;
    let launches = summary
        .ops
        .iter()
        .find(|o| o.op == "cudaLaunchKernel")
        .map_or(0, |o| o.stored);
    println!(
        "\nsustained: {} launches asked at {per_s}/s on {threads} threads: {:.0} events/s stored over {:.2} s, drops {} (ring {}, channel {}), write failures {}",
        calls * threads,
        launches as f64 / (wall_ns / 1e9),
        wall_ns / 1e9,
        summary.ringbuf_drops + summary.channel_drops,
        summary.ringbuf_drops,
        summary.channel_drops,
        summary.write_failed
    );
    println!(
        "  collector CPU {cpu_pct:.1}% of one core (poll + writer + DuckDB, while recording); peak RSS {peak_rss_mib:.1} MiB (this whole process; {rss_before:.1} MiB before the trace)"
    );
    let file_mib = std::fs::metadata(&db).map_or(0, |m| m.len()) as f64 / (1024.0 * 1024.0);
    println!(
        "  store file {file_mib:.1} MiB ({:.1} bytes per event written); store reopened {} times",
        file_mib * 1024.0 * 1024.0 / summary.events_written.max(1) as f64,
        summary.store_reopens
    );
}

/// The Python program of part 7: `calls` calls from `depth` Python frames; writes CPU ns/call.
const PY_BENCH: &str = r#"import ctypes, sys, time
rt = ctypes.CDLL(sys.argv[1])
calls, depth, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
f = rt.cudaDeviceSynchronize
def at(k):
    if k > 1:
        return at(k - 1)
    for _ in range(1000):
        f()
    t = time.thread_time_ns()
    for _ in range(calls):
        f()
    return (time.thread_time_ns() - t) / calls
ns = at(depth - 1)
open(out, "w").write(str(ns))
"#;

/// BPF time of the call entry program while `f` runs: (run_time_ns, run_cnt) summed over the
/// programs of that name (kernel BPF statistics, switched on for the call).
fn entry_prog_time<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    use causeway_bpf::libbpf_rs::query::ProgInfoIter;
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    let done = Arc::new(AtomicBool::new(false));
    // The programs go when the trace ends: sample them while it runs, keep each id's last.
    let sampler = std::thread::spawn({
        let done = done.clone();
        move || {
            let mut last = std::collections::HashMap::new();
            while !done.load(Ordering::Relaxed) {
                for p in ProgInfoIter::default() {
                    if p.name.to_string_lossy().starts_with("cw_call_entry") {
                        last.insert(p.id, (p.run_time_ns, p.run_cnt));
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            last.values()
                .fold((0, 0), |(t, n), (dt, dn)| (t + dt, n + dn))
        }
    });
    let out = f();
    done.store(true, Ordering::Relaxed);
    let (t, n) = sampler.join().unwrap();
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0");
    (out, t, n)
}

/// Part 7: what walking 32 Python frames adds to a recorded call, in the same rounds.
fn python_table(s: &standin::Standin, dir: &Path, calls: u64, rounds: usize) {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let python = format!("{home}/.pyenv/versions/3.12.1/bin/python3");
    if !Path::new(&python).exists() {
        println!(
            "
part 7 skipped: no CPython 3.12 at {python}"
        );
        return;
    }
    let script = dir.join("py_bench.py");
    std::fs::write(&script, PY_BENCH).unwrap();
    let out = dir.join("py_bench.out");
    let db = dir.join("py_bench.duckdb");
    let cmd: Vec<String> = [
        python.as_str(),
        script.to_str().unwrap(),
        s.dir.join("libcudart.so.12").to_str().unwrap(),
        &calls.to_string(),
        "32",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let sync = causeway_store::catalog::op_by_name("cudaDeviceSynchronize")
        .unwrap()
        .id;
    // (label, traced, stacks, python frames)
    let runs = [
        ("untraced", false, false, false),
        ("full mode, no --stacks", true, false, false),
        ("--stacks --no-python-frames", true, true, false),
        ("--stacks (32 Python frames)", true, true, true),
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut bpf: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut walks = 0;
    for _ in 0..rounds {
        for (i, &(_, traced, stacks, py)) in runs.iter().enumerate() {
            let _ = std::fs::remove_file(&out);
            if traced {
                let _ = std::fs::remove_file(&db);
                let mut a = args(&db, cmd.clone(), None);
                a.probe_modes = vec![(sync, ProbeMode::Full)];
                a.stacks = stacks;
                a.no_python_frames = !py;
                let (summary, t, n) =
                    entry_prog_time(|| run_trace(&a).expect("trace (run as root)"));
                bpf[i].push(t as f64 / n.max(1) as f64);
                if py {
                    walks = summary.python.walks;
                    assert!(summary.python.walks >= calls, "{:?}", summary.python);
                }
            } else {
                let st = Command::new(&cmd[0]).args(&cmd[1..]).status().unwrap();
                assert!(st.success());
            }
            let v: f64 = std::fs::read_to_string(&out)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            ns[i].push(v);
        }
    }
    println!("
Python frames: CPU ns per ctypes call of cudaDeviceSynchronize, 32 Python frames deep, CPython 3.12, {calls} calls, medians of {rounds} rounds");
    for ((label, ..), v) in runs.iter().zip(&ns) {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        println!(
            "  {label:<30} {:>9.0} ns  (rounds {lo:.0}-{hi:.0})",
            median(v.clone())
        );
    }
    let walk: Vec<f64> = ns[3].iter().zip(&ns[2]).map(|(a, b)| a - b).collect();
    println!(
        "  Python walk per recorded call: {:.0} ns (median of the rounds' differences; {walks} walks in the last run)",
        median(walk)
    );
    println!(
        "BPF time of the call entry program per run (kernel statistics, ~45 ns of their own):"
    );
    for ((label, traced, ..), v) in runs.iter().zip(&bpf) {
        if *traced {
            println!("  {label:<30} {:>7.0} ns", median(v.clone()));
        }
    }
    let walk: Vec<f64> = bpf[3].iter().zip(&bpf[2]).map(|(a, b)| a - b).collect();
    println!("  Python walk in the entry program: {:.0} ns", median(walk));
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("probe_cost needs root (it loads BPF programs)");
        std::process::exit(1);
    }
    let calls = env_u64("CAUSEWAY_BENCH_CALLS", 200_000);
    let rounds = env_u64("CAUSEWAY_BENCH_ROUNDS", 5) as usize;
    let per_s = env_u64("CAUSEWAY_BENCH_RATE", 100_000);
    let dir = tempfile::tempdir().unwrap();
    let stepped = standin::get();
    let emulated = standin::build(&["-fno-omit-frame-pointer"]);
    if std::env::var("CAUSEWAY_BENCH_ONLY_STEPS").is_ok() {
        steps_table(&emulated, dir.path(), rounds.min(3));
        return;
    }
    if std::env::var("CAUSEWAY_BENCH_ONLY_IN_SITU").is_ok() {
        in_situ_table(stepped, &emulated, dir.path(), rounds.min(3));
        return;
    }
    if std::env::var("CAUSEWAY_BENCH_ONLY_PYTHON").is_ok() {
        python_table(&emulated, dir.path(), calls / 10, rounds);
        return;
    }
    // First, while this process is fresh (its RSS is the collector's).
    if std::env::var("CAUSEWAY_BENCH_SKIP_SUSTAINED").is_err() {
        sustained(
            &emulated,
            dir.path(),
            per_s,
            env_u64("CAUSEWAY_BENCH_SECONDS", 5),
        );
    }
    if std::env::var("CAUSEWAY_BENCH_ONLY_SUSTAINED").is_ok() {
        return;
    }
    per_call_table(
        "stand-in as the tests build it",
        stepped,
        dir.path(),
        calls / 4,
        rounds,
    );
    let summary = per_call_table(
        "stand-in with frame pointers",
        &emulated,
        dir.path(),
        calls,
        rounds,
    );
    syscall_table(&emulated, dir.path(), rounds);
    steps_table(&emulated, dir.path(), rounds.min(3));
    in_situ_table(stepped, &emulated, dir.path(), rounds.min(3));
    python_table(&emulated, dir.path(), calls / 10, rounds);
    println!("\ncalibration of the last trace (ns per call; ours/bare in the same run):");
    for (kind, c) in &summary.overhead.costs.kinds {
        println!(
            "  first instruction {:<8} bare pair {:>8.1}  full {:>8.1} ({:.2}x)  bare uprobe {:>8.1}  entry-only {:>8.1} ({:.2}x)",
            kind.name(),
            c.bare_pair_ns,
            c.full_ns,
            c.full_ns / c.bare_pair_ns,
            c.bare_entry_ns,
            c.entry_only_ns,
            c.entry_only_ns / c.bare_entry_ns
        );
    }
}
