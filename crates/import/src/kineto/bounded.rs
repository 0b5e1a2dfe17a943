//! The byte stream a Kineto trace is parsed from, with the limits that keep a hostile file from
//! taking the machine: gzip undone (members concatenated, as `gzip` writes them) and the
//! decompressed size capped (gzip bomb). The caps on one string's length, the nesting depth and
//! one value's size (JSON bomb) are enforced by the splitter ([`super::split`]), before it buffers
//! or the parser recurses into them: serde_json buffers a whole string before handing it over and
//! has no length cap, and its recursion limit cannot be named in a message.

use std::io::{self, BufReader, Read};

use std::path::Path;

use flate2::read::MultiGzDecoder;

/// The caps a trace is read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Most bytes of JSON one file may hold after decompression.
    pub max_bytes: u64,
    /// Most bytes of JSON per compressed byte of a gzip file (deflate reaches ~1000:1 on
    /// repeated bytes; traces compress 10-30:1). Applied once the JSON is past `max_bytes / 64`.
    pub max_ratio: u64,
    /// Longest string, in bytes as written (escapes count as written).
    pub max_string: u64,
    /// Deepest nesting of arrays and objects.
    pub max_depth: u32,
    /// Largest trace event, or value of a top-level key, in bytes as written: the most the
    /// import holds in memory at once.
    pub max_value: u64,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_bytes: 64 << 30,
            max_ratio: 200,
            max_string: 16 << 20,
            max_depth: 64,
            max_value: 64 << 20,
        }
    }
}

/// Which limit a file broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Breach {
    /// More JSON than `max_bytes`, or than `max_ratio` times the compressed size.
    #[error("decompresses to more than {limit} bytes of JSON ({why})")]
    TooLarge {
        /// The cap reached, in bytes.
        limit: u64,
        /// Which cap.
        why: &'static str,
    },
    /// A string longer than `max_string`.
    #[error("holds a string longer than {limit} bytes at byte {at}")]
    LongString {
        /// The cap.
        limit: u64,
        /// Offset of the string's start in the JSON.
        at: u64,
    },
    /// One trace event, or the value of a top-level key, larger than `max_value`.
    #[error("holds a trace event or top-level value larger than {limit} bytes at byte {at}")]
    LongValue {
        /// The cap.
        limit: u64,
        /// Offset of the value's start in the JSON.
        at: u64,
    },
    /// Arrays and objects nested deeper than `max_depth`.
    #[error("nests arrays and objects deeper than {limit} levels at byte {at}")]
    TooDeep {
        /// The cap.
        limit: u32,
        /// Offset in the JSON.
        at: u64,
    },
}

/// What a file starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// gzip magic.
    Gzip,
    /// JSON text (an object or array, after optional whitespace and a UTF-8 byte-order mark).
    Json,
}

/// Tells gzip and JSON apart by the first bytes; None for anything else.
pub fn sniff(head: &[u8]) -> Option<Container> {
    if head.starts_with(&[0x1f, 0x8b]) {
        return Some(Container::Gzip);
    }
    let body = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') => Some(Container::Json),
        _ => None,
    }
}

/// A JSON byte stream under the size caps of `limits`.
pub struct Bounded<R> {
    inner: R,
    limits: JsonLimits,
    /// The compressed size, for a gzip file.
    compressed: Option<u64>,
    read: u64,
    /// A byte-order mark at the very start is dropped (serde_json refuses it).
    at_start: bool,
}

impl<R: Read> Bounded<R> {
    fn new(inner: R, limits: JsonLimits, compressed: Option<u64>) -> Self {
        Bounded {
            inner,
            limits,
            compressed,
            read: 0,
            at_start: true,
        }
    }

    fn check(&self, end: u64) -> Result<(), Breach> {
        if end > self.limits.max_bytes {
            return Err(Breach::TooLarge {
                limit: self.limits.max_bytes,
                why: "the import's cap",
            });
        }
        if let Some(c) = self.compressed {
            let ratio_cap = c.saturating_mul(self.limits.max_ratio);
            if end > self.limits.max_bytes / 64 && end > ratio_cap {
                return Err(Breach::TooLarge {
                    limit: ratio_cap,
                    why: "far more than gzip makes of a trace: a gzip bomb",
                });
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = self.inner.read(buf)?;
        if self.at_start && n > 0 {
            self.at_start = false;
            if buf[..n].starts_with(b"\xEF\xBB\xBF") {
                buf.copy_within(3..n, 0);
                n -= 3;
            }
        }
        self.read += n as u64;
        self.check(self.read).map_err(io::Error::other)?;
        Ok(n)
    }
}

/// Opens `path` (gzip or plain JSON, told by content) as a bounded JSON stream (unbuffered: the
/// splitter reads it in large blocks).
pub fn open(
    path: &Path,
    container: Container,
    limits: JsonLimits,
) -> io::Result<Bounded<Box<dyn Read>>> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let (inner, compressed): (Box<dyn Read>, _) = match container {
        Container::Gzip => (
            Box::new(MultiGzDecoder::new(BufReader::with_capacity(1 << 16, file))),
            Some(len),
        ),
        Container::Json => (Box::new(file), None),
    };
    Ok(Bounded::new(inner, limits, compressed))
}

/// The limit breached, when an I/O error is one.
pub fn breach(e: &io::Error) -> Option<Breach> {
    e.get_ref()?.downcast_ref::<Breach>().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(json: &[u8], limits: JsonLimits) -> Result<Vec<u8>, Breach> {
        let mut r = Bounded::new(json, limits, None);
        let mut out = Vec::new();
        match r.read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) => Err(breach(&e).expect("a breach")),
        }
    }

    #[test]
    fn the_size_is_capped() {
        let limits = JsonLimits {
            max_bytes: 4,
            ..JsonLimits::default()
        };
        assert!(read_all(b"[1,2]", limits).is_err());
        assert!(read_all(b"[12]", limits).is_ok());
    }

    #[test]
    fn a_byte_order_mark_is_dropped_and_sniffed() {
        let json = b"\xEF\xBB\xBF {\"a\":1}";
        assert_eq!(sniff(json), Some(Container::Json));
        assert_eq!(
            read_all(json, JsonLimits::default()).unwrap(),
            b" {\"a\":1}"
        );
        assert_eq!(sniff(b"SQLite format 3\0"), None);
        assert_eq!(sniff(&[0x1f, 0x8b, 8]), Some(Container::Gzip));
    }
}
