//! Decoding row keys read in key order. Consecutive keys share their
//! leading segments (a host's rows, a balloon's hour), so a key is read
//! from the first segment it does not share with the key before it, and
//! a time segment from the digits that changed: what an aggregate grouped
//! by key segments pays per row.

use super::key::{KeySchema, KeyValue, Segment, SegmentKind, TimeFormat, parse_value};
use super::time_pattern::{DigitReader, parse_pattern_after};
use crate::codec::common_prefix;

/// What [`KeySchema::decode_next`] keeps of the last key it read. One
/// cursor reads the keys of one schema.
#[derive(Debug, Default, Clone)]
pub struct KeyCursor {
    /// The last key, if it fit (`known`).
    last: Vec<u8>,
    known: bool,
    /// Per segment, where its text ends in `last`.
    ends: Vec<usize>,
    /// Per field, its value in `last`.
    values: Vec<KeyValue>,
    /// Per field, whether it is a time the digit reader read (which the
    /// next key's time may be read after).
    digits: Vec<bool>,
    /// When the last segment is a time of a digit pattern: its field and
    /// the pattern's reader (looked for once: `tail_sought`).
    tail: Option<(usize, DigitReader)>,
    tail_sought: bool,
}

impl KeyCursor {
    /// The fields of the last key read (by field index), if it fit.
    pub fn values(&self) -> Option<&[KeyValue]> {
        self.known.then_some(&self.values[..])
    }
}

impl KeySchema {
    /// [`KeySchema::decode`] of `key`, the next key of a read in key order
    /// (any order answers the same, only slower): its fields are then
    /// [`KeyCursor::values`]. Reads only the segments `key` does not share
    /// with the last key `cursor` read. The index of the first field read
    /// again (those before it are the last key's; the field count when
    /// none was), or `None` when `key` does not fit.
    pub fn decode_next(&self, cursor: &mut KeyCursor, key: &[u8]) -> Option<usize> {
        if let Some(first) = self.read_last_time(cursor, key) {
            return Some(first);
        }
        let first = self.read_next(cursor, key);
        cursor.known = first.is_some();
        if cursor.known {
            cursor.last.clear();
            cursor.last.extend_from_slice(key);
        }
        first
    }

    /// [`KeySchema::decode_next`] of a key that differs from the last
    /// only in its last segment, a time the digit reader read the last
    /// key's of, when the reader reads this one's after it (keys of one
    /// series in a row: the common case): the time is read from the
    /// digits that changed and only those bytes of the key are kept.
    /// `None` where the whole reading must decide.
    fn read_last_time(&self, cursor: &mut KeyCursor, key: &[u8]) -> Option<usize> {
        if !cursor.known || key.len() != cursor.last.len() {
            return None;
        }
        let segments = self.segments.len();
        let (field, reader) = cursor.tail.as_ref()?;
        if !*cursor.digits.get(*field)? || cursor.ends.len() != segments {
            return None;
        }
        let KeyValue::Time(micros) = cursor.values.get(*field)? else {
            return None;
        };
        let start = match segments {
            1 => 0,
            n => cursor.ends[n - 2] + self.delimiter.len_utf8(),
        };
        let shared = common_prefix(&cursor.last, key);
        if shared < start {
            return None;
        }
        let t = reader.after(
            &cursor.last[start..],
            *micros,
            &key[start..],
            shared - start,
        )?;
        let field = *field;
        cursor.values[field] = KeyValue::Time(t);
        cursor.last[shared..].copy_from_slice(&key[shared..]);
        Some(field)
    }

    /// The last segment's field and digit reader, when it is a time of a
    /// pattern the digit reader reads and the key is not salted.
    fn last_time(&self) -> Option<(usize, DigitReader)> {
        let (last, before) = self.segments.split_last()?;
        let Segment::Field {
            kind:
                SegmentKind::Time {
                    format: TimeFormat::Pattern(p),
                    ..
                },
            ..
        } = last
        else {
            return None;
        };
        if self.salted() {
            return None;
        }
        let field = before
            .iter()
            .filter(|s| matches!(s, Segment::Field { .. }))
            .count();
        Some((field, DigitReader::of(p)?))
    }

    fn read_next(&self, cursor: &mut KeyCursor, key: &[u8]) -> Option<usize> {
        if !cursor.tail_sought {
            cursor.tail = self.last_time();
            cursor.tail_sought = true;
        }
        let segments = self.segments.len();
        let delimiter = self.delimiter.len_utf8();
        // The first segment `key` may not share: the first whose text and
        // delimiter do not lie in the shared bytes (the last always).
        // A salt bucket depends on other fields: salted keys read whole.
        let salted = self.salted();
        // (How many leading bytes the key shares with the last.)
        let mut shared = 0;
        let (from, start) =
            if cursor.known && segments > 0 && cursor.ends.len() == segments && !salted {
                shared = common_prefix(&cursor.last, key);
                let from = cursor.ends[..segments - 1]
                    .iter()
                    .position(|&end| end + delimiter > shared)
                    .unwrap_or(segments - 1);
                let start = match from {
                    0 => 0,
                    n => cursor.ends[n - 1] + delimiter,
                };
                (from, start)
            } else {
                cursor.ends.clear();
                cursor.ends.resize(segments, 0);
                cursor.values.clear();
                cursor.digits.clear();
                (0, 0)
            };
        // The bytes before `start` are the last key's, which were text
        // ending in a delimiter: the key is text when each part after is
        // (a time read from its digits is; others are checked).
        let mut delimiter_bytes = [0u8; 4];
        let delimiter_bytes: &[u8] = self.delimiter.encode_utf8(&mut delimiter_bytes).as_bytes();
        let mut field = self.segments[..from]
            .iter()
            .filter(|s| matches!(s, Segment::Field { .. }))
            .count();
        let first = field;
        let mut at = start;
        let mut prev_start = start;
        for (n, segment) in self.segments.iter().enumerate().skip(from) {
            let tail = key.get(at..)?;
            let part = if n + 1 < segments {
                &tail[..find(tail, delimiter_bytes)?]
            } else {
                tail
            };
            let prev_end = cursor.ends[n];
            cursor.ends[n] = at + part.len();
            let text = || std::str::from_utf8(part).ok();
            match segment {
                Segment::Literal(literal) => {
                    if part != literal.as_bytes() {
                        return None;
                    }
                }
                Segment::Field { kind, .. } => {
                    // A time written with a pattern is read after the last
                    // key's when the digit reader read that.
                    let (value, digits) = match kind {
                        SegmentKind::Time {
                            format: TimeFormat::Pattern(p),
                            ..
                        } => {
                            let prev = match (cursor.digits.get(field), cursor.values.get(field)) {
                                (Some(true), Some(KeyValue::Time(t))) => {
                                    cursor.last.get(prev_start..prev_end).map(|text| (text, *t))
                                }
                                _ => None,
                            };
                            // The texts start where the keys' shared
                            // bytes run on, or their share is not known.
                            let same = (at == prev_start && shared >= at).then(|| shared - at);
                            let (t, digits) = parse_pattern_after(p, prev, part, same)?;
                            (KeyValue::Time(t), digits)
                        }
                        SegmentKind::Padded { .. }
                            if n + 1 == segments && find(part, delimiter_bytes).is_some() =>
                        {
                            return None;
                        }
                        _ => (parse_value(kind, text()?)?, false),
                    };
                    if field < cursor.values.len() {
                        cursor.values[field] = value;
                        cursor.digits[field] = digits;
                    } else {
                        cursor.values.push(value);
                        cursor.digits.push(digits);
                    }
                    field += 1;
                }
            }
            prev_start = prev_end + delimiter;
            at += part.len() + delimiter;
        }
        if salted {
            // (Read whole; a text, as its parts are.)
            self.salt_fits(std::str::from_utf8(key).ok()?)?;
        }
        Some(first)
    }
}

/// Where `needle` (a delimiter's bytes) first starts in `bytes`.
fn find(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    match needle {
        [b] => bytes.iter().position(|x| x == b),
        _ => bytes.windows(needle.len()).position(|w| w == needle),
    }
}
