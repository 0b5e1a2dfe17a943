//! Launches grouped by kernel (store: `kernels`, `kernel_launches`): how often each kernel was
//! launched and what its launch calls cost on the host, for `stats` and the MCP tools alike.

use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::window::Window;

/// One kernel's launches in a window. Durations are the host-side launch calls, not the
/// kernel's time on the GPU.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KernelStats {
    /// Demangled name without parameters.
    pub kernel: String,
    /// Demangled full signature (overloads and template instances apart).
    pub signature: String,
    /// File name of the module holding its host stub.
    pub module: String,
    /// Launches.
    pub launches: u64,
    /// Median launch call duration (ns, exact).
    pub p50_ns: i64,
    /// 99th percentile (ns, exact).
    pub p99_ns: i64,
    /// Sum of launch call durations (ns).
    pub total_ns: i64,
}

const ANY_SQL: &str = "SELECT count(*) > 0 FROM kernels";

const TOP_SQL: &str = "
SELECT any_value(kernel), kernel_symbol, min(kernel_module), count(*)::BIGINT,
       quantile_disc(duration, 0.5)::BIGINT, quantile_disc(duration, 0.99)::BIGINT,
       (CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 ELSE sum(duration) END)::BIGINT
FROM kernel_launches
WHERE timestamp BETWEEN ? AND ? AND (? < 0 OR pid = ?) AND (? = '' OR node = ?)
GROUP BY kernel_symbol
ORDER BY 7 DESC, 4 DESC, 1, 2
LIMIT ?
";

/// The `limit` kernels whose launches cost the most host time in the window (most launched
/// first on ties); empty where no launch was named (imported traces, schema < 7).
pub fn top(
    r: &Reader,
    window: &Window,
    pid: Option<u32>,
    node: Option<&str>,
    limit: usize,
) -> Result<Vec<KernelStats>, StoreError> {
    if !crate::coverage::has_rows(r, ANY_SQL, "reading kernels")? {
        return Ok(Vec::new());
    }
    r.prepare_trusted(TOP_SQL)?
        .query_map(window.scoped(pid, node, limit), |row| {
            Ok(KernelStats {
                kernel: row.get(0)?,
                signature: causeway_store::symbols::signature(&row.get::<_, String>(1)?),
                module: row.get(2)?,
                launches: row.get::<_, i64>(3)? as u64,
                p50_ns: row.get(4)?,
                p99_ns: row.get(5)?,
                total_ns: row.get(6)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(crate::base::errors::duck(r, "grouping launches by kernel"))
}

#[cfg(test)]
mod tests {
    use causeway_store::{Event, KernelName, Writer, WriterOptions};

    use crate::stats::{StatsQuery, trace_stats};
    use causeway_demo::model::op;

    const T0: i64 = 1_700_000_000_000_000_000;

    /// Launches of two kernels from two addresses each in two processes, and one unnamed:
    /// `stats` groups the named ones by kernel, the costlier first, with exact percentiles.
    #[test]
    fn stats_group_named_launches_by_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.duckdb");
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        // (pid, address, duration) of each launch.
        let mut launches = Vec::new();
        for i in 0..100i64 {
            launches.push((1u32, 0x1000i64, 5_000 + i)); // gemm, pid 1
            launches.push((2u32, 0x2000i64, 6_000 + i)); // gemm again, pid 2's own address
        }
        for i in 0..10i64 {
            launches.push((1, 0x3000, 50_000 + i)); // norm: fewer, dearer in all
        }
        launches.push((1, 0x9999, 1_000_000)); // not named
        for (n, &(pid, address, d)) in launches.iter().enumerate() {
            w.append(&Event {
                timestamp: T0 + n as i64 * 100_000,
                duration: d,
                pid,
                tid: pid,
                op_id: op("cudaLaunchKernel"),
                arg0: address,
                ..Event::default()
            })
            .unwrap();
        }
        let k = |pid, address, id, name: &str| KernelName {
            pid,
            address,
            kernel_id: id,
            name: name.into(),
            symbol: format!("_Z{name}"),
            module: "libk.so".into(),
        };
        w.record_kernels(&[
            k(1, 0x1000, 1, "gemm"),
            k(2, 0x2000, 1, "gemm"),
            k(1, 0x3000, 2, "norm"),
        ])
        .unwrap();
        w.finish().unwrap();
        let r = causeway_store::Reader::open(&p).unwrap();
        let s = trace_stats(&r, &StatsQuery::default()).unwrap();
        let got: Vec<(&str, u64, i64, i64, i64)> = s
            .kernels
            .iter()
            .map(|k| {
                (
                    k.kernel.as_str(),
                    k.launches,
                    k.p50_ns,
                    k.p99_ns,
                    k.total_ns,
                )
            })
            .collect();
        // gemm: 200 launches, 5,000..5,099 and 6,000..6,099 ns; norm: 10, 50,000..50,009.
        let gemm_total: i64 = (0..100).map(|i| 11_000 + 2 * i).sum();
        assert_eq!(
            got,
            [
                // p99 of 200: the 198th value (ceil(0.99 x 200)), 6,097.
                ("gemm", 200, 5_099, 6_097, gemm_total),
                ("norm", 10, 50_004, 50_009, 500_045)
            ]
        );
        let one = trace_stats(
            &r,
            &StatsQuery {
                pid: Some(2),
                ..StatsQuery::default()
            },
        )
        .unwrap();
        assert_eq!(one.kernels.len(), 1);
        assert_eq!(one.kernels[0].launches, 100);
    }

    /// Issue 50: two overloads of one kernel were one row under their short name.
    #[test]
    fn overloads_stay_apart_with_their_signatures() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.duckdb");
        let mut w = Writer::create(&p, WriterOptions::default()).unwrap();
        for (n, (address, d)) in [(0x1000, 5_000), (0x2000, 9_000)]
            .into_iter()
            .cycle()
            .take(30)
            .enumerate()
        {
            w.append(&Event {
                timestamp: T0 + n as i64 * 100_000,
                duration: d,
                pid: 1,
                tid: 1,
                op_id: op("cudaLaunchKernel"),
                arg0: address,
                ..Event::default()
            })
            .unwrap();
        }
        let k = |address, id, symbol: &str| KernelName {
            pid: 1,
            address,
            kernel_id: id,
            name: "saxpy_forward".into(),
            symbol: symbol.into(),
            module: "libk.so".into(),
        };
        w.record_kernels(&[
            k(0x1000, 1, "_Z13saxpy_forwardPfPKffi"),
            k(0x2000, 2, "_Z13saxpy_forwardPdPKddi"),
        ])
        .unwrap();
        w.finish().unwrap();
        let r = causeway_store::Reader::open(&p).unwrap();
        let s = trace_stats(&r, &StatsQuery::default()).unwrap();
        let got: Vec<(&str, &str, u64)> = s
            .kernels
            .iter()
            .map(|k| (k.kernel.as_str(), k.signature.as_str(), k.launches))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "saxpy_forward",
                    "saxpy_forward(double*, double const*, double, int)",
                    15
                ),
                (
                    "saxpy_forward",
                    "saxpy_forward(float*, float const*, float, int)",
                    15
                ),
            ]
        );
    }
}
