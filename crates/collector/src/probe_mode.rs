//! How the collector probes an op: the kernel's three recording modes, plus sampled mode, which
//! is the collector's own scheduling (probes attached for a share of the time, sampling.rs) and
//! which the kernel sees as full mode while the probes are attached.

use causeway_bpf::abi::OpMode;

/// How an op is probed. Calls are counted at entry in every mode that keeps the probes attached,
/// so counts stay exact across switches between them; `Sampled` detaches the probes for most of
/// the time, and its counts are estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeMode {
    /// Entry and return probes: duration histogram and one event per call.
    Full,
    /// Entry and return probes: duration histogram only, no ring-buffer events.
    Aggregate,
    /// Entry probe only (the return probe is detached): calls and bytes counted, no durations.
    EntryOnly,
    /// Duty-cycled: entry and return probes attached (as in full mode) for a share of the time,
    /// detached otherwise. Calls made while detached are not seen: their count is estimated
    /// from the time the probes were attached (poll.rs `estimate`).
    Sampled,
}

impl ProbeMode {
    /// Every mode, most detailed (and most costly) first.
    pub const ALL: [ProbeMode; 4] = [
        ProbeMode::Full,
        ProbeMode::Aggregate,
        ProbeMode::EntryOnly,
        ProbeMode::Sampled,
    ];

    /// What the kernel records while the probes are attached: a sampled op's calls are
    /// recorded in full.
    pub fn kernel(self) -> OpMode {
        match self {
            ProbeMode::Full | ProbeMode::Sampled => OpMode::Full,
            ProbeMode::Aggregate => OpMode::Aggregate,
            ProbeMode::EntryOnly => OpMode::EntryOnly,
        }
    }

    /// The name used on the command line and in the store: full, aggregate, entry_only, sampled.
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Full => "full",
            ProbeMode::Aggregate => "aggregate",
            ProbeMode::EntryOnly => "entry_only",
            ProbeMode::Sampled => "sampled",
        }
    }

    /// Parses a mode name.
    pub fn from_name(name: &str) -> Option<ProbeMode> {
        ProbeMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the return probe must be attached.
    pub fn needs_return_probe(self) -> bool {
        self != ProbeMode::EntryOnly
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_modes_round_trip_by_name() {
        for m in ProbeMode::ALL {
            assert_eq!(ProbeMode::from_name(m.name()), Some(m));
        }
        assert_eq!(ProbeMode::from_name("fast"), None);
        assert!(!ProbeMode::EntryOnly.needs_return_probe());
        assert_eq!(ProbeMode::Aggregate.kernel(), OpMode::Aggregate);
        assert_eq!(ProbeMode::Sampled.kernel(), ProbeMode::Full.kernel());
        assert!(ProbeMode::Sampled.needs_return_probe());
    }
}
