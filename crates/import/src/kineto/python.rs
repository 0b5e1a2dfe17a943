//! The Python call stacks of a trace recorded with `with_stack=True`: its `python_function`
//! ranges (`train.py(12): read_loss`), kept per thread from the first pass, give each runtime
//! call the chain of Python frames open around it on its thread, stored as the collector's
//! `--stacks` recordings store theirs (`python_stacks`, `python_frames`, the event's
//! `stack_hash`), so that findings name their call sites the same way.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use causeway_store::{PythonFrame, PythonStack};

/// Most `python_function` ranges kept (a trace past it stores the later calls without stacks).
const MAX_RANGES: usize = 1 << 22;

/// One range: start and end (ns on the profiler's clock until [`PythonRanges::finish`], then
/// since the epoch), its frame, and the range that encloses it (`usize::MAX`: none).
#[derive(Debug, Clone, Copy)]
struct Open {
    start: i64,
    end: i64,
    frame: u32,
    parent: usize,
}

/// Every thread's `python_function` ranges, and their frames (each distinct one once).
#[derive(Debug, Default)]
pub struct PythonRanges {
    frames: Vec<PythonFrame>,
    by_name: HashMap<String, u32>,
    threads: HashMap<(u32, u32), Vec<Open>>,
    kept: usize,
}

/// The frame a `python_function` range names: `FILE(LINE): FUNCTION`. Other names (built-in
/// functions, `nn.Module: Linear_0` markers) are not frames of Python code.
pub fn frame(name: &str) -> Option<PythonFrame> {
    let (head, function) = name.split_once("): ")?;
    let (file, line) = head.rsplit_once('(')?;
    let line = line.parse().ok()?;
    (!file.is_empty() && !function.is_empty()).then(|| PythonFrame {
        file: file.to_string(),
        function: function.to_string(),
        line,
        entry: false,
    })
}

impl PythonRanges {
    /// Notes one `python_function` range of a thread (times on the profiler's clock, ns).
    pub fn push(&mut self, pid: u32, tid: u32, name: &str, start: i64, end: i64) {
        if self.kept >= MAX_RANGES || end < start {
            return;
        }
        let frame = match self.by_name.get(name) {
            Some(&i) => i,
            None => {
                let Some(f) = frame(name) else { return };
                let i = self.frames.len() as u32;
                self.frames.push(f);
                self.by_name.insert(name.to_string(), i);
                i
            }
        };
        self.kept += 1;
        self.threads.entry((pid, tid)).or_default().push(Open {
            start,
            end,
            frame,
            parent: usize::MAX,
        });
    }

    /// Moves the ranges to the epoch (`base_ns` after them) and links each to the range that
    /// encloses it.
    pub fn finish(&mut self, base_ns: i64) {
        self.by_name = HashMap::new();
        for ranges in self.threads.values_mut() {
            for r in ranges.iter_mut() {
                r.start = r.start.saturating_add(base_ns);
                r.end = r.end.saturating_add(base_ns);
            }
            // Outer before inner at one start: the longer range holds the shorter.
            ranges.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
            let mut open: Vec<usize> = Vec::new();
            for i in 0..ranges.len() {
                while open
                    .last()
                    .is_some_and(|&o| ranges[o].end <= ranges[i].start)
                {
                    open.pop();
                }
                ranges[i].parent = open.last().copied().unwrap_or(usize::MAX);
                open.push(i);
            }
        }
    }

    /// The Python stack of a call of thread (`pid`, `tid`) over [`start`, `end`] (ns since the
    /// epoch): the frames of the ranges that enclose it, innermost first, and the stack's hash.
    pub fn stack(&self, pid: u32, tid: u32, start: i64, end: i64) -> Option<(i64, PythonStack)> {
        let ranges = self.threads.get(&(pid, tid))?;
        // The last range to start at or before the call, then out through its parents to the
        // first that holds the whole call.
        let mut i = ranges
            .partition_point(|r| r.start <= start)
            .checked_sub(1)?;
        while ranges[i].end < end {
            i = ranges[i].parent;
            if i == usize::MAX {
                return None;
            }
        }
        let mut frames = Vec::new();
        while i != usize::MAX {
            frames.push(self.frames[ranges[i].frame as usize].clone());
            i = ranges[i].parent;
        }
        let mut h = std::hash::DefaultHasher::new();
        for f in &frames {
            (&f.file, &f.function, f.line).hash(&mut h);
        }
        // 0 is "no stack" in `events.stack_hash`.
        let hash = match h.finish() as i64 {
            0 => 1,
            h => h,
        };
        Some((
            hash,
            PythonStack {
                tid,
                status: "ok",
                frames,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_code_are_frames_and_others_are_not() {
        let f = frame("train.py(12): read_loss").unwrap();
        assert_eq!(
            (f.file.as_str(), f.line, f.function.as_str()),
            ("train.py", 12, "read_loss")
        );
        let g = frame("/opt/torch/nn/modules/module.py(1501): _call_impl").unwrap();
        assert_eq!(
            (g.file.as_str(), g.line),
            ("/opt/torch/nn/modules/module.py", 1501)
        );
        assert!(frame("<built-in method item of Tensor object at 0x7f>").is_none());
        assert!(frame("nn.Module: Linear_0").is_none());
        assert!(frame("f.py(x): g").is_none());
    }

    #[test]
    fn a_call_gets_the_frames_open_around_it_innermost_first() {
        let mut p = PythonRanges::default();
        p.push(1, 2, "train.py(40): <module>", 0, 100);
        p.push(1, 2, "train.py(12): read_loss", 10, 30);
        p.push(1, 2, "<built-in method item of Tensor object>", 15, 20);
        p.push(1, 2, "train.py(20): step", 40, 90);
        p.finish(1000);
        let names = |s: &PythonStack| -> Vec<String> {
            s.frames
                .iter()
                .map(|f| format!("{}:{} {}", f.file, f.line, f.function))
                .collect()
        };
        let (h, s) = p.stack(1, 2, 1016, 1018).unwrap();
        assert_eq!(names(&s), ["train.py:12 read_loss", "train.py:40 <module>"]);
        // Between the two functions only <module> is open.
        let (h2, s2) = p.stack(1, 2, 1032, 1035).unwrap();
        assert_eq!(names(&s2), ["train.py:40 <module>"]);
        assert_ne!(h, h2);
        assert_eq!(
            p.stack(1, 2, 1016, 1019).unwrap().0,
            h,
            "one stack, one hash"
        );
        assert!(p.stack(1, 2, 1200, 1201).is_none());
        assert!(p.stack(1, 3, 1016, 1018).is_none());
    }
}
