//! The byte formats of cellar: pure functions, no storage engine, no SQL.
//!
//! # Escaping
//!
//! Row keys and qualifiers are arbitrary bytes. To concatenate them into one
//! fjall key and still sort correctly, each is *escaped*:
//!
//! ```text
//! byte 0x00        ->  0x00 0xFF
//! any other byte   ->  itself
//! end of string    ->  0x00 0x01   (the terminator)
//! ```
//!
//! Laws (property-tested below):
//! - **order**: `a < b` (bytewise) ⇔ `escape(a) < escape(b)`, and because no
//!   escaped string is a prefix of another, anything appended after
//!   `escape(a)` still sorts before anything appended after `escape(b)`.
//! - **round trip**: `unescape(escape(x)) == x`, consuming exactly `escape(x)`.
//! - **prefix**: the rows whose key starts with `p` are exactly the cell keys
//!   starting with `escape_body(p)` (the escaping without terminator), which
//!   is one contiguous key range.
//!
//! # Cell keys
//!
//! Inside a family keyspace every cell is one key-value pair:
//!
//! ```text
//! +-------------------------+-------------------------+------------------------+
//! | escape(row key)         | escape(qualifier)       | u64::MAX - timestamp   |
//! | 1..=8194 bytes, ends    | 2..=32770 bytes, ends   | 8 bytes, big-endian    |
//! | 0x00 0x01               | 0x00 0x01               |                        |
//! +-------------------------+-------------------------+------------------------+
//! value = the cell value, unchanged
//! ```
//!
//! so cells sort by row, then qualifier, then newest timestamp first.
//! docs/format.md draws the same layout with a worked example.

use crate::error::{Error, Result};
use std::ops::Bound;

/// The two bytes that end every escaped string.
pub const TERMINATOR: [u8; 2] = [0x00, 0x01];
const ESCAPED_ZERO: [u8; 2] = [0x00, 0xFF];

/// Appends the escaping of `bytes` without its terminator.
pub fn escape_body_into(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    let mut rest = bytes;
    while let Some(at) = memchr::memchr(0, rest) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(&ESCAPED_ZERO);
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
}

/// Appends the escaping of `bytes`, terminator included.
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    escape_body_into(out, bytes);
    out.extend_from_slice(&TERMINATOR);
}

/// The escaping of `bytes`, terminator included.
pub fn escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 2);
    escape_into(&mut out, bytes);
    out
}

/// The length of the escaped string at the start of `input`, terminator
/// included, without decoding it.
pub fn escaped_len(input: &[u8]) -> Result<usize> {
    let mut i = 0;
    loop {
        let zero = input
            .get(i..)
            .and_then(|rest| rest.iter().position(|&b| b == 0))
            .ok_or_else(|| corrupt("escaped string has no terminator", input))?;
        match input.get(i + zero + 1) {
            Some(0x01) => return Ok(i + zero + 2),
            Some(0xFF) => i += zero + 2,
            _ => return Err(corrupt("invalid escape sequence", input)),
        }
    }
}

/// Decodes the escaped string at the start of `input`; returns it and the
/// number of bytes consumed.
pub fn unescape(input: &[u8]) -> Result<(Vec<u8>, usize)> {
    let len = escaped_len(input)?;
    Ok((unescape_exact(&input[..len]), len))
}

/// Decodes an escaped string, terminator included, appending it to `out`;
/// an error (with `out` perhaps extended) unless `escaped` is exactly one
/// escaped string (what `escaped_len` finds all of), so that it checks
/// what it decodes.
pub fn unescape_into(escaped: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let body = escaped
        .strip_suffix(&TERMINATOR)
        .ok_or_else(|| corrupt("escaped string has no terminator", escaped))?;
    out.reserve(body.len());
    // Runs between escaped zeros copy whole; each `0x00 0xFF` is one 0x00.
    let mut rest = body;
    while let Some(zero) = rest.iter().position(|&b| b == 0) {
        if rest.get(zero + 1) != Some(&0xFF) {
            return Err(corrupt("invalid escape sequence", escaped));
        }
        out.extend_from_slice(&rest[..=zero]);
        rest = &rest[zero + 2..];
    }
    out.extend_from_slice(rest);
    Ok(())
}

/// The unescaped bytes of a delimited escaped string when none of them
/// needed escaping (no 0x00), which is the string's body as is.
pub fn plain_body(escaped: &[u8]) -> Option<&[u8]> {
    let body = escaped.strip_suffix(&TERMINATOR)?;
    memchr::memchr(0, body).is_none().then_some(body)
}

/// Decodes an escaped string that `escaped_len` has already delimited.
fn unescape_exact(escaped: &[u8]) -> Vec<u8> {
    let body = &escaped[..escaped.len() - 2];
    let mut out = Vec::with_capacity(body.len());
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        out.push(b);
        if b == 0 {
            bytes.next();
        }
    }
    out
}

fn corrupt(what: &str, bytes: &[u8]) -> Error {
    Error::Corrupt {
        reason: format!("{what} in key {}", show_bytes(bytes)),
    }
}

/// How many leading bytes `a` and `b` share.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let words = a.chunks_exact(8).zip(b.chunks_exact(8));
    let mut n = 0;
    for (x, y) in words {
        if x != y {
            break;
        }
        n += 8;
    }
    n + a[n..]
        .iter()
        .zip(&b[n..])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Renders bytes for messages: printable ASCII as is, everything else `\xNN`,
/// cut short after 64 bytes.
pub fn show_bytes(bytes: &[u8]) -> String {
    const MAX: usize = 64;
    let mut s = String::new();
    for &b in bytes.iter().take(MAX) {
        if b.is_ascii_graphic() || b == b' ' {
            if b == b'\\' {
                s.push('\\');
            }
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > MAX {
        s.push_str(&format!("... ({} bytes)", bytes.len()));
    }
    s
}

/// Encodes a timestamp so that newer sorts first.
pub fn encode_timestamp(timestamp: i64) -> [u8; 8] {
    (u64::MAX - timestamp as u64).to_be_bytes()
}

/// Inverse of [`encode_timestamp`].
pub fn decode_timestamp(bytes: [u8; 8]) -> Result<i64> {
    let raw = u64::MAX - u64::from_be_bytes(bytes);
    i64::try_from(raw).map_err(|_| corrupt("timestamp out of range", &bytes))
}

/// A decoded cell key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellKey {
    /// The row key.
    pub row: Vec<u8>,
    /// The column qualifier.
    pub qualifier: Vec<u8>,
    /// Microseconds since the Unix epoch, 0 or more.
    pub timestamp: i64,
}

impl CellKey {
    /// The fjall key of this cell.
    pub fn encode(&self) -> Vec<u8> {
        encode_cell_key(&self.row, &self.qualifier, self.timestamp)
    }

    /// Decodes a fjall key written by [`CellKey::encode`].
    pub fn decode(key: &[u8]) -> Result<Self> {
        let parts = CellKeyParts::split(key)?;
        Ok(CellKey {
            row: unescape_exact(parts.escaped_row),
            qualifier: unescape_exact(parts.escaped_qualifier),
            timestamp: parts.timestamp,
        })
    }
}

/// Encodes a cell key; `timestamp` must be 0 or more.
pub fn encode_cell_key(row: &[u8], qualifier: &[u8], timestamp: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(row.len() + qualifier.len() + 12);
    escape_into(&mut out, row);
    escape_into(&mut out, qualifier);
    out.extend_from_slice(&encode_timestamp(timestamp));
    out
}

/// A cell key split into its parts without copying; the scan loop uses
/// this to notice row and column changes by comparing escaped bytes.
#[derive(Debug, Clone, Copy)]
pub struct CellKeyParts<'a> {
    /// `escape(row)`, terminator included.
    pub escaped_row: &'a [u8],
    /// `escape(qualifier)`, terminator included.
    pub escaped_qualifier: &'a [u8],
    /// The decoded timestamp.
    pub timestamp: i64,
}

impl<'a> CellKeyParts<'a> {
    /// Splits a cell key.
    pub fn split(key: &'a [u8]) -> Result<Self> {
        CellKeyParts::split_after(key, escaped_len(key)?)
    }

    /// Splits a cell key whose escaped row is known to be its first
    /// `row_len` bytes (the pairs of one row, whose row was delimited
    /// once).
    pub fn split_after(key: &'a [u8], row_len: usize) -> Result<Self> {
        let rest = key
            .get(row_len..)
            .ok_or_else(|| corrupt("cell key is shorter than its row", key))?;
        let qualifier_len = escaped_len(rest)?;
        let ts: [u8; 8] = rest[qualifier_len..]
            .try_into()
            .map_err(|_| corrupt("cell key does not end in an 8-byte timestamp", key))?;
        Ok(CellKeyParts {
            escaped_row: &key[..row_len],
            escaped_qualifier: &rest[..qualifier_len],
            timestamp: decode_timestamp(ts)?,
        })
    }
}

/// The smallest byte string greater than every string starting with
/// `prefix`, or `None` when there is none (empty or all 0xFF).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut out = prefix[..=last].to_vec();
    out[last] += 1;
    Some(out)
}

/// A half-open range of fjall keys: `start` inclusive, `end` exclusive,
/// `None` for no upper bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRange {
    /// Inclusive lower bound.
    pub start: Vec<u8>,
    /// Exclusive upper bound; `None` is unbounded.
    pub end: Option<Vec<u8>>,
}

impl EncodedRange {
    /// Whether the range holds no key.
    pub fn is_empty(&self) -> bool {
        matches!(&self.end, Some(end) if *end <= self.start)
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }
}

/// The cell keys of the rows whose key lies between `start` and `end`.
pub fn row_range(start: Bound<&[u8]>, end: Bound<&[u8]>) -> EncodedRange {
    let start = match start {
        Bound::Unbounded => Vec::new(),
        Bound::Included(row) => escape(row),
        // escape(row) ends in 0x01, so it always has a successor.
        Bound::Excluded(row) => prefix_successor(&escape(row)).unwrap_or_default(),
    };
    let end = match end {
        Bound::Unbounded => None,
        Bound::Included(row) => prefix_successor(&escape(row)),
        Bound::Excluded(row) => Some(escape(row)),
    };
    EncodedRange { start, end }
}

/// The cell keys of the rows whose key starts with `prefix`.
pub fn row_prefix_range(prefix: &[u8]) -> EncodedRange {
    let mut start = Vec::with_capacity(prefix.len() + 2);
    escape_body_into(&mut start, prefix);
    let end = prefix_successor(&start);
    EncodedRange { start, end }
}

/// The cell keys of exactly one row.
pub fn single_row_range(row: &[u8]) -> EncodedRange {
    row_range(Bound::Included(row), Bound::Included(row))
}

/// A range of row keys.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowRange {
    /// Lower bound.
    pub start: Bound<Vec<u8>>,
    /// Upper bound.
    pub end: Bound<Vec<u8>>,
}

impl RowRange {
    /// Whether `key` lies strictly after the range's start and in it (so
    /// that cutting the range at `key` leaves two non-empty ranges); the
    /// empty key never does.
    pub fn cuts_at(&self, key: &[u8]) -> bool {
        let after = match &self.start {
            Bound::Included(s) | Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => !key.is_empty(),
        };
        let before = match &self.end {
            Bound::Included(e) => key <= e.as_slice(),
            Bound::Excluded(e) => key < e.as_slice(),
            Bound::Unbounded => true,
        };
        after && before
    }

    /// Every row.
    pub fn all() -> Self {
        RowRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// Exactly one row.
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        let key = key.into();
        RowRange {
            start: Bound::Included(key.clone()),
            end: Bound::Included(key),
        }
    }

    /// The rows whose key starts with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let prefix = prefix.into();
        let end = prefix_successor(&prefix).map_or(Bound::Unbounded, Bound::Excluded);
        RowRange {
            start: Bound::Included(prefix),
            end,
        }
    }

    /// The rows between two bounds.
    pub fn between(start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Self {
        RowRange { start, end }
    }

    /// The cell keys of these rows.
    pub fn encode(&self) -> EncodedRange {
        row_range(as_slice_bound(&self.start), as_slice_bound(&self.end))
    }
}

/// A bound over owned bytes as a bound over a slice.
pub fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v),
        Bound::Excluded(v) => Bound::Excluded(v),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// What [`merge_ranges`] does with two ranges that touch (one ends where
/// the next starts) without overlapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touching {
    /// One range: a read walks them in one pass.
    Merge,
    /// Kept apart: the planner's splits of a range, one per partition.
    KeepApart,
}

/// Row ranges sorted by start, empty ones dropped and overlapping ones
/// merged (touching ones as `touching` says), each with its cell-key
/// range: no row lies in two of them. The one way key ranges are sorted
/// and merged, for the store's reads and the planner's partitions.
pub fn merge_ranges(
    ranges: impl IntoIterator<Item = RowRange>,
    touching: Touching,
) -> Vec<(EncodedRange, RowRange)> {
    let mut keyed: Vec<(EncodedRange, RowRange)> = ranges
        .into_iter()
        .map(|r| (r.encode(), r))
        .filter(|(e, _)| !e.is_empty())
        .collect();
    keyed.sort_by(|a, b| a.0.start.cmp(&b.0.start));
    let mut out: Vec<(EncodedRange, RowRange)> = Vec::with_capacity(keyed.len());
    for (enc, range) in keyed {
        if let Some((last_enc, last)) = out.last_mut()
            && last_enc.end.as_ref().is_none_or(|end| match touching {
                Touching::Merge => *end >= enc.start,
                Touching::KeepApart => *end > enc.start,
            })
        {
            let extends = match (&last_enc.end, &enc.end) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(a), Some(b)) => b > a,
            };
            if extends {
                last.end = range.end;
                last_enc.end = enc.end;
            }
            continue;
        }
        out.push((enc, range));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one merge of ranges: sorted, overlapping ones merged, empty
    /// ones dropped; touching ones merged for a read and kept apart for
    /// the planner's splits.
    #[test]
    fn ranges_sort_and_merge_one_way() {
        let r = |a: &str, b: &str| {
            RowRange::between(
                Bound::Included(a.as_bytes().to_vec()),
                Bound::Excluded(b.as_bytes().to_vec()),
            )
        };
        let shown = |out: Vec<(EncodedRange, RowRange)>| -> Vec<String> {
            out.into_iter()
                .map(|(_, r)| format!("{:?}..{:?}", r.start, r.end))
                .collect()
        };
        let ranges = vec![
            r("m", "p"),
            r("a", "c"),
            r("b", "d"),
            r("d", "f"),
            r("x", "x"),
        ];
        let kept = shown(merge_ranges(ranges.clone(), Touching::KeepApart));
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert!(
            kept[0].contains("[97]") && kept[0].contains("[100]"),
            "{kept:?}"
        );
        let merged = merge_ranges(ranges, Touching::Merge);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].1, r("a", "f"));
        assert_eq!(merged[1].1, r("m", "p"));
        let all = merge_ranges([r("c", "d"), RowRange::all()], Touching::KeepApart);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1, RowRange::all());
        assert!(all[0].0.end.is_none());
    }
    use proptest::prelude::*;

    /// Bytes biased towards 0x00, 0x01 and 0xFF, the interesting ones.
    fn tricky_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                Just(0x00u8),
                Just(0x01u8),
                Just(0xFFu8),
                Just(b'a'),
                any::<u8>()
            ],
            0..max,
        )
    }

    #[test]
    fn escapes_zero_and_terminates() {
        assert_eq!(escape(b""), vec![0x00, 0x01]);
        assert_eq!(escape(b"a\x00b"), vec![b'a', 0x00, 0xFF, b'b', 0x00, 0x01]);
        assert_eq!(escape(b"\xFF"), vec![0xFF, 0x00, 0x01]);
    }

    #[test]
    fn rejects_malformed_escapes() {
        assert!(escaped_len(b"abc").is_err());
        assert!(escaped_len(b"a\x00\x02").is_err());
        assert!(escaped_len(b"a\x00").is_err());
        assert!(CellKey::decode(&escape(b"row")).is_err());
        let mut short = encode_cell_key(b"r", b"q", 5);
        short.pop();
        assert!(CellKey::decode(&short).is_err());
    }

    #[test]
    fn successor_skips_trailing_ff() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xFF\xFF"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xFF\xFF"), None);
        assert_eq!(prefix_successor(b""), None);
    }

    #[test]
    fn newer_timestamps_sort_first() {
        assert!(encode_cell_key(b"r", b"q", 10) < encode_cell_key(b"r", b"q", 9));
        assert!(encode_cell_key(b"r", b"q", i64::MAX) < encode_cell_key(b"r", b"q", 0));
    }

    proptest! {
        #[test]
        fn escape_preserves_order(a in tricky_bytes(12), b in tricky_bytes(12)) {
            prop_assert_eq!(a.cmp(&b), escape(&a).cmp(&escape(&b)));
        }

        #[test]
        fn unescape_inverts_escape(x in tricky_bytes(32), tail in tricky_bytes(8)) {
            let mut buf = escape(&x);
            let len = buf.len();
            buf.extend_from_slice(&tail);
            prop_assert_eq!(unescape(&buf).unwrap(), (x, len));
        }

        #[test]
        fn cell_key_round_trips(row in tricky_bytes(16), q in tricky_bytes(16), ts in 0..=i64::MAX) {
            let key = CellKey { row, qualifier: q, timestamp: ts };
            prop_assert_eq!(CellKey::decode(&key.encode()).unwrap(), key);
        }

        #[test]
        fn unescape_into_takes_exactly_one_escaped_string(x in tricky_bytes(24)) {
            let whole = escaped_len(&x).is_ok_and(|n| n == x.len());
            prop_assert_eq!(unescape_into(&x, &mut Vec::new()).is_ok(), whole);
            let mut twice = escape(&x);
            twice.extend_from_slice(&escape(b"more"));
            prop_assert!(unescape_into(&twice, &mut Vec::new()).is_err());
        }

        #[test]
        fn unescape_into_and_plain_body_invert_escape(x in tricky_bytes(24)) {
            let escaped = escape(&x);
            let mut out = b"kept".to_vec();
            unescape_into(&escaped, &mut out).unwrap();
            prop_assert_eq!(&out[4..], x.as_slice());
            if let Some(body) = plain_body(&escaped) {
                prop_assert_eq!(body, x.as_slice());
            }
            prop_assert_eq!(plain_body(&escaped).is_some(), !x.contains(&0));
        }

        #[test]
        fn cell_keys_sort_by_row_qualifier_then_newest(
            a in (tricky_bytes(6), tricky_bytes(6), 0..1000i64),
            b in (tricky_bytes(6), tricky_bytes(6), 0..1000i64),
        ) {
            let ka = encode_cell_key(&a.0, &a.1, a.2);
            let kb = encode_cell_key(&b.0, &b.1, b.2);
            let logical = (&a.0, &a.1, std::cmp::Reverse(a.2)).cmp(&(&b.0, &b.1, std::cmp::Reverse(b.2)));
            prop_assert_eq!(logical, ka.cmp(&kb));
        }

        #[test]
        fn prefix_range_holds_exactly_the_prefixed_rows(
            prefix in tricky_bytes(5), row in tricky_bytes(8), q in tricky_bytes(4), ts in 0..=i64::MAX,
        ) {
            let range = row_prefix_range(&prefix);
            let key = encode_cell_key(&row, &q, ts);
            prop_assert_eq!(range.contains(&key), row.starts_with(&prefix));
            // The same with the prefix glued to the row, which must always match.
            let mut inside = prefix.clone();
            inside.extend_from_slice(&row);
            prop_assert!(range.contains(&encode_cell_key(&inside, &q, ts)));
        }

        #[test]
        fn single_row_range_holds_every_cell_of_the_row_and_nothing_else(
            row in tricky_bytes(8), other in tricky_bytes(8), q in tricky_bytes(4), ts in 0..=i64::MAX,
        ) {
            let range = single_row_range(&row);
            prop_assert!(range.contains(&encode_cell_key(&row, &q, ts)));
            prop_assert_eq!(range.contains(&encode_cell_key(&other, &q, ts)), other == row);
        }

        #[test]
        fn row_range_matches_bounds(
            lo in tricky_bytes(5), hi in tricky_bytes(5), row in tricky_bytes(6),
            lo_incl in any::<bool>(), hi_incl in any::<bool>(), q in tricky_bytes(3),
        ) {
            let start = if lo_incl { Bound::Included(lo.as_slice()) } else { Bound::Excluded(lo.as_slice()) };
            let end = if hi_incl { Bound::Included(hi.as_slice()) } else { Bound::Excluded(hi.as_slice()) };
            let range = row_range(start, end);
            let expected = std::ops::RangeBounds::<&[u8]>::contains(&(start, end), &row.as_slice());
            prop_assert_eq!(range.contains(&encode_cell_key(&row, &q, 7)), expected);
        }
    }
}
