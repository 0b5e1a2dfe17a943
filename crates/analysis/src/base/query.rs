//! What the engine is asked: the window, process and node to analyse and how many chains, with
//! the prices that turn time lost into money (the `[cost]` table of the config file).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fmt::sig3;
use crate::window::WindowSpec;

/// Which chains to return.
#[derive(Debug, Clone, Default)]
pub struct ChainQuery {
    /// Time window (anchored to the trace end).
    pub window: WindowSpec,
    /// Only this process.
    pub pid: Option<u32>,
    /// Only this node.
    pub node: Option<String>,
    /// At most this many, best first.
    pub top_n: Option<usize>,
    /// Prices per GPU-hour for the findings' cost.
    pub prices: Prices,
}

/// Prices per GPU-hour: the `[cost]` table of the config file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Price of one GPU for one hour, for GPU models `models` does not name.
    #[serde(default)]
    pub gpu_hour: Option<f64>,
    /// Prices per GPU model: a key matches a model that contains it (case-insensitive; the
    /// longest matching key wins), e.g. `"H100" = 4.0`.
    #[serde(default)]
    pub models: BTreeMap<String, f64>,
    /// Currency the prices are in ("USD" or "$" print as `$1.23`; anything else follows the
    /// amount). Default: USD.
    #[serde(default)]
    pub currency: Option<String>,
}

/// A price that is not a price.
#[derive(Debug, thiserror::Error)]
#[error("[cost] {what} = {value}: a price per GPU-hour must be a finite number >= 0")]
pub struct BadPrice {
    what: String,
    value: f64,
}

impl Prices {
    /// Checks every price is a finite number >= 0.
    pub fn validate(&self) -> Result<(), BadPrice> {
        let all = self
            .gpu_hour
            .map(|v| ("gpu_hour".to_string(), v))
            .into_iter()
            .chain(
                self.models
                    .iter()
                    .map(|(k, v)| (format!("models.\"{k}\""), *v)),
            );
        for (what, value) in all {
            if !value.is_finite() || value < 0.0 {
                return Err(BadPrice { what, value });
            }
        }
        Ok(())
    }

    /// The price of one GPU-hour of `model`, where one is configured.
    pub fn for_model(&self, model: &str) -> Option<f64> {
        let m = model.to_lowercase();
        self.models
            .iter()
            .filter(|(k, _)| !k.is_empty() && m.contains(&k.to_lowercase()))
            .max_by_key(|(k, _)| k.len())
            .map(|(_, v)| *v)
            .or(self.gpu_hour)
    }

    /// `amount` in the configured currency, e.g. "$7.75" or "7.75 EUR".
    pub fn money(&self, amount: f64) -> String {
        money(amount, self.currency.as_deref().unwrap_or_default())
    }
}

/// `amount` in `currency`: "$7.75" for USD (or "$" or none), else "7.75 EUR"; amounts under
/// one with 3 significant digits ("$0.0382").
pub fn money(amount: f64, currency: &str) -> String {
    let a = if amount.abs() >= 1.0 || amount == 0.0 {
        format!("{amount:.2}")
    } else {
        sig3(amount)
    };
    match currency.trim() {
        "" | "$" | "USD" => format!("${a}"),
        c => format!("{a} {c}"),
    }
}
