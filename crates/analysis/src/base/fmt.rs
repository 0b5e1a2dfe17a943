//! Small formatting helpers for chain texts and the report: human durations and counts.

/// ns -> "812 ns", "20.3 us", "5.08 ms", "8.94 s", "3m 12s".
pub fn dur(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if a < 1e3 {
        format!("{sign}{a} ns")
    } else if a < 1e6 {
        format!("{sign}{:.1} us", a / 1e3)
    } else if a < 1e9 {
        format!("{sign}{:.2} ms", a / 1e6)
    } else if a < 120e9 {
        format!("{sign}{:.2} s", a / 1e9)
    } else {
        let s = (a / 1e9) as u64;
        format!("{sign}{}m {}s", s / 60, s % 60)
    }
}

/// 12345678 -> "12,345,678".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes -> "1.5 GiB".
pub fn bytes(b: i64) -> String {
    let a = b.max(0) as f64;
    if a >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", a / (1u64 << 30) as f64)
    } else if a >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", a / (1u64 << 20) as f64)
    } else {
        format!("{} KiB", (a / 1024.0).round())
    }
}

/// "3 significant digits", for GPU-hours that range from milliseconds of one GPU to days.
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(dur(20_300), "20.3 us");
        assert_eq!(dur(8_935_952_000), "8.94 s");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
