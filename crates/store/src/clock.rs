//! Clock offsets between the nodes of a merged trace, estimated from events that happen at the
//! same moment on every rank: the completions of one collective call (an all-reduce returns on
//! all ranks together, give or take the interconnect latency). Offsets are recorded next to
//! the nodes; raw timestamps are never rewritten.

/// How far one node's clock is from the reference node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEstimate {
    /// `node_time - reference_time` for the same instant, in ns (subtract it to align).
    pub offset_ns: i64,
    /// Spread of the per-call differences (1.4826 x median absolute deviation), in ns.
    pub uncertainty_ns: i64,
    /// Call pairs the estimate is based on.
    pub samples: usize,
}

/// Fewest call pairs an estimate needs.
pub const MIN_SAMPLES: usize = 3;

fn median(v: &mut [i64]) -> i64 {
    v.sort_unstable();
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        // Halves first: no overflow for timestamps near i64::MAX / 2.
        v[m - 1] / 2 + v[m] / 2 + (v[m - 1] % 2 + v[m] % 2) / 2
    }
}

/// Median and scaled MAD of `other[i + lag] - reference[i]` over the overlapping calls.
fn at_lag(reference: &[i64], other: &[i64], lag: isize) -> Option<OffsetEstimate> {
    let mut diffs: Vec<i64> = reference
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let j = i as isize + lag;
            (j >= 0)
                .then(|| other.get(j as usize).map(|o| o - r))
                .flatten()
        })
        .collect();
    if diffs.len() < MIN_SAMPLES {
        return None;
    }
    let offset = median(&mut diffs);
    let mut dev: Vec<i64> = diffs.iter().map(|d| (d - offset).abs()).collect();
    let mad = median(&mut dev);
    Some(OffsetEstimate {
        offset_ns: offset,
        uncertainty_ns: (mad as f64 * 1.4826).round() as i64,
        samples: diffs.len(),
    })
}

/// Estimates the offset of `other` against `reference` from the completion times (ns, in call
/// order) of the same collective calls on both nodes. One trace may have started a few calls
/// earlier than the other, so small lags are tried. Collectives are periodic, so every lag
/// lines the calls up about equally well: among the consistent lags (spread within twice the
/// best) the smallest offset wins. Offsets up to half the collective period are therefore
/// resolved; larger ones are ambiguous from the calls alone (cluster clocks are normally
/// NTP-synchronised far tighter). `None` with fewer than [`MIN_SAMPLES`] pairs.
pub fn estimate(reference: &[i64], other: &[i64]) -> Option<OffsetEstimate> {
    let max_lag = (reference.len().min(other.len()) / 4).min(16) as isize;
    let all: Vec<OffsetEstimate> = (-max_lag..=max_lag)
        .filter_map(|lag| at_lag(reference, other, lag))
        .collect();
    let best = all.iter().map(|e| e.uncertainty_ns).min()?;
    all.into_iter()
        .filter(|e| e.uncertainty_ns <= 2 * best + 1_000)
        .min_by_key(|e| (e.offset_ns.unsigned_abs(), usize::MAX - e.samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls every 100 ms with up to +-40 us of jitter (deterministic).
    fn calls(n: usize, start: i64, prime: i64) -> Vec<i64> {
        (0..n as i64)
            .map(|i| start + i * 100_000_000 + ((i * prime + 17) % 81 - 40) * 1_000)
            .collect()
    }

    #[test]
    fn recovers_a_known_offset_with_its_uncertainty() {
        let reference = calls(200, 1_000_000_000_000, 7919);
        let other: Vec<i64> = calls(200, 1_000_000_000_000, 104_729)
            .iter()
            .map(|t| t + 23_000_000)
            .collect();
        let e = estimate(&reference, &other).unwrap();
        assert!((e.offset_ns - 23_000_000).abs() < 50_000, "{e:?}");
        assert!(e.uncertainty_ns > 0 && e.uncertainty_ns < 100_000, "{e:?}");
        assert_eq!(e.samples, 200);
    }

    #[test]
    fn finds_the_alignment_when_one_trace_started_later() {
        let reference = calls(100, 0, 7919);
        // The other node's recording missed the first 3 calls; its clock is 7 ms behind.
        let other: Vec<i64> = reference[3..].iter().map(|t| t - 7_000_000).collect();
        let e = estimate(&reference, &other).unwrap();
        assert_eq!(e.offset_ns, -7_000_000);
        assert_eq!(e.uncertainty_ns, 0);
        assert_eq!(e.samples, 97);
    }

    #[test]
    fn too_few_calls_give_no_estimate() {
        assert_eq!(estimate(&[1, 2], &[5, 6]), None);
        assert_eq!(median(&mut [i64::MAX - 1, i64::MAX - 3]), i64::MAX - 2);
    }
}
