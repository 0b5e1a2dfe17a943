//! The prices per GPU-hour every command prices findings at: `[cost]` of the file named by
//! `$CAUSEWAY_CONFIG`, else `$XDG_CONFIG_HOME/causeway/config.toml` (else
//! `~/.config/causeway/config.toml`); none when there is no such file (GPU-hours only).

use std::path::{Path, PathBuf};

use anyhow::Result;
use causeway_analysis::cost::Prices;
use causeway_store::Hinted;
use serde::Deserialize;

/// The config file's tables this reads; others (an agent config's) are left to their readers.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    cost: Option<Prices>,
}

/// Where the config file is looked for.
pub fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAUSEWAY_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("causeway").join("config.toml"))
}

/// The configured prices; the default (none) when no config file exists.
pub fn load() -> Result<Prices> {
    let Some(p) = path() else {
        return Ok(Prices::default());
    };
    let named = std::env::var_os("CAUSEWAY_CONFIG").is_some_and(|v| !v.is_empty());
    match std::fs::read_to_string(&p) {
        Ok(text) => parse(&text, &p),
        // Only a file the user named must exist.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => Ok(Prices::default()),
        Err(e) => Err(anyhow::anyhow!(Hinted::new(
            format!("config {}: {e}", p.display()),
            "set CAUSEWAY_CONFIG to a readable TOML file, or unset it"
        ))),
    }
}

/// A TOML error in one line: "WHAT PATH (line N): MESSAGE".
pub fn toml_error(what: &str, path: &Path, text: &str, e: &toml::de::Error) -> String {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
    let at = line.map_or(String::new(), |l| format!(" (line {l})"));
    format!(
        "{what} {}{at}: {}",
        path.display(),
        e.message().lines().next().unwrap_or("malformed")
    )
}

/// `[cost]` of the config `text` (read from `path`, named in errors).
pub fn parse(text: &str, path: &Path) -> Result<Prices> {
    let hint = "e.g. [cost] gpu_hour = 2.50, and per GPU model [cost.models] \"H100\" = 4.00 (docs/cli.md, Cost)";
    let f: File = toml::from_str(text)
        .map_err(|e| anyhow::anyhow!(Hinted::new(toml_error("config", path, text, &e), hint)))?;
    let prices = f.cost.unwrap_or_default();
    prices.validate().map_err(|e| {
        anyhow::anyhow!(Hinted::new(format!("config {}: {e}", path.display()), hint))
    })?;
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_read_beside_other_tables_and_bad_prices_are_refused() {
        let p = Path::new("c.toml");
        let got = parse(
            "data_dir = \"/x\"\n[cost]\ngpu_hour = 2.5\ncurrency = \"EUR\"\n[cost.models]\n\"H100\" = 4.0\n",
            p,
        )
        .unwrap();
        assert_eq!(got.gpu_hour, Some(2.5));
        assert_eq!(got.for_model("NVIDIA H100 80GB HBM3"), Some(4.0));
        assert_eq!(parse("", p).unwrap(), Prices::default());
        let e = parse("[cost]\ngpu_hour = -3.0\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gpu_hour = -3"), "{e}");
        let e = parse("[cost]\ngpu_hours = 3.0\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `gpu_hours`"), "{e}");
    }
}
