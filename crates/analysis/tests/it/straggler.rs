//! Straggler detection on a synthetic synchronous 8-rank job written through the store writer:
//! one rank 30% slower from T is found within 30 s of T (trace time) with its local cause, and
//! the healthy job has no straggler. The same holds for ranks sharing a node (named by RANK; on
//! one node, by the order they enter the collectives), and for 1- and 2-rank jobs, which fall back to each rank's own baseline.

use causeway_analysis::{ChainQuery, explain};
use causeway_demo::model::MS;
use causeway_demo::sync_job::{SyncJob, write};
use causeway_store::Reader;

fn chains(job: &SyncJob) -> (Vec<causeway_analysis::Chain>, i64) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("job.duckdb");
    write(&p, job).unwrap();
    let r = Reader::open(&p).unwrap();
    let first: i64 = r
        .prepare_trusted("SELECT min(timestamp) FROM event_data")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    (explain(&r, &ChainQuery::default()).unwrap().chains, first)
}

/// The job's single straggler chain, checked for its onset (within 30 s after T), its local
/// cause and its node.
fn found_within_30s(job: &SyncJob, t: i64, node: &str) -> causeway_analysis::Chain {
    let (chains, first) = chains(job);
    let s: Vec<_> = chains
        .iter()
        .filter(|c| c.detector == "straggler")
        .collect();
    assert_eq!(s.len(), 1, "{chains:#?}");
    assert_eq!(s[0].node, node);
    assert_eq!(chains[0].detector, "straggler", "the straggler ranks first");
    let since: f64 = s[0]
        .summary
        .split("since +")
        .nth(1)
        .and_then(|x| x.split('s').next())
        .and_then(|x| x.parse().ok())
        .expect("the summary says since when");
    let onset = (first + t) as f64;
    let since_ns = first as f64 + since * 1e9;
    // The summary's offset is from the window start (= the first event).
    let delay_s = (since_ns - onset) / 1e9;
    println!(
        "straggler onset detected {delay_s:.2} s after T: {}",
        s[0].summary
    );
    assert!(
        (-0.5..=30.0).contains(&delay_s),
        "detected {delay_s:.2} s after T"
    );
    assert!(
        s[0].summary.contains("preempted"),
        "local cause: {}",
        s[0].summary
    );
    assert!(
        s[0].summary.contains("31337"),
        "the competing task: {}",
        s[0].summary
    );
    s[0].clone()
}

#[test]
fn a_rank_thirty_percent_slower_from_t_is_found_within_30s() {
    let t = 60_000 * MS;
    let job = SyncJob {
        straggler: Some((5, t, 0.3)),
        ..SyncJob::default()
    };
    found_within_30s(&job, t, "rank-5");
}

#[test]
fn ranks_sharing_a_node_are_named_by_rank() {
    let t = 45_000 * MS;
    let job = SyncJob {
        ranks_per_node: 4,
        straggler: Some((6, t, 0.3)),
        ..SyncJob::default()
    };
    let c = found_within_30s(&job, t, "node-1");
    assert!(c.summary.starts_with("node-1 rank 6 "), "{}", c.summary);
    assert!(c.summary.contains("7 peers"), "{}", c.summary);
}

#[test]
fn on_one_node_the_rank_entering_last_is_the_straggler() {
    // One node, one clock: the rank entering the all-reduces last is late, and the healthy
    // job's jitter does not make one.
    let t = 40_000 * MS;
    let job = SyncJob {
        ranks: 4,
        ranks_per_node: 4,
        straggler: Some((2, t, 0.3)),
        ..SyncJob::default()
    };
    let c = found_within_30s(&job, t, "node-0");
    assert!(c.summary.starts_with("node-0 rank 2 "), "{}", c.summary);
    assert!(
        c.explanation.contains("enters the collective last"),
        "{}",
        c.explanation
    );
    let (chains, _) = chains(&SyncJob {
        ranks: 4,
        ranks_per_node: 4,
        ..SyncJob::default()
    });
    assert!(
        chains.iter().all(|c| c.detector != "straggler"),
        "{chains:#?}"
    );
}

#[test]
fn two_ranks_fall_back_to_their_own_baseline() {
    let t = 50_000 * MS;
    let job = SyncJob {
        ranks: 2,
        straggler: Some((1, t, 0.3)),
        ..SyncJob::default()
    };
    let c = found_within_30s(&job, t, "rank-1");
    assert!(c.summary.contains("own baseline"), "{}", c.summary);
    no_straggler(2);
}

#[test]
fn a_single_rank_is_compared_with_its_own_start() {
    let t = 30_000 * MS;
    let job = SyncJob {
        ranks: 1,
        straggler: Some((0, t, 0.3)),
        ..SyncJob::default()
    };
    let c = found_within_30s(&job, t, "rank-0");
    assert!(c.summary.contains("the only rank traced"), "{}", c.summary);
    no_straggler(1);
}

#[test]
fn the_healthy_eight_rank_job_has_no_straggler() {
    no_straggler(8);
}

/// The healthy job of `ranks` ranks has no straggler.
fn no_straggler(ranks: usize) {
    let (chains, _) = chains(&SyncJob {
        ranks,
        ..SyncJob::default()
    });
    assert!(
        chains.iter().all(|c| c.detector != "straggler"),
        "{chains:#?}"
    );
}
