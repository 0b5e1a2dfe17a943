//! The reference trace's stacks: its `stack_traces` table (IPs and symbolised frames), and the
//! stacks events carry inline (`stack_ips`), hashed as the reference tool hashes them.

use std::collections::{HashMap, HashSet};

use causeway_store::{Frame, Writer};

use super::SqliteTrace;
use crate::ImportError;

impl SqliteTrace {
    pub(super) fn copy_stacks(
        &self,
        w: &mut Writer,
        ip_stacks: &HashMap<i64, Vec<u64>>,
        seen: &mut HashSet<i64>,
    ) -> Result<u64, ImportError> {
        let mut stacks: Vec<(i64, Vec<Frame>)> = Vec::new();
        if self.tables.contains("stack_traces") {
            let mut st = self.sq(self
                .conn
                .prepare("SELECT hash, ips, frames FROM stack_traces"))?;
            let rows: Vec<(i64, String, String)> = self.sq(st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(|rows| rows.collect()))?;
            for (hash, ips, frames) in rows {
                if !seen.insert(hash) {
                    continue;
                }
                let ips = parse_ips(&ips);
                let parsed: Vec<serde_json::Value> =
                    serde_json::from_str(&frames).unwrap_or_default();
                let depth = ips.len().max(parsed.len());
                let frames = (0..depth)
                    .map(|d| {
                        let f = parsed.get(d);
                        let text = |k: &str| {
                            f.and_then(|f| f.get(k))
                                .and_then(|v| v.as_str())
                                .unwrap_or("")
                                .to_string()
                        };
                        let symbol = text("s");
                        Frame {
                            ip: ips
                                .get(d)
                                .copied()
                                .or_else(|| parse_hex(&text("i")))
                                .unwrap_or(0),
                            offset: symbol
                                .rsplit_once("+0x")
                                .and_then(|(_, o)| u64::from_str_radix(o, 16).ok())
                                .unwrap_or(0),
                            symbol,
                            module: text("f"),
                        }
                    })
                    .collect();
                stacks.push((hash, frames));
            }
        }
        for (hash, ips) in ip_stacks {
            if !seen.insert(*hash) {
                continue;
            }
            let frames = ips
                .iter()
                .map(|&ip| Frame {
                    ip,
                    ..Frame::default()
                })
                .collect();
            stacks.push((*hash, frames));
        }
        Ok(w.add_new_stacks(stacks.iter().map(|(h, f)| (*h, f.as_slice())))?)
    }
}

pub(super) fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

pub(super) fn parse_ips(text: &str) -> Vec<u64> {
    serde_json::from_str::<Vec<String>>(text)
        .unwrap_or_default()
        .iter()
        .filter_map(|s| parse_hex(s))
        .collect()
}

/// FNV-1a 64 over the little-endian bytes of the IPs (the reference tool's stack hash).
pub(super) fn fnv64(ips: &[u64]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for ip in ips {
        for b in ip.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ips_parse() {
        assert_eq!(parse_ips(r#"["0x10","0xff"]"#), vec![16, 255]);
        assert!(parse_ips("").is_empty());
    }
}
