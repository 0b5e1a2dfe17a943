//! The cost model of probes: what one probed call costs the traced thread, by probe mode and by
//! the kind of the probed function's first instruction. The kernel replaces that instruction
//! with a breakpoint and must then execute it: some kinds it emulates (push, nop), the others it
//! single-steps out of line, which costs a second trap. Measured here (Linux 6.18 VM): an empty
//! uprobe costs about 1 us on a `push` and 20 us on a `mov` or `endbr64`, so the kind matters
//! more than anything causeway's programs do. calibrate.rs measures every kind at trace start.

use crate::ProbeMode;
use causeway_store::ProbeCost;
use serde::Serialize;

/// The kind of a function's first instruction, as far as probe cost goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstInsn {
    /// `push r64`.
    Push,
    /// A nop (`nop`, `nopl ...`, the 5-byte nop of patchable entries).
    Nop,
    /// `endbr64` (CET builds).
    Endbr,
    /// Anything else (`mov`, `sub rsp`, ...).
    Other,
}

impl FirstInsn {
    /// Every kind, in calibration order.
    pub const ALL: [FirstInsn; 4] = [
        FirstInsn::Push,
        FirstInsn::Nop,
        FirstInsn::Endbr,
        FirstInsn::Other,
    ];

    /// Name in the store (`probe_costs.first_insn`).
    pub fn name(self) -> &'static str {
        match self {
            FirstInsn::Push => "push",
            FirstInsn::Nop => "nop",
            FirstInsn::Endbr => "endbr64",
            FirstInsn::Other => "other",
        }
    }

    /// Classifies the first bytes of a function (x86-64).
    pub fn of(code: &[u8]) -> FirstInsn {
        match code {
            [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => FirstInsn::Push,
            [0x90, ..] | [0x0f, 0x1f, ..] | [0x66, 0x0f, 0x1f, ..] | [0x66, 0x90, ..] => {
                FirstInsn::Nop
            }
            [0xf3, 0x0f, 0x1e, 0xfa, ..] => FirstInsn::Endbr,
            _ => FirstInsn::Other,
        }
    }
}

/// Per-call cost of probes in each mode for one kind of first instruction (ns the traced thread
/// spends per call).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Costs {
    /// The empty uprobe + uretprobe pair (the baseline).
    pub bare_pair_ns: f64,
    /// The empty uprobe alone.
    pub bare_entry_ns: f64,
    /// causeway's programs, full mode.
    pub full_ns: f64,
    /// causeway's programs, aggregate mode.
    pub aggregate_ns: f64,
    /// causeway's entry program alone (entry-only mode).
    pub entry_only_ns: f64,
}

impl Costs {
    /// Cost per call of `mode` (sampled: per call made while the probes are attached).
    pub fn of(&self, mode: ProbeMode) -> f64 {
        match mode {
            ProbeMode::Full | ProbeMode::Sampled => self.full_ns,
            ProbeMode::Aggregate => self.aggregate_ns,
            ProbeMode::EntryOnly => self.entry_only_ns,
        }
    }

    /// Makes the costs monotonic (entry-only <= aggregate <= full): noise must not make the
    /// controller believe a cheaper mode costs more.
    pub fn monotonic(mut self) -> Costs {
        self.aggregate_ns = self.aggregate_ns.min(self.full_ns);
        self.entry_only_ns = self.entry_only_ns.min(self.aggregate_ns);
        self
    }

    /// Elementwise smallest of two measurements.
    pub fn min(self, o: Costs) -> Costs {
        Costs {
            bare_pair_ns: self.bare_pair_ns.min(o.bare_pair_ns),
            bare_entry_ns: self.bare_entry_ns.min(o.bare_entry_ns),
            full_ns: self.full_ns.min(o.full_ns),
            aggregate_ns: self.aggregate_ns.min(o.aggregate_ns),
            entry_only_ns: self.entry_only_ns.min(o.entry_only_ns),
        }
    }
}

/// The costs of every kind of first instruction, and how they were obtained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostModel {
    /// Costs per kind, in [`FirstInsn::ALL`] order.
    pub kinds: Vec<(FirstInsn, Costs)>,
    /// "calibrated ..." or "fallback ...".
    pub method: String,
}

impl CostModel {
    /// The costs of one kind (the most expensive kind's when it was not measured).
    pub fn costs(&self, kind: FirstInsn) -> Costs {
        let worst = self
            .kinds
            .iter()
            .map(|(_, c)| *c)
            .max_by(|a, b| a.full_ns.total_cmp(&b.full_ns));
        self.kinds
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, c)| *c)
            .or(worst)
            .unwrap_or(FALLBACK)
    }

    /// Cost per call of `mode` on a function starting with `kind`.
    pub fn of(&self, kind: FirstInsn, mode: ProbeMode) -> f64 {
        self.costs(kind).of(mode)
    }

    /// Rows for the store's `probe_costs` table.
    pub fn rows(&self) -> Vec<ProbeCost> {
        let mut out = Vec::new();
        for (kind, c) in &self.kinds {
            for (mode, ns) in [
                ("full", c.full_ns),
                ("aggregate", c.aggregate_ns),
                ("entry_only", c.entry_only_ns),
                ("bare_pair", c.bare_pair_ns),
                ("bare_entry", c.bare_entry_ns),
            ] {
                out.push(ProbeCost {
                    mode: mode.into(),
                    first_insn: kind.name().into(),
                    ns_per_call: ns,
                    method: self.method.clone(),
                });
            }
        }
        out
    }

    /// The model used when calibration fails: this VM's figures (docs/benchmarks.md).
    pub fn fallback(why: &str) -> CostModel {
        CostModel {
            kinds: vec![(FirstInsn::Other, FALLBACK)],
            method: format!(
                "fallback (docs/benchmarks.md figures for a single-stepped first instruction): {why}"
            ),
        }
    }
}

/// A single-stepped function's costs on the development VM (the expensive case).
const FALLBACK: Costs = Costs {
    bare_pair_ns: 22_000.0,
    bare_entry_ns: 20_000.0,
    full_ns: 22_500.0,
    aggregate_ns: 22_300.0,
    entry_only_ns: 20_200.0,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_instructions_are_classified() {
        assert_eq!(FirstInsn::of(&[0x55, 0x48, 0x89, 0xe5]), FirstInsn::Push);
        assert_eq!(FirstInsn::of(&[0x41, 0x57]), FirstInsn::Push);
        assert_eq!(
            FirstInsn::of(&[0x0f, 0x1f, 0x44, 0x00, 0x00]),
            FirstInsn::Nop
        );
        assert_eq!(FirstInsn::of(&[0xf3, 0x0f, 0x1e, 0xfa]), FirstInsn::Endbr);
        assert_eq!(FirstInsn::of(&[0x44, 0x89, 0xc0]), FirstInsn::Other);
        assert_eq!(FirstInsn::of(&[]), FirstInsn::Other);
    }

    #[test]
    fn unmeasured_kinds_get_the_most_expensive_measured_costs() {
        let cheap = Costs {
            bare_pair_ns: 1.0,
            bare_entry_ns: 1.0,
            full_ns: 2.0,
            aggregate_ns: 3.0,
            entry_only_ns: 1.0,
        };
        let dear = Costs {
            full_ns: 20.0,
            ..cheap
        };
        let m = CostModel {
            kinds: vec![(FirstInsn::Push, cheap), (FirstInsn::Other, dear)],
            method: "t".into(),
        };
        assert_eq!(m.of(FirstInsn::Push, ProbeMode::Full), 2.0);
        assert_eq!(m.of(FirstInsn::Endbr, ProbeMode::Full), 20.0);
        assert_eq!(cheap.monotonic().aggregate_ns, 2.0);
        assert_eq!(m.rows().len(), 10);
        assert_eq!(
            CostModel::fallback("x").of(FirstInsn::Push, ProbeMode::EntryOnly),
            20_200.0
        );
    }
}
