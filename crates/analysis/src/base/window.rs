//! Time windows over a trace, anchored to the trace's own end (not "now"): `--since 5m` is the
//! last five minutes of the recording; `--from`/`--until` take absolute or relative times.

use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

/// A point in a trace's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeRef {
    /// Absolute ns since the Unix epoch.
    Absolute(i64),
    /// ns after the trace's first event (`+30s`).
    AfterStart(i64),
    /// ns before the trace's last event (`-5m`).
    BeforeEnd(i64),
}

/// Why a time or duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {what} '{input}': {why}")]
pub struct TimeError {
    what: &'static str,
    input: String,
    why: String,
    hint: &'static str,
}

const TIME_HINT: &str = "use ns since the Unix epoch (1774099500000000000), RFC 3339 (2026-03-21T13:25:00Z), +DURATION after the trace start (+30s) or -DURATION before its end (-5m)";
const DURATION_HINT: &str =
    "use a duration such as 30s, 5m, 1h30m or 250ms (since: that much of the trace's end)";

impl TimeError {
    fn time(input: &str, why: String) -> TimeError {
        TimeError {
            what: "time",
            input: input.to_string(),
            why,
            hint: TIME_HINT,
        }
    }
}

impl causeway_hint::Hint for TimeError {
    /// The forms that are understood.
    fn hint(&self) -> Option<String> {
        Some({ self.hint }.to_string())
    }
}

causeway_hint::register!(TimeError);

fn parse_duration(s: &str) -> Result<i64, String> {
    humantime::parse_duration(s.trim())
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .map_err(|e| e.to_string())
}

/// Parses a duration such as `5m`, `250ms`, `1h30m` into ns.
pub fn parse_duration_ns(s: &str) -> Result<i64, TimeError> {
    parse_duration(s).map_err(|why| TimeError {
        what: "duration",
        input: s.to_string(),
        why,
        hint: DURATION_HINT,
    })
}

impl FromStr for TimeRef {
    type Err = TimeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let err = |why: String| TimeError::time(s, why);
        if let Some(rest) = t.strip_prefix('+') {
            return parse_duration(rest).map(TimeRef::AfterStart).map_err(err);
        }
        if let Some(rest) = t.strip_prefix('-') {
            return parse_duration(rest).map(TimeRef::BeforeEnd).map_err(err);
        }
        if let Ok(ns) = t.parse::<i64>() {
            return Ok(TimeRef::Absolute(ns));
        }
        humantime::parse_rfc3339_weak(t)
            .map_err(|e| err(e.to_string()))
            .and_then(|st| {
                st.duration_since(std::time::UNIX_EPOCH)
                    .map(|d| TimeRef::Absolute(d.as_nanos() as i64))
                    .map_err(|e| err(e.to_string()))
            })
    }
}

impl TimeRef {
    /// Resolves against a trace spanning `[first, last]`.
    pub fn resolve(self, first: i64, last: i64) -> i64 {
        match self {
            TimeRef::Absolute(ns) => ns,
            TimeRef::AfterStart(d) => first.saturating_add(d),
            TimeRef::BeforeEnd(d) => last.saturating_sub(d),
        }
    }
}

/// Which part of a trace to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowSpec {
    /// The whole trace.
    #[default]
    All,
    /// The last `ns` of the trace.
    Since(i64),
    /// Between two points (either may be open).
    Range {
        /// Start (inclusive).
        from: Option<TimeRef>,
        /// End (inclusive).
        until: Option<TimeRef>,
    },
}

impl WindowSpec {
    /// Builds a spec from CLI/tool arguments: `since` excludes `from`/`until`.
    pub fn from_args(
        since: Option<&str>,
        from: Option<&str>,
        until: Option<&str>,
    ) -> Result<WindowSpec, TimeError> {
        if let Some(s) = since {
            if from.is_some() || until.is_some() {
                return Err(TimeError {
                    what: "since",
                    input: s.to_string(),
                    why: "since cannot be combined with from/until".into(),
                    hint: "give either since, or from and/or until",
                });
            }
            return Ok(WindowSpec::Since(parse_duration_ns(s)?));
        }
        if from.is_none() && until.is_none() {
            return Ok(WindowSpec::All);
        }
        Ok(WindowSpec::Range {
            from: from.map(str::parse).transpose()?,
            until: until.map(str::parse).transpose()?,
        })
    }

    /// Resolves to absolute bounds against a trace spanning `[first, last]`.
    pub fn resolve(self, first: i64, last: i64) -> Window {
        let (from_ns, until_ns) = match self {
            WindowSpec::All => (first, last),
            WindowSpec::Since(d) => (last.saturating_sub(d), last),
            WindowSpec::Range { from, until } => (
                from.map_or(first, |t| t.resolve(first, last)),
                until.map_or(last, |t| t.resolve(first, last)),
            ),
        };
        Window { from_ns, until_ns }
    }
}

/// The schema that added the device timeline (`gpu_activity`).
pub const DEVICE_SCHEMA: u32 = 13;

const EVENTS_SPAN_SQL: &str = "SELECT count(*)::BIGINT, coalesce(min(timestamp), 0), coalesce(max(timestamp), 0) FROM event_rows";
const TRACE_SPAN_SQL: &str = "SELECT e.n, coalesce(least(e.f, g.f), 0), coalesce(greatest(e.l, g.l), 0) FROM (SELECT count(*)::BIGINT AS n, min(timestamp) AS f, max(timestamp) AS l FROM event_rows) e, (SELECT min(start_ns) AS f, max(end_ns) AS l FROM gpu_activity) g";

/// The trace's span, the one every command resolves its window against: (events stored, first
/// instant, last instant), from the first event's start to the last's, widened to the device
/// timeline where a profiler recorded one (the device runs behind the host: its work can end
/// after the host's last call, and that time is the trace's too).
pub fn trace_span(
    r: &causeway_store::Reader,
) -> Result<(i64, i64, i64), causeway_store::StoreError> {
    let sql = if r.schema_version() >= DEVICE_SCHEMA {
        TRACE_SPAN_SQL
    } else {
        EVENTS_SPAN_SQL
    };
    r.prepare_trusted(sql)?
        .query_row([], causeway_store::row)
        .map_err(crate::base::errors::duck(r, "reading the trace span"))
}

/// Absolute, inclusive bounds in ns since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Start.
    pub from_ns: i64,
    /// End.
    pub until_ns: i64,
}

impl Window {
    /// Length of the window.
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.until_ns.saturating_sub(self.from_ns).max(0) as u64)
    }

    /// Parameters of a query scoped the usual way, `... BETWEEN ? AND ? AND (? < 0 OR pid = ?)
    /// AND (? = '' OR node = ?) ... LIMIT ?`: the window, the pid (-1 for any), the node ('' for
    /// any) and the limit.
    pub fn scoped(
        &self,
        pid: Option<u32>,
        node: Option<&str>,
        limit: usize,
    ) -> causeway_store::duckdb::ParamsFromIter<Vec<causeway_store::duckdb::types::Value>> {
        use causeway_store::duckdb::types::Value;
        let pid = pid.map_or(-1, i64::from);
        let node = node.unwrap_or("").to_string();
        causeway_store::duckdb::params_from_iter(vec![
            Value::BigInt(self.from_ns),
            Value::BigInt(self.until_ns),
            Value::BigInt(pid),
            Value::BigInt(pid),
            Value::Text(node.clone()),
            Value::Text(node),
            Value::BigInt(limit as i64),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_anchored_to_trace_end() {
        let w = WindowSpec::from_args(Some("5s"), None, None)
            .unwrap()
            .resolve(1_000, 100_000_000_000);
        assert_eq!(w.from_ns, 95_000_000_000);
        assert_eq!(w.until_ns, 100_000_000_000);
    }

    #[test]
    fn relative_and_absolute_times() {
        assert_eq!(
            "+1s".parse::<TimeRef>().unwrap(),
            TimeRef::AfterStart(1_000_000_000)
        );
        assert_eq!(
            "-2ms".parse::<TimeRef>().unwrap(),
            TimeRef::BeforeEnd(2_000_000)
        );
        assert_eq!("42".parse::<TimeRef>().unwrap(), TimeRef::Absolute(42));
        assert_eq!(
            "1970-01-01T00:00:01Z".parse::<TimeRef>().unwrap(),
            TimeRef::Absolute(1_000_000_000)
        );
        let e = "yesterday".parse::<TimeRef>().unwrap_err();
        assert!(
            e.to_string().contains("cannot read time 'yesterday'")
                && causeway_hint::Hint::hint(&e).is_some_and(|h| h.contains("-5m")),
            "{e}"
        );
    }

    #[test]
    fn since_excludes_range() {
        assert!(WindowSpec::from_args(Some("5m"), Some("+1s"), None).is_err());
    }
}
