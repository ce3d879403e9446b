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
use crate::store::RowRange;

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
    fn unit_micros(&self) -> i64 {
        match self {
            TimeFormat::Seconds => 1_000_000,
            TimeFormat::Millis => 1_000,
            TimeFormat::Micros | TimeFormat::Pattern(_) => 1,
        }
    }

    fn width(&self) -> usize {
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
const MAX_PREFIXES: usize = 4096;

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

    fn salt_of<'t>(
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
    fn free_tail(&self) -> Option<usize> {
        match self.segments.last() {
            Some(Segment::Field {
                kind: SegmentKind::Text,
                ..
            }) => self.fields().count().checked_sub(1),
            _ => None,
        }
    }

    fn format_value(&self, name: &str, kind: &SegmentKind, value: &KeyValue) -> Result<String> {
        let mut text = String::new();
        self.write_value(name, kind, value.borrowed(), &mut text)?;
        Ok(text)
    }

    /// Appends a field's text for `value` to `out`.
    fn write_value(
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
        self.walk(key, |kind, part| match kind {
            SegmentKind::Text => Some(()),
            SegmentKind::Padded { width, .. } => {
                (part.chars().count() == usize::from(*width)).then_some(())
            }
            _ => parse_value(kind, part).map(|_| ()),
        })
        .is_some()
    }

    /// Splits `key` into its segments, checks the literals, and hands each
    /// field's kind and text to `field`, in order; then checks what
    /// needs several fields (salt buckets). `None` when anything does not
    /// fit.
    fn walk<'k>(
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

    /// Key ranges covering every key whose fields satisfy `constraints`
    /// (by field index). The ranges may cover more keys than match (the
    /// scan re-checks); they never miss one.
    pub fn ranges(&self, constraints: &[Option<Constraint>]) -> Vec<RowRange> {
        self.ranges_with_exact(constraints).0
    }

    /// [`KeySchema::ranges`], and per field whether the ranges hold only
    /// keys whose field meets its constraint, among keys that fit the
    /// schema (a scan that skips the re-check must still drop keys that do
    /// not): true for a field the ranges pin to listed values (`=`, `IN`)
    /// that write and read back unchanged, when every field before it is
    /// a salt or such a field.
    pub fn ranges_with_exact(
        &self,
        constraints: &[Option<Constraint>],
    ) -> (Vec<RowRange>, Vec<bool>) {
        let mut exact = vec![false; self.fields().count()];
        // Whether the fields so far are all pinned exactly.
        let mut pinned = true;
        let mut prefixes: Vec<String> = vec![String::new()];
        let mut field = 0;
        for (n, segment) in self.segments.iter().enumerate() {
            let delimiter = if n + 1 < self.segments.len() {
                Some(self.delimiter)
            } else {
                None
            };
            let extend = |prefixes: &[String], values: &[String]| -> Vec<String> {
                let mut out = Vec::with_capacity(prefixes.len() * values.len());
                for p in prefixes {
                    for v in values {
                        let mut s = p.clone();
                        s.push_str(v);
                        s.extend(delimiter);
                        out.push(s);
                    }
                }
                out
            };
            match segment {
                Segment::Literal(text) => prefixes = extend(&prefixes, std::slice::from_ref(text)),
                Segment::Field { name, kind } => {
                    let constraint = constraints.get(field).and_then(Option::as_ref);
                    field += 1;
                    if let SegmentKind::Salt { buckets, of } = kind {
                        let buckets_used = self.salt_candidates(*buckets, of, constraints);
                        let texts: Vec<String> = buckets_used
                            .iter()
                            .map(|b| format_salt(*b, *buckets))
                            .collect();
                        if prefixes.len() * texts.len() > MAX_PREFIXES {
                            return (prefix_ranges(&prefixes), exact);
                        }
                        prefixes = extend(&prefixes, &texts);
                        continue;
                    }
                    match constraint {
                        Some(Constraint::In(values)) => {
                            let mut texts: Vec<String> = values
                                .iter()
                                .filter_map(|v| self.format_value(name, kind, v).ok())
                                .collect();
                            texts.sort();
                            texts.dedup();
                            if prefixes.len() * texts.len().max(1) > MAX_PREFIXES {
                                return (prefix_ranges(&prefixes), exact);
                            }
                            // An IN list of values that cannot be written here matches nothing.
                            prefixes = extend(&prefixes, &texts);
                            if prefixes.is_empty() {
                                return (Vec::new(), exact);
                            }
                            // Pinned exactly when each value reads back as itself
                            // (a time within a `%Y%m%d` day does not).
                            pinned &= values.iter().all(|v| {
                                self.format_value(name, kind, v)
                                    .map_or(true, |t| parse_value(kind, &t).as_ref() == Some(v))
                            });
                            exact[field - 1] = pinned;
                        }
                        Some(Constraint::Range(lo, hi)) => {
                            let (ranges, answered) =
                                self.range_within(&prefixes, name, kind, lo, hi);
                            exact[field - 1] = pinned && answered;
                            return (ranges, exact);
                        }
                        Some(Constraint::Prefix(start)) => {
                            if start.contains(self.delimiter)
                                && self.free_tail() != self.field_index(name)
                            {
                                // No value of this segment holds the delimiter.
                                return (Vec::new(), exact);
                            }
                            let texts: Vec<String> =
                                prefixes.iter().map(|p| format!("{p}{start}")).collect();
                            return (prefix_ranges(&texts), exact);
                        }
                        None => return (prefix_ranges(&prefixes), exact),
                    }
                }
            }
        }
        // Every segment pinned: whole keys (the trailing delimiter was not added).
        let keys = prefixes
            .into_iter()
            .map(|p| RowRange::key(p.into_bytes()))
            .collect();
        (keys, exact)
    }

    /// What key order says about segment order for a scan under
    /// `constraints`: the leading segments pinned to listed values (and
    /// salt buckets) split the keys into groups, one key prefix each; within
    /// a group, keys sort by the next segments, as far as their text sorts
    /// as their values do. `None` when no segment follows the groups in an
    /// order-preserving form, or the groups are too many to merge.
    pub fn order(&self, constraints: &[Option<Constraint>]) -> Option<KeyOrder> {
        let mut prefixes: Vec<String> = vec![String::new()];
        let mut constants = Vec::new();
        let mut field = 0;
        let last = self.segments.len().saturating_sub(1);
        let mut segments = self.segments.iter().enumerate();
        // The groups: literals, salts and pinned fields up to the first
        // field that is free or ranged.
        let first = loop {
            let (n, segment) = segments.next()?;
            let texts: Vec<String> = match segment {
                Segment::Literal(text) => vec![text.clone()],
                Segment::Field { name, kind } => {
                    let i = field;
                    field += 1;
                    if let SegmentKind::Salt { buckets, of } = kind {
                        self.salt_candidates(*buckets, of, constraints)
                            .iter()
                            .map(|b| format_salt(*b, *buckets))
                            .collect()
                    } else if let Some(Some(Constraint::In(values))) = constraints.get(i) {
                        let mut texts: Vec<String> = values
                            .iter()
                            .filter_map(|v| self.format_value(name, kind, v).ok())
                            .collect();
                        texts.sort();
                        texts.dedup();
                        if texts.len() == 1 {
                            constants.push(i);
                        }
                        texts
                    } else {
                        break (n, i, kind);
                    }
                }
            };
            if texts.is_empty() || prefixes.len() * texts.len() > MAX_GROUPS {
                return None;
            }
            prefixes = prefixes
                .iter()
                .flat_map(|p| {
                    texts
                        .iter()
                        .map(move |t| format!("{p}{t}{}", self.delimiter))
                })
                .collect();
        };
        // Then the fields whose text sorts as their values, each after a
        // field of one width (so a longer value cannot sort among them).
        let mut fields = Vec::new();
        let (mut n, mut i, mut kind) = first;
        while let Some((descending, fixed)) = sorts_as_value(kind, n == last) {
            fields.push((i, descending));
            if !fixed {
                break;
            }
            let next = segments.by_ref().find_map(|(m, s)| match s {
                Segment::Literal(_) => None,
                Segment::Field { kind, .. } => Some((m, kind)),
            });
            let Some((m, k)) = next else {
                break;
            };
            (n, i, kind) = (m, i + 1, k);
        }
        if fields.is_empty() {
            return None;
        }
        Some(KeyOrder {
            groups: prefixes.into_iter().map(String::into_bytes).collect(),
            fields,
            constants,
        })
    }

    /// Salt buckets that keys satisfying `constraints` can fall in.
    fn salt_candidates(
        &self,
        buckets: u32,
        of: &[String],
        constraints: &[Option<Constraint>],
    ) -> Vec<u32> {
        let all = || (0..buckets).collect();
        let mut combos: Vec<Vec<Option<String>>> =
            vec![vec![None; constraints.len().max(self.fields().count())]];
        for source in of {
            let Some(i) = self.field_index(source) else {
                return all();
            };
            let Some(Some(Constraint::In(values))) = constraints.get(i) else {
                return all();
            };
            let Some((_, name, kind)) = self.fields().nth(i) else {
                return all();
            };
            let texts: Vec<String> = values
                .iter()
                .filter_map(|v| self.format_value(name, kind, v).ok())
                .collect();
            if combos.len() * texts.len() > MAX_PREFIXES {
                return all();
            }
            combos = combos
                .iter()
                .flat_map(|c| {
                    texts.iter().map(move |t| {
                        let mut c = c.clone();
                        c[i] = Some(t.clone());
                        c
                    })
                })
                .collect();
        }
        let mut out: Vec<u32> = combos
            .iter()
            .filter_map(|c| {
                let text = |i: usize| c.get(i).and_then(Option::as_deref).unwrap_or_default();
                self.salt_of(buckets, of, &text).ok()
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn range_within(
        &self,
        prefixes: &[String],
        name: &str,
        kind: &SegmentKind,
        lo: &Bound<KeyValue>,
        hi: &Bound<KeyValue>,
    ) -> (Vec<RowRange>, bool) {
        let encode = |v: &KeyValue| self.format_value(name, kind, v).ok();
        // Where every value's text has one width, the keys holding a
        // bound's own text hold one value: what that text reads back as
        // (the bound cut to the format's precision, never above it). They
        // belong in the range exactly when that value meets the bound.
        let fixed = match kind {
            SegmentKind::Int { width } => *width > 0,
            SegmentKind::Time {
                format: TimeFormat::Pattern(p),
                ..
            } => pattern_fixed(p),
            SegmentKind::Time { .. } => true,
            SegmentKind::Text | SegmentKind::Padded { .. } | SegmentKind::Salt { .. } => false,
        };
        let holds = |bound: &Bound<KeyValue>, lower: bool| -> bool {
            let (Bound::Included(v) | Bound::Excluded(v)) = bound else {
                return true;
            };
            let read = encode(v).and_then(|t| parse_value(kind, &t));
            match (fixed, read) {
                (true, Some(read)) => match (bound, lower) {
                    (Bound::Included(_), true) => read >= *v,
                    (Bound::Excluded(_), true) => read > *v,
                    (Bound::Included(_), false) => read <= *v,
                    _ => read < *v,
                },
                _ => true,
            }
        };
        let (keep_lo, keep_hi) = (holds(lo, true), holds(hi, false));
        let (lo, hi, keep_lo, keep_hi) = match kind {
            SegmentKind::Time { reversed: true, .. } => (hi, lo, keep_hi, keep_lo),
            _ => (lo, hi, keep_lo, keep_hi),
        };
        let value_of = |b: &Bound<KeyValue>| match b {
            Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
            Bound::Unbounded => None,
        };
        let sortable = match kind {
            SegmentKind::Int { width } => *width > 0,
            SegmentKind::Time {
                format: TimeFormat::Pattern(p),
                ..
            } => pattern_sorts(p),
            SegmentKind::Time { .. } => true,
            SegmentKind::Text => true,
            // Padding sorts by the pad character, not as the value does.
            SegmentKind::Padded { .. } | SegmentKind::Salt { .. } => false,
        };
        if !sortable {
            return (prefix_ranges(prefixes), false);
        }
        let lo_text = value_of(lo).and_then(|v| encode(&v));
        let hi_text = value_of(hi).and_then(|v| encode(&v));
        // The ranges hold exactly the keys that fit and meet the bounds
        // when the text has one width and sorts as the value ascends (a
        // key's text between the bounds' texts is a value between them,
        // and a bound's own text reads back as `holds` judged), and each
        // bound has a text and reads back from it (out-of-domain bounds
        // widen the range to the parent prefix).
        let reads_back = |b: &Bound<KeyValue>| {
            value_of(b).is_none_or(|v| encode(&v).and_then(|t| parse_value(kind, &t)).is_some())
        };
        let exact = fixed
            && !matches!(kind, SegmentKind::Time { reversed: true, .. })
            && reads_back(lo)
            && reads_back(hi);
        // Out-of-domain bounds (a negative integer, a date the format cannot
        // write) fall back to the parent prefix: wider, never wrong.
        let delimiter = self.delimiter as u8;
        let ranges = prefixes
            .iter()
            .map(|p| {
                let parent = RowRange::prefix(p.as_bytes().to_vec());
                let start = match &lo_text {
                    // Fixed width: every key holding the bound's text starts
                    // with it, and every larger value sorts after them all.
                    Some(t) if !keep_lo => {
                        crate::codec::prefix_successor(format!("{p}{t}").as_bytes())
                            .map_or(parent.start.clone(), Bound::Included)
                    }
                    Some(t) => Bound::Included(format!("{p}{t}").into_bytes()),
                    None => parent.start.clone(),
                };
                let end = match &hi_text {
                    Some(t) if !keep_hi => Bound::Excluded(format!("{p}{t}").into_bytes()),
                    Some(t) if !matches!(kind, SegmentKind::Text) => {
                        let mut end = format!("{p}{t}").into_bytes();
                        end.push(delimiter);
                        crate::codec::prefix_successor(&end)
                            .map_or(Bound::Unbounded, Bound::Excluded)
                    }
                    // Text: a shorter value sorts by its delimiter byte, so
                    // the bound holds only when every byte of the bound sorts
                    // after the delimiter.
                    Some(t) if t.bytes().all(|b| b > delimiter) => {
                        let mut end = format!("{p}{t}").into_bytes();
                        end.push(delimiter);
                        crate::codec::prefix_successor(&end)
                            .map_or(Bound::Unbounded, Bound::Excluded)
                    }
                    _ => parent.end.clone(),
                };
                RowRange::between(start, end)
            })
            .collect();
        (ranges, exact)
    }
}

/// At most this many key groups are merged in segment order.
const MAX_GROUPS: usize = 256;

/// Segment order within a scan's key order (see `KeySchema::order`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyOrder {
    /// One key prefix per group, sorted.
    pub groups: Vec<Vec<u8>>,
    /// Fields (by index) whose values, in this order, sort as the keys of
    /// a group do; `true` where the value descends as keys ascend.
    pub fields: Vec<(usize, bool)>,
    /// Fields pinned to one value in every group.
    pub constants: Vec<usize>,
}

/// Whether a segment's text sorts as its value: `Some((descending,
/// fixed width))`. Text does only as the key's last segment (elsewhere a
/// shorter value sorts by the delimiter that follows it).
fn sorts_as_value(kind: &SegmentKind, last: bool) -> Option<(bool, bool)> {
    match kind {
        SegmentKind::Int { width } => (*width > 0).then_some((false, true)),
        SegmentKind::Time {
            format: TimeFormat::Pattern(p),
            ..
        } => pattern_sorts(p).then(|| (false, pattern_fixed(p))),
        SegmentKind::Time { reversed, .. } => Some((*reversed, true)),
        SegmentKind::Text => last.then_some((false, false)),
        SegmentKind::Padded { .. } | SegmentKind::Salt { .. } => None,
    }
}

fn prefix_ranges(prefixes: &[String]) -> Vec<RowRange> {
    prefixes
        .iter()
        .map(|p| RowRange::prefix(p.as_bytes().to_vec()))
        .collect()
}

fn format_salt(bucket: u32, buckets: u32) -> String {
    let width = (buckets.saturating_sub(1)).to_string().len();
    format!("{bucket:0width$}")
}

fn write_padded(name: &str, n: i64, width: usize, out: &mut String) -> Result<()> {
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

fn format_time(name: &str, format: &TimeFormat, reversed: bool, micros: i64) -> Result<String> {
    let mut text = String::new();
    write_time(name, format, reversed, micros, &mut text)?;
    Ok(text)
}

fn write_time(
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

fn parse_value(kind: &SegmentKind, part: &str) -> Option<KeyValue> {
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

fn check_pattern(pattern: &str) -> std::result::Result<(), String> {
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
fn pattern_sorts(pattern: &str) -> bool {
    pattern_traits(pattern).sorts
}

/// Whether a pattern writes every time (of years 1000 to 9999) in text
/// of one length.
fn pattern_fixed(pattern: &str) -> bool {
    pattern_traits(pattern).fixed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_patterns_are_accepted() {
        assert!(check_pattern("%Y%m").is_ok() && check_pattern("%Y").is_ok());
        // A time of day without a date cannot be read back.
        assert!(check_pattern("%H%M").is_err());
    }

    fn battery() -> KeySchema {
        KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Literal("BATTERY".into()),
                Segment::Field {
                    name: "salt".into(),
                    kind: SegmentKind::Salt {
                        buckets: 4,
                        of: vec!["ts".into()],
                    },
                },
                Segment::Field {
                    name: "ts".into(),
                    kind: SegmentKind::Time {
                        format: TimeFormat::Pattern("%Y%m%d%H%M%S%3f".into()),
                        reversed: false,
                    },
                },
            ],
        }
    }

    fn micros(s: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.3f")
            .unwrap()
            .and_utc()
            .timestamp_micros()
    }

    #[test]
    fn key_order_names_the_groups_and_the_segments_they_sort_by() {
        // Salted: one group per bucket, each in time order.
        let order = battery().order(&[None, None]).unwrap();
        assert_eq!(order.groups.len(), 4);
        assert!(order.groups[0].starts_with(b"BATTERY#0#"));
        assert_eq!(order.fields, vec![(1, false)]);
        // A device pinned, then a reversed time: one group, newest first.
        let events = KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field {
                    name: "dev".into(),
                    kind: SegmentKind::Text,
                },
                Segment::Field {
                    name: "ts".into(),
                    kind: SegmentKind::Time {
                        format: TimeFormat::Millis,
                        reversed: true,
                    },
                },
            ],
        };
        let pinned = Some(Constraint::In(vec![KeyValue::Text("d1".into())]));
        let order = events.order(&[pinned, None]).unwrap();
        assert_eq!(order.groups, vec![b"d1#".to_vec()]);
        assert_eq!(order.fields, vec![(1, true)]);
        assert_eq!(order.constants, vec![0]);
        // A text segment before others does not sort as its value ("a" and
        // "a!" sort as "a#" and "a!"), so nothing follows from the key.
        assert_eq!(events.order(&[None, None]), None);
        // Values that cannot be written leave no group.
        let bad = Some(Constraint::In(vec![KeyValue::Text("x#y".into())]));
        assert_eq!(events.order(&[bad, None]), None);
    }

    #[test]
    fn salted_keys_round_trip() {
        let schema = battery();
        schema.validate().unwrap();
        let ts = micros("2015-03-01 12:45:01.001");
        let key = schema.encode(&[None, Some(KeyValue::Time(ts))]).unwrap();
        let text = String::from_utf8(key.clone()).unwrap();
        assert!(
            text.starts_with("BATTERY#") && text.ends_with("#20150301124501001"),
            "{text}"
        );
        let decoded = schema.decode(&key).unwrap();
        assert_eq!(decoded[1], KeyValue::Time(ts));
        // Equality on the salt's source pins its bucket: one key.
        let ranges = schema.ranges(&[None, Some(Constraint::In(vec![KeyValue::Time(ts)]))]);
        assert_eq!(ranges, vec![RowRange::key(key)]);
        // A time range fans out over every bucket.
        let ranges = schema.ranges(&[
            None,
            Some(Constraint::Range(
                Bound::Included(KeyValue::Time(ts)),
                Bound::Unbounded,
            )),
        ]);
        assert_eq!(ranges.len(), 4);
    }

    #[test]
    fn misfits_decode_to_none() {
        let schema = battery();
        for bad in [
            &b"BATTERY#1"[..],
            b"BATTERY#x#20150301124501001",
            b"PHONE#1#20150301124501001",
            b"\xff",
        ] {
            assert_eq!(schema.decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reversed_timestamps_invert_ranges() {
        let schema = KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field {
                    name: "user".into(),
                    kind: SegmentKind::Text,
                },
                Segment::Field {
                    name: "ts".into(),
                    kind: SegmentKind::Time {
                        format: TimeFormat::Millis,
                        reversed: true,
                    },
                },
            ],
        };
        let a = schema
            .encode(&[
                Some(KeyValue::Text("u".into())),
                Some(KeyValue::Time(1_000_000)),
            ])
            .unwrap();
        let b = schema
            .encode(&[
                Some(KeyValue::Text("u".into())),
                Some(KeyValue::Time(2_000_000)),
            ])
            .unwrap();
        assert!(b < a, "newer sorts first");
        let ranges = schema.ranges(&[
            Some(Constraint::In(vec![KeyValue::Text("u".into())])),
            Some(Constraint::Range(
                Bound::Included(KeyValue::Time(1_500_000)),
                Bound::Unbounded,
            )),
        ]);
        let [range] = ranges.as_slice() else {
            panic!("{ranges:?}")
        };
        let inside = |k: &[u8]| {
            std::ops::RangeBounds::<[u8]>::contains(
                &(
                    range.start.as_ref().map(|v| v.as_slice()),
                    range.end.as_ref().map(|v| v.as_slice()),
                ),
                k,
            )
        };
        assert!(inside(&b) && !inside(&a));
    }

    #[test]
    fn bad_values_are_named() {
        let schema = KeySchema {
            delimiter: '#',
            segments: vec![Segment::Field {
                name: "n".into(),
                kind: SegmentKind::Int { width: 3 },
            }],
        };
        let err = schema
            .encode(&[Some(KeyValue::Int(1234))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("1234") && err.contains("3 digits"), "{err}");
        let err = schema
            .encode(&[Some(KeyValue::Int(-1))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("-1"), "{err}");
        assert_eq!(schema.encode(&[Some(KeyValue::Int(7))]).unwrap(), b"007");
    }

    #[test]
    fn unsortable_patterns_are_detected() {
        assert!(pattern_sorts("%Y-%m-%d-%H%M"));
        assert!(pattern_sorts("%Y%m%d%H%M%S%3f"));
        assert!(!pattern_sorts("%d-%m-%Y"));
    }

    #[test]
    fn a_last_time_pattern_may_hold_the_delimiter() {
        let schema = KeySchema {
            delimiter: '-',
            segments: vec![
                Segment::Field {
                    name: "dev".into(),
                    kind: SegmentKind::Text,
                },
                Segment::Field {
                    name: "day".into(),
                    kind: SegmentKind::Time {
                        format: TimeFormat::Pattern("%Y-%m-%d".into()),
                        reversed: false,
                    },
                },
            ],
        };
        let values = schema.decode(b"d1-2024-02-02").unwrap();
        assert_eq!(
            schema
                .encode(&values.into_iter().map(Some).collect::<Vec<_>>())
                .unwrap(),
            b"d1-2024-02-02"
        );
        assert!(schema.decode(b"d1-2024-2-2").is_none());
    }

    #[test]
    fn fits_agrees_with_decode() {
        let padded = KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field {
                    name: "x".into(),
                    kind: SegmentKind::Padded { width: 3, pad: ' ' },
                },
                Segment::Literal("L".into()),
            ],
        };
        let keys: [&[u8]; 12] = [
            b"h1#0007",
            b"h1#7",
            b"h1#00x7",
            b"h1",
            b"#0007",
            b"h1#0007#more",
            b"\xff#0007",
            b"ab #L",
            b"ab#L",
            b"abc#M",
            b"BATTERY#2#20150301000000000",
            b"BATTERY#2#2015",
        ];
        for key in keys {
            for schema in [host_n(false), host_n(true), padded.clone(), battery()] {
                assert_eq!(
                    schema.fits(key),
                    schema.decode(key).is_some(),
                    "{}",
                    String::from_utf8_lossy(key)
                );
            }
        }
    }

    #[test]
    fn only_listed_leading_values_that_read_back_are_exact() {
        let text = |t: &str| KeyValue::Text(t.into());
        let schema = host_n(false);
        let pinned = Some(Constraint::In(vec![text("h1"), text("h2")]));
        let n = |v: i64| Some(Constraint::In(vec![KeyValue::Int(v)]));
        assert_eq!(
            schema.ranges_with_exact(&[pinned.clone(), n(7)]).1,
            [true, true]
        );
        // After a field that is not pinned, nothing is.
        assert_eq!(schema.ranges_with_exact(&[None, n(7)]).1, [false, false]);
        let range = Some(Constraint::Range(
            Bound::Unbounded,
            Bound::Excluded(KeyValue::Int(9)),
        ));
        // A range on the fixed-width, sortable field after pinned ones is
        // exact; not after a free field, nor with a bound the field cannot
        // write (the range widens to the parent), nor on reversed times.
        assert_eq!(
            schema.ranges_with_exact(&[pinned.clone(), range.clone()]).1,
            [true, true]
        );
        assert_eq!(schema.ranges_with_exact(&[None, range]).1, [false, false]);
        let too_wide = Some(Constraint::Range(
            Bound::Unbounded,
            Bound::Excluded(KeyValue::Int(100_000)),
        ));
        assert_eq!(
            schema.ranges_with_exact(&[pinned.clone(), too_wide]).1,
            [true, false]
        );
        let since = Some(Constraint::Range(
            Bound::Included(KeyValue::Time(5)),
            Bound::Unbounded,
        ));
        assert_eq!(
            host_n(true).ranges_with_exact(&[pinned, since]).1,
            [true, false]
        );
        // A day-resolution segment cannot pin a time within the day.
        let days = KeySchema {
            delimiter: '#',
            segments: vec![Segment::Field {
                name: "day".into(),
                kind: SegmentKind::Time {
                    format: TimeFormat::Pattern("%Y%m%d".into()),
                    reversed: false,
                },
            }],
        };
        let noon = micros("2015-03-01 12:00:00.000");
        let midnight = micros("2015-03-01 00:00:00.000");
        let at = |t: i64| Some(Constraint::In(vec![KeyValue::Time(t)]));
        assert_eq!(days.ranges_with_exact(&[at(midnight)]).1, [true]);
        assert_eq!(days.ranges_with_exact(&[at(noon)]).1, [false]);
        // Salted: the salt bucket follows from the pinned time, which the
        // range then pins exactly.
        assert_eq!(
            battery().ranges_with_exact(&[None, at(midnight)]).1,
            [false, true]
        );
    }

    fn host_n(reversed_ts: bool) -> KeySchema {
        KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field {
                    name: "host".into(),
                    kind: SegmentKind::Text,
                },
                Segment::Field {
                    name: "n".into(),
                    kind: if reversed_ts {
                        SegmentKind::Time {
                            format: TimeFormat::Micros,
                            reversed: true,
                        }
                    } else {
                        SegmentKind::Int { width: 4 }
                    },
                },
            ],
        }
    }

    fn bound(kind: u8, v: i64, reversed_ts: bool) -> Bound<KeyValue> {
        let value = if reversed_ts {
            KeyValue::Time(v)
        } else {
            KeyValue::Int(v)
        };
        match kind % 3 {
            0 => Bound::Included(value),
            1 => Bound::Excluded(value),
            _ => Bound::Unbounded,
        }
    }

    fn inside(v: i64, b: &Bound<KeyValue>, lower: bool) -> bool {
        let x = match b {
            Bound::Included(KeyValue::Int(x) | KeyValue::Time(x))
            | Bound::Excluded(KeyValue::Int(x) | KeyValue::Time(x)) => *x,
            _ => return true,
        };
        match (b, lower) {
            (Bound::Included(_), true) => v >= x,
            (Bound::Excluded(_), true) => v > x,
            (Bound::Included(_), false) => v <= x,
            _ => v < x,
        }
    }

    proptest::proptest! {
        /// Every key whose segments satisfy the constraints lies in one of
        /// the ranges, and for integer and exact-time segments no other
        /// key of the schema does.
        #[test]
        fn ranges_cover_exactly(
            reversed_ts in proptest::bool::ANY,
            host in "[a-c]{0,2}",
            lo in 0i64..40, lo_kind in 0u8..3,
            hi in 0i64..40, hi_kind in 0u8..3,
            keys in proptest::collection::vec(("[a-c]{0,2}", 0i64..40), 1..40),
        ) {
            let schema = host_n(reversed_ts);
            let (lo, hi) = (bound(lo_kind, lo, reversed_ts), bound(hi_kind, hi, reversed_ts));
            let ranges = schema.ranges(&[
                Some(Constraint::In(vec![KeyValue::Text(host.clone())])),
                Some(Constraint::Range(lo.clone(), hi.clone())),
            ]);
            for (h, n) in keys {
                let value = if reversed_ts { KeyValue::Time(n) } else { KeyValue::Int(n) };
                let key = schema
                    .encode(&[Some(KeyValue::Text(h.clone())), Some(value)])
                    .unwrap();
                let wanted = h == host && inside(n, &lo, true) && inside(n, &hi, false);
                let found = ranges.iter().any(|r| {
                    std::ops::RangeBounds::<Vec<u8>>::contains(&(r.start.clone(), r.end.clone()), &key)
                });
                proptest::prop_assert_eq!(found, wanted, "key {:?} ranges {:?}", String::from_utf8_lossy(&key), ranges);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// A key decodes only from the text its values write (a mutated
        /// key either writes back as it is or does not decode), so no row
        /// is shown with values whose key range would not hold it.
        #[test]
        fn keys_decode_only_from_the_text_their_values_write(
            which in 0usize..6,
            host in "[a-c]{1,3}",
            n in 0i64..10_000,
            micros in 0i64..4_102_444_800_000_000,
            edit in 0usize..4,
            at in 0usize..24,
            c in "[0-3#x ]",
        ) {
            let padded = KeySchema {
                delimiter: '#',
                segments: vec![
                    Segment::Field { name: "x".into(), kind: SegmentKind::Padded { width: 3, pad: ' ' } },
                    Segment::Literal("L".into()),
                ],
            };
            // Padded text last may not hold the delimiter, which the
            // split leaves in it.
            let padded_last = KeySchema {
                delimiter: '#',
                segments: vec![
                    Segment::Literal("L".into()),
                    Segment::Field { name: "x".into(), kind: SegmentKind::Padded { width: 3, pad: ' ' } },
                ],
            };
            let day_n = KeySchema {
                delimiter: '#',
                segments: vec![
                    Segment::Field { name: "n".into(), kind: SegmentKind::Int { width: 0 } },
                    Segment::Field {
                        name: "day".into(),
                        kind: SegmentKind::Time { format: TimeFormat::Pattern("%Y%m%d".into()), reversed: false },
                    },
                ],
            };
            let schema = vec![host_n(false), host_n(true), battery(), padded, day_n, padded_last].swap_remove(which);
            let values: Vec<Option<KeyValue>> = schema
                .fields()
                .map(|(_, _, kind)| match kind {
                    SegmentKind::Text | SegmentKind::Padded { .. } => Some(KeyValue::Text(host.clone())),
                    SegmentKind::Int { .. } | SegmentKind::Salt { .. } => Some(KeyValue::Int(n)),
                    SegmentKind::Time { .. } => Some(KeyValue::Time(micros)),
                })
                .collect();
            let mut key = String::from_utf8(schema.encode(&values).unwrap()).unwrap();
            let at = at % (key.len() + 1);
            match edit {
                1 if at < key.len() => { key.remove(at); }
                2 => key.insert_str(at, &c),
                3 if at < key.len() => key.replace_range(at..=at, &c),
                _ => {}
            }
            let decoded = schema.decode(key.as_bytes());
            proptest::prop_assert_eq!(schema.fits(key.as_bytes()), decoded.is_some(), "{}", key);
            if edit == 0 {
                proptest::prop_assert!(decoded.is_some(), "{} as written does not decode", key);
            }
            if let Some(decoded) = decoded {
                let written = schema.encode(&decoded.into_iter().map(Some).collect::<Vec<_>>()).unwrap();
                proptest::prop_assert_eq!(String::from_utf8(written).unwrap(), key);
            }
        }
    }
}
