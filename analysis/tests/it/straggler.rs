//! Straggler detection on a synthetic synchronous 8-rank job written through the store writer:
//! one rank 30% slower from T is found within 30 s of T (trace time) with its local cause, and
//! the healthy job has no straggler.

use causeway_analysis::demo::model::MS;
use causeway_analysis::demo::sync_job::{SyncJob, write};
use causeway_analysis::{ChainQuery, explain};
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

#[test]
fn a_rank_thirty_percent_slower_from_t_is_found_within_30s() {
    let t = 60_000 * MS;
    let job = SyncJob {
        straggler: Some((5, t, 0.3)),
        ..SyncJob::default()
    };
    let (chains, first) = chains(&job);
    let s: Vec<_> = chains
        .iter()
        .filter(|c| c.detector == "straggler")
        .collect();
    assert_eq!(s.len(), 1, "{chains:#?}");
    assert_eq!(s[0].node, "rank-5");
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
    println!("straggler onset detected {delay_s:.2} s after T");
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
}

#[test]
fn the_healthy_eight_rank_job_has_no_straggler() {
    let (chains, _) = chains(&SyncJob::default());
    assert!(
        chains.iter().all(|c| c.detector != "straggler"),
        "{chains:#?}"
    );
}
