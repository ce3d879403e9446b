//! [`KeyShape`]: what a table's row keys are made of, as far as the
//! guides' advice turns on it: what leads the key (a timestamp, a number,
//! a salt), which salt buckets there are, and whether the key ends in an
//! ascending timestamp. Read from the declared row-key schema where there
//! is one, else from the sampled keys' text split at the delimiter.

use std::collections::BTreeSet;

use crate::codec::show_bytes;
use crate::schema::{KeySchema, Segment, SegmentKind, format_salt};

/// Distinct values of a leading number, at most, for it to read as salt
/// buckets.
const MAX_SALT_BUCKETS: usize = 64;
/// Digits of a leading number, at most, for it to read as a salt.
const MAX_SALT_DIGITS: usize = 3;
/// The share of sampled values that must look like times for a segment
/// to be taken for a timestamp.
const TIME_SHARE: f64 = 0.9;

/// What leads a row key.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Lead {
    /// A timestamp (`reversed`: newest first).
    Time {
        /// Written as `i64::MAX - t`.
        reversed: bool,
    },
    /// A number (an id, perhaps sequential).
    Number,
    /// A salt bucket.
    Salt,
    /// Anything else (an entity: a device, a user, a tenant).
    Other,
}

/// What a table's row keys are made of.
#[derive(Debug, Clone)]
pub(super) struct KeyShape {
    /// The byte between segments.
    pub delimiter: char,
    /// What leads the key, after any segment every key shares (a literal
    /// such as `BATTERY`).
    pub lead: Lead,
    /// The leading segment's name (a declared field), or its place.
    pub lead_name: String,
    /// The first and last leading values sampled, as examples.
    pub lead_examples: Option<(String, String)>,
    /// When the lead is a salt: its buckets as the key writes them, in
    /// key order.
    pub salt_buckets: Vec<String>,
    /// Where the salt is in the key: the segments before it, each with
    /// its delimiter (the bytes a bucket's keys start with, less the
    /// bucket).
    pub salt_prefix: Vec<u8>,
    /// The key ends in an ascending timestamp (named so), where a
    /// reversed one would put the newest first.
    pub ascending_time_last: Option<String>,
}

impl KeyShape {
    /// The shape of keys declared by `schema` (if any) and sampled as
    /// `keys`.
    pub fn of(schema: Option<&KeySchema>, keys: &[Vec<u8>]) -> KeyShape {
        let delimiter = schema.map_or('#', |s| s.delimiter);
        let texts: Vec<Vec<&str>> = keys
            .iter()
            .filter_map(|k| std::str::from_utf8(k).ok())
            .map(|k| k.split(delimiter).collect())
            .collect();
        // The first segment whose value differs between keys.
        let lead_at = (0..texts.iter().map(Vec::len).max().unwrap_or(0))
            .find(|&i| {
                let first = texts.first().and_then(|t| t.get(i));
                texts.iter().any(|t| t.get(i) != first)
            })
            .unwrap_or(0);
        let values: Vec<&str> = texts
            .iter()
            .filter_map(|t| t.get(lead_at).copied())
            .collect();
        let lead_examples = match (values.first(), values.last()) {
            (Some(a), Some(b)) => Some((show_bytes(a.as_bytes()), show_bytes(b.as_bytes()))),
            _ => None,
        };
        let mut shape = KeyShape {
            delimiter,
            lead: Lead::Other,
            lead_name: format!("segment {}", lead_at + 1),
            lead_examples,
            salt_buckets: Vec::new(),
            salt_prefix: texts
                .first()
                .map(|t| {
                    t.iter()
                        .take(lead_at)
                        .flat_map(|s| format!("{s}{delimiter}").into_bytes())
                        .collect()
                })
                .unwrap_or_default(),
            ascending_time_last: None,
        };
        match schema.and_then(declared_lead) {
            Some((name, kind)) => {
                shape.lead_name = name.to_string();
                shape.lead = match kind {
                    SegmentKind::Time { reversed, .. } => Lead::Time {
                        reversed: *reversed,
                    },
                    SegmentKind::Int { .. } => Lead::Number,
                    SegmentKind::Salt { buckets, .. } => {
                        shape.salt_buckets =
                            (0..*buckets).map(|b| format_salt(b, *buckets)).collect();
                        Lead::Salt
                    }
                    SegmentKind::Text | SegmentKind::Padded { .. } => lead_of_values(&values),
                };
            }
            None => shape.lead = lead_of_values(&values),
        }
        if shape.lead == Lead::Number {
            let distinct: BTreeSet<&str> = values.iter().copied().collect();
            let width = values.first().map_or(0, |v| v.len());
            let after = texts.iter().any(|t| t.len() > lead_at + 1);
            if (2..=MAX_SALT_BUCKETS).contains(&distinct.len())
                && width <= MAX_SALT_DIGITS
                && values.iter().all(|v| v.len() == width)
                && after
            {
                shape.lead = Lead::Salt;
                shape.salt_buckets = distinct.into_iter().map(str::to_string).collect();
            }
        }
        // Whether the sampled keys' last segments read as times.
        let last: Vec<&str> = texts.iter().filter_map(|t| t.last().copied()).collect();
        let time_last = texts.iter().all(|t| t.len() > 1) && mostly_times(&last);
        shape.ascending_time_last = match schema.and_then(|s| s.fields().last()) {
            Some((_, name, SegmentKind::Time { reversed, .. })) => {
                (!reversed).then(|| name.to_string())
            }
            Some((_, name, SegmentKind::Text)) => time_last.then(|| name.to_string()),
            Some(_) => None,
            None => time_last.then(|| "the last segment".to_string()),
        };
        shape
    }

    /// The salt bucket of the keys just before `end` (a range's end,
    /// exclusive): [`KeyShape::salt_of`], less one where `end` is where a
    /// bucket begins (`3#` or `3`).
    pub fn salt_before(&self, end: &[u8]) -> Option<usize> {
        let b = self.salt_of(end)?;
        let rest = end.strip_prefix(&self.salt_prefix[..]).unwrap_or(end);
        let bucket = self.salt_buckets[b].as_bytes();
        let begins =
            rest == bucket || rest.strip_prefix(bucket) == Some(&[self.delimiter as u8][..]);
        if begins { b.checked_sub(1) } else { Some(b) }
    }

    /// What leads the key, in words, with the sampled examples.
    pub fn describe(&self) -> String {
        let what = match self.lead {
            Lead::Time { reversed: false } => "a timestamp",
            Lead::Time { reversed: true } => "a reversed timestamp",
            Lead::Number => "a number",
            Lead::Salt => "a salt bucket",
            Lead::Other => "text",
        };
        match &self.lead_examples {
            Some((a, b)) => format!("led by {} ({what}): '{a}' to '{b}'", self.lead_name),
            None => "no keys sampled".into(),
        }
    }

    /// The salt bucket a key falls in (by its text at the salt's place),
    /// as an index into [`KeyShape::salt_buckets`]: the last bucket at or
    /// before it in key order.
    pub fn salt_of(&self, key: &[u8]) -> Option<usize> {
        let rest = key.strip_prefix(&self.salt_prefix[..]).unwrap_or(key);
        let at = self.salt_buckets.partition_point(|b| {
            b.as_bytes()
                <= rest
                    .split(|c| *c == self.delimiter as u8)
                    .next()
                    .unwrap_or(rest)
        });
        at.checked_sub(1)
    }
}

/// The first declared field (the literals before it are shared by every
/// key) with its kind.
fn declared_lead(schema: &KeySchema) -> Option<(&str, &SegmentKind)> {
    schema.segments.iter().find_map(|s| match s {
        Segment::Literal(_) => None,
        Segment::Field { name, kind } => Some((name.as_str(), kind)),
    })
}

/// What sampled leading values hold.
fn lead_of_values(values: &[&str]) -> Lead {
    if values.is_empty() {
        Lead::Other
    } else if mostly_times(values) {
        Lead::Time {
            reversed: values.iter().all(|v| is_reversed_time(v)),
        }
    } else if values
        .iter()
        .all(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    {
        Lead::Number
    } else {
        Lead::Other
    }
}

fn mostly_times(values: &[&str]) -> bool {
    !values.is_empty()
        && values.iter().filter(|v| looks_like_time(v)).count() as f64
            >= TIME_SHARE * values.len() as f64
}

/// Whether `text` reads as a time the way keys write them: an epoch
/// number (seconds, milliseconds or microseconds from 2000 to 2100), a
/// reversed one (`i64::MAX - t`), digits of a date (`20150317`,
/// `201503170830`), or an ISO date (`2015-03-17...`).
pub(super) fn looks_like_time(text: &str) -> bool {
    if !text.is_ascii() {
        return false;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let year_month = |s: &str| {
        let year: u32 = s[..4].parse().unwrap_or(0);
        let month: u32 = s[4..6].parse().unwrap_or(0);
        (1970..=2100).contains(&year) && (1..=12).contains(&month)
    };
    let b = text.as_bytes();
    if b.len() >= 10
        && digits(&text[..4])
        && b[4] == b'-'
        && digits(&text[5..7])
        && b[7] == b'-'
        && digits(&text[8..10])
    {
        return true;
    }
    if !digits(text) {
        return false;
    }
    let n: u64 = text.parse().unwrap_or(0);
    match text.len() {
        10 => (946_684_800..4_102_444_800).contains(&n),
        13 => (946_684_800_000..4_102_444_800_000).contains(&n),
        16 => (946_684_800_000_000..4_102_444_800_000_000).contains(&n),
        19 => is_reversed_time(text),
        8 | 10..=17 => year_month(text),
        _ => false,
    }
}

/// Whether `text` is `i64::MAX - t` for a time `t` in microseconds from
/// 2000 to 2100 (19 digits).
fn is_reversed_time(text: &str) -> bool {
    let Ok(n) = text.parse::<i64>() else {
        return false;
    };
    text.len() == 19
        && (i64::MAX - 4_102_444_800_000_000..=i64::MAX - 946_684_800_000_000).contains(&n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_told_from_ids() {
        for t in [
            "2026-12-01T000000123",
            "1700000000",
            "1700000000000",
            "20150317",
            "201503170830",
            &(i64::MAX - 1_700_000_000_000_000).to_string(),
        ] {
            assert!(looks_like_time(t), "{t}");
        }
        for t in [
            "user42",
            "000123",
            "12",
            "99999999",
            "2015x03",
            "",
            "1234567890123456789",
            "20ü5-03-17",
        ] {
            assert!(!looks_like_time(t), "{t}");
        }
    }

    #[test]
    fn shapes_from_keys_alone() {
        let keys = |v: &[&str]| v.iter().map(|k| k.as_bytes().to_vec()).collect::<Vec<_>>();
        let s = KeyShape::of(None, &keys(&["2026-12-01T01#u1", "2026-12-01T02#u2"]));
        assert_eq!(s.lead, Lead::Time { reversed: false });
        let s = KeyShape::of(None, &keys(&["3#2026-12-01T01", "5#2026-12-01T02", "7#x"]));
        assert_eq!(s.lead, Lead::Salt);
        assert_eq!(s.salt_buckets, ["3", "5", "7"]);
        assert_eq!(s.salt_of(b"5#zz"), Some(1));
        assert_eq!(s.salt_of(b"6#zz"), Some(1));
        assert_eq!(s.salt_of(b"0#zz"), None);
        assert_eq!(s.salt_before(b"5#"), Some(0));
        assert_eq!(s.salt_before(b"5#a"), Some(1));
        assert_eq!(s.salt_before(b"3"), None);
        // A shared literal first: what follows leads.
        let s = KeyShape::of(
            None,
            &keys(&["BATTERY#1700000000#a", "BATTERY#1700000100#b"]),
        );
        assert_eq!(s.lead, Lead::Time { reversed: false });
        assert_eq!(s.salt_prefix, b"BATTERY#");
        let s = KeyShape::of(None, &keys(&["host1#1700000000", "host2#1700000100"]));
        assert_eq!(s.lead, Lead::Other);
        assert_eq!(s.ascending_time_last.as_deref(), Some("the last segment"));
    }
}
