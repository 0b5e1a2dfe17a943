//! Drops: none at a moderate rate; counted (never silent) when a tiny ring buffer is overrun.
//! cudaLaunchKernel (op 3) is forced to full mode here: on a loaded machine the probes' estimated
//! share of the workload's CPU can pass even a 100% budget, and the controller would then
//! switch it to entry-only (whose calls are counted but not stored).

use crate::{args, bpf_test, db_path, q, standin, trace};

#[test]
fn moderate_rate_loses_nothing() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let mut a = args(&db, &[s.exe(), "rate", "20000"]);
    a.probe_modes = vec![(3, causeway_collector::ProbeMode::Full)];
    let summary = trace(&a);
    assert_eq!(summary.ringbuf_drops + summary.channel_drops, 0);
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'"
        ),
        20000
    );
    assert_eq!(q(&db, "SELECT coalesce(sum(count), 0) FROM drops"), 0);
}

#[test]
fn overrun_ring_buffer_drops_are_counted() {
    let Some(_g) = bpf_test() else { return };
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let db = db_path(&dir);
    let mut a = args(&db, &[s.exe(), "rate", "200000"]);
    a.ringbuf_size = 4096;
    a.probe_modes = vec![(3, causeway_collector::ProbeMode::Full)];
    let summary = trace(&a);
    assert!(
        summary.ringbuf_drops > 0,
        "a 4 KiB ring buffer did not overflow"
    );
    let stored = q(
        &db,
        "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'",
    );
    let ring = q(
        &db,
        "SELECT sum(count) FROM drops WHERE kind = 'ringbuf_full' AND op_id = 3",
    );
    let channel = q(
        &db,
        "SELECT coalesce(sum(count), 0) FROM drops WHERE kind = 'channel_full' AND op_id = 3",
    );
    assert!(summary.ringbuf_drops >= ring as u64);
    // The forced mode held: no switch by the controller.
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM probe_modes WHERE reason <> 'forced'"
        ),
        0
    );
    // Every call is either stored or counted as dropped, and the kernel counted all of them.
    assert_eq!(
        stored + ring + channel,
        200000,
        "stored {stored} + ring {ring} + channel {channel}"
    );
    assert_eq!(
        q(&db, "SELECT sum(calls) FROM op_counts WHERE op_id = 3"),
        200000
    );
    // op_counts.stored counts what entered the ring buffer (lost later only on the channel).
    assert_eq!(
        q(&db, "SELECT sum(stored) FROM op_counts WHERE op_id = 3"),
        stored + channel
    );
}
