//! Exact interval joins of one thread's intervals, by sorting and sweeping instead of a
//! pairwise (or bucketed) join: every overlapping pair of two interval sets, and how many
//! intervals strictly contain each of a set of points. Cost: a sort plus the pairs found.

/// A half-open time interval `[start, end)` with a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span<T> {
    /// Start (ns).
    pub start: i64,
    /// End (ns); may be below `start` in malformed data (then it overlaps nothing after it).
    pub end: i64,
    /// What the interval carries.
    pub data: T,
}

/// Spans without a payload from `(start, end)` pairs.
pub fn spans(v: impl IntoIterator<Item = (i64, i64)>) -> Vec<Span<()>> {
    v.into_iter()
        .map(|(start, end)| Span {
            start,
            end,
            data: (),
        })
        .collect()
}

/// Sorts spans by start (then end), as [`overlaps`] expects.
pub fn sort<T>(v: &mut [Span<T>]) {
    v.sort_by(|a, b| a.start.cmp(&b.start).then(a.end.cmp(&b.end)));
}

/// The union of `[start, end)` intervals in any order: sorted and disjoint, touching ones joined.
pub fn union(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Calls `f(a, b, overlap_ns)` for every pair with `b.start < a.end && b.end > a.start`, the
/// overlap being `min(a.end, b.end) - max(a.start, b.start)`. Both slices must be sorted by
/// start ([`sort`]). Each pair is reported once, whatever the data (nested or overlapping
/// intervals within one set included).
pub fn overlaps<A, B>(a: &[Span<A>], b: &[Span<B>], mut f: impl FnMut(&Span<A>, &Span<B>, i64)) {
    // Pairs where b starts at or after a: b.start in [a.start, a.end), a contiguous run of b.
    // Pairs where b starts before a: b is still open at a.start; kept in `open` by a sweep.
    let mut open: Vec<usize> = Vec::new();
    let mut next = 0;
    for x in a {
        while next < b.len() && b[next].start < x.start {
            open.push(next);
            next += 1;
        }
        open.retain(|&j| b[j].end > x.start);
        for &j in &open {
            let y = &b[j];
            if y.start < x.end {
                f(x, y, x.end.min(y.end) - x.start.max(y.start));
            }
        }
        let lo = next;
        let hi = lo + b[lo..].partition_point(|y| y.start < x.end);
        for y in &b[lo..hi] {
            if y.end > x.start {
                f(x, y, x.end.min(y.end) - x.start.max(y.start));
            }
        }
    }
}

/// For `points`, the number of (point, interval) pairs with `start < point < end`.
/// `starts` and `ends` are the intervals' bounds, each sorted ascending, of intervals with
/// `start < end` only (an empty interval contains no point).
pub fn strictly_inside(points: &[i64], starts: &[i64], ends: &[i64]) -> i64 {
    // #{start < t < end} = #{start < t} - #{end <= t}, since end <= t implies start < t.
    points
        .iter()
        .map(|&t| {
            let begun = starts.partition_point(|&s| s < t);
            let ended = ends.partition_point(|&e| e <= t);
            (begun - ended) as i64
        })
        .sum()
}

/// i128 sums as i64, saturating (sums of pointers in arg0 can exceed i64).
pub fn sat(x: i128) -> i64 {
    i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_union_joins_overlapping_and_touching_intervals() {
        let u = union(vec![
            (50, 60),
            (0, 10),
            (5, 20),
            (20, 30),
            (40, 45),
            (41, 42),
        ]);
        assert_eq!(u, [(0, 30), (40, 45), (50, 60)]);
        assert!(union(Vec::new()).is_empty());
    }

    fn lcg(s: &mut u64) -> i64 {
        *s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        ((*s >> 33) % 1000) as i64
    }

    fn spans(s: &mut u64, n: usize, max_len: i64) -> Vec<Span<usize>> {
        (0..n)
            .map(|i| {
                let start = lcg(s);
                // Mostly well-formed, some empty and some reversed intervals.
                let len = lcg(s) % max_len - max_len / 10;
                Span {
                    start,
                    end: start + len,
                    data: i,
                }
            })
            .collect()
    }

    #[test]
    fn overlaps_equal_the_pairwise_join() {
        let mut seed = 7;
        for round in 0..200 {
            let mut a = spans(&mut seed, 1 + round % 40, 1 + (round as i64 % 7) * 60);
            let mut b = spans(&mut seed, 1 + round % 53, 1 + (round as i64 % 5) * 90);
            let mut want: Vec<(usize, usize, i64)> = Vec::new();
            for x in &a {
                for y in &b {
                    if y.start < x.end && y.end > x.start {
                        want.push((x.data, y.data, x.end.min(y.end) - x.start.max(y.start)));
                    }
                }
            }
            sort(&mut a);
            sort(&mut b);
            let mut got = Vec::new();
            overlaps(&a, &b, |x, y, ov| got.push((x.data, y.data, ov)));
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn strictly_inside_counts_pairs() {
        let mut seed = 11;
        for round in 0..100 {
            let iv = spans(&mut seed, 1 + round % 30, 200);
            let mut pts: Vec<i64> = (0..1 + round % 25).map(|_| lcg(&mut seed)).collect();
            let want: i64 = pts
                .iter()
                .map(|&t| iv.iter().filter(|y| y.start < t && t < y.end).count() as i64)
                .sum();
            pts.sort_unstable();
            let ok: Vec<&Span<usize>> = iv.iter().filter(|y| y.start < y.end).collect();
            let mut starts: Vec<i64> = ok.iter().map(|y| y.start).collect();
            let mut ends: Vec<i64> = ok.iter().map(|y| y.end).collect();
            starts.sort_unstable();
            ends.sort_unstable();
            assert_eq!(strictly_inside(&pts, &starts, &ends), want, "round {round}");
        }
    }
}
