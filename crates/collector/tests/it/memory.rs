//! Memory reclaim: a traced command that writes and reads back a file four times larger than
//! the memory cgroup it runs in frees page cache itself before each new page (memory-cgroup
//! reclaim), and its processes' rows carry the limit; its twin without the limit reclaims
//! nothing.

use std::path::PathBuf;

use crate::{args, bpf_test, open, q, trace};

/// A memory cgroup limited to `limit` bytes (cgroup v2 where the memory controller is there,
/// else v1), removed on drop.
struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    fn new(limit: u64) -> MemoryCgroup {
        let name = format!("causeway-reclaim-{}", std::process::id());
        let v2 = causeway_placement::cgroup::mount_point().filter(|m| {
            std::fs::read_to_string(m.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        });
        let (dir, file) = match v2 {
            Some(m) => {
                // Children get the memory files only when the parent delegates the controller.
                let _ = std::fs::write(m.join("cgroup.subtree_control"), "+memory");
                (m.join(&name), "memory.max")
            }
            None => {
                let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
                let path = own
                    .lines()
                    .find_map(|l| {
                        let mut f = l.splitn(3, ':');
                        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
                        ctl.split(',').any(|c| c == "memory").then_some(path)
                    })
                    .expect("no memory cgroup controller, neither v2 nor v1");
                let base =
                    PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
                (base.join(&name), "memory.limit_in_bytes")
            }
        };
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        std::fs::write(dir.join(file), limit.to_string())
            .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()));
        MemoryCgroup { dir }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Writes 64 MiB to a file on disk and reads it back, inside `cgroup` when given.
fn script(cgroup: Option<&MemoryCgroup>, file: &std::path::Path) -> String {
    let enter = cgroup
        .map(|c| format!("echo $$ > {}/cgroup.procs && ", c.dir.display()))
        .unwrap_or_default();
    // `sleep` lives long enough to be read from /proc whatever the load.
    format!(
        "{enter}dd if=/dev/zero of={f} bs=1M count=64 2>/dev/null && cat {f} > /dev/null && sleep 1",
        f = file.display()
    )
}

#[test]
fn a_command_over_its_memory_limit_reclaims_and_its_twin_does_not() {
    let Some(_g) = bpf_test() else { return };
    if !causeway_bpf::load::reclaim_tracepoints_supported() {
        panic!(
            "this kernel has no reclaim tracepoints (mm_vmscan_*_reclaim_*): memory-cgroup support is missing"
        );
    }
    // Page cache on a real disk: tmpfs pages are not reclaimable without swap.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("big");

    let cg = MemoryCgroup::new(16 << 20);
    let db = dir.path().join("limited.duckdb");
    let summary = trace(&args(&db, &["sh", "-c", &script(Some(&cg), &file)]));
    assert_eq!(summary.command_exit, Some(0));
    let reclaims = q(
        &db,
        "SELECT count(*) FROM events WHERE op = 'mm_reclaim' AND arg1 = 1",
    );
    // The kernel reclaimed about 130 times here for 64 MiB through 16 MiB; any dozen will do.
    assert!(reclaims >= 10, "{reclaims} memory-cgroup reclaims");
    // Only the command's processes reclaimed (the shell too: forking `cat` or `sleep` charges
    // the full cgroup), each reclaim timed, freeing whole pages.
    let odd: Option<String> = open(&db)
        .query_row(
            "SELECT string_agg(comm || ' ' || duration || ' ns ' || arg0 || ' B', ', ') FROM events
             WHERE op = 'mm_reclaim'
               AND (comm NOT IN ('sh', 'dd', 'cat', 'sleep') OR duration <= 0 OR arg0 < 0 OR arg0 % 4096 <> 0)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(odd, None, "reclaims outside the command or malformed");
    // The bulk of them is the copying.
    let copying = q(
        &db,
        "SELECT count(*) FROM events WHERE op = 'mm_reclaim' AND arg1 = 1 AND comm IN ('dd', 'cat')",
    );
    assert!(
        copying * 2 > reclaims,
        "{copying} of {reclaims} reclaims by dd and cat"
    );
    let cgroup_id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&cg.dir).unwrap());
    if cg.dir.starts_with("/sys/fs/cgroup/memory") {
        // v1: the event's cgroup id is the task's v2 (unified) cgroup, not the memory one.
    } else {
        assert_eq!(
            q(
                &db,
                &format!(
                    "SELECT count(*) FROM events WHERE op = 'mm_reclaim' AND cgroup_id <> {cgroup_id}"
                ),
            ),
            0
        );
    }
    // Counted per process as well: the stats agree with the stored events.
    assert_eq!(
        q(
            &db,
            "SELECT coalesce(sum(calls), 0)::BIGINT FROM op_counts WHERE op_id = 110",
        ),
        q(&db, "SELECT count(*) FROM events WHERE op = 'mm_reclaim'")
    );
    // The limit each process inside ran under is recorded with it.
    assert_eq!(
        q(
            &db,
            "SELECT max(memory_limit)::BIGINT FROM processes WHERE comm = 'sleep'",
        ),
        16 << 20
    );
    drop(cg);

    std::fs::remove_file(&file).unwrap();
    let db = dir.path().join("unlimited.duckdb");
    let summary = trace(&args(&db, &["sh", "-c", &script(None, &file)]));
    assert_eq!(summary.command_exit, Some(0));
    assert_eq!(
        q(
            &db,
            "SELECT count(*) FROM events WHERE op = 'mm_reclaim' AND arg1 = 1",
        ),
        0
    );
    assert_ne!(
        q(
            &db,
            "SELECT max(memory_limit)::BIGINT FROM processes WHERE comm = 'sleep'",
        ),
        16 << 20
    );
}
