//! Reading a Kineto (Chrome trace) JSON document as a stream: the top-level object's small keys
//! are kept, and `traceEvents` is walked one event at a time into a sink, never held whole
//! (serde's `DeserializeSeed` over the array). A document that is an array is read as the
//! events themselves (Chrome's array format). Values of unexpected types in the fields read are
//! taken as absent rather than failing the file.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The top-level keys the importer uses.
#[derive(Debug, Default, Clone)]
pub struct Header {
    /// `traceEvents` was present (or the document was an array).
    pub has_events: bool,
    /// `distributedInfo.rank`.
    pub rank: Option<i64>,
    /// `distributedInfo.world_size`.
    pub world_size: Option<i64>,
    /// `baseTimeNanoseconds`: `ts` values are microseconds after it.
    pub base_ns: Option<i64>,
    /// `displayTimeUnit` (a display hint only: `ts` is in microseconds whatever it says).
    pub display_unit: Option<String>,
    /// `schemaVersion`.
    pub schema_version: Option<i64>,
    /// `host_name` / `hostname`, where the profiler wrote one.
    pub host_name: Option<String>,
    /// `deviceProperties[].name`, by device id.
    pub devices: Vec<(i64, String)>,
}

/// A number or a string, as Chrome traces give pids and tids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Id {
    /// A number.
    Num(i64),
    /// A label ("Spans", "stream 7").
    Text(String),
}

impl Id {
    /// The number, when it is one.
    pub fn num(&self) -> Option<i64> {
        match self {
            Id::Num(n) => Some(*n),
            Id::Text(_) => None,
        }
    }
}

/// One trace event, with only the fields the importer maps.
#[derive(Debug, Default, Deserialize)]
pub struct RawEvent {
    /// Phase: X (complete), M (metadata), i, s/f (flows), ...
    #[serde(default, deserialize_with = "lenient_string")]
    pub ph: Option<String>,
    /// Category: cpu_op, cuda_runtime, kernel, ...
    #[serde(default, deserialize_with = "lenient_string")]
    pub cat: Option<String>,
    /// Name.
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: Option<String>,
    /// Process (host pid, or the device for GPU rows).
    #[serde(default, deserialize_with = "lenient_id")]
    pub pid: Option<Id>,
    /// Thread (host tid, or the stream for GPU rows).
    #[serde(default, deserialize_with = "lenient_id")]
    pub tid: Option<Id>,
    /// Start, microseconds, as written (parsed exactly by [`micros_to_ns`]).
    #[serde(default)]
    pub ts: Option<Box<RawValue>>,
    /// Duration, microseconds, as written.
    #[serde(default)]
    pub dur: Option<Box<RawValue>>,
    /// Arguments.
    #[serde(default)]
    pub args: Option<Args>,
}

/// The arguments the importer maps.
#[derive(Debug, Default, Deserialize)]
pub struct Args {
    /// Correlation id tying a runtime call to its device work.
    #[serde(default, deserialize_with = "lenient_int")]
    pub correlation: Option<i64>,
    /// CUDA device ordinal.
    #[serde(default, deserialize_with = "lenient_int")]
    pub device: Option<i64>,
    /// Stream id.
    #[serde(default, deserialize_with = "lenient_int")]
    pub stream: Option<i64>,
    /// Bytes copied or set.
    #[serde(default, deserialize_with = "lenient_int")]
    pub bytes: Option<i64>,
    /// Kernel grid.
    #[serde(default, deserialize_with = "lenient_dim3")]
    pub grid: Option<[u32; 3]>,
    /// Kernel block.
    #[serde(default, deserialize_with = "lenient_dim3")]
    pub block: Option<[u32; 3]>,
    /// Metadata events' value (thread_name, process_name).
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: Option<String>,
}

/// `text` (a JSON number of microseconds, as written) in ns, rounded to the nearest: exact for
/// every decimal, where going through an f64 loses the last digits of 17-digit timestamps.
pub fn micros_to_ns(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i32>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits = int.bytes().chain(frac.bytes());
    // value = digits x 10^(exp - frac.len()) us = digits x 10^(exp - frac.len() + 3) ns.
    let shift = exp.checked_sub(frac.len() as i32)?.checked_add(3)?;
    let mut v: i128 = 0;
    let total = int.len() + frac.len();
    // Digits past what the shift keeps decide the rounding only.
    let keep = if shift >= 0 {
        total
    } else {
        total.saturating_sub(shift.unsigned_abs() as usize)
    };
    let mut round_up = false;
    for (i, b) in digits.enumerate() {
        if !b.is_ascii_digit() {
            return None;
        }
        if i < keep {
            v = v.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
            if v > i128::from(i64::MAX) * 10 {
                return None;
            }
        } else if i == keep {
            round_up = b >= b'5';
        }
    }
    if shift > 0 {
        v = v.checked_mul(10i128.checked_pow(shift as u32)?)?;
    }
    if round_up {
        v += 1;
    }
    let v = i64::try_from(v).ok()?;
    Some(if neg { -v } else { v })
}

/// Where the events of a document go.
pub trait EventSink {
    /// One event of `traceEvents`; an error stops the parse (kept by the sink, named by
    /// [`EventSink::failed`]).
    fn event(&mut self, ev: RawEvent) -> Result<(), String>;
}

/// The document's root: its header is filled in, its events go to the sink.
pub struct Root<'a, S> {
    /// Filled while reading.
    pub header: &'a mut Header,
    /// Receives every event.
    pub sink: &'a mut S,
}

impl<'de, S: EventSink> DeserializeSeed<'de> for Root<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: EventSink> Visitor<'de> for Root<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace object with traceEvents, or an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.header.has_events = true;
        Events { sink: self.sink }.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let h = &mut *self.header;
            match key.as_str() {
                "traceEvents" => {
                    h.has_events = true;
                    map.next_value_seed(Events {
                        sink: &mut *self.sink,
                    })?;
                }
                "distributedInfo" => {
                    let d: Distributed = map.next_value_seed(Object(PhantomData))?;
                    h.rank = d.rank;
                    h.world_size = d.world_size;
                }
                "baseTimeNanoseconds" => h.base_ns = map.next_value_seed(Lenient)?,
                "schemaVersion" => h.schema_version = map.next_value_seed(Lenient)?,
                "displayTimeUnit" => h.display_unit = map.next_value_seed(LenientText)?,
                "host_name" | "hostname" => h.host_name = map.next_value_seed(LenientText)?,
                "deviceProperties" => {
                    let devices = map.next_value_seed(Devices)?;
                    h.devices = devices
                        .into_iter()
                        .filter_map(|d| Some((d.id?, d.name?)))
                        .collect();
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The `traceEvents` array.
struct Events<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: EventSink> DeserializeSeed<'de> for Events<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, S: EventSink> Visitor<'de> for Events<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("traceEvents as an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(ev) = seq.next_element::<RawEvent>()? {
            self.sink.event(ev).map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

/// An object read field by field, each leniently; any other value reads as the default.
trait Fields: Default {
    /// Reads the value of `key` (or skips it).
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

struct Object<T>(PhantomData<T>);

impl<'de, T: Fields> DeserializeSeed<'de> for Object<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Fields> Visitor<'de> for Object<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut t = T::default();
        while let Some(key) = map.next_key::<String>()? {
            t.field(&key, &mut map)?;
        }
        Ok(t)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(T::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::default())
    }
}

#[derive(Debug, Default)]
struct Distributed {
    rank: Option<i64>,
    world_size: Option<i64>,
}

impl Fields for Distributed {
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "rank" => self.rank = map.next_value_seed(Lenient)?,
            "world_size" => self.world_size = map.next_value_seed(Lenient)?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Device {
    id: Option<i64>,
    name: Option<String>,
}

impl Fields for Device {
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "id" => self.id = map.next_value_seed(Lenient)?,
            "name" => self.name = map.next_value_seed(LenientText)?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Most devices kept from `deviceProperties` (a machine has at most a few dozen).
const MAX_DEVICES: usize = 1024;

/// `deviceProperties`: an array of device objects, else none.
struct Devices;

impl<'de> DeserializeSeed<'de> for Devices {
    type Value = Vec<Device>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Device>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Devices {
    type Value = Vec<Device>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of devices")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Device>, A::Error> {
        let mut v = Vec::new();
        while let Some(d) = seq.next_element_seed(Object::<Device>(PhantomData))? {
            if v.len() < MAX_DEVICES {
                v.push(d);
            }
        }
        Ok(v)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Device>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Vec::new())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Vec<Device>, E> {
        Ok(Vec::new())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Vec<Device>, E> {
        Ok(Vec::new())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Vec<Device>, E> {
        Ok(Vec::new())
    }

    fn visit_str<E>(self, _: &str) -> Result<Vec<Device>, E> {
        Ok(Vec::new())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Vec<Device>, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E>(self) -> Result<Vec<Device>, E> {
        Ok(Vec::new())
    }
}

/// What a lenient field makes of one JSON value: the value when it has the expected shape,
/// else None (arrays and objects are consumed unread).
trait Shape: Sized {
    /// What is expected, for messages.
    const EXPECTING: &'static str;
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_f64(_: f64) -> Option<Self> {
        None
    }
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

impl Shape for i64 {
    const EXPECTING: &'static str = "an integer";
    fn from_i64(v: i64) -> Option<i64> {
        Some(v)
    }
    fn from_f64(v: f64) -> Option<i64> {
        (v.fract() == 0.0 && v.abs() < 9.0e18).then_some(v as i64)
    }
    fn from_str(s: &str) -> Option<i64> {
        s.trim().parse().ok()
    }
}

impl Shape for String {
    const EXPECTING: &'static str = "a string";
    fn from_str(s: &str) -> Option<String> {
        Some(s.to_string())
    }
}

impl Shape for Id {
    const EXPECTING: &'static str = "a number or a string";
    fn from_i64(v: i64) -> Option<Id> {
        Some(Id::Num(v))
    }
    fn from_f64(v: f64) -> Option<Id> {
        i64::from_f64(v).map(Id::Num)
    }
    fn from_str(s: &str) -> Option<Id> {
        Some(Id::Text(s.to_string()))
    }
}

impl Shape for [u32; 3] {
    const EXPECTING: &'static str = "three integers";
    fn from_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Option<[u32; 3]>, A::Error> {
        let mut out = [1u32; 3];
        let mut ok = true;
        let mut n = 0;
        while let Some(v) = seq.next_element_seed(Lenient)? {
            match (n < 3, v.and_then(|v: i64| u32::try_from(v).ok())) {
                (true, Some(v)) => out[n] = v,
                _ => ok = false,
            }
            n += 1;
        }
        Ok((ok && n > 0).then_some(out))
    }
}

struct LenientOf<T>(PhantomData<T>);

impl<'de, T: Shape> DeserializeSeed<'de> for LenientOf<T> {
    type Value = Option<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Shape> Visitor<'de> for LenientOf<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_i64<E>(self, v: i64) -> Result<Option<T>, E> {
        Ok(T::from_i64(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Option<T>, E> {
        Ok(i64::try_from(v).ok().and_then(T::from_i64))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Option<T>, E> {
        Ok(T::from_f64(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<T>, E> {
        Ok(T::from_str(v))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_none<E>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<T>, A::Error> {
        T::from_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// An integer, leniently.
struct Lenient;

impl<'de> DeserializeSeed<'de> for Lenient {
    type Value = Option<i64>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        LenientOf::<i64>(PhantomData).deserialize(d)
    }
}

/// A string, leniently.
struct LenientText;

impl<'de> DeserializeSeed<'de> for LenientText {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        LenientOf::<String>(PhantomData).deserialize(d)
    }
}

fn lenient_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    LenientOf::<i64>(PhantomData).deserialize(d)
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    LenientOf::<String>(PhantomData).deserialize(d)
}

fn lenient_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Id>, D::Error> {
    LenientOf::<Id>(PhantomData).deserialize(d)
}

fn lenient_dim3<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u32; 3]>, D::Error> {
    LenientOf::<[u32; 3]>(PhantomData).deserialize(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_become_ns_exactly() {
        assert_eq!(
            micros_to_ns("1712195495505543.2"),
            Some(1_712_195_495_505_543_200)
        );
        assert_eq!(
            micros_to_ns("4458676981028.392"),
            Some(4_458_676_981_028_392)
        );
        assert_eq!(
            micros_to_ns("1683564901951734"),
            Some(1_683_564_901_951_734_000)
        );
        assert_eq!(micros_to_ns("41.768"), Some(41_768));
        assert_eq!(micros_to_ns("0.0004"), Some(0));
        assert_eq!(micros_to_ns("0.0005"), Some(1));
        assert_eq!(micros_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(
            micros_to_ns("1.7121954955055432e15"),
            Some(1_712_195_495_505_543_200)
        );
        assert_eq!(micros_to_ns("-2"), Some(-2_000));
        assert_eq!(micros_to_ns("\"12\""), None);
        assert_eq!(micros_to_ns("1e30"), None);
    }

    fn parse(json: &str) -> (Header, Vec<RawEvent>) {
        struct Keep(Vec<RawEvent>);
        impl EventSink for Keep {
            fn event(&mut self, ev: RawEvent) -> Result<(), String> {
                self.0.push(ev);
                Ok(())
            }
        }
        let mut header = Header::default();
        let mut keep = Keep(Vec::new());
        let mut de = serde_json::Deserializer::from_str(json);
        Root {
            header: &mut header,
            sink: &mut keep,
        }
        .deserialize(&mut de)
        .unwrap();
        (header, keep.0)
    }

    #[test]
    fn fields_of_unexpected_types_read_as_absent() {
        let (h, evs) = parse(
            r#"{"distributedInfo": {"rank": "3", "world_size": 8.0, "pg_config": [{"x": 1}]},
                "deviceProperties": [{"id": 0, "name": "A100"}, 7, {"id": "x"}],
                "traceEvents": [{"ph": "X", "pid": "Spans", "tid": 7, "ts": 1.5, "name": 3,
                                 "args": {"grid": [64, 1, 1], "block": "x", "device": [1]}}],
                "baseTimeNanoseconds": 1000}"#,
        );
        assert_eq!(
            (h.rank, h.world_size, h.base_ns),
            (Some(3), Some(8), Some(1000))
        );
        assert_eq!(h.devices, vec![(0, "A100".to_string())]);
        let ev = &evs[0];
        assert_eq!(ev.pid, Some(Id::Text("Spans".into())));
        assert_eq!(ev.tid, Some(Id::Num(7)));
        assert_eq!(ev.name, None);
        assert_eq!(micros_to_ns(ev.ts.as_ref().unwrap().get()), Some(1_500));
        let args = ev.args.as_ref().unwrap();
        assert_eq!(
            (args.grid, args.block, args.device),
            (Some([64, 1, 1]), None, None)
        );
    }

    #[test]
    fn an_array_document_is_its_events() {
        let (h, evs) = parse(r#"[{"ph": "X", "name": "a"}, {"ph": "M"}]"#);
        assert!(h.has_events);
        assert_eq!(evs.len(), 2);
    }
}
