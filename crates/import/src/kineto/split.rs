//! Splits a Kineto (Chrome trace) JSON stream into its top-level values and the elements of
//! `traceEvents`, each parsed from memory (serde_json over a slice, about twice as fast as its
//! byte-at-a-time reader interface). The stream is read in large blocks; the buffer holds one
//! value at a time, so memory follows the largest event, not the file.
//!
//! Two ways through the events. Scanned (the first pass): a scanner that tracks only strings,
//! escapes and brackets finds each event's end and the values of its top-level keys, enforcing
//! the caps on string length, nesting depth and value size before anything is buffered past
//! them. Parsed (the second pass): serde_json parses each event where it lies in the buffer and
//! says where it ends; an event cut by the buffer's end is parsed again once more is read. JSON's
//! grammar is serde_json's to check; its errors are moved to the document's line and column.

use std::io::{self, Read};

use memchr::{memchr2, memrchr};

use super::bounded::{Breach, JsonLimits};

/// Bytes asked of the source per read.
const BLOCK: usize = 1 << 20;

/// Why a walk stopped.
#[derive(Debug)]
pub enum Fault {
    /// The source failed (gzip damage or truncation, or the size caps of [`super::bounded`]).
    Io(io::Error),
    /// A cap on strings, depth or value size.
    Limit(Breach),
    /// The document ends early; where.
    Truncated(String),
    /// Not JSON: the message with its line and column.
    Malformed(String),
    /// JSON, but not shaped as a trace: the message with its line and column.
    Schema(String),
    /// The sink stopped the walk (it keeps its reason).
    Stopped,
}

/// What a sink's parse of a slice gave.
pub enum Stop {
    /// serde_json failed on the slice.
    Json(serde_json::Error),
    /// The sink failed for its own reasons.
    Sink,
}

impl From<serde_json::Error> for Stop {
    fn from(e: serde_json::Error) -> Stop {
        Stop::Json(e)
    }
}

/// Where the parts of a document go.
pub trait Parts {
    /// Events go to [`Parts::scanned`] when true, else to [`Parts::parse`].
    const SCANNED: bool;
    /// A key of the top-level object (unescaped) and its value, other than `traceEvents` as an
    /// array.
    fn header(&mut self, key: &str, value: &[u8]) -> Result<(), Stop>;
    /// The `traceEvents` key (or an array document) was found.
    fn events_found(&mut self);
    /// One element of `traceEvents` (or of an array document), scanned.
    fn scanned(&mut self, ev: &Scanned<'_>) -> Result<(), Stop>;
    /// Parses and takes the element at the start of `avail` (JSON text to the buffer's end, not
    /// to the element's), returning its length; an error that `is_eof` asks for more bytes.
    fn parse(&mut self, avail: &[u8]) -> Result<usize, Stop>;
}

/// The top-level keys of an event whose values the scanner locates.
pub const KEYS: [&[u8]; 6] = [b"ph", b"cat", b"name", b"pid", b"tid", b"args"];

/// An event as the scanner saw it.
#[derive(Debug)]
pub struct Scanned<'a> {
    /// The event's bytes.
    pub json: &'a [u8],
    /// Where in `json` the value of each of [`KEYS`] is (untrimmed), if the event has the key.
    pub fields: [Option<(usize, usize)>; KEYS.len()],
    /// A top-level key has an escape, so it may be one of [`KEYS`] spelled otherwise.
    pub escaped_key: bool,
}

/// No key of [`KEYS`].
const OTHER_KEY: usize = usize::MAX;

/// The block reader and scanner.
pub struct Splitter<R> {
    src: R,
    limits: JsonLimits,
    buf: Vec<u8>,
    /// Valid bytes in `buf`.
    end: usize,
    /// Next byte to look at.
    pos: usize,
    /// First byte that must survive a refill (the start of the value being scanned).
    keep: usize,
    /// Offset in the document of `buf[0]`.
    base: u64,
    eof: bool,
    /// Newlines in the bytes dropped from the buffer, and the offset after the last of them.
    lines_dropped: u64,
    line_start_dropped: u64,
    /// Bracket kinds open in the value being scanned (true = array).
    stack: Vec<bool>,
    /// The event being scanned: what [`Scanned`] gets, offsets from `keep`.
    fields: [Option<(usize, usize)>; KEYS.len()],
    escaped_key: bool,
    /// Which of [`KEYS`] the key being read is, and where its value starts (0: not yet).
    key: usize,
    value_start: usize,
    expect_key: bool,
}

impl<R: Read> Splitter<R> {
    /// A splitter over `src` (already decompressed and size-capped).
    pub fn new(src: R, limits: JsonLimits) -> Self {
        Splitter {
            src,
            limits,
            buf: vec![0; BLOCK],
            end: 0,
            pos: 0,
            keep: 0,
            base: 0,
            eof: false,
            lines_dropped: 0,
            line_start_dropped: 0,
            stack: Vec::new(),
            fields: [None; KEYS.len()],
            escaped_key: false,
            key: OTHER_KEY,
            value_start: 0,
            expect_key: false,
        }
    }

    /// Walks the whole document into `parts`.
    pub fn walk<P: Parts>(&mut self, parts: &mut P) -> Result<(), Fault> {
        match self.next_token()? {
            b'{' => {
                self.check_depth(1, self.pos - 1)?;
                self.root_object(parts)?;
            }
            b'[' => {
                self.check_depth(1, self.pos - 1)?;
                parts.events_found();
                self.events(parts, 1)?;
            }
            _ => {
                return Err(Fault::Schema(format!(
                    "the document is not an object or an array at {}",
                    self.position(self.pos - 1)
                )));
            }
        }
        self.keep = self.pos;
        self.skip_ws()?;
        if self.pos < self.end {
            return Err(Fault::Malformed(format!(
                "trailing characters at {}",
                self.position(self.pos)
            )));
        }
        Ok(())
    }

    fn root_object<P: Parts>(&mut self, parts: &mut P) -> Result<(), Fault> {
        if self.next_token()? == b'}' {
            return Ok(());
        }
        self.pos -= 1;
        loop {
            if self.next_token()? != b'"' {
                return Err(self.malformed("key must be a string", self.pos - 1));
            }
            let (k0, k1) = self.value_from(self.pos - 1, 1)?;
            let key: std::borrow::Cow<'_, str> = serde_json::from_slice(&self.buf[k0..k1])
                .map_err(|e| self.json_fault(e, k0, k1))?;
            let key = key.into_owned();
            if self.next_token()? != b':' {
                return Err(self.malformed("expected `:`", self.pos - 1));
            }
            let first = self.next_token()?;
            if key == "traceEvents" && first == b'[' {
                self.check_depth(2, self.pos - 1)?;
                parts.events_found();
                self.events(parts, 2)?;
            } else {
                let (v0, v1) = self.value_from(self.pos - 1, 1)?;
                match parts.header(&key, &self.buf[v0..v1]) {
                    Ok(()) => {}
                    Err(Stop::Json(e)) => return Err(self.json_fault(e, v0, v1)),
                    Err(Stop::Sink) => return Err(Fault::Stopped),
                }
            }
            match self.next_token()? {
                b',' => continue,
                b'}' => return Ok(()),
                _ => return Err(self.malformed("expected `,` or `}`", self.pos - 1)),
            }
        }
    }

    /// The elements of an array whose `[` was just read, `depth` containers deep.
    fn events<P: Parts>(&mut self, parts: &mut P, depth: u32) -> Result<(), Fault> {
        if self.next_token()? == b']' {
            return Ok(());
        }
        self.pos -= 1;
        loop {
            let first = self.next_token()?;
            if first == b']' {
                return Err(self.malformed("trailing comma", self.pos - 1));
            }
            if P::SCANNED {
                self.scanned_event(parts, depth)?;
            } else {
                self.parsed_event(parts)?;
            }
            match self.next_token()? {
                b',' => continue,
                b']' => return Ok(()),
                _ => return Err(self.malformed("expected `,` or `]`", self.pos - 1)),
            }
        }
    }

    /// The event whose first byte was just read, scanned and handed over.
    fn scanned_event<P: Parts>(&mut self, parts: &mut P, depth: u32) -> Result<(), Fault> {
        let start = self.pos - 1;
        let (v0, v1) = if self.buf[start] == b'{' {
            self.keep = start;
            self.fields = [None; KEYS.len()];
            self.escaped_key = false;
            self.key = OTHER_KEY;
            self.value_start = 0;
            self.expect_key = true;
            self.stack.clear();
            self.stack.push(false);
            self.check_depth(depth + 1, start)?;
            let matched = self.container::<true>(depth)?;
            self.value_len_check()?;
            if !matched {
                // serde_json names the mismatch.
                let e =
                    serde_json::from_slice::<serde::de::IgnoredAny>(&self.buf[self.keep..self.pos])
                        .err()
                        .unwrap_or_else(|| serde::de::Error::custom("mismatched brackets"));
                return Err(self.json_fault(e, self.keep, self.pos));
            }
            (self.keep, self.pos)
        } else {
            self.fields = [None; KEYS.len()];
            self.value_from(start, depth)?
        };
        let ev = Scanned {
            json: &self.buf[v0..v1],
            fields: self.fields,
            escaped_key: self.escaped_key,
        };
        match parts.scanned(&ev) {
            Ok(()) => Ok(()),
            Err(Stop::Json(e)) => Err(self.json_fault(e, v0, v1)),
            Err(Stop::Sink) => Err(Fault::Stopped),
        }
    }

    /// The event whose first byte was just read, parsed where it lies; read further and parsed
    /// again when the buffer ends inside it.
    fn parsed_event<P: Parts>(&mut self, parts: &mut P) -> Result<(), Fault> {
        self.pos -= 1;
        self.keep = self.pos;
        loop {
            match parts.parse(&self.buf[self.pos..self.end]) {
                Ok(n) => {
                    self.pos += n;
                    return Ok(());
                }
                // A number cut by the buffer's end is "invalid", not an end of input: an error
                // that close to the end is tried again with more bytes (a real one recurs).
                Err(Stop::Json(e))
                    if !self.eof
                        && (e.is_eof()
                            || error_offset(&self.buf[self.pos..self.end], &e) + 64
                                >= self.end - self.pos) =>
                {
                    self.pos = self.end;
                    self.value_len_check()?;
                    // Twice what the event has so far: an event is parsed again O(log n) times.
                    let want = (self.end - self.keep).max(BLOCK);
                    // At the document's end, parsed once more to say what is wrong.
                    self.fill_at_least(want)?;
                    self.pos = self.keep;
                }
                Err(Stop::Json(e)) if e.is_eof() => return Err(self.truncated()),
                Err(Stop::Json(e)) => return Err(self.json_fault(e, self.pos, self.end)),
                Err(Stop::Sink) => return Err(Fault::Stopped),
            }
        }
    }

    /// The next byte that is not whitespace, consumed; the document ending is a truncation.
    fn next_token(&mut self) -> Result<u8, Fault> {
        self.keep = self.pos;
        self.skip_ws()?;
        if self.pos == self.end {
            return Err(self.truncated());
        }
        self.pos += 1;
        Ok(self.buf[self.pos - 1])
    }

    fn skip_ws(&mut self) -> Result<(), Fault> {
        loop {
            while self.pos < self.end && matches!(self.buf[self.pos], b' ' | b'\n' | b'\r' | b'\t')
            {
                self.pos += 1;
            }
            if self.pos < self.end || !self.fill()? {
                return Ok(());
            }
        }
    }

    /// Reads more of the source, dropping what is before `keep`; false at its end.
    fn fill(&mut self) -> Result<bool, Fault> {
        self.fill_at_least(1)
    }

    /// Drops what is before `keep` and reads until `want` more bytes are in (or the source
    /// ends); false when nothing more was read.
    fn fill_at_least(&mut self, want: usize) -> Result<bool, Fault> {
        if self.eof {
            return Ok(false);
        }
        let drop = self.keep;
        if drop > 0 {
            let dropped = &self.buf[..drop];
            let lines = memchr::memchr_iter(b'\n', dropped).count() as u64;
            if lines > 0 {
                self.lines_dropped += lines;
                self.line_start_dropped =
                    self.base + memrchr(b'\n', dropped).map_or(0, |i| i as u64 + 1);
            }
            self.buf.copy_within(drop..self.end, 0);
            self.end -= drop;
            self.pos -= drop;
            self.keep = 0;
            self.base += drop as u64;
        }
        let free = want.max(BLOCK / 2);
        if self.buf.len() - self.end < free {
            let len = (self.end + free).max(self.buf.len() * 2);
            self.buf.resize(len, 0);
        }
        let mut got = 0;
        while got < want {
            let n = match self.src.read(&mut self.buf[self.end..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Fault::Io(e)),
            };
            if n == 0 {
                self.eof = true;
                break;
            }
            self.end += n;
            got += n;
        }
        Ok(got > 0)
    }

    /// Scans the value whose first byte is at `start` (already consumed), inside `depth`
    /// containers, to its end; its bytes are `buf[a..b]` until the next refill.
    fn value_from(&mut self, start: usize, depth: u32) -> Result<(usize, usize), Fault> {
        self.keep = start;
        let first = self.buf[start];
        match first {
            b'"' => {
                self.string(start)?;
            }
            b'{' | b'[' => {
                self.stack.clear();
                self.stack.push(first == b'[');
                self.check_depth(depth + 1, start)?;
                self.container::<false>(depth)?;
            }
            _ => self.scalar()?,
        }
        self.value_len_check()?;
        Ok((self.keep, self.pos))
    }

    fn value_len_check(&self) -> Result<(), Fault> {
        if (self.pos - self.keep) as u64 > self.limits.max_value {
            return Err(Fault::Limit(Breach::LongValue {
                limit: self.limits.max_value,
                at: self.base + self.keep as u64,
            }));
        }
        Ok(())
    }

    /// A number or literal: up to the next delimiter (serde_json checks what it is).
    fn scalar(&mut self) -> Result<(), Fault> {
        loop {
            while self.pos < self.end
                && !matches!(
                    self.buf[self.pos],
                    b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'
                )
            {
                self.pos += 1;
            }
            if self.pos < self.end {
                return Ok(());
            }
            self.value_len_check()?;
            if !self.fill()? {
                return Err(self.truncated());
            }
        }
    }

    /// The rest of a string whose opening quote is at `open`; `pos` ends past its closing quote.
    /// True when it has an escape.
    fn string(&mut self, open: usize) -> Result<bool, Fault> {
        let open_at = self.base + open as u64;
        let mut escaped = false;
        let mut any_escape = false;
        loop {
            if escaped && self.pos < self.end {
                self.pos += 1;
                escaped = false;
            }
            match memchr2(b'"', b'\\', &self.buf[self.pos..self.end]) {
                Some(k) => {
                    let j = self.pos + k;
                    self.pos = j + 1;
                    if self.buf[j] == b'"' {
                        self.string_len_check(open_at, true)?;
                        return Ok(any_escape);
                    }
                    escaped = true;
                    any_escape = true;
                    continue;
                }
                None => self.pos = self.end,
            }
            self.string_len_check(open_at, false)?;
            self.value_len_check()?;
            if !self.fill()? {
                return Err(self.truncated());
            }
        }
    }

    fn string_len_check(&self, open_at: u64, closed: bool) -> Result<(), Fault> {
        // The quotes seen are not the string's.
        let content = self.base + self.pos as u64 - open_at - 1 - u64::from(closed);
        if content > self.limits.max_string {
            return Err(Fault::Limit(Breach::LongString {
                limit: self.limits.max_string,
                at: open_at,
            }));
        }
        Ok(())
    }

    /// The rest of an array or object whose opening bracket was just read, `depth` containers
    /// deep (not counting it); `stack` holds that bracket. With `CAPTURE`, the value of each of
    /// [`KEYS`] at the top level is located (offsets from `keep`).
    /// False when it ended at a mismatched bracket.
    fn container<const CAPTURE: bool>(&mut self, depth: u32) -> Result<bool, Fault> {
        loop {
            while self.pos < self.end {
                let b = self.buf[self.pos];
                self.pos += 1;
                match b {
                    b'"' => {
                        let open = self.pos - 1 - self.keep;
                        let escaped = self.string(self.pos - 1)?;
                        if CAPTURE && self.expect_key && self.stack.len() == 1 {
                            let key = &self.buf[self.keep + open + 1..self.pos - 1];
                            self.key = KEYS.iter().position(|k| *k == key).unwrap_or(OTHER_KEY);
                            self.escaped_key |= escaped;
                            self.expect_key = false;
                        }
                    }
                    b':' if CAPTURE && self.stack.len() == 1 => {
                        self.value_start = self.pos - self.keep;
                    }
                    b',' if CAPTURE && self.stack.len() == 1 => {
                        self.value_end(self.pos - 1 - self.keep);
                        self.expect_key = true;
                    }
                    b'{' | b'[' => {
                        self.stack.push(b == b'[');
                        self.check_depth(depth + self.stack.len() as u32, self.pos - 1)?;
                    }
                    b'}' | b']' => {
                        // A mismatched bracket ends the slice there: serde_json names the error.
                        if self.stack.pop() != Some(b == b']') {
                            return Ok(false);
                        }
                        if self.stack.is_empty() {
                            if CAPTURE {
                                self.value_end(self.pos - 1 - self.keep);
                            }
                            return Ok(true);
                        }
                    }
                    _ => {}
                }
            }
            self.value_len_check()?;
            if !self.fill()? {
                return Err(self.truncated());
            }
        }
    }

    /// The value of the key being read ends at `at` (from `keep`).
    fn value_end(&mut self, at: usize) {
        if self.key != OTHER_KEY && self.value_start > 0 {
            self.fields[self.key] = Some((self.value_start, at));
        }
        self.key = OTHER_KEY;
        self.value_start = 0;
    }

    fn check_depth(&self, depth: u32, at: usize) -> Result<(), Fault> {
        if depth > self.limits.max_depth {
            return Err(Fault::Limit(Breach::TooDeep {
                limit: self.limits.max_depth,
                at: self.base + at as u64,
            }));
        }
        Ok(())
    }

    /// Line and column of `buf[at]` (1-based), which must still be in the buffer.
    fn line_column(&self, at: usize) -> (u64, u64) {
        let at = at.min(self.end);
        let before = &self.buf[..at];
        let line = self.lines_dropped + memchr::memchr_iter(b'\n', before).count() as u64 + 1;
        let line_start =
            memrchr(b'\n', before).map_or(self.line_start_dropped, |i| self.base + i as u64 + 1);
        (line, self.base + at as u64 - line_start + 1)
    }

    /// `line L column C` of `buf[at]`, as serde_json writes positions.
    fn position(&self, at: usize) -> String {
        let (line, column) = self.line_column(at);
        format!("line {line} column {column}")
    }

    fn truncated(&self) -> Fault {
        let (line, column) = self.line_column(self.end);
        Fault::Truncated(format!("line {line}, column {column}"))
    }

    fn malformed(&self, what: &str, at: usize) -> Fault {
        Fault::Malformed(format!("{what} at {}", self.position(at)))
    }

    /// serde_json's error on `buf[a..b]`, placed in the document.
    fn json_fault(&self, e: serde_json::Error, a: usize, b: usize) -> Fault {
        let at = a + error_offset(&self.buf[a..b], &e);
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let msg = full.strip_suffix(&suffix).unwrap_or(&full);
        let text = format!("{msg} at {}", self.position(at));
        match e.classify() {
            serde_json::error::Category::Data => Fault::Schema(text),
            _ => Fault::Malformed(text),
        }
    }
}

/// Where in `slice` serde_json's error on it is (it counts lines and columns from the start).
fn error_offset(slice: &[u8], e: &serde_json::Error) -> usize {
    let line_start = if e.line() <= 1 {
        0
    } else {
        memchr::memchr_iter(b'\n', slice)
            .nth(e.line() - 2)
            .map_or(slice.len(), |i| i + 1)
    };
    (line_start + e.column().saturating_sub(1)).min(slice.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a walk handed over, scanned (`SCANNED`) or parsed.
    #[derive(Default)]
    struct Collect<const SCANNED: bool> {
        header: Vec<(String, String)>,
        events: Vec<String>,
        found: bool,
    }

    impl<const S: bool> Parts for Collect<S> {
        const SCANNED: bool = S;
        fn header(&mut self, key: &str, value: &[u8]) -> Result<(), Stop> {
            serde_json::from_slice::<serde::de::IgnoredAny>(value)?;
            self.header
                .push((key.into(), String::from_utf8_lossy(value).into()));
            Ok(())
        }
        fn events_found(&mut self) {
            self.found = true;
        }
        fn scanned(&mut self, ev: &Scanned<'_>) -> Result<(), Stop> {
            serde_json::from_slice::<serde::de::IgnoredAny>(ev.json)?;
            let mut text = String::from_utf8_lossy(ev.json).into_owned();
            for (k, f) in KEYS.iter().zip(ev.fields) {
                if let Some((a, b)) = f {
                    let v = String::from_utf8_lossy(&ev.json[a..b]);
                    text += &format!(" | {}={}", String::from_utf8_lossy(k), v.trim());
                }
            }
            self.events.push(text);
            Ok(())
        }
        fn parse(&mut self, avail: &[u8]) -> Result<usize, Stop> {
            let mut stream =
                serde_json::Deserializer::from_slice(avail).into_iter::<serde::de::IgnoredAny>();
            match stream.next() {
                Some(Ok(_)) => {
                    let n = stream.byte_offset();
                    self.events
                        .push(String::from_utf8_lossy(&avail[..n]).into());
                    Ok(n)
                }
                Some(Err(e)) => Err(Stop::Json(e)),
                None => unreachable!("called at a value"),
            }
        }
    }

    /// Reads one byte per call, so that every value crosses refills.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// A walk of `json`, scanned, checked to give what a walk reading one byte at a time gives.
    fn walk(json: &str, limits: JsonLimits) -> Result<Collect<true>, Fault> {
        let mut fast = Collect::default();
        let fast_result = Splitter::new(json.as_bytes(), limits).walk(&mut fast);
        let mut slow = Collect::<true>::default();
        let slow_result = Splitter::new(Trickle(json.as_bytes()), limits).walk(&mut slow);
        assert_eq!(format!("{fast_result:?}"), format!("{slow_result:?}"));
        assert_eq!(fast.events, slow.events);
        fast_result.map(|()| fast)
    }

    /// A walk of `json`, parsed, as [`walk`].
    fn walk_parsed(json: &str, limits: JsonLimits) -> Result<Collect<false>, Fault> {
        let mut fast = Collect::default();
        let fast_result = Splitter::new(json.as_bytes(), limits).walk(&mut fast);
        let mut slow = Collect::<false>::default();
        let slow_result = Splitter::new(Trickle(json.as_bytes()), limits).walk(&mut slow);
        assert_eq!(format!("{fast_result:?}"), format!("{slow_result:?}"));
        assert_eq!(fast.events, slow.events);
        fast_result.map(|()| fast)
    }

    #[test]
    fn values_and_events_are_split_whole() {
        let c = walk(
            r#" {"a": 1, "b\"": {"x": [1, "]}"]}, "traceEvents": [ {"ph": "X", "name": "a\\\"[{"} ,{}],
                "c": "s", "d": true}  "#,
            JsonLimits::default(),
        )
        .unwrap();
        assert!(c.found);
        assert_eq!(
            c.header,
            [
                ("a".into(), "1".into()),
                ("b\"".into(), r#"{"x": [1, "]}"]}"#.into()),
                ("c".into(), r#""s""#.into()),
                ("d".into(), "true".into())
            ]
        );
        assert_eq!(
            c.events,
            [
                r#"{"ph": "X", "name": "a\\\"[{"} | ph="X" | name="a\\\"[{""#,
                "{}"
            ]
        );
        let c = walk(r#"[1, {"a": [[]]}]"#, JsonLimits::default()).unwrap();
        assert_eq!(c.events, ["1", r#"{"a": [[]]}"#]);
    }

    #[test]
    fn a_number_cut_by_the_end_of_a_block_is_read_whole() {
        for tail in [".5", "e3", ".5e-3"] {
            for cut in 1..=tail.len() {
                let head = r#"{"traceEvents": [{"name": ""#;
                let before = r#""}, {"ts": 12"#;
                let pad = BLOCK - head.len() - before.len() - cut;
                let doc = format!("{head}{}{before}{tail}}}]}}", "a".repeat(pad));
                let c = walk_parsed(&doc, JsonLimits::default()).unwrap();
                assert_eq!(c.events[1], format!(r#"{{"ts": 12{tail}}}"#));
            }
        }
    }

    #[test]
    fn the_top_level_keys_of_events_are_located() {
        let doc = r#"[{"args": {"ph": 1, "x": [",", ":"]}, "pid" :  7 , "a": {"tid": 2}, "tid":"x"},
                      {"name": {}, "cat": "k"}, {"ph":"X"}]"#;
        let c = walk(doc, JsonLimits::default()).unwrap();
        let located: Vec<&str> = c
            .events
            .iter()
            .map(|e| e.split_once(" | ").unwrap().1)
            .collect();
        assert_eq!(
            located,
            [
                r#"pid=7 | tid="x" | args={"ph": 1, "x": [",", ":"]}"#,
                r#"cat="k" | name={}"#,
                r#"ph="X""#
            ]
        );
        // Parsed, the events are the same bytes.
        let parsed = walk_parsed(doc, JsonLimits::default()).unwrap();
        let whole: Vec<&str> = c
            .events
            .iter()
            .map(|e| e.split_once(" | ").unwrap().0)
            .collect();
        assert_eq!(parsed.events, whole);
    }

    #[test]
    fn bad_json_is_placed_in_the_document() {
        let err = |json: &str| {
            let message = |r: Result<(), Fault>| match r {
                Err(Fault::Malformed(m) | Fault::Truncated(m) | Fault::Schema(m)) => m,
                other => panic!("{other:?}"),
            };
            let scanned = message(walk(json, JsonLimits::default()).map(|_| ()));
            let parsed = message(walk_parsed(json, JsonLimits::default()).map(|_| ()));
            assert_eq!(scanned, parsed);
            scanned
        };
        assert_eq!(
            err("{\"traceEvents\": [\n {\"a\": 1},\n  {\"a\" 2}]}"),
            "expected `:` at line 3 column 8"
        );
        assert_eq!(
            err("{\"traceEvents\": [{\"a\": [1}]}"),
            "expected `,` or `]` at line 1 column 26"
        );
        assert_eq!(
            err("{\"a\": 1} x"),
            "trailing characters at line 1 column 10"
        );
        assert_eq!(
            err("{traceEvents: 1}"),
            "key must be a string at line 1 column 2"
        );
        assert_eq!(err("{\"traceEvents\": [{}\n"), "line 2, column 1");
        assert_eq!(err("[1,]"), "trailing comma at line 1 column 4");
        assert_eq!(
            err("\"x\""),
            "the document is not an object or an array at line 1 column 1"
        );
    }

    #[test]
    fn strings_depth_and_values_are_capped() {
        let limits = JsonLimits {
            max_string: 8,
            max_depth: 3,
            max_value: 40,
            ..JsonLimits::default()
        };
        assert!(walk(r#"{"a":[["[[[[\"]]"]]}"#, limits).is_ok());
        assert!(matches!(
            walk(r#"{"a":[[[1]]]}"#, limits),
            Err(Fault::Limit(Breach::TooDeep { limit: 3, at: 7 }))
        ));
        let long_keys = JsonLimits {
            max_string: 16,
            ..limits
        };
        assert!(matches!(
            walk(r#"{"traceEvents":[[[1]]]}"#, long_keys),
            Err(Fault::Limit(Breach::TooDeep { limit: 3, at: 17 }))
        ));
        assert!(matches!(
            walk(r#"{"abcdefghi":1}"#, limits),
            Err(Fault::Limit(Breach::LongString { limit: 8, at: 1 }))
        ));
        assert!(walk(r#"{"abcdefgh":1}"#, limits).is_ok());
        assert!(matches!(
            walk(r#"{"abcdefghijklmnopqrstu"#, limits),
            Err(Fault::Limit(Breach::LongString { limit: 8, at: 1 }))
        ));
        assert!(matches!(
            walk(
                r#"{"traceEvents": [{}, {"a": "1234", "b": "1234", "c": "1234", "d": 1}]}"#,
                long_keys
            ),
            Err(Fault::Limit(Breach::LongValue { limit: 40, at: 21 }))
        ));
    }
}
