//! The facts every detector starts from, computed once per `explain` from two aggregating scans
//! per node (DuckDB does the heavy lifting): the window, the nodes and how their sched_switch
//! rows are timestamped, per-thread call and off-CPU totals, exact per-(pid, op) statistics,
//! launches per GPU, warm-up phases, the off-CPU intervals of the threads that matter, and the
//! GPU-call pass (slow calls, launch rates, gaps, the time budget's calls).

use std::collections::{BTreeMap, HashMap};

use causeway_store::{Reader, StoreError};

use crate::budget::pass::{CallPass, NodeCalls};
use crate::scan::{self, NodeRef};
use crate::switches::Switches;
use crate::timeline::{self, SlowRule, Timeline};

use crate::base::query::ChainQuery;
use crate::derive;
use crate::window::Window;

// Until every caller names their new homes (the ground floor).
pub(crate) use crate::base::errors::duck;
pub use crate::derive::{GpuLaunches, OpFacts, ThreadFacts};
pub use crate::opsets::SYNC_OPS;

/// Facts shared by all detectors.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The store.
    pub r: &'a Reader,
    /// Absolute window.
    pub window: Window,
    /// pid filter (-1 = all).
    pub pid: i64,
    /// node filter ('' = all).
    pub node: String,
    /// Nodes with events in the window.
    pub nodes: Vec<String>,
    /// Nodes whose sched_switch timestamps are switch-in times (reference imports), as
    /// `\x1fnode\x1f...` for SQL.
    pub resume_nodes: String,
    /// Per thread.
    pub threads: Vec<ThreadFacts>,
    /// Per (node, pid, op).
    pub ops: Vec<OpFacts>,
    /// Process names by (node, pid).
    pub names: HashMap<(String, u32), String>,
    /// Parent pids by (node, pid).
    pub parents: HashMap<(String, u32), u32>,
    /// Where containerised processes ran ("pod ml-jobs/trainer-0, container trainer
    /// (containerd 3f1c2a9be4d5)"), by (node, pid).
    pub places: HashMap<(String, u32), String>,
    /// Tasks that are not traced but took a traced thread's CPU: (node, tid) -> (pid, name).
    pub tasks: HashMap<(String, u32), (u32, String)>,
    /// Kernel launches per (node, GPU, process), all processes (a pid filter does not apply).
    pub gpu_launches: Vec<GpuLaunches>,
    /// End of each process's warm-up phase: its first max(1 s, 5% of its span) of GPU calls
    /// (synchronisations excepted), by (node, pid).
    pub warm_ends: HashMap<(String, u32), i64>,
    /// Off-CPU intervals of the threads that call the GPU or issue block I/O.
    pub switches: Switches,
    /// The store's op table: id -> (source, op).
    pub op_names: HashMap<u16, (String, String)>,
    /// First and last event start of every (node, pid, tid) in the window, all processes.
    pub spans: BTreeMap<(String, u32, u32), (i64, i64)>,
    /// Slow calls, launches per second and gaps between GPU calls, by node (nodes with GPU
    /// calls under the pid filter).
    pub timelines: HashMap<String, Timeline>,
    /// The time budget's GPU calls and off-CPU attribution, by node (same nodes).
    pub budget_calls: HashMap<String, NodeCalls>,
    /// Whether the window holds one node only (per-node queries then skip the node filter).
    pub only_node: bool,
    /// By node: stretches where some GPU op's probes were sampled (gaps between stored calls
    /// there are not gaps between calls).
    pub sampled: HashMap<String, Vec<(i64, i64)>>,
    /// By node: the stretches where an op that can wait (anything but a launch: a sync, a copy,
    /// a free) was sampled, so a sleep between stored calls may have been inside one.
    pub sampled_waits: HashMap<String, Vec<(i64, i64)>>,
}

const NAMES_SQL: &str = "SELECT node, pid, comm, ppid FROM processes";
const TASKS_SQL: &str = "SELECT node, tid, arg_min(pid, first_seen_ns), arg_min(comm, first_seen_ns) FROM tasks GROUP BY ALL";
/// Containerised processes read per analysis (enough for any one machine's GPU jobs).
const MAX_PLACES: usize = 10_000;

impl<'a> Ctx<'a> {
    /// Gathers the facts for `q`.
    pub fn load(r: &'a Reader, q: &ChainQuery) -> Result<Ctx<'a>, StoreError> {
        let (_, first, last) = crate::window::trace_span(r)?;
        let window = q.window.resolve(first, last);
        let pid = q.pid.map_or(-1, i64::from);
        let node = q.node.clone().unwrap_or_default();
        let names_of_ops = scan::op_names(r)?;
        let resume_nodes = crate::convention::resume_nodes(r)?;

        let mut threads = Vec::new();
        let mut ops = Vec::new();
        let mut gpu_launches = Vec::new();
        let mut warm_ends = HashMap::new();
        let mut switches = Switches::default();
        let mut spans = BTreeMap::new();
        let mut timelines = HashMap::new();
        let mut budget_calls = HashMap::new();
        let rows_in_store = timeline::event_rows(r)?;
        let all_nodes = scan::nodes(r, window)?;
        let only_node = all_nodes.len() == 1;
        for n in all_nodes
            .into_iter()
            .filter(|n| node.is_empty() || *n == node)
        {
            let nref = NodeRef {
                name: &n,
                only: only_node,
            };
            let rows = scan::thread_ops(r, &nref, window)?;
            let derived = derive::derive(&n, &rows, &names_of_ops, pid);
            gpu_launches.extend(derived.gpu_launches);
            spans.extend(
                derived
                    .spans
                    .into_iter()
                    .map(|((p, t), s)| ((n.clone(), p, t), s)),
            );
            if derived.threads.is_empty() {
                continue;
            }
            let quantiles = scan::quantiles(r, &nref, window, pid)?;
            ops.extend(derive::op_facts(&n, &rows, &quantiles, &names_of_ops, pid));
            // Off-CPU intervals of the threads that call the GPU or issue block I/O (before
            // the GPU-call pass, which attributes the feeding threads' to their calls).
            let mut tids: Vec<u32> = derived
                .threads
                .iter()
                .filter(|t| t.gpu_calls > 0 || t.io_requests > 0)
                .map(|t| t.tid)
                .collect();
            tids.sort_unstable();
            tids.dedup();
            let resume = resume_nodes.contains(&format!("\x1f{n}\x1f"));
            switches.load(r, &nref, window, &tids, resume)?;
            let mut feeders: Vec<u32> = derived
                .threads
                .iter()
                .filter(|t| t.gpu_calls > 0)
                .map(|t| t.tid)
                .collect();
            if !feeders.is_empty() {
                feeders.sort_unstable();
                feeders.dedup();
                let rule = SlowRule {
                    pid,
                    p50: quantiles
                        .iter()
                        .map(|&(p, o, p50, _)| ((p, o), p50))
                        .collect(),
                    warm_end: derived.warm_ends.clone(),
                };
                let mut pass = CallPass::new(r, &nref, window, &feeders, &switches)?;
                let t = Timeline::load(r, &nref, window, rows_in_store, &rule, &mut pass)?;
                timelines.insert(n.clone(), t);
                let sampled = crate::probe_overhead::sampled_spans(r, window.until_ns, &n)?;
                budget_calls.insert(n.clone(), pass.finish(&sampled));
            }
            warm_ends.extend(
                derived
                    .warm_ends
                    .into_iter()
                    .map(|(p, w)| ((n.clone(), p), w)),
            );
            threads.extend(derived.threads);
        }

        let procs: Vec<(String, u32, String, u32)> = r
            .prepare_trusted(NAMES_SQL)?
            .query_map([], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading process names"))?;
        let mut names = HashMap::new();
        let mut parents = HashMap::new();
        for (n, pid, comm, ppid) in procs {
            if !comm.is_empty() {
                names.insert((n.clone(), pid), causeway_store::sanitize::sanitize(&comm));
            }
            parents.insert((n, pid), ppid);
        }

        // Every containerised process of the trace (not only the window's): a budget names it.
        let all = Window {
            from_ns: i64::MIN,
            until_ns: i64::MAX,
        };
        let places = crate::placement::placed(r, &all, None, None, MAX_PLACES)?
            .into_iter()
            .map(|p| ((p.node.clone(), p.pid), p.describe()))
            .collect();

        let mut tasks = HashMap::new();
        if r.schema_version() >= 8 {
            let rows: Vec<(String, u32, u32, String)> = r
                .prepare_trusted(TASKS_SQL)?
                .query_map([], causeway_store::row)
                .and_then(|rows| rows.collect())
                .map_err(duck(r, "reading the names of tasks not traced"))?;
            for (n, tid, pid, comm) in rows {
                tasks.insert((n, tid), (pid, causeway_store::sanitize::sanitize(&comm)));
            }
        }

        let mut nodes: Vec<String> = threads.iter().map(|t| t.node.clone()).collect();
        nodes.dedup();
        let mut sampled = HashMap::new();
        let mut sampled_waits = HashMap::new();
        for n in &nodes {
            let spans = crate::probe_overhead::sampled_spans(r, window.until_ns, n)?;
            if !spans.is_empty() {
                sampled.insert(n.clone(), spans);
                let waits = crate::probe_overhead::sampled_spans_of(r, window.until_ns, n, |op| {
                    !crate::opsets::is_launch(op)
                })?;
                sampled_waits.insert(n.clone(), waits);
            }
        }
        Ok(Ctx {
            r,
            window,
            pid,
            node,
            nodes,
            resume_nodes,
            threads,
            ops,
            names,
            parents,
            places,
            tasks,
            gpu_launches,
            warm_ends,
            switches,
            op_names: names_of_ops,
            spans,
            timelines,
            budget_calls,
            only_node,
            sampled,
            sampled_waits,
        })
    }

    /// Whether `[a, b)` of `node` lies in a stretch whose GPU calls were sampled.
    pub fn sampled(&self, node: &str, a: i64, b: i64) -> bool {
        self.sampled
            .get(node)
            .is_some_and(|s| crate::probe_overhead::in_sampled(s, a, b))
    }

    /// Window length in ns (at least 1).
    pub fn window_ns(&self) -> i64 {
        (self.window.until_ns - self.window.from_ns).max(1)
    }

    /// Span of events of one node in the window (ns, at least 1).
    pub fn node_span_ns(&self, node: &str) -> i64 {
        let ts = self.threads.iter().filter(|t| t.node == node);
        let (a, b) = ts.fold((i64::MAX, i64::MIN), |(a, b), t| {
            (a.min(t.first_ns), b.max(t.last_ns))
        });
        if a > b { 1 } else { (b - a).max(1) }
    }

    /// Whether a node's sched_switch timestamps are switch-in times.
    pub fn resume_convention(&self, node: &str) -> bool {
        self.resume_nodes.contains(&format!("\x1f{node}\x1f"))
    }

    /// Where process `pid` of `node` ran, when in a container or pod ('' otherwise).
    pub fn place(&self, node: &str, pid: u32) -> String {
        self.places
            .get(&(node.to_string(), pid))
            .cloned()
            .unwrap_or_default()
    }

    /// The process name of (node, pid), falling back to the thread names seen.
    pub fn name(&self, node: &str, pid: u32) -> String {
        if pid == 0 {
            return "idle".into();
        }
        self.names
            .get(&(node.to_string(), pid))
            .cloned()
            .or_else(|| {
                self.threads
                    .iter()
                    .find(|t| t.node == node && t.pid == pid)
                    .map(|t| t.comm.clone())
            })
            .or_else(|| {
                self.tasks
                    .get(&(node.to_string(), pid))
                    .map(|t| t.1.clone())
            })
            .unwrap_or_else(|| "?".into())
    }

    /// When a launching thread started launching steadily (the end of its start-up), if it
    /// launched: [`crate::timeline::Timeline::steady_from`].
    pub fn steady_from(&self, node: &str, tid: u32) -> Option<i64> {
        self.timelines
            .get(node)
            .and_then(|t| t.steady_from.get(&tid).copied())
    }

    /// The process and name of a task that is not traced (a preemptor), where the trace
    /// recorded them.
    pub fn task(&self, node: &str, tid: u32) -> Option<&(u32, String)> {
        self.tasks.get(&(node.to_string(), tid))
    }

    /// Threads that launch kernels (the GPU-feeding threads), busiest first.
    pub fn feeders(&self) -> Vec<&ThreadFacts> {
        let mut f: Vec<&ThreadFacts> = self.threads.iter().filter(|t| t.launches > 0).collect();
        f.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.tid.cmp(&b.tid)));
        f
    }

    /// Statistics of one op of one process.
    pub fn op(&self, node: &str, pid: u32, op: &str) -> Option<&OpFacts> {
        self.ops
            .iter()
            .find(|o| o.node == node && o.pid == pid && o.op == op)
    }
}
