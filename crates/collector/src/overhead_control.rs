//! The overhead controller (`--overhead-budget`): every window it estimates what the probes cost
//! each traced process (windows.rs: calls the kernel counted x cost of the op's plan) against the
//! process's CPU time, and moves hot ops down the ladder of plans (below) when the worst process
//! is over budget, and back up, one op at a time, once the estimate stays well below it. Counts
//! stay exact in every plan but sampled, whose probes are attached for a share of the time (its
//! duty, sampling.rs) and whose calls are estimated from what was counted then. Once a sampled
//! op's cost to the job is measured in situ (insitu.rs) above its calibration, its costs are
//! scaled by the difference. An op that its calibration keeps out of sampling, yet costs a good
//! share of the budget, is sampled for a while once, so that its cost is measured too (an in-situ
//! check).
//!
//! The ladder, most detailed (and dearest) first: full -> aggregate -> entry_only -> sampled at
//! decreasing duty (`DUTY_MAX` down to `DUTY_MIN`). Over budget an op takes the least step down
//! that covers the excess (else the cheapest); under budget the op whose step up costs least
//! climbs to the most detailed plan that fits, a sampled op that fits none doubling its duty.
//! `--exact-counts` ends the ladder at entry_only; `--probe-mode` pins an op to one rung. The
//! host's waits for the GPU (syncs, copies) stop at aggregate, which keeps their durations in
//! kernel histograms, while together they cost at most `WAIT_SHARE_OF_BUDGET` of the budget of
//! the window's wall time (or CPU time, if more).
//!
//! The decisions are pure functions of the window's numbers (unit-tested below); reading /proc
//! and applying a switch to the BPF maps and links is the caller's (recorder.rs) job.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::ProbeMode;
use causeway_ops::Class;
use causeway_store::{ModeSwitch, OverheadWindow};

use crate::cost::{CostModel, FirstInsn};
use crate::estimate::SampledTime;
use crate::tuning::{
    CHECK_AFTER_NS, CHECK_DUTY, CHECK_MAX_NS, CHECK_MIN_PROGRESS_PER_S, CHECK_SHARE_OF_BUDGET,
    DUTY_MAX, DUTY_MIN, EXEMPT_SHARE_OF_BUDGET, HOT_SHARE, MARGIN, MAX_FACTOR, MIN_DWELL_NS,
    SIGNIFICANT_SHARE_OF_CORE, UPGRADE_BELOW, WAIT_SHARE_OF_BUDGET,
};
use crate::windows::Windows;
pub use crate::windows::{CpuReading, ProcessWindow};

/// Whether an op id is a probed library call (CUDA runtime/driver/graph or NCCL).
pub fn is_call_op(op: u16) -> bool {
    causeway_ops::by_id(op).is_some_and(|o| o.is_call())
}

/// Whether an op is one of the host's waits for the GPU whose durations the engine reads: a
/// synchronisation, or a host/device copy (which waits for its stream).
pub fn is_wait_op(op: u16) -> bool {
    // A peer copy is between two GPUs: the host does not wait on it for its own work.
    causeway_ops::by_id(op).is_some_and(|o| {
        o.class == Class::Sync || (o.class == Class::Copy && !o.name.contains("Peer"))
    })
}

/// How an op is probed: its mode and, in sampled mode, its duty (the share of the time its
/// probes are attached). One rung of the ladder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The probe mode.
    pub mode: ProbeMode,
    /// The duty, in sampled mode only.
    pub duty: Option<f64>,
}

impl Plan {
    /// Every op's plan until the controller moves it.
    pub const FULL: Plan = Plan {
        mode: ProbeMode::Full,
        duty: None,
    };

    /// `mode` (not sampled).
    pub fn of(mode: ProbeMode) -> Plan {
        Plan { mode, duty: None }
    }

    /// Sampled at `duty` (kept within `DUTY_MIN`..`DUTY_MAX`).
    pub fn sampled(duty: f64) -> Plan {
        Plan {
            mode: ProbeMode::Sampled,
            duty: Some(duty.clamp(DUTY_MIN, DUTY_MAX)),
        }
    }

    /// The share of the calls made that the probes trap, as planned: a sampled op's only while
    /// attached. For projecting a plan's cost; what a window's calls were is estimated from
    /// the time actually attached (estimate.rs).
    fn share_counted(self) -> f64 {
        self.duty.unwrap_or(1.0)
    }
}

/// Why a plan changed (`mode_switches.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `--probe-mode`.
    Forced,
    /// The worst process was over the budget.
    OverBudget,
    /// Every process stayed well under the budget.
    UnderBudget,
    /// Sampled to measure its cost on the job.
    InSituCheck,
    /// Its in-situ check ended.
    Checked,
}

impl Reason {
    /// The stored name.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Forced => "forced",
            Reason::OverBudget => "over_budget",
            Reason::UnderBudget => "under_budget",
            Reason::InSituCheck => "in_situ_check",
            Reason::Checked => "checked",
        }
    }
}

/// One plan change, typed; [`Switch::row`] is its store row.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    /// When it was decided (ns).
    pub ts_ns: i64,
    /// The op.
    pub op: u16,
    /// The plan it had.
    pub from: Plan,
    /// The plan it gets.
    pub to: Plan,
    /// Why.
    pub reason: Reason,
    /// The worst process's overhead in the window that decided it (%).
    pub overhead_pct: f64,
}

impl Switch {
    /// The `mode_switches` row: names only here, at the store boundary.
    pub fn row(&self) -> ModeSwitch {
        ModeSwitch {
            ts_ns: self.ts_ns,
            op_id: self.op,
            mode: self.to.mode.name().into(),
            previous: self.from.mode.name().into(),
            reason: self.reason.name().into(),
            overhead_pct: self.overhead_pct,
        }
    }
}

/// What one controller tick produced.
#[derive(Debug, Default)]
pub struct Tick {
    /// Rows for `probe_overhead`.
    pub windows: Vec<OverheadWindow>,
    /// Plan changes to apply (and record).
    pub switches: Vec<Switch>,
}

/// The controller's state across windows.
#[derive(Debug)]
pub struct Controller {
    budget_pct: f64,
    costs: CostModel,
    kinds: HashMap<u16, FirstInsn>,
    /// Every op not in full mode: its plan (the one table of modes and duties).
    plans: BTreeMap<u16, Plan>,
    forced: BTreeSet<u16>,
    /// Per op, how much more a probe hit costs the job than calibrated, as measured in situ
    /// (insitu.rs; at least 1).
    measured: BTreeMap<u16, f64>,
    /// Whether the controller may sample (no `--exact-counts`).
    sampling: bool,
    /// Ops measured in situ (or whose check ended without a measurement): never checked again.
    checked: BTreeSet<u16>,
    /// The op under an in-situ check: the mode it goes back to, and since when (ns).
    checking: Option<(u16, ProbeMode, i64)>,
    /// When the trace started (ns).
    start_ns: i64,
    last_switch_ns: HashMap<u16, i64>,
    /// What the probes cost, per window and over the trace.
    pub windows: Windows,
    /// The worst process's overhead in the last window (%).
    pub last_worst_pct: f64,
}

impl Controller {
    /// A controller for `budget_pct` (% of CPU time) with calibrated costs, starting at `now_ns`.
    pub fn new(budget_pct: f64, costs: CostModel, now_ns: i64) -> Controller {
        Controller {
            budget_pct,
            costs,
            kinds: HashMap::new(),
            plans: BTreeMap::new(),
            forced: BTreeSet::new(),
            measured: BTreeMap::new(),
            sampling: true,
            checked: BTreeSet::new(),
            checking: None,
            start_ns: now_ns,
            last_switch_ns: HashMap::new(),
            windows: Windows::new(now_ns),
            last_worst_pct: 0.0,
        }
    }

    /// Never moves an op to sampled mode (`--exact-counts`): entry-only is the cheapest.
    pub fn exact_counts(&mut self) {
        self.sampling = false;
    }

    /// The plan of an op.
    pub fn plan(&self, op: u16) -> Plan {
        self.plans.get(&op).copied().unwrap_or(Plan::FULL)
    }

    /// The duty of a sampled op (the share of the time its probes are attached).
    pub fn duty(&self, op: u16) -> Option<f64> {
        self.plan(op).duty
    }

    /// The budget (% of CPU time).
    pub fn budget_pct(&self) -> f64 {
        self.budget_pct
    }

    /// The calibrated costs.
    pub fn costs(&self) -> &CostModel {
        &self.costs
    }
    /// Records the first instruction of a probed function of `op`; an op probed in several
    /// functions or files is costed at its most expensive one.
    pub fn set_first_insn(&mut self, op: u16, kind: FirstInsn) {
        let full = |k| self.costs.of(k, ProbeMode::Full);
        let keep = self.kinds.get(&op).is_some_and(|&k| full(k) >= full(kind));
        if !keep {
            self.kinds.insert(op, kind);
        }
    }

    /// Calibrated cost per call of `op` in `mode` (ops whose functions were not seen: the
    /// dearest kind).
    pub fn calibrated(&self, op: u16, mode: ProbeMode) -> f64 {
        let kind = self.kinds.get(&op).copied().unwrap_or(FirstInsn::Other);
        self.costs.of(kind, mode)
    }

    /// Cost per call of `op` in `mode`: calibrated, scaled by what was measured in situ.
    pub fn cost(&self, op: u16, mode: ProbeMode) -> f64 {
        self.calibrated(op, mode) * self.factor(op)
    }

    /// How much more than calibrated a probe hit of `op` costs the job (1 until measured).
    pub fn factor(&self, op: u16) -> f64 {
        self.measured.get(&op).copied().unwrap_or(1.0)
    }

    /// Records that a probe hit of `op` was measured in situ to cost the job `lost_ns` (a
    /// conservative estimate): from now on its costs are scaled by lost / calibrated, when that
    /// is more than 1 (at most [`MAX_FACTOR`]). A measurement at or below the calibration leaves
    /// the calibrated costs: a job that hides the probes' time (behind the GPU, say) now may not
    /// later.
    pub fn set_measured(&mut self, op: u16, lost_ns: f64) {
        self.checked.insert(op);
        let calibrated = self.calibrated(op, ProbeMode::Full);
        if calibrated > 0.0 && lost_ns > calibrated {
            self.measured
                .insert(op, (lost_ns / calibrated).min(MAX_FACTOR));
        } else {
            self.measured.remove(&op);
        }
    }

    /// The current mode of an op.
    pub fn mode(&self, op: u16) -> ProbeMode {
        self.plan(op).mode
    }

    /// Ops not in full mode.
    pub fn reduced(&self) -> impl Iterator<Item = (u16, ProbeMode)> + '_ {
        self.plans
            .iter()
            .filter(|(_, p)| p.mode != ProbeMode::Full)
            .map(|(o, p)| (*o, p.mode))
    }

    /// Pins an op to a mode (`--probe-mode`; `duty` for sampled): the controller never moves it.
    pub fn force(&mut self, op: u16, mode: ProbeMode, duty: f64, now_ns: i64) -> Switch {
        self.forced.insert(op);
        let to = if mode == ProbeMode::Sampled {
            Plan::sampled(duty)
        } else {
            Plan::of(mode)
        };
        let s = self.switch(op, to, Reason::Forced, 0.0, now_ns);
        self.plans.insert(op, to);
        s
    }

    /// Ends a window at `now_ns`: `counts` are the kernel's cumulative calls per (pid, op) of
    /// probed ops, `cpu` reads a process's CPU time, `sampling` says how long sampled ops'
    /// probes were attached (their calls are estimated as the stored counts are). Updates the
    /// plans it decides on.
    pub fn tick(
        &mut self,
        now_ns: i64,
        counts: &[((u32, u16), u64)],
        cpu: impl Fn(u32) -> CpuReading,
        sampling: &impl SampledTime,
    ) -> Tick {
        let m = self.measure(now_ns, counts, cpu, sampling);
        let span_ns = (now_ns - m.start_ns).max(1) as f64;
        let significant: Vec<&ProcessWindow> = m
            .procs
            .values()
            .filter(|w| w.probe_ns >= SIGNIFICANT_SHARE_OF_CORE * span_ns)
            .collect();
        self.last_worst_pct = significant.iter().map(|w| w.pct()).fold(0.0, f64::max);
        let mut decided = self.decide(&significant, span_ns, now_ns);
        if decided.is_empty() {
            decided.extend(self.check(&significant, span_ns, now_ns));
        }
        for s in &decided {
            self.plans.insert(s.op, s.to);
            self.last_switch_ns.insert(s.op, now_ns);
        }
        Tick {
            windows: m.rows,
            switches: decided,
        }
    }

    /// The op under an in-situ check, if any.
    pub fn checking(&self) -> Option<u16> {
        self.checking.map(|(op, ..)| op)
    }

    /// In-situ checks, in a window where nothing else changed. A check in progress ends once
    /// the op is measured (or after `CHECK_MAX_NS`); the op then goes back to the mode it had
    /// if every process stays under the budget, with the margin, at its costs as measured
    /// (`checked`), and otherwise stays sampled for the budget to lower its duty. Else the op
    /// costing a process the most, if at least `CHECK_SHARE_OF_BUDGET` of the budget and
    /// neither sampled, forced nor checked before, is sampled at `CHECK_DUTY`
    /// (`in_situ_check`), in a process with progress to measure.
    fn check(&mut self, procs: &[&ProcessWindow], span_ns: f64, now_ns: i64) -> Option<Switch> {
        let worst_pct = procs.iter().map(|w| w.pct()).fold(0.0, f64::max);
        if let Some((op, back, since)) = self.checking {
            if self.mode(op) != ProbeMode::Sampled {
                // The budget moved it meanwhile.
                self.checking = None;
                self.checked.insert(op);
                return None;
            }
            if !self.checked.contains(&op) && now_ns - since < CHECK_MAX_NS {
                return None;
            }
            self.checking = None;
            self.checked.insert(op);
            let back = Plan::of(back);
            let fits =
                self.projected_pct(procs, op, self.unit_cost(op, back)) <= self.budget_pct * MARGIN;
            return fits.then(|| self.switch(op, back, Reason::Checked, worst_pct, now_ns));
        }
        if !self.sampling || now_ns - self.start_ns < CHECK_AFTER_NS {
            return None;
        }
        let mut best: Option<(f64, u16)> = None;
        for w in procs {
            let allowance = CHECK_SHARE_OF_BUDGET * self.budget_pct / 100.0 * w.cpu_ns as f64;
            // Calls of the ops not sampled: the progress, but for the op checked.
            let not_sampled: u64 = w
                .calls
                .iter()
                .filter(|(o, _)| self.mode(**o) != ProbeMode::Sampled)
                .map(|(_, n)| *n)
                .sum();
            for (&op, &n) in &w.calls {
                let mode = self.mode(op);
                if mode == ProbeMode::Sampled
                    || self.forced.contains(&op)
                    || self.checked.contains(&op)
                {
                    continue;
                }
                let cost = n as f64 * self.cost(op, mode);
                let progress = not_sampled - n;
                if cost >= allowance
                    && progress as f64 >= CHECK_MIN_PROGRESS_PER_S * span_ns / 1e9
                    && best.is_none_or(|(c, _)| cost > c)
                {
                    best = Some((cost, op));
                }
            }
        }
        let (_, op) = best?;
        self.checking = Some((op, self.mode(op), now_ns));
        let to = Plan::sampled(CHECK_DUTY);
        Some(self.switch(op, to, Reason::InSituCheck, worst_pct, now_ns))
    }

    /// The worst process's share in probes (%) were `op` to cost `unit` per call made.
    fn projected_pct(&self, procs: &[&ProcessWindow], op: u16, unit: f64) -> f64 {
        let now = self.unit_now(op);
        procs
            .iter()
            .map(|w| {
                let made = w.made.get(&op).copied().unwrap_or(0.0);
                let add = made * (unit - now);
                ProcessWindow {
                    probe_ns: w.probe_ns + add,
                    cpu_ns: (w.cpu_ns as f64 + add).max(0.0) as u64,
                    ..ProcessWindow::default()
                }
                .pct()
            })
            .fold(0.0, f64::max)
    }

    /// The last window, when the trace ends: measured and recorded, nothing decided.
    pub fn close(
        &mut self,
        now_ns: i64,
        counts: &[((u32, u16), u64)],
        cpu: impl Fn(u32) -> CpuReading,
        sampling: &impl SampledTime,
    ) -> Vec<OverheadWindow> {
        self.measure(now_ns, counts, cpu, sampling).rows
    }

    /// The trace so far: estimated probe time over CPU time of the processes with probed calls (%).
    pub fn overall_pct(&self) -> f64 {
        self.windows.overall_pct()
    }

    /// The window ending at `now_ns`, each call counted at the cost of its op's plan.
    fn measure(
        &mut self,
        now_ns: i64,
        counts: &[((u32, u16), u64)],
        cpu: impl Fn(u32) -> CpuReading,
        sampling: &impl SampledTime,
    ) -> crate::windows::Measured {
        let mut windows = std::mem::replace(&mut self.windows, Windows::new(now_ns));
        let m = windows.measure(
            now_ns,
            counts,
            |op| self.cost(op, self.mode(op)),
            cpu,
            sampling,
            self.budget_pct,
        );
        self.windows = windows;
        m
    }

    fn switch(&self, op: u16, to: Plan, reason: Reason, pct: f64, now_ns: i64) -> Switch {
        Switch {
            ts_ns: now_ns,
            op,
            from: self.plan(op),
            to,
            reason,
            overhead_pct: pct,
        }
    }

    /// Probe time per call made of `op` under `plan`: a sampled op's calls trap only while its
    /// probes are attached.
    fn unit_cost(&self, op: u16, plan: Plan) -> f64 {
        self.cost(op, plan.mode) * plan.share_counted()
    }

    /// Probe time per call made of `op` now.
    fn unit_now(&self, op: u16) -> f64 {
        self.unit_cost(op, self.plan(op))
    }

    /// Whether `op` is as cheap as the controller may make it: the bottom of its ladder.
    fn at_floor(&self, op: u16) -> bool {
        self.forced.contains(&op)
            || match self.mode(op) {
                ProbeMode::EntryOnly => !self.sampling,
                ProbeMode::Sampled => self.duty(op).is_none_or(|d| d <= DUTY_MIN),
                _ => false,
            }
    }

    /// The rungs below `op`'s plan, most detailed first: the cheaper modes, then (if the
    /// controller samples) sampled at the duty that would cover `excess` given `made` calls.
    fn steps_down(&self, op: u16, made: f64, excess: f64) -> Vec<Plan> {
        let mode = self.mode(op);
        let mut steps: Vec<Plan> = [ProbeMode::Aggregate, ProbeMode::EntryOnly]
            .into_iter()
            .filter(|m| *m > mode && mode != ProbeMode::Sampled)
            .map(Plan::of)
            .collect();
        if self.sampling {
            let full = self.cost(op, ProbeMode::Sampled);
            let d = (made * self.unit_now(op) - excess) / (made * full);
            steps.push(Plan::sampled(d));
        }
        steps
    }

    /// The rungs above `op`'s plan, most detailed first; a sampled op below `DUTY_MAX` may
    /// also double its duty.
    fn steps_up(&self, op: u16) -> Vec<Plan> {
        let mode = self.mode(op);
        let mut steps: Vec<Plan> = [ProbeMode::Full, ProbeMode::Aggregate, ProbeMode::EntryOnly]
            .into_iter()
            .filter(|m| *m < mode)
            .map(Plan::of)
            .collect();
        if let Some(d) = self.duty(op).filter(|d| *d < DUTY_MAX) {
            steps.push(Plan::sampled(d * 2.0));
        }
        steps
    }

    fn decide(&self, procs: &[&ProcessWindow], span_ns: f64, now_ns: i64) -> Vec<Switch> {
        let Some(worst) = procs.iter().max_by(|a, b| a.pct().total_cmp(&b.pct())) else {
            return self.upgrade(procs, now_ns).into_iter().collect();
        };
        let pct = worst.pct();
        if pct <= self.budget_pct {
            return self.upgrade(procs, now_ns).into_iter().collect();
        }
        // Over budget: cheapen the ops that cost the worst process most, until the estimate is
        // back under the budget with a margin.
        let cpu = (worst.cpu_ns as f64).max(worst.probe_ns);
        let mut excess = worst.probe_ns - self.budget_pct / 100.0 * MARGIN * cpu;
        let window_cost = |op: u16, n: u64| n as f64 * self.cost(op, self.mode(op));
        let mut by_cost: Vec<(u16, f64)> = worst
            .calls
            .iter()
            .map(|(op, n)| (*op, window_cost(*op, *n)))
            .collect();
        by_cost.sort_by(|a, b| a.1.total_cmp(&b.1));
        let allowance = EXEMPT_SHARE_OF_BUDGET * self.budget_pct / 100.0 * cpu;
        let mut spent = 0.0;
        let exempt: Vec<u16> = by_cost
            .iter()
            .take_while(|(_, c)| {
                spent += c;
                spent < allowance
            })
            .map(|(op, _)| *op)
            .collect();
        // The waits that stay timed, the cheapest first, while they fit their share of the
        // window's wall time: a process waiting for the GPU uses little CPU, and the probes on
        // its waits delay it by their own time, against progress the GPU sets.
        let wait_allowance = WAIT_SHARE_OF_BUDGET * self.budget_pct / 100.0 * cpu.max(span_ns);
        let mut waits: Vec<(u16, f64)> = worst
            .made
            .iter()
            .filter(|(op, _)| is_wait_op(**op) && !self.forced.contains(op))
            .map(|(op, made)| (*op, made * self.cost(*op, ProbeMode::Aggregate)))
            .collect();
        waits.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut spent = 0.0;
        let timed_waits: Vec<u16> = waits
            .iter()
            .take_while(|(_, c)| {
                spent += c;
                spent <= wait_allowance
            })
            .map(|(op, _)| *op)
            .collect();
        let mut ops: Vec<(u16, f64)> = worst
            .calls
            .iter()
            .filter(|(op, n)| {
                !self.at_floor(**op)
                    && !exempt.contains(op)
                    && window_cost(**op, **n) >= HOT_SHARE * worst.probe_ns
            })
            .map(|(op, _)| (*op, worst.made.get(op).copied().unwrap_or(0.0)))
            .collect();
        ops.sort_by(|a, b| (b.1 * self.unit_now(b.0)).total_cmp(&(a.1 * self.unit_now(a.0))));
        let mut out = Vec::new();
        for (op, made) in ops {
            if excess <= 0.0 {
                break;
            }
            let now = self.unit_now(op);
            let mut steps = self.steps_down(op, made, excess);
            if timed_waits.contains(&op) {
                steps.retain(|s| s.mode == ProbeMode::Aggregate);
            }
            let unit = |p: Plan| self.unit_cost(op, p);
            // The least reduction that covers the excess, else the cheapest step, the most
            // reduced of equally cheap ones: calibration noise can make entry-only cost what full
            // mode does (the costs are clamped monotonic), yet it saves a trap per call.
            let Some(to) = steps
                .iter()
                .copied()
                .find(|s| made * (now - unit(*s)) >= excess)
                .or_else(|| {
                    steps
                        .iter()
                        .rev()
                        .copied()
                        .min_by(|a, b| unit(*a).total_cmp(&unit(*b)))
                })
                .filter(|s| unit(*s) <= now)
            else {
                continue;
            };
            excess -= made * (now - unit(to));
            out.push(self.switch(op, to, Reason::OverBudget, pct, now_ns));
        }
        out
    }

    /// Under budget: move back the one op whose step up (the most detailed rung that fits)
    /// costs least, if every process stays well below the budget with it and the op has kept
    /// its plan long enough.
    fn upgrade(&self, procs: &[&ProcessWindow], now_ns: i64) -> Option<Switch> {
        let limit = self.budget_pct * UPGRADE_BELOW;
        let worst_pct = procs.iter().map(|w| w.pct()).fold(0.0, f64::max);
        let candidates = self.plans.iter().filter(|(op, p)| {
            p.mode != ProbeMode::Full
                && !self.forced.contains(op)
                && self.checking() != Some(**op)
                && self
                    .last_switch_ns
                    .get(op)
                    .is_none_or(|t| now_ns - t >= MIN_DWELL_NS)
        });
        let mut best: Option<(f64, u16, Plan)> = None;
        for (&op, _) in candidates {
            let Some((p, to)) = self
                .steps_up(op)
                .into_iter()
                .map(|s| (self.projected_pct(procs, op, self.unit_cost(op, s)), s))
                .find(|(p, _)| *p < limit)
            else {
                continue;
            };
            if best.is_none_or(|(b, ..)| p < b) {
                best = Some((p, op, to));
            }
        }
        best.map(|(_, op, to)| self.switch(op, to, Reason::UnderBudget, worst_pct, now_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Costs;
    use causeway_bpf::abi::OP_CALIBRATE;

    const COSTS: Costs = Costs {
        bare_pair_ns: 10_000.0,
        bare_entry_ns: 4_000.0,
        full_ns: 11_000.0,
        aggregate_ns: 10_500.0,
        entry_only_ns: 5_000.0,
    };
    const S: i64 = 1_000_000_000;

    fn model(c: Costs) -> CostModel {
        CostModel {
            kinds: vec![(FirstInsn::Other, c)],
            method: "test".into(),
        }
    }

    fn alive(cpu_ns: u64) -> impl Fn(u32) -> CpuReading {
        move |_| CpuReading::Alive { cpu_ns, new: true }
    }

    /// A controller whose sampled ops' probes were attached exactly their duty of each window
    /// (what sampling.rs's schedule does on average): its detached time follows the plans.
    struct Job {
        c: Controller,
        detached: Detached,
        last_ns: i64,
    }

    /// Detached time so far per op (ns); nothing spent switching, no speedup measured.
    #[derive(Clone, Default)]
    struct Detached(BTreeMap<u16, i64>);

    impl SampledTime for Detached {
        fn detached_and_switching_ns(&self, op: u16, _now_ns: i64) -> (i64, i64) {
            (self.0.get(&op).copied().unwrap_or(0), 0)
        }
        fn speedup(&self, _op: u16, _pid: u32) -> Option<f64> {
            None
        }
    }

    impl Job {
        fn new(budget_pct: f64, costs: CostModel, now_ns: i64) -> Job {
            Job {
                c: Controller::new(budget_pct, costs, now_ns),
                detached: Detached::default(),
                last_ns: now_ns,
            }
        }

        /// The detached time of the window ending at `now_ns`, under the plans it ran with.
        fn advance(&mut self, now_ns: i64) {
            for (op, plan) in &self.c.plans {
                if let Some(d) = plan.duty {
                    let off = ((1.0 - d) * (now_ns - self.last_ns) as f64) as i64;
                    *self.detached.0.entry(*op).or_default() += off;
                }
            }
            self.last_ns = now_ns;
        }

        fn tick(
            &mut self,
            now_ns: i64,
            counts: &[((u32, u16), u64)],
            cpu: impl Fn(u32) -> CpuReading,
        ) -> Tick {
            self.advance(now_ns);
            let detached = self.detached.clone();
            self.c.tick(now_ns, counts, cpu, &detached)
        }

        fn close(
            &mut self,
            now_ns: i64,
            counts: &[((u32, u16), u64)],
            cpu: impl Fn(u32) -> CpuReading,
        ) -> Vec<OverheadWindow> {
            self.advance(now_ns);
            let detached = self.detached.clone();
            self.c.close(now_ns, counts, cpu, &detached)
        }
    }

    impl std::ops::Deref for Job {
        type Target = Controller;
        fn deref(&self) -> &Controller {
            &self.c
        }
    }

    impl std::ops::DerefMut for Job {
        fn deref_mut(&mut self) -> &mut Controller {
            &mut self.c
        }
    }

    #[test]
    fn a_hot_op_over_budget_goes_entry_only_and_counts_keep_their_estimate() {
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.exact_counts();
        // 50k launches in 1 s by a process that used 1 s of CPU: 55% in probes.
        let t = c.tick(S, &[((7, 3), 50_000), ((7, 1), 10)], alive(S as u64));
        assert_eq!(t.windows.len(), 1);
        assert_eq!(t.windows[0].calls, 50_010);
        assert_eq!(t.windows[0].probe_ns, 50_010 * 11_000);
        assert_eq!(
            t.switches.len(),
            1,
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        let s = &t.switches[0].row();
        assert_eq!(
            (s.op_id, s.mode.as_str(), s.previous.as_str()),
            (3, "entry_only", "full")
        );
        assert_eq!(s.reason, "over_budget");
        assert!(s.overhead_pct > 50.0);
        assert_eq!(c.mode(3), ProbeMode::EntryOnly);
        // The rare op keeps its durations; the next window is costed at the new mode.
        assert_eq!(c.mode(1), ProbeMode::Full);
        let t = c.tick(
            2 * S,
            &[((7, 3), 100_000), ((7, 1), 10)],
            alive(2 * S as u64),
        );
        assert_eq!(t.windows[0].probe_ns, 50_000 * 5_000);
        assert!(
            t.switches.is_empty(),
            "entry-only is the floor: {:?}",
            t.switches
        );
    }

    #[test]
    fn a_budget_of_100_percent_never_cheapens_a_probe() {
        // The stand-in's launches do nothing but trap: all of its CPU time is probe time, and
        // a probe time in floating point once came to 100.00000000000001% of it.
        let probe_ns = 766_446_420.746_562_1;
        let w = ProcessWindow {
            cpu_ns: 0,
            probe_ns,
            ..ProcessWindow::default()
        };
        assert_eq!(w.pct(), 100.0);
        let mut c = Job::new(100.0, model(COSTS), 0);
        for t in 1..10 {
            let n = 100_000 * t as u64;
            let sw = c
                .tick(t * S, &[((7, 3), n)], alive(S as u64 / 100))
                .switches;
            assert!(sw.is_empty(), "{:?}", sw.iter().map(Switch::row));
        }
        assert_eq!(c.mode(3), ProbeMode::Full);
    }

    /// Ticks once a second from `from` to `to` (s, exclusive): op 3 makes `hot` calls a second
    /// (counted at the duty it has), op 1 `progress`, in 1 s of CPU a second; the switches.
    fn run_checks(c: &mut Job, from: i64, to: i64, hot: f64, progress: u64) -> Vec<ModeSwitch> {
        let mut out = Vec::new();
        let mut counted = c.windows.prev_calls.get(&(7, 3)).copied().unwrap_or(0);
        for t in from..to {
            counted += (hot * c.duty(3).unwrap_or(1.0)) as u64;
            let counts = [((7, 3), counted), ((7, 1), progress * t as u64)];
            out.extend(
                c.tick(t * S, &counts, alive((t * S) as u64))
                    .switches
                    .iter()
                    .map(Switch::row),
            );
        }
        out
    }

    #[test]
    fn an_op_kept_out_of_sampling_by_its_calibration_is_checked_in_situ_once() {
        // 500 launches a second at 11 us: 0.55% of the CPU, under the 1% budget but more than a
        // quarter of it; 100 syncs a second are the progress.
        let mut c = Job::new(1.0, model(COSTS), 0);
        assert!(
            run_checks(&mut c, 1, 30, 500.0, 100).is_empty(),
            "not before 30 s"
        );
        let s = run_checks(&mut c, 30, 31, 500.0, 100);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(
            (
                s[0].op_id,
                s[0].mode.as_str(),
                s[0].previous.as_str(),
                s[0].reason.as_str()
            ),
            (3, "sampled", "full", "in_situ_check")
        );
        assert_eq!((c.duty(3), c.checking()), (Some(DUTY_MAX), Some(3)));
        // Nothing happens until it is measured (the dwell time passes meanwhile).
        assert!(run_checks(&mut c, 31, 60, 500.0, 100).is_empty());
        // Measured 3x the calibration: 1.65% in full mode, so it stays sampled.
        c.set_measured(3, 33_000.0);
        let s = run_checks(&mut c, 60, 61, 500.0, 100);
        assert!(s.is_empty(), "{s:?}");
        assert_eq!((c.mode(3), c.checking()), (ProbeMode::Sampled, None));
        // The budget then keeps it under the budget with the measured cost: 250 counted at
        // 33 us and the syncs are 0.94%, under 1%, so the duty stays; never checked again.
        assert!(run_checks(&mut c, 61, 200, 500.0, 100).is_empty());
        assert_eq!(c.duty(3), Some(DUTY_MAX));

        // Measured at or below the calibration: back to full mode.
        let mut c = Job::new(1.0, model(COSTS), 0);
        assert_eq!(run_checks(&mut c, 1, 31, 500.0, 100).len(), 1);
        c.set_measured(3, 9_000.0);
        let s = run_checks(&mut c, 31, 32, 500.0, 100);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(
            (
                s[0].mode.as_str(),
                s[0].previous.as_str(),
                s[0].reason.as_str()
            ),
            ("full", "sampled", "checked")
        );
        assert_eq!(
            (c.mode(3), c.duty(3), c.checking()),
            (ProbeMode::Full, None, None)
        );
        assert!(
            run_checks(&mut c, 32, 200, 500.0, 100).is_empty(),
            "checked once"
        );

        // Never measured (the job's progress too irregular): back after two minutes.
        let mut c = Job::new(1.0, model(COSTS), 0);
        run_checks(&mut c, 1, 31, 500.0, 100);
        assert!(run_checks(&mut c, 31, 150, 500.0, 100).is_empty());
        let s = run_checks(&mut c, 150, 151, 500.0, 100);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].reason, "checked");
    }

    #[test]
    fn no_check_without_sampling_progress_or_a_share_of_the_budget() {
        let none = |c: &mut Job, hot, progress| {
            let s = run_checks(c, 1, 100, hot, progress);
            assert!(s.is_empty(), "{s:?}");
        };
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.exact_counts();
        none(&mut c, 500.0, 100);
        // Nothing else to measure the job's progress by.
        none(&mut Job::new(1.0, model(COSTS), 0), 500.0, 10);
        // 0.2% of the CPU: under a quarter of the budget.
        none(&mut Job::new(1.0, model(COSTS), 0), 180.0, 100);
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.force(3, ProbeMode::Full, 0.0, 0);
        none(&mut c, 500.0, 100);
    }

    #[test]
    fn an_exited_process_is_measured_once() {
        let mut c = Job::new(100.0, model(COSTS), 0);
        let exited = |_| CpuReading::Exited {
            cpu_ns: S as u64,
            new: true,
        };
        let t = c.tick(S, &[((7, 3), 1_000)], exited);
        assert_eq!(t.windows.len(), 1);
        assert_eq!(t.windows[0].calls, 1_000);
        // The kernel still reports its final counts, and the exit reading is still there.
        let t = c.tick(2 * S, &[((7, 3), 1_000)], exited);
        assert!(t.windows.is_empty(), "{:?}", t.windows);
        assert!(c.close(3 * S, &[((7, 3), 1_000)], exited).is_empty());
        assert_eq!(c.windows.cpu_ns, S as u64);
    }

    #[test]
    fn a_small_excess_takes_the_cheapest_sufficient_step() {
        // 1000 calls at 11 us in 1 s of CPU: 1.1% against 1.05%; the target is 1.05% * 0.8 of
        // 1 s = 8.4 ms, so 2.6 ms must go: aggregate saves 0.5 ms, not enough.
        let mut c = Job::new(1.05, model(COSTS), 0);
        let t = c.tick(S, &[((7, 3), 1_000)], alive(S as u64));
        assert_eq!(t.switches[0].row().mode, "entry_only");
        // Where aggregate saves enough (3 us of 11 us per call), it is the step taken.
        let costs = Costs {
            aggregate_ns: 8_000.0,
            ..COSTS
        };
        let mut c = Job::new(1.3, model(costs), 0);
        let t = c.tick(S, &[((7, 3), 1_000)], alive(800_000_000));
        assert_eq!(
            t.switches.len(),
            1,
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        assert_eq!(t.switches[0].row().mode, "aggregate");
    }

    #[test]
    fn waits_for_the_gpu_keep_their_histograms_while_they_fit_half_the_budget() {
        // --exact-counts: 1000 launches (11 ms) and 450 stream syncs (4.95 ms) in 1 s of CPU
        // against 1%: 7.95 ms must go. Launches go entry-only (6 ms saved); the syncs would
        // cover the rest entry-only (2.7 ms), but their aggregate cost (4.73 ms) fits half
        // the budget (5 ms): they go to aggregate and keep their histograms.
        assert!(is_wait_op(5) && is_wait_op(7) && is_wait_op(53));
        assert!(!is_wait_op(3) && !is_wait_op(12) && !is_wait_op(200));
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.exact_counts();
        c.tick(S, &[((7, 3), 1_000), ((7, 5), 450)], alive(S as u64));
        assert_eq!(c.mode(3), ProbeMode::EntryOnly);
        assert_eq!(c.mode(5), ProbeMode::Aggregate);
        // Over again (1500 launches at 5 us, the syncs at 10.5 us: 12.2 ms), launches at
        // their floor: aggregate is the syncs' floor.
        let t = c.tick(
            2 * S,
            &[((7, 3), 2_500), ((7, 5), 900)],
            alive(2 * S as u64),
        );
        assert!(c.last_worst_pct > 1.0, "{}", c.last_worst_pct);
        assert_eq!(t.switches.iter().filter(|s| s.op == 5).count(), 0);
        assert_eq!(c.mode(5), ProbeMode::Aggregate);
        // A server waiting for the GPU: 300 syncs (3.3 ms) in a second where it ran 30 ms is
        // 11% of its CPU, but in aggregate (3.15 ms) they fit half the budget of the second.
        let mut c = Job::new(1.0, model(COSTS), 0);
        let t = c.tick(S, &[((7, 5), 300)], alive(30_000_000));
        assert_eq!(t.switches.len(), 1);
        assert_eq!(c.mode(5), ProbeMode::Aggregate);
        // 700 syncs cost 7.35 ms in aggregate, over the 5 ms share: they go lower, as any op.
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.exact_counts();
        c.tick(S, &[((7, 3), 1_000), ((7, 5), 700)], alive(S as u64));
        assert_eq!(c.mode(5), ProbeMode::EntryOnly);
    }

    #[test]
    fn ops_come_back_after_the_dwell_time() {
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.tick(S, &[((7, 3), 50_000)], alive(S as u64));
        // 55% in probes: even entry-only (25%) is far over; sampled at the least duty.
        assert_eq!(c.mode(3), ProbeMode::Sampled);
        assert_eq!(c.duty(3), Some(DUTY_MIN));
        // Quiet now, but not for long enough.
        let t = c.tick(2 * S, &[((7, 3), 50_000)], alive(2 * S as u64));
        assert!(t.switches.is_empty());
        let t = c.tick(12 * S, &[((7, 3), 50_000)], alive(3 * S as u64));
        assert_eq!(t.switches.len(), 1);
        assert_eq!(t.switches[0].row().reason, "under_budget");
        assert_eq!(c.mode(3), ProbeMode::Full);
        assert_eq!(c.duty(3), None);
        assert_eq!(c.reduced().count(), 0);
    }

    #[test]
    fn where_entry_only_is_not_enough_the_op_is_sampled_with_the_duty_that_fits() {
        // 2000 calls in 1 s of CPU: 2.2% in full mode against 1%: 14 ms must go, entry-only
        // saves 12 ms. Sampled at duty d costs 2000 x d x 11 us: d = 8/22.
        let mut c = Job::new(1.0, model(COSTS), 0);
        let t = c.tick(S, &[((7, 3), 2_000)], alive(S as u64));
        assert_eq!(
            t.switches.len(),
            1,
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        assert_eq!(
            (
                t.switches[0].row().mode.as_str(),
                t.switches[0].row().previous.as_str()
            ),
            ("sampled", "full")
        );
        let d = c.duty(3).unwrap();
        assert!((d - 8.0 / 22.0).abs() < 1e-9, "{d}");
        // The next second the kernel counts the calls made while attached: on target.
        let counted = 2_000 + (2_000.0 * d) as u64;
        let t = c.tick(2 * S, &[((7, 3), counted)], alive(2 * S as u64));
        assert!(
            t.switches.is_empty(),
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        assert!(
            (c.last_worst_pct - 0.8).abs() < 0.01,
            "{}",
            c.last_worst_pct
        );
        // Still too dear (the job got busier): a lower duty, recorded as a switch.
        let t = c.tick(3 * S, &[((7, 3), counted + 2_000)], alive(3 * S as u64));
        assert_eq!(t.switches.len(), 1);
        assert_eq!(
            (
                t.switches[0].row().mode.as_str(),
                t.switches[0].row().previous.as_str()
            ),
            ("sampled", "sampled")
        );
        assert!(c.duty(3).unwrap() < d);
        // With --exact-counts entry-only is the floor.
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.exact_counts();
        let t = c.tick(S, &[((7, 3), 2_000)], alive(S as u64));
        assert_eq!(t.switches[0].row().mode, "entry_only");
        assert_eq!(c.duty(3), None);
    }

    #[test]
    fn a_cost_measured_in_situ_above_the_calibration_lowers_the_duty() {
        let mut c = Job::new(1.0, model(COSTS), 0);
        let t = c.tick(S, &[((7, 3), 2_000)], alive(S as u64));
        assert_eq!(t.switches[0].row().mode, "sampled");
        let d = c.duty(3).unwrap();
        // The job loses 33 us per hit, not 11: every mode of the op costs 3x.
        c.set_measured(3, 33_000.0);
        assert!((c.factor(3) - 3.0).abs() < 1e-9);
        assert_eq!(c.cost(3, ProbeMode::EntryOnly), 15_000.0);
        assert_eq!(c.calibrated(3, ProbeMode::Full), 11_000.0);
        let counted = 2_000 + (2_000.0 * d) as u64;
        let t = c.tick(2 * S, &[((7, 3), counted)], alive(2 * S as u64));
        assert_eq!(
            t.switches.len(),
            1,
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        assert!(
            (t.switches[0].overhead_pct - 2.4).abs() < 0.05,
            "{:?}",
            t.switches
        );
        let lower = c.duty(3).unwrap();
        assert!((lower - d / 3.0).abs() < 0.01, "{d} -> {lower}");
        // A measurement at or below the calibration leaves it; the factor is bounded.
        c.set_measured(3, 9_000.0);
        assert_eq!(c.factor(3), 1.0);
        c.set_measured(3, 1e9);
        assert_eq!(c.factor(3), MAX_FACTOR);
    }

    #[test]
    fn calibration_ties_still_end_at_the_floor() {
        // Entry-only measured no cheaper than full (noise; the model clamps it to full).
        let flat = Costs {
            aggregate_ns: 11_000.0,
            entry_only_ns: 11_000.0,
            ..COSTS
        };
        let mut c = Job::new(1.0, model(flat), 0);
        c.exact_counts();
        let t = c.tick(S, &[((7, 3), 50_000)], alive(S as u64));
        assert_eq!(
            t.switches.len(),
            1,
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        assert_eq!(t.switches[0].row().mode, "entry_only");
    }

    #[test]
    fn a_sampled_op_that_cools_down_gets_a_higher_duty_first() {
        let mut c = Job::new(1.0, model(COSTS), 0);
        c.tick(S, &[((7, 3), 50_000)], alive(S as u64));
        assert_eq!(c.duty(3), Some(DUTY_MIN));
        // 5000 calls a second now (100 counted): full 5.5%, entry-only 2.5%, twice the duty
        // 0.22%: under half the budget.
        let mut counted = 50_000;
        for i in 2..=11 {
            counted += 100;
            let t = c.tick(i * S, &[((7, 3), counted)], alive(i as u64 * S as u64));
            if i < 11 {
                assert!(
                    t.switches.is_empty(),
                    "second {i}: {:?}",
                    t.switches.iter().map(Switch::row)
                );
            } else {
                assert_eq!(
                    t.switches.len(),
                    1,
                    "{:?}",
                    t.switches.iter().map(Switch::row)
                );
                assert_eq!(t.switches[0].row().reason, "under_budget");
            }
        }
        assert_eq!(c.mode(3), ProbeMode::Sampled);
        assert_eq!(c.duty(3), Some(2.0 * DUTY_MIN));
    }

    #[test]
    fn coming_back_takes_the_most_detailed_mode_that_fits() {
        // Where the op still runs and full mode would cost too much but aggregate would not.
        let costs = Costs {
            aggregate_ns: 6_000.0,
            ..COSTS
        };
        let mut c = Job::new(1.0, model(costs), 0);
        c.exact_counts();
        c.tick(S, &[((7, 3), 50_000)], alive(S as u64));
        assert_eq!(c.mode(3), ProbeMode::EntryOnly);
        // Then 600 calls a second in 1 s of CPU: 0.3% at entry-only. Full would make it 0.66%,
        // aggregate 0.36%, against 0.5% of the budget: aggregate, once the dwell time is over.
        for i in 2..=11 {
            let calls = 50_000 + 600 * (i as u64 - 1);
            let t = c.tick(i * S, &[((7, 3), calls)], alive(i as u64 * S as u64));
            if i < 11 {
                assert!(
                    t.switches.is_empty(),
                    "second {i}: {:?}",
                    t.switches.iter().map(Switch::row)
                );
            } else {
                assert_eq!(
                    t.switches.len(),
                    1,
                    "{:?}",
                    t.switches.iter().map(Switch::row)
                );
                assert_eq!(t.switches[0].row().mode, "aggregate");
            }
        }
    }

    #[test]
    fn forced_ops_and_idle_processes_are_left_alone() {
        let mut c = Job::new(1.0, model(COSTS), 0);
        let f = c.force(3, ProbeMode::Full, 1.0, 0);
        assert_eq!(f.row().reason, "forced");
        let t = c.tick(S, &[((7, 3), 50_000)], alive(S as u64));
        assert!(
            t.switches.is_empty(),
            "{:?}",
            t.switches.iter().map(Switch::row)
        );
        // 10 calls in a second by a process that hardly ran: reported, not acted on.
        let mut c = Job::new(1.0, model(COSTS), 0);
        let t = c.tick(S, &[((8, 1), 10)], alive(1_000));
        assert_eq!(t.windows.len(), 1);
        assert!(t.switches.is_empty());
        assert_eq!(c.last_worst_pct, 0.0);
    }

    /// A process over budget because of an op at its floor (forced here): an op costing under a
    /// tenth of the budget keeps its mode, however large its share of the probe time, so its
    /// counts stay exact; one costing more is reduced.
    #[test]
    fn ops_costing_under_a_tenth_of_the_budget_are_left_alone() {
        for (syncs, reduced) in [(80, false), (200, true)] {
            let mut c = Job::new(1.0, model(COSTS), 0);
            c.force(3, ProbeMode::Full, 1.0, 0);
            // 1 s of CPU: a 10 ms budget. The forced launches cost 16.5 ms; 80 syncs 0.88 ms
            // (5% of the probe time, 9% of the budget), 200 syncs 2.2 ms.
            let t = c.tick(S, &[((7, 3), 1_500), ((7, 1), syncs)], alive(S as u64));
            assert!(t.windows[0].probe_ns > 10_000_000);
            let switched: Vec<u16> = t.switches.iter().map(|s| s.op).collect();
            assert_eq!(
                switched,
                if reduced { vec![1] } else { vec![] },
                "{syncs} syncs"
            );
            assert_eq!(c.mode(1) == ProbeMode::Full, !reduced);
        }
    }

    #[test]
    fn old_processes_start_with_a_baseline_and_exits_close_the_window() {
        let mut c = Job::new(1.0, model(COSTS), 0);
        let old = |_| CpuReading::Alive {
            cpu_ns: 500 * S as u64,
            new: false,
        };
        let t = c.tick(S, &[((9, 3), 10)], old);
        assert!(t.windows.is_empty(), "no baseline yet");
        let exited = |_| CpuReading::Exited {
            cpu_ns: 500 * S as u64 + 2_000_000,
            new: false,
        };
        let t = c.tick(2 * S, &[((9, 3), 30)], exited);
        assert_eq!(t.windows[0].cpu_ns, 2_000_000);
        assert_eq!(t.windows[0].calls, 20);
        // An op is costed at its dearest function.
        let two = CostModel {
            kinds: vec![
                (
                    FirstInsn::Push,
                    Costs {
                        full_ns: 1_000.0,
                        ..COSTS
                    },
                ),
                (FirstInsn::Other, COSTS),
            ],
            method: "test".into(),
        };
        let mut c = Job::new(1.0, two, 0);
        c.set_first_insn(3, FirstInsn::Push);
        assert_eq!(c.cost(3, ProbeMode::Full), 1_000.0);
        c.set_first_insn(3, FirstInsn::Other);
        c.set_first_insn(3, FirstInsn::Push);
        assert_eq!(c.cost(3, ProbeMode::Full), 11_000.0);
        assert_eq!(c.cost(99, ProbeMode::Full), 11_000.0);
        // Host ops and the calibration op are not probe calls.
        assert!(!is_call_op(100) && !is_call_op(OP_CALIBRATE) && is_call_op(200));
    }
}
