//! Which annotation ranges are training steps: the one rule the collector (NVTX ranges it
//! records) and the importers (Kineto `record_function` annotations, Nsight Systems NVTX ranges)
//! apply, so that a step means the same thing whichever tool marked it.

use std::collections::HashMap;

use crate::Step;

/// The index a step-like name carries: `ProfilerStep#N` (what the importers recognise),
/// `NAME#N`, `step N`, `step_N`, `Step N`.
pub fn step_index(name: &str) -> Option<i64> {
    if let Some((_, n)) = name.rsplit_once('#') {
        return n.trim().parse().ok();
    }
    let lower = name.to_ascii_lowercase();
    let rest = lower.strip_prefix("step")?;
    let rest = rest.strip_prefix([' ', '_', '-']).unwrap_or(rest);
    rest.trim().parse().ok()
}

/// An outermost range: its name without its domain, start and end (Unix ns).
type Outermost = (String, i64, i64);

/// Outermost annotation ranges of each thread, kept until the trace ends to find its steps.
#[derive(Debug, Default)]
pub struct StepFinder {
    /// (pid, tid) -> the thread's outermost ranges.
    threads: HashMap<(u32, u32), Vec<Outermost>>,
    /// Ranges kept (bounded: a thread annotating millions of outermost ranges is not stepping).
    kept: usize,
}

/// Most outermost ranges kept for step finding.
const MAX_KEPT: usize = 1 << 20;

impl StepFinder {
    /// Notes one outermost range of its thread (no annotation range of the thread encloses
    /// it): `name` without its domain, times in Unix ns.
    pub fn push(&mut self, pid: u32, tid: u32, name: &str, start_ns: i64, end_ns: i64) {
        if self.kept >= MAX_KEPT {
            return;
        }
        self.kept += 1;
        self.threads
            .entry((pid, tid))
            .or_default()
            .push((name.to_string(), start_ns, end_ns));
    }

    /// The steps, labelled `source`: per thread, outermost ranges whose names carry an index
    /// (`ProfilerStep#N`, `step N`), or else, where every outermost range of the thread has one
    /// name and it repeats, those ranges numbered from 0.
    pub fn steps(&self, source: &'static str) -> Vec<Step> {
        let mut out = Vec::new();
        for (&(pid, tid), ranges) in &self.threads {
            let step = |step, start_ns, end_ns| Step {
                pid,
                tid,
                step,
                start_ns,
                end_ns,
                source,
            };
            let indexed: Vec<Step> = ranges
                .iter()
                .filter_map(|(name, s, e)| Some(step(step_index(name)?, *s, *e)))
                .collect();
            if !indexed.is_empty() {
                out.extend(indexed);
                continue;
            }
            let one_name = ranges.windows(2).all(|w| w[0].0 == w[1].0);
            if ranges.len() >= 2 && one_name {
                let mut sorted: Vec<_> = ranges.iter().map(|(_, s, e)| (*s, *e)).collect();
                sorted.sort_unstable();
                out.extend(
                    sorted
                        .into_iter()
                        .enumerate()
                        .map(|(i, (s, e))| step(i as i64, s, e)),
                );
            }
        }
        out.sort_by_key(|s| (s.pid, s.tid, s.start_ns));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names_give_their_index() {
        assert_eq!(step_index("ProfilerStep#551"), Some(551));
        assert_eq!(step_index("train#3"), Some(3));
        assert_eq!(step_index("step 7"), Some(7));
        assert_eq!(step_index("Step_8"), Some(8));
        assert_eq!(step_index("step"), None);
        assert_eq!(step_index("forward"), None);
        assert_eq!(step_index("stepper 2"), None);
        assert_eq!(
            step_index("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
            None
        );
    }

    #[test]
    fn repeated_outermost_ranges_of_one_name_are_steps_and_others_are_not() {
        let mut f = StepFinder::default();
        for i in 0..3 {
            f.push(1, 2, "iter", i * 10 + 20, i * 10 + 25);
        }
        let steps = f.steps("nvtx");
        assert_eq!(steps.len(), 3);
        assert_eq!(
            (steps[2].step, steps[2].start_ns, steps[2].source),
            (2, 40, "nvtx")
        );

        let mut g = StepFinder::default();
        for name in ["load", "train"] {
            g.push(1, 2, name, 0, 1);
        }
        assert!(g.steps("nvtx").is_empty());
        // One range of a name is not a cadence.
        let mut h = StepFinder::default();
        h.push(1, 2, "train", 0, 1);
        assert!(h.steps("nvtx").is_empty());
    }

    #[test]
    fn indexed_names_win_over_other_outermost_ranges_of_the_thread() {
        let mut f = StepFinder::default();
        f.push(1, 2, "setup", 0, 5);
        f.push(1, 2, "step 12", 5, 10);
        f.push(1, 2, "step 13", 10, 15);
        f.push(1, 3, "iteration#3", 0, 4);
        let got: Vec<_> = f
            .steps("nvtx")
            .iter()
            .map(|s| (s.tid, s.step, s.start_ns))
            .collect();
        assert_eq!(got, [(2, 12, 5), (2, 13, 10), (3, 3, 0)]);
    }
}
