//! Input starvation on a busy machine: the demo's starved DataLoader, its workers' preemptions
//! rewritten to a task outside the job (a busy loop the trainer did not start), is blamed on
//! that task; the demo as generated (workers preempting each other) is not.

use causeway_analysis::{ChainQuery, explain};
use causeway_demo::{Scenario, write_scenario};
use causeway_store::Reader;

fn starvation_cause(p: &std::path::Path) -> String {
    let r = Reader::open(p).unwrap();
    let e = explain(&r, &ChainQuery::default()).unwrap();
    e.chains
        .iter()
        .find(|c| c.detector == "dataloader_starvation")
        .map(|c| c.root_cause.clone())
        .expect("the starved loop is found")
}

#[test]
fn workers_preempted_by_a_task_outside_the_job_are_a_busy_machine() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dl.duckdb");
    write_scenario(&p, Scenario::DataloaderStarvation, false).unwrap();
    let own = starvation_cause(&p);
    assert!(own.starts_with("Input starvation: "), "{own}");
    {
        // Every preemption of a worker now lets a task outside the job run.
        let c = causeway_store::duckdb::Connection::open(&p).unwrap();
        c.execute_batch(
            "UPDATE event_rows SET arg0 = 31337
             WHERE op_id = 100 AND arg1 = 0
               AND pid IN (SELECT pid FROM processes WHERE comm = 'pt_data_worker');
             INSERT INTO processes (node, pid, comm) VALUES ('demo-node', 31337, 'busyloop');",
        )
        .unwrap();
    }
    let busy = starvation_cause(&p);
    assert!(
        busy.starts_with("Input starvation from a busy machine"),
        "{busy}"
    );
    assert!(
        busy.contains("took 100.0% of the")
            && busy.contains("the task that ran instead most often: busyloop (tid 31337)"),
        "{busy}"
    );
}
