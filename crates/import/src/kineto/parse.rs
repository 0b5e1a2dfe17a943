//! Parsing a Kineto (Chrome trace) JSON document's parts, which [`super::split`] hands over as
//! byte slices: the top-level object's small keys are kept in a [`Header`], each element of
//! `traceEvents` is parsed into a [`RawEvent`] (borrowing its strings from the slice) for a sink.
//! A document that is an array is read as the events themselves (Chrome's array format). Values
//! of unexpected types in the fields read are taken as absent rather than failing the file.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::split::Scanned;

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
pub struct RawEvent<'a> {
    /// Phase: X (complete), M (metadata), i, s/f (flows), ...
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub ph: Option<Cow<'a, str>>,
    /// Category: cpu_op, cuda_runtime, kernel, ...
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub cat: Option<Cow<'a, str>>,
    /// Name.
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub name: Option<Cow<'a, str>>,
    /// Process (host pid, or the device for GPU rows).
    #[serde(default, deserialize_with = "lenient_id")]
    pub pid: Option<Id>,
    /// Thread (host tid, or the stream for GPU rows).
    #[serde(default, deserialize_with = "lenient_id")]
    pub tid: Option<Id>,
    /// Start, microseconds, as written (parsed exactly by [`micros_to_ns`]).
    #[serde(default, borrow)]
    pub ts: Option<&'a RawValue>,
    /// Duration, microseconds, as written.
    #[serde(default, borrow)]
    pub dur: Option<&'a RawValue>,
    /// Arguments (an `args` that is not an object reads as none).
    #[serde(default, deserialize_with = "lenient_args")]
    pub args: Option<Args>,
}

/// What the first pass reads of an event whose keys it could not locate by scanning.
#[derive(Debug, Default, Deserialize)]
pub struct MetaEvent<'a> {
    /// Phase.
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub ph: Option<Cow<'a, str>>,
    /// Category.
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub cat: Option<Cow<'a, str>>,
    /// Name.
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub name: Option<Cow<'a, str>>,
    /// Process.
    #[serde(default, deserialize_with = "lenient_id")]
    pub pid: Option<Id>,
    /// Thread.
    #[serde(default, deserialize_with = "lenient_id")]
    pub tid: Option<Id>,
    /// Arguments, read only for metadata events.
    #[serde(default, borrow)]
    pub args: Option<&'a RawValue>,
}

/// The arguments the importer maps.
#[derive(Debug, Default)]
pub struct Args {
    /// Correlation id tying a runtime call to its device work.
    pub correlation: Option<i64>,
    /// CUDA device ordinal.
    pub device: Option<i64>,
    /// Stream.
    pub stream: Option<i64>,
    /// Bytes copied or set.
    pub bytes: Option<i64>,
    /// Kernel grid.
    pub grid: Option<[u32; 3]>,
    /// Kernel block.
    pub block: Option<[u32; 3]>,
    /// Metadata events' value (thread_name, process_name).
    pub name: Option<String>,
}

impl Fields for Args {
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "correlation" => self.correlation = map.next_value_seed(Lenient)?,
            "device" => self.device = map.next_value_seed(Lenient)?,
            "stream" => self.stream = map.next_value_seed(Lenient)?,
            "bytes" => self.bytes = map.next_value_seed(Lenient)?,
            "grid" => self.grid = map.next_value_seed(LenientOf::<[u32; 3]>(PhantomData))?,
            "block" => self.block = map.next_value_seed(LenientOf::<[u32; 3]>(PhantomData))?,
            "name" => self.name = map.next_value_seed(LenientText)?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
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

/// Reads the value of the top-level key `key` into `h` (keys the importer does not use are
/// only checked to be JSON).
pub fn header_value(h: &mut Header, key: &str, value: &[u8]) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(value);
    match key {
        "traceEvents" => {
            return Err(de::Error::custom(
                "invalid type: traceEvents is not an array",
            ));
        }
        "distributedInfo" => {
            let d = Object::<Distributed>(PhantomData).deserialize(&mut de)?;
            h.rank = d.rank;
            h.world_size = d.world_size;
        }
        "baseTimeNanoseconds" => h.base_ns = Lenient.deserialize(&mut de)?,
        "schemaVersion" => h.schema_version = Lenient.deserialize(&mut de)?,
        "displayTimeUnit" => h.display_unit = LenientText.deserialize(&mut de)?,
        "host_name" | "hostname" => h.host_name = LenientText.deserialize(&mut de)?,
        "deviceProperties" => {
            let devices = Devices.deserialize(&mut de)?;
            h.devices = devices
                .into_iter()
                .filter_map(|d| Some((d.id?, d.name?)))
                .collect();
        }
        _ => {
            IgnoredAny::deserialize(&mut de)?;
        }
    }
    de.end()
}

/// The error for an element of `traceEvents` that is not an object.
pub fn not_an_object() -> serde_json::Error {
    de::Error::custom("invalid type: a trace event that is not an object")
}

/// Parses the event at the start of `avail` (which may go on past it), returning it and its
/// length.
pub fn parse_event(avail: &[u8]) -> Result<(RawEvent<'_>, usize), serde_json::Error> {
    if avail.first() != Some(&b'{') {
        return Err(not_an_object());
    }
    let mut stream = serde_json::Deserializer::from_slice(avail).into_iter::<RawEvent>();
    match stream.next() {
        Some(Ok(ev)) => Ok((ev, stream.byte_offset())),
        Some(Err(e)) => Err(e),
        None => Err(de::Error::custom("no event")),
    }
}

/// What the first pass reads of an event.
#[derive(Debug, Default)]
pub struct Meta<'a> {
    /// Phase.
    pub ph: Option<Cow<'a, str>>,
    /// Category.
    pub cat: Option<Cow<'a, str>>,
    /// Name.
    pub name: Option<Cow<'a, str>>,
    /// Process.
    pub pid: Option<Id>,
    /// Thread.
    pub tid: Option<Id>,
    /// `args`, as written.
    pub args: Option<&'a [u8]>,
}

impl<'a> Meta<'a> {
    /// The fields of a scanned event: plain strings and integers read in place, anything else
    /// through serde_json (the whole event when a key has an escape, or on any error, so that
    /// the error is serde_json's and placed in the event).
    pub fn of(ev: &Scanned<'a>) -> Result<Meta<'a>, serde_json::Error> {
        if ev.json.first() != Some(&b'{') {
            return Err(not_an_object());
        }
        let fast = || -> Result<Meta<'a>, serde_json::Error> {
            let value = |i: usize| ev.fields[i].map(|(a, b)| ev.json[a..b].trim_ascii());
            Ok(Meta {
                ph: value(0).map(text).transpose()?.flatten(),
                cat: value(1).map(text).transpose()?.flatten(),
                name: value(2).map(text).transpose()?.flatten(),
                pid: value(3).map(id).transpose()?.flatten(),
                tid: value(4).map(id).transpose()?.flatten(),
                args: value(5),
            })
        };
        match (ev.escaped_key, fast()) {
            (false, Ok(m)) => Ok(m),
            _ => {
                let whole: MetaEvent<'a> = serde_json::from_slice(ev.json)?;
                Ok(Meta {
                    ph: whole.ph,
                    cat: whole.cat,
                    name: whole.name,
                    pid: whole.pid,
                    tid: whole.tid,
                    args: whole.args.map(|r| r.get().as_bytes()),
                })
            }
        }
    }

    /// The arguments the importer maps, when `args` is an object.
    pub fn args(&self) -> Option<Args> {
        let mut de = serde_json::Deserializer::from_slice(self.args?);
        Object::<Args>(PhantomData).deserialize(&mut de).ok()
    }

    /// `args.name` (a thread's or process's name in metadata events).
    pub fn args_name(&self) -> Option<String> {
        self.args()?.name
    }
}

/// A string value as written: borrowed when plain, else through serde_json (escapes; other
/// types read as absent).
fn text(v: &[u8]) -> Result<Option<Cow<'_, str>>, serde_json::Error> {
    if let [b'"', inner @ .., b'"'] = v
        && !inner.contains(&b'\\')
        && let Ok(s) = std::str::from_utf8(inner)
    {
        return Ok(Some(Cow::Borrowed(s)));
    }
    let mut de = serde_json::Deserializer::from_slice(v);
    let out = lenient_str(&mut de)?;
    de.end()?;
    Ok(out)
}

/// A pid or tid as written: plain integers read in place, else through serde_json.
fn id(v: &[u8]) -> Result<Option<Id>, serde_json::Error> {
    if !v.is_empty() && v.len() <= 18 && v.iter().all(u8::is_ascii_digit) {
        let n = v.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
        return Ok(Some(Id::Num(n)));
    }
    let mut de = serde_json::Deserializer::from_slice(v);
    let out = lenient_id(&mut de)?;
    de.end()?;
    Ok(out)
}

/// A key of an object, borrowed from the slice where it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
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
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
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

/// A string, leniently, borrowed from the slice where it has no escapes.
struct LenientStr;

impl<'de> Visitor<'de> for LenientStr {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

fn lenient_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    d.deserialize_any(LenientStr)
}

fn lenient_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Id>, D::Error> {
    LenientOf::<Id>(PhantomData).deserialize(d)
}

fn lenient_args<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Args>, D::Error> {
    Object::<Args>(PhantomData).deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kineto::split::{Parts, Splitter, Stop};

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

    /// The header and the events' JSON of a document, and each event's first-pass fields.
    fn parse(json: &str) -> (Header, Vec<Vec<u8>>) {
        #[derive(Default)]
        struct Keep {
            header: Header,
            events: Vec<Vec<u8>>,
        }
        impl Parts for Keep {
            const SCANNED: bool = false;
            fn header(&mut self, key: &str, value: &[u8]) -> Result<(), Stop> {
                Ok(header_value(&mut self.header, key, value)?)
            }
            fn events_found(&mut self) {
                self.header.has_events = true;
            }
            fn scanned(&mut self, _: &Scanned<'_>) -> Result<(), Stop> {
                unreachable!("parsed")
            }
            fn parse(&mut self, avail: &[u8]) -> Result<usize, Stop> {
                let (_, n) = parse_event(avail)?;
                self.events.push(avail[..n].to_vec());
                Ok(n)
            }
        }
        let mut keep = Keep::default();
        Splitter::new(json.as_bytes(), Default::default())
            .walk(&mut keep)
            .unwrap();
        (keep.header, keep.events)
    }

    /// The first pass's fields of each event of a document.
    fn metas(json: &str) -> Vec<String> {
        #[derive(Default)]
        struct Keep(Vec<String>);
        impl Parts for Keep {
            const SCANNED: bool = true;
            fn header(&mut self, _: &str, _: &[u8]) -> Result<(), Stop> {
                Ok(())
            }
            fn events_found(&mut self) {}
            fn scanned(&mut self, ev: &Scanned<'_>) -> Result<(), Stop> {
                let m = Meta::of(ev)?;
                self.0.push(format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?}",
                    m.ph,
                    m.cat,
                    m.name,
                    m.pid,
                    m.tid,
                    m.args_name()
                ));
                Ok(())
            }
            fn parse(&mut self, _: &[u8]) -> Result<usize, Stop> {
                unreachable!("scanned")
            }
        }
        let mut keep = Keep::default();
        Splitter::new(json.as_bytes(), Default::default())
            .walk(&mut keep)
            .unwrap();
        keep.0
    }

    #[test]
    fn the_first_pass_reads_fields_as_the_second_does() {
        let doc = r#"{"traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 12, "tid": "7", "args": {"name": "py\"thon"}},
            { "args" : {"x": {"ph": "no"}, "name": 3} , "name" : "a\u0062c", "cat":"kernel" ,"ph":7,
              "pid": -1, "tid": 1.0},
            {"p\u0068": "X", "pid": "Spans", "tid": [1], "cat": {"a": 1}},
            {}
        ]}"#;
        assert_eq!(
            metas(doc),
            [
                r#"Some("M") None Some("thread_name") Some(Num(12)) Some(Text("7")) Some("py\"thon")"#,
                r#"None Some("kernel") Some("abc") Some(Num(-1)) Some(Num(1)) None"#,
                r#"Some("X") None None Some(Text("Spans")) None None"#,
                "None None None None None None",
            ]
        );
        // The second pass reads the same.
        let (_, evs) = parse(doc);
        let ev: RawEvent = serde_json::from_slice(&evs[1]).unwrap();
        assert_eq!(
            (ev.ph, ev.cat.as_deref(), ev.name.as_deref(), ev.pid, ev.tid),
            (
                None,
                Some("kernel"),
                Some("abc"),
                Some(Id::Num(-1)),
                Some(Id::Num(1))
            )
        );
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
        let ev: RawEvent = serde_json::from_slice(&evs[0]).unwrap();
        assert_eq!(ev.pid, Some(Id::Text("Spans".into())));
        assert_eq!(ev.tid, Some(Id::Num(7)));
        assert_eq!(ev.name, None);
        assert_eq!(micros_to_ns(ev.ts.as_ref().unwrap().get()), Some(1_500));
        let args = ev.args.as_ref().unwrap();
        assert_eq!(
            (args.grid, args.block, args.device),
            (Some([64, 1, 1]), None, None)
        );
        let ev: RawEvent = serde_json::from_slice(br#"{"args": 7, "name": "a\"b"}"#).unwrap();
        assert!(ev.args.is_some_and(|a| a.correlation.is_none()));
        assert_eq!(ev.name.as_deref(), Some("a\"b"));
    }

    #[test]
    fn an_array_document_is_its_events() {
        let (h, evs) = parse(r#"[{"ph": "X", "name": "a"}, {"ph": "M"}]"#);
        assert!(h.has_events);
        assert_eq!(evs.len(), 2);
    }
}
