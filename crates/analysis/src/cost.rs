//! What a finding costs: its time lost times the GPUs the processes it is about hold, in
//! GPU-hours, and in money at a configured price per GPU-hour (`[cost]` in the config file),
//! with a day's worth at the window's rate as an estimate.

use std::collections::{BTreeMap, BTreeSet};

use causeway_store::{Reader, StoreError};
use serde::{Deserialize, Serialize};

use crate::base::errors::duck;
pub use crate::base::query::{BadPrice, Prices, money};
use crate::chains::Chain;
use crate::facts::Ctx;
pub use crate::fmt::sig3;

/// What one finding costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// GPUs held by the processes the finding is about.
    pub gpus: u32,
    /// How they were counted: "device timeline", "CUDA_VISIBLE_DEVICES", "device files", or
    /// "assumed" (one per GPU-calling process) (joined with ", " where mixed).
    pub gpus_from: String,
    /// Time lost x GPUs, in GPU-hours.
    pub gpu_hours: f64,
    /// An estimate: GPU-hours lost in a day at the window's rate (`gpu_hours` x 24 h / window).
    pub gpu_hours_per_day: f64,
    /// The nodes' GPU model, where recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gpu_model: String,
    /// The configured price per GPU-hour that applies, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<f64>,
    /// `gpu_hours` x price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<f64>,
    /// An estimate: `gpu_hours_per_day` x price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_per_day: Option<f64>,
    /// The prices' currency ("USD" unless configured), with a price.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub currency: String,
}

/// `v` to 6 significant digits: what the figures are worth, in fewer characters.
fn sig6(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(5 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// One process's GPUs: how they were counted and their identities on the node.
struct Held {
    from: &'static str,
    ids: Vec<String>,
}

const FROM_TIMELINE: &str = "device timeline";
const FROM_VISIBLE: &str = "CUDA_VISIBLE_DEVICES";
const FROM_FILES: &str = "device files";
const FROM_ASSUMED: &str = "assumed";

/// `CUDA_VISIBLE_DEVICES`'s devices in a `processes.gpu_visible` value
/// ("CUDA_VISIBLE_DEVICES=0,1; NVIDIA_VISIBLE_DEVICES=all"); None when unset or empty.
fn visible(v: &str) -> Option<Vec<String>> {
    let list = v
        .split(';')
        .find_map(|kv| kv.trim().strip_prefix("CUDA_VISIBLE_DEVICES="))?;
    // The runtime stops at the first invalid entry; a negative one hides every later device.
    let ids: Vec<String> = list
        .split(',')
        .map(str::trim)
        .take_while(|d| !d.is_empty() && !d.starts_with('-'))
        .map(str::to_string)
        .collect();
    (!ids.is_empty()).then_some(ids)
}

/// The NVIDIA device files in a `processes.gpu_devices` value ("nvidia0,nvidia3").
fn files(v: &str) -> Option<Vec<String>> {
    let ids: Vec<String> = v
        .split(',')
        .filter_map(|f| f.trim().strip_prefix("nvidia"))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string)
        .collect();
    (!ids.is_empty()).then_some(ids)
}

const PLACED_SQL: &str = "SELECT node, pid, gpu_visible, gpu_devices FROM processes";
const TIMELINE_SQL: &str = "
SELECT node, pid, string_agg(DISTINCT device::VARCHAR, ',') FROM gpu_activity
WHERE start_ns <= ? AND end_ns >= ? GROUP BY ALL";
const MODELS_SQL: &str = "
SELECT node, string_agg(DISTINCT gpu_model, ', ' ORDER BY gpu_model) FROM sessions
WHERE gpu_model <> '' GROUP BY node";

/// Sets each chain's cost: its time lost times the GPUs of the process its scope names (else
/// of every GPU-calling process on its node, or in the trace for a trace-wide chain), priced
/// from `prices` where a price applies.
pub fn price(
    r: &Reader,
    ctx: &Ctx<'_>,
    chains: &mut [Chain],
    prices: &Prices,
) -> Result<(), StoreError> {
    if chains.is_empty() {
        return Ok(());
    }
    let mut held: BTreeMap<(String, u32), Held> = BTreeMap::new();
    if r.schema_version() >= 13 {
        let rows: Vec<(String, u32, String)> = r
            .prepare_trusted(TIMELINE_SQL)?
            .query_map(
                [ctx.window.until_ns, ctx.window.from_ns],
                causeway_store::row,
            )
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading the GPUs on the device timeline"))?;
        for (node, pid, ids) in rows {
            let ids = ids.split(',').map(str::to_string).collect();
            held.insert(
                (node, pid),
                Held {
                    from: FROM_TIMELINE,
                    ids,
                },
            );
        }
    }
    if r.schema_version() >= 9 {
        let rows: Vec<(String, u32, String, String)> = r
            .prepare_trusted(PLACED_SQL)?
            .query_map([], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading the processes' GPUs"))?;
        for (node, pid, vis, dev) in rows {
            let found = visible(&vis)
                .map(|ids| (FROM_VISIBLE, ids))
                .or_else(|| files(&dev).map(|ids| (FROM_FILES, ids)));
            if let Some((from, ids)) = found {
                held.entry((node, pid)).or_insert(Held { from, ids });
            }
        }
    }
    let models: BTreeMap<String, String> = r
        .prepare_trusted(MODELS_SQL)?
        .query_map([], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the GPU models"))?;
    let gpu_pids: BTreeSet<(String, u32)> = ctx
        .threads
        .iter()
        .filter(|t| t.gpu_calls > 0)
        .map(|t| (t.node.clone(), t.pid))
        .collect();
    let window_ns = (ctx.window.until_ns - ctx.window.from_ns).max(1);
    for c in chains.iter_mut() {
        let procs: Vec<(String, u32)> = match &c.scope {
            Some(s) => vec![(s.node.clone(), s.pid)],
            None => gpu_pids
                .iter()
                .filter(|(n, _)| c.node.is_empty() || *n == c.node)
                .cloned()
                .collect(),
        };
        let mut ids: BTreeSet<(String, &str, String)> = BTreeSet::new();
        let mut from: BTreeSet<&str> = BTreeSet::new();
        let mut unknown = 0u32;
        for (node, pid) in &procs {
            match held.get(&(node.clone(), *pid)) {
                Some(h) => {
                    from.insert(h.from);
                    for id in &h.ids {
                        ids.insert((node.clone(), h.from, id.clone()));
                    }
                }
                None => {
                    from.insert(FROM_ASSUMED);
                    unknown += 1;
                }
            }
        }
        let gpus = ids.len() as u32 + unknown;
        if gpus == 0 || c.time_lost_ns <= 0 {
            continue;
        }
        let nodes: BTreeSet<&str> = procs.iter().map(|(n, _)| n.as_str()).collect();
        let model = nodes
            .iter()
            .filter_map(|n| models.get(*n))
            .cloned()
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ");
        let gpu_hours = sig6(c.time_lost_ns as f64 * gpus as f64 / 3.6e12);
        let per_day = sig6(gpu_hours * 86_400e9 / window_ns as f64);
        let price = prices.for_model(&model);
        c.cost = Some(Cost {
            gpus,
            gpus_from: from.into_iter().collect::<Vec<_>>().join(", "),
            gpu_hours,
            gpu_hours_per_day: per_day,
            gpu_model: model,
            price_per_gpu_hour: price,
            amount: price.map(|p| sig6(p * gpu_hours)),
            amount_per_day: price.map(|p| sig6(p * per_day)),
            currency: match price {
                Some(_) => prices
                    .currency
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .unwrap_or_else(|| "USD".into()),
                None => String::new(),
            },
        });
    }
    Ok(())
}

/// One line for people and agents: "0.00956 GPU-hours (2 GPUs, CUDA_VISIBLE_DEVICES), ~41.3 a
/// day at this rate (estimate); $0.0382 at $4.00/GPU-hour (NVIDIA H100 80GB HBM3), ~$165 a day".
pub fn line(c: &Cost) -> String {
    let gpus = match c.gpus_from.as_str() {
        FROM_ASSUMED => format!("{} GPU{}, 1 per process assumed", c.gpus, plural(c.gpus)),
        from => format!("{} GPU{}, {from}", c.gpus, plural(c.gpus)),
    };
    let mut s = format!(
        "{} GPU-hours ({gpus}), ~{} a day at this rate (estimate)",
        sig3(c.gpu_hours),
        sig3(c.gpu_hours_per_day)
    );
    if let (Some(p), Some(a), Some(d)) = (c.price_per_gpu_hour, c.amount, c.amount_per_day) {
        s.push_str(&format!(
            "; {} at {}/GPU-hour{}, ~{} a day",
            money(a, &c.currency),
            money(p, &c.currency),
            if c.gpu_model.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.gpu_model)
            },
            money(d, &c.currency)
        ));
    }
    s
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices_stop_at_the_first_invalid_entry() {
        assert_eq!(
            visible("CUDA_VISIBLE_DEVICES=0,1; NVIDIA_VISIBLE_DEVICES=all"),
            Some(vec!["0".into(), "1".into()])
        );
        assert_eq!(
            visible("CUDA_VISIBLE_DEVICES=2,-1,3"),
            Some(vec!["2".into()])
        );
        assert_eq!(visible("CUDA_VISIBLE_DEVICES="), None);
        assert_eq!(visible("NVIDIA_VISIBLE_DEVICES=all"), None);
        assert_eq!(
            files("nvidia0,nvidia3,nvidiactl"),
            Some(vec!["0".into(), "3".into()])
        );
    }

    #[test]
    fn the_longest_matching_model_key_sets_the_price() {
        let p = Prices {
            gpu_hour: Some(2.5),
            models: [("H100".to_string(), 4.0), ("H100 NVL".to_string(), 5.0)]
                .into_iter()
                .collect(),
            currency: None,
        };
        assert_eq!(p.for_model("NVIDIA H100 NVL"), Some(5.0));
        assert_eq!(p.for_model("NVIDIA H100 80GB HBM3"), Some(4.0));
        assert_eq!(p.for_model("NVIDIA A100-SXM4-40GB"), Some(2.5));
        assert_eq!(Prices::default().for_model("H100"), None);
        assert_eq!(p.money(7.75), "$7.75");
        let eur = Prices {
            currency: Some("EUR".into()),
            ..p
        };
        assert_eq!(eur.money(0.0055), "0.00550 EUR");
        assert_eq!(money(0.03824, "USD"), "$0.0382");
        let bad = Prices {
            gpu_hour: Some(-1.0),
            ..Prices::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(0.002211), "0.00221");
        assert_eq!(sig3(3.45678), "3.46");
        assert_eq!(sig3(123.4), "123");
        assert_eq!(sig3(12345.6), "12346");
    }
}
