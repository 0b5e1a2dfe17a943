//! Probe cost benchmark (`cargo bench -p causeway-collector --bench probe_cost`, as root).
//!
//! On one stand-in `cudaLaunchKernel`, in the same run and interleaved: no probe, the bare empty
//! uprobe+uretprobe pair, and causeway's probes through a full `run_trace` (ring buffer, writer
//! thread, DuckDB). Reports ns per call and the ratio ours/bare, the sustained event rate with
//! its drops, and the collector's CPU% and peak RSS while it records.

#![allow(clippy::print_stdout)]

#[path = "../tests/it/standin.rs"]
#[allow(dead_code)]
mod standin;

use std::mem::MaybeUninit;
use std::process::Command;
use std::time::{Duration, Instant};

use causeway_bpf::libbpf_rs::UprobeOpts;
use causeway_bpf::load::{LoadConfig, open_and_load};
use causeway_collector::{TraceArgs, run_trace};

const CALLS: u64 = 200_000;
const ROUNDS: usize = 3;

fn rate(exe: &str, out: &std::path::Path) -> f64 {
    let st = Command::new(exe)
        .args(["rate", &CALLS.to_string(), out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(st.status.success());
    per_call(out)
}

fn per_call(out: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(out).unwrap();
    let mut f = text.split_whitespace().map(|v| v.parse::<f64>().unwrap());
    let (n, ns) = (f.next().unwrap(), f.next().unwrap());
    ns / n
}

fn bare(exe: &str, lib: &std::path::Path, out: &std::path::Path) -> f64 {
    let mut storage = MaybeUninit::uninit();
    let cfg = LoadConfig {
        bare: true,
        host: false,
        ..LoadConfig::default()
    };
    let skel = open_and_load(&mut storage, &cfg).expect("load (run as root)");
    let opts = |retprobe| UprobeOpts {
        retprobe,
        func_name: Some("cudaLaunchKernel".into()),
        ..Default::default()
    };
    let _e = skel
        .progs
        .cw_bare_entry
        .attach_uprobe_with_opts(-1, lib, 0, opts(false))
        .unwrap();
    let _x = skel
        .progs
        .cw_bare_exit
        .attach_uprobe_with_opts(-1, lib, 0, opts(true))
        .unwrap();
    rate(exe, out)
}

fn cpu_s() -> f64 {
    let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(r.user_time()) + t(r.system_time())
}

fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    kb / 1024.0
}

struct Ours {
    ns_per_call: f64,
    events_per_s: f64,
    drops: u64,
    cpu_pct: f64,
}

fn ours(exe: &str, out: &std::path::Path, dir: &std::path::Path, round: usize) -> Ours {
    let db = dir.join(format!("bench-{round}.duckdb"));
    let mut args = TraceArgs::with_db(db.clone());
    args.duration = Some(Duration::from_secs(120));
    args.node = Some("bench".into());
    args.no_host = true;
    args.ringbuf_size = 8 << 20;
    // The controller stays out of the measurement: every op keeps full probes.
    args.overhead_budget = 100.0;
    args.command = vec![
        exe.into(),
        "rate".into(),
        CALLS.to_string(),
        out.to_string_lossy().into_owned(),
    ];
    let (c0, t0) = (cpu_s(), Instant::now());
    let s = run_trace(&args).expect("trace (run as root)");
    let (cpu, wall) = (cpu_s() - c0, t0.elapsed().as_secs_f64());
    let ns_per_call = per_call(out);
    Ours {
        ns_per_call,
        events_per_s: s.events_written as f64 / (ns_per_call * CALLS as f64 / 1e9),
        drops: s.ringbuf_drops + s.channel_drops,
        cpu_pct: 100.0 * cpu / wall,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("probe_cost needs root (it loads BPF programs)");
        std::process::exit(1);
    }
    let s = standin::get();
    let lib = s.dir.join("libcudart.so.12");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rate.txt");
    let (mut none, mut pair, mut our, mut evs, mut cpu) = (vec![], vec![], vec![], vec![], vec![]);
    let mut drops = 0;
    for round in 0..ROUNDS {
        none.push(rate(s.exe(), &out));
        pair.push(bare(s.exe(), &lib, &out));
        let o = ours(s.exe(), &out, dir.path(), round);
        our.push(o.ns_per_call);
        evs.push(o.events_per_s);
        cpu.push(o.cpu_pct);
        drops += o.drops;
    }
    let (n, b, o) = (median(none), median(pair), median(our));
    println!("probe cost per cudaLaunchKernel call ({CALLS} calls x {ROUNDS} rounds, medians):");
    println!("  no probe              {n:>10.1} ns");
    println!("  bare uprobe+uretprobe {b:>10.1} ns");
    println!(
        "  causeway probes       {o:>10.1} ns   ratio ours/bare = {:.2}",
        o / b
    );
    println!(
        "sustained: {:.0} events/s with {drops} drops; collector CPU {:.1}% of one core (incl. DuckDB writer); peak RSS {:.1} MiB",
        median(evs),
        median(cpu),
        peak_rss_mib()
    );
}
