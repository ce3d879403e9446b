//! Row-key schemas: a row key declared as delimited, typed segments.
//!
//! `BATTERY#<salt>#<ts>` is three segments: the literal `BATTERY`, a salt
//! bucket computed from `ts`, and a timestamp in the format
//! `%Y%m%d%H%M%S%3f`. The schema maps typed values to key bytes (writes,
//! field promotion) and key bytes back to typed values (reads), and turns
//! constraints on segments into key ranges (pushdown).

use std::ops::Bound;

use serde::{Deserialize, Serialize};

use super::time_pattern::{parse_pattern, pattern_traits, write_pattern};
use crate::error::{Error, Result};

/// How a timestamp segment is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeFormat {
    /// A chrono strftime pattern in UTC, e.g. `%Y-%m-%d-%H%M`.
    Pattern(String),
    /// Seconds since the epoch, 10 digits.
    Seconds,
    /// Milliseconds since the epoch, 13 digits.
    Millis,
    /// Microseconds since the epoch, 16 digits.
    Micros,
}

impl TimeFormat {
    pub(super) fn unit_micros(&self) -> i64 {
        match self {
            TimeFormat::Seconds => 1_000_000,
            TimeFormat::Millis => 1_000,
            TimeFormat::Micros | TimeFormat::Pattern(_) => 1,
        }
    }

    pub(super) fn width(&self) -> usize {
        match self {
            TimeFormat::Seconds => 10,
            TimeFormat::Millis => 13,
            TimeFormat::Micros => 16,
            TimeFormat::Pattern(_) => 0,
        }
    }
}

/// The type of one named segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SegmentKind {
    /// Any UTF-8 text without the delimiter.
    Text,
    /// Text of at most `width` characters, written padded on the right
    /// with `pad` to exactly `width` (fixed offsets, as the market-data
    /// guide pads EXCHANGE and SYMBOL) and read with the padding trimmed.
    Padded {
        /// Characters.
        width: u16,
        /// The padding character (a space by default).
        pad: char,
    },
    /// A non-negative integer, zero-padded to `width` digits (0: unpadded).
    Int {
        /// Digits; 0 means no padding (and no range pushdown).
        width: u8,
    },
    /// A timestamp (microseconds in SQL).
    Time {
        /// How it is written.
        format: TimeFormat,
        /// Written as `i64::MAX - n` (19 digits) so newer sorts first.
        reversed: bool,
    },
    /// A bucket `hash(sources) % buckets`, spreading sequential keys.
    Salt {
        /// Number of buckets.
        buckets: u32,
        /// The named segments hashed, in this order.
        of: Vec<String>,
    },
}

/// One segment of a row key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Segment {
    /// Fixed text, such as `BATTERY`; not a column.
    Literal(String),
    /// A typed value, exposed as a SQL column.
    Field {
        /// Column name.
        name: String,
        /// Its type.
        kind: SegmentKind,
    },
}

/// A typed segment value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue {
    /// Text.
    Text(String),
    /// Integers and salt buckets.
    Int(i64),
    /// Microseconds since the epoch.
    Time(i64),
}

impl KeyValue {
    /// The value borrowed.
    pub fn borrowed(&self) -> KeyRef<'_> {
        match self {
            KeyValue::Text(t) => KeyRef::Text(t),
            KeyValue::Int(n) => KeyRef::Int(*n),
            KeyValue::Time(t) => KeyRef::Time(*t),
        }
    }
}

/// A [`KeyValue`] borrowed: what [`KeySchema::encode_into`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// Text.
    Text(&'a str),
    /// Integers and salt buckets.
    Int(i64),
    /// Microseconds since the epoch.
    Time(i64),
}

/// A constraint on one segment, from a query's predicates.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// The segment is one of these values.
    In(Vec<KeyValue>),
    /// The segment lies between these bounds.
    Range(Bound<KeyValue>, Bound<KeyValue>),
    /// A text segment starts with this text (`LIKE 'p%'`, `starts_with`).
    Prefix(String),
}

/// A row key declared as delimited, typed segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySchema {
    /// The byte between segments, e.g. `#`.
    pub delimiter: char,
    /// The segments in key order.
    pub segments: Vec<Segment>,
}

/// At most this many key prefixes come out of IN lists and salt fan-out
/// before the planner stops refining and scans wider.
pub(super) const MAX_PREFIXES: usize = 4096;

impl KeySchema {
    /// Checks the schema itself: names unique, salt sources exist, formats
    /// usable, delimiter ASCII.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidArgument(format!("row key schema: {reason}"));
        if !self.delimiter.is_ascii() || self.delimiter.is_ascii_alphanumeric() {
            return Err(bad(format!(
                "delimiter {:?} must be one ASCII punctuation character",
                self.delimiter
            )));
        }
        let mut names = Vec::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) if text.contains(self.delimiter) => {
                    return Err(bad(format!(
                        "literal {text:?} contains the delimiter {:?}",
                        self.delimiter
                    )));
                }
                Segment::Literal(_) => {}
                Segment::Field { name, kind } => {
                    if names.contains(&name) {
                        return Err(bad(format!("segment {name:?} appears twice")));
                    }
                    names.push(name);
                    match kind {
                        SegmentKind::Salt { buckets, of } => {
                            if *buckets == 0 {
                                return Err(bad(format!(
                                    "salt {name:?} needs at least one bucket"
                                )));
                            }
                            if of.is_empty() {
                                return Err(bad(format!(
                                    "salt {name:?} names no segments to hash"
                                )));
                            }
                        }
                        SegmentKind::Padded { width, pad } => {
                            if *width == 0 {
                                return Err(bad(format!("{name:?}: TEXT(0) holds nothing")));
                            }
                            if *pad == self.delimiter {
                                return Err(bad(format!(
                                    "{name:?}: the pad character {pad:?} is the delimiter"
                                )));
                            }
                        }
                        SegmentKind::Time {
                            format: TimeFormat::Pattern(p),
                            reversed,
                        } => {
                            if *reversed {
                                return Err(bad(format!(
                                    "{name:?}: only epoch timestamps can be REVERSED"
                                )));
                            }
                            check_pattern(p).map_err(|e| bad(format!("{name:?}: {e}")))?;
                        }
                        _ => {}
                    }
                }
            }
        }
        for segment in &self.segments {
            if let Segment::Field {
                name,
                kind: SegmentKind::Salt { of, .. },
            } = segment
            {
                for source in of {
                    let found = self
                        .fields()
                        .any(|(_, n, k)| n == source && !matches!(k, SegmentKind::Salt { .. }));
                    if !found {
                        return Err(bad(format!(
                            "salt {name:?} hashes {source:?}, which is not a segment"
                        )));
                    }
                }
            }
        }
        if self.fields().next().is_none() {
            return Err(bad("no named segments".into()));
        }
        Ok(())
    }

    /// The named segments: (position among fields, name, kind).
    pub fn fields(&self) -> impl Iterator<Item = (usize, &str, &SegmentKind)> {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Field { name, kind } => Some((name.as_str(), kind)),
                Segment::Literal(_) => None,
            })
            .enumerate()
            .map(|(i, (n, k))| (i, n, k))
    }

    /// Index of a named segment among the fields.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields()
            .find(|(_, n, _)| n.eq_ignore_ascii_case(name))
            .map(|(i, _, _)| i)
    }

    /// The text field `field` holds in a key for `value` (what
    /// [`KeySchema::encode`] writes there).
    pub fn field_text(&self, field: usize, value: KeyRef<'_>) -> Result<String> {
        let (_, name, kind) = self
            .fields()
            .nth(field)
            .ok_or_else(|| Error::Internal(format!("the row key has no field {field}")))?;
        let mut out = String::new();
        self.write_value(name, kind, value, &mut out)?;
        Ok(out)
    }

    /// Builds a row key from field values (by field index). Salt fields are
    /// computed and need no value.
    pub fn encode(&self, values: &[Option<KeyValue>]) -> Result<Vec<u8>> {
        let values: Vec<Option<KeyRef<'_>>> = values
            .iter()
            .map(|v| v.as_ref().map(KeyValue::borrowed))
            .collect();
        let mut key = Vec::new();
        self.encode_into(&values, &mut key)?;
        Ok(key)
    }

    /// [`KeySchema::encode`] of borrowed values, appended to `out` (left
    /// as it was on an error). Writes a row's key with no allocation of
    /// its own: what a bulk write does per row.
    pub fn encode_into(&self, values: &[Option<KeyRef<'_>>], out: &mut Vec<u8>) -> Result<()> {
        thread_local! {
            /// The fields' texts, and where each is in them.
            static TEXTS: std::cell::RefCell<(String, Vec<Option<std::ops::Range<usize>>>)> =
                std::cell::RefCell::default();
        }
        TEXTS.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let (texts, spans) = &mut *scratch;
            texts.clear();
            spans.clear();
            spans.resize(values.len(), None);
            for (i, name, kind) in self.fields() {
                if matches!(kind, SegmentKind::Salt { .. }) {
                    continue;
                }
                let value = values.get(i).copied().flatten().ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "row key segment {name:?} has no value (it is part of the key)"
                    ))
                })?;
                let start = texts.len();
                self.write_value(name, kind, value, texts)?;
                spans[i] = Some(start..texts.len());
            }
            let text = |i: usize| {
                spans
                    .get(i)
                    .cloned()
                    .flatten()
                    .map_or("", |span| &texts[span])
            };
            let start = out.len();
            let mut field = 0;
            let mut delimiter = [0u8; 4];
            let delimiter = self.delimiter.encode_utf8(&mut delimiter).as_bytes();
            for (n, segment) in self.segments.iter().enumerate() {
                if n > 0 {
                    out.extend_from_slice(delimiter);
                }
                match segment {
                    Segment::Literal(literal) => out.extend_from_slice(literal.as_bytes()),
                    Segment::Field {
                        kind: SegmentKind::Salt { buckets, of },
                        ..
                    } => {
                        let bucket = match self.salt_of(*buckets, of, &text) {
                            Ok(bucket) => bucket,
                            Err(e) => {
                                out.truncate(start);
                                return Err(e);
                            }
                        };
                        out.extend_from_slice(format_salt(bucket, *buckets).as_bytes());
                        field += 1;
                    }
                    Segment::Field { .. } => {
                        out.extend_from_slice(text(field).as_bytes());
                        field += 1;
                    }
                }
            }
            Ok(())
        })
    }

    pub(super) fn salt_of<'t>(
        &self,
        buckets: u32,
        of: &[String],
        text: &impl Fn(usize) -> &'t str,
    ) -> Result<u32> {
        thread_local! {
            /// The sources joined (a key is salted per row written and
            /// checked per row read).
            static JOINED: std::cell::RefCell<String> = std::cell::RefCell::default();
        }
        JOINED.with(|joined| {
            let mut joined = joined.borrow_mut();
            joined.clear();
            for source in of {
                let i = self
                    .field_index(source)
                    .ok_or_else(|| Error::InvalidArgument(format!("no segment {source:?}")))?;
                joined.push_str(text(i));
                joined.push(self.delimiter);
            }
            Ok((xxhash_rust::xxh3::xxh3_64(joined.as_bytes()) % u64::from(buckets)) as u32)
        })
    }

    /// The field index of a text segment that ends the key: it may hold
    /// the delimiter, since no segment follows it to be confused with.
    pub(super) fn free_tail(&self) -> Option<usize> {
        match self.segments.last() {
            Some(Segment::Field {
                kind: SegmentKind::Text,
                ..
            }) => self.fields().count().checked_sub(1),
            _ => None,
        }
    }

    pub(super) fn format_value(
        &self,
        name: &str,
        kind: &SegmentKind,
        value: &KeyValue,
    ) -> Result<String> {
        let mut text = String::new();
        self.write_value(name, kind, value.borrowed(), &mut text)?;
        Ok(text)
    }

    /// Appends a field's text for `value` to `out`.
    pub(super) fn write_value(
        &self,
        name: &str,
        kind: &SegmentKind,
        value: KeyRef<'_>,
        out: &mut String,
    ) -> Result<()> {
        let mismatch =
            || Error::InvalidArgument(format!("row key segment {name:?} cannot hold {value:?}"));
        match (kind, value) {
            (SegmentKind::Text, KeyRef::Text(t)) => {
                if t.contains(self.delimiter) && self.free_tail() != self.field_index(name) {
                    return Err(Error::InvalidArgument(format!(
                        "row key segment {name:?} value {t:?} contains the delimiter {:?}",
                        self.delimiter
                    )));
                }
                out.push_str(t);
            }
            (SegmentKind::Padded { width, pad }, KeyRef::Text(t)) => {
                let bad = |why: String| {
                    Err(Error::InvalidArgument(format!(
                        "row key segment {name:?} value {t:?} {why}"
                    )))
                };
                let chars = t.chars().count();
                if chars > usize::from(*width) {
                    return bad(format!("is longer than {width} characters"));
                }
                if t.contains(self.delimiter) {
                    return bad(format!("contains the delimiter {:?}", self.delimiter));
                }
                if t.ends_with(*pad) {
                    return bad(format!(
                        "ends with the pad character {pad:?}, which reading trims"
                    ));
                }
                out.push_str(t);
                out.extend(std::iter::repeat_n(*pad, usize::from(*width) - chars));
            }
            (SegmentKind::Int { width }, KeyRef::Int(n)) => {
                write_padded(name, n, usize::from(*width), out)?
            }
            (SegmentKind::Time { format, reversed }, KeyRef::Time(micros)) => {
                write_time(name, format, *reversed, micros, out)?
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// Splits a row key into field values (by field index). `None` when the
    /// key does not fit the schema: a field's text must be what writing its
    /// value writes (no leniency: a key that decoded to a value it was not
    /// written from would sort elsewhere than that value, so a key range
    /// for it would miss the row a full scan shows), and a salt bucket must
    /// be the one its sources hash to.
    pub fn decode(&self, key: &[u8]) -> Option<Vec<KeyValue>> {
        let mut out = Vec::with_capacity(self.segments.len());
        self.walk(key, |kind, part| {
            out.push(parse_value(kind, part)?);
            Some(())
        })?;
        Some(out)
    }

    /// Whether a row key fits the schema: what [`KeySchema::decode`]
    /// answers with `Some`, without building the values.
    pub fn fits(&self, key: &[u8]) -> bool {
        self.walk(key, fits_field).is_some()
    }

    /// Whether a field is a salt bucket (which depends on other fields:
    /// a key sharing a salted key's prefix is checked whole).
    pub(super) fn salted(&self) -> bool {
        self.fields()
            .any(|(_, _, kind)| matches!(kind, SegmentKind::Salt { .. }))
    }

    /// Splits `key` into its segments, checks the literals, and hands each
    /// field's kind and text to `field`, in order; then checks what
    /// needs several fields (salt buckets). `None` when anything does not
    /// fit.
    pub(super) fn walk<'k>(
        &self,
        key: &'k [u8],
        mut field: impl FnMut(&SegmentKind, &'k str) -> Option<()>,
    ) -> Option<()> {
        let key = std::str::from_utf8(key).ok()?;
        // A segment at the end keeps any delimiters in it: text may hold
        // them, and so may a time pattern's text (`%Y-%m-%d` after a
        // `-`), which reads only as written; padded text may not.
        let mut parts = key.splitn(self.segments.len(), self.delimiter);
        let last = self.segments.len().saturating_sub(1);
        for (n, segment) in self.segments.iter().enumerate() {
            let part = parts.next()?;
            match segment {
                Segment::Literal(text) => {
                    if part != text {
                        return None;
                    }
                }
                Segment::Field { kind, .. } => {
                    if n == last
                        && matches!(kind, SegmentKind::Padded { .. })
                        && part.contains(self.delimiter)
                    {
                        return None;
                    }
                    field(kind, part)?;
                }
            }
        }
        self.salt_fits(key)
    }

    /// Whether each salt bucket of `key` (which has the schema's
    /// segments) is the one its sources hash to.
    pub(super) fn salt_fits(&self, key: &str) -> Option<()> {
        // Field `j`'s text (split again: only salted keys ask).
        let text = |j: usize| {
            key.splitn(self.segments.len(), self.delimiter)
                .zip(&self.segments)
                .filter(|(_, s)| matches!(s, Segment::Field { .. }))
                .nth(j)
                .map_or("", |(part, _)| part)
        };
        for (i, _, kind) in self.fields() {
            if let SegmentKind::Salt { buckets, of } = kind {
                let bucket = self.salt_of(*buckets, of, &text).ok()?;
                if text(i).parse::<u32>() != Ok(bucket) {
                    return None;
                }
            }
        }
        Some(())
    }
}

/// Whether a field's text is one its kind writes (what
/// [`KeySchema::fits`] asks of each field).
fn fits_field(kind: &SegmentKind, part: &str) -> Option<()> {
    match kind {
        SegmentKind::Text => Some(()),
        SegmentKind::Padded { width, .. } => {
            (part.chars().count() == usize::from(*width)).then_some(())
        }
        _ => parse_value(kind, part).map(|_| ()),
    }
}

/// A salt bucket as the key writes it: zero-padded to the width of the
/// largest bucket.
pub fn format_salt(bucket: u32, buckets: u32) -> String {
    let width = (buckets.saturating_sub(1)).to_string().len();
    format!("{bucket:0width$}")
}

pub(super) fn write_padded(name: &str, n: i64, width: usize, out: &mut String) -> Result<()> {
    use std::fmt::Write;
    if n < 0 {
        return Err(Error::InvalidArgument(format!(
            "row key segment {name:?} is a zero-padded integer and cannot hold {n}"
        )));
    }
    let start = out.len();
    let _ = write!(out, "{n:0width$}");
    if width > 0 && out.len() - start > width {
        out.truncate(start);
        return Err(Error::InvalidArgument(format!(
            "row key segment {name:?} value {n} has more than {width} digits"
        )));
    }
    Ok(())
}

pub(super) fn format_time(
    name: &str,
    format: &TimeFormat,
    reversed: bool,
    micros: i64,
) -> Result<String> {
    let mut text = String::new();
    write_time(name, format, reversed, micros, &mut text)?;
    Ok(text)
}

pub(super) fn write_time(
    name: &str,
    format: &TimeFormat,
    reversed: bool,
    micros: i64,
    out: &mut String,
) -> Result<()> {
    use std::fmt::Write;
    if let TimeFormat::Pattern(p) = format {
        return write_pattern(p, micros, out).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "row key segment {name:?}: timestamp {micros} µs is out of range"
            ))
        });
    }
    let n = micros.div_euclid(format.unit_micros());
    if reversed {
        if n < 0 {
            return Err(Error::InvalidArgument(format!(
                "row key segment {name:?}: negative timestamp {micros}"
            )));
        }
        let _ = write!(out, "{:019}", i64::MAX - n);
        return Ok(());
    }
    write_padded(name, n, format.width(), out)
}

pub(super) fn parse_value(kind: &SegmentKind, part: &str) -> Option<KeyValue> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match kind {
        SegmentKind::Text => Some(KeyValue::Text(part.to_string())),
        SegmentKind::Padded { width, pad } => (part.chars().count() == usize::from(*width))
            .then(|| KeyValue::Text(part.trim_end_matches(*pad).to_string())),
        SegmentKind::Int { width } => {
            // Zero-padded to its width, or unpadded without leading zeros.
            let fits = match *width {
                0 => part == "0" || !part.starts_with('0'),
                width => part.len() == usize::from(width),
            };
            if !digits(part) || !fits {
                return None;
            }
            part.parse().ok().map(KeyValue::Int)
        }
        SegmentKind::Salt { buckets, .. } => {
            if !digits(part) {
                return None;
            }
            let bucket: u32 = part.parse().ok()?;
            (bucket < *buckets && format_salt(bucket, *buckets) == part)
                .then_some(KeyValue::Int(i64::from(bucket)))
        }
        SegmentKind::Time {
            format: TimeFormat::Pattern(p),
            ..
        } => parse_pattern(p, part).map(KeyValue::Time),
        SegmentKind::Time { format, reversed } => {
            // Written at one width; other text is not this schema's.
            let width = if *reversed { 19 } else { format.width() };
            if !digits(part) || part.len() != width {
                return None;
            }
            let n: i64 = part.parse().ok()?;
            let n = if *reversed {
                i64::MAX.checked_sub(n)?
            } else {
                n
            };
            n.checked_mul(format.unit_micros()).map(KeyValue::Time)
        }
    }
}

pub(super) fn check_pattern(pattern: &str) -> std::result::Result<(), String> {
    let probe = 1_614_945_600_123_000i64; // 2021-03-05 12:00:00.123
    let text = format_time(
        "probe",
        &TimeFormat::Pattern(pattern.to_string()),
        false,
        probe,
    )
    .map_err(|e| e.to_string())?;
    if parse_pattern(pattern, &text).is_none() {
        return Err(format!(
            "timestamp format {pattern:?} writes {text:?}, which it cannot read back"
        ));
    }
    Ok(())
}

/// Whether text written with `pattern` sorts like the time it encodes:
/// checked on probes an hour, a day, a month and a year apart.
pub(super) fn pattern_sorts(pattern: &str) -> bool {
    pattern_traits(pattern).sorts
}

/// Whether a pattern writes every time (of years 1000 to 9999) in text
/// of one length.
pub(super) fn pattern_fixed(pattern: &str) -> bool {
    pattern_traits(pattern).fixed
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
