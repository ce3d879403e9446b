//! A packed row's qualifiers (versions 3 and 4): listed, or numbered when they
//! are one prefix and a decimal number each.
//!
//! ```text
//! qualifiers = u8 kind
//!   kind 0, listed:   per column, ascending: varint length, the bytes
//!   kind 1, numbered: varint prefix length, the prefix;
//!                     run of C widths: the number's digits before any point
//!                     run of C widths: its digits after the point (0: none)
//!                     run of C numbers: the digits read as one integer,
//!                     negative after a '-'
//! ```
//!
//! Time buckets with a new column per event name columns by the event's
//! minute (`00` to `59`) or a measurement (`90012.5`), and the guide's
//! smart meters by the quarter hour (`0000` to `2345`): numbered, a
//! bucket's qualifiers take a few run headers where listed they take three
//! or more bytes a column. The writer numbers qualifiers only when every
//! one reads back byte for byte (no `-0`, no `+`, at most 18 digits) and
//! the numbers take less room; anything else is listed.

use super::layout::MAX_PACKED_LEN;
use super::runs::{Plan, Run, put_varint, varint, varint_len};
use std::ops::Range;

const LISTED: u8 = 0;
const NUMBERED: u8 = 1;

/// Most digits a numbered qualifier's number holds (below 10^18 fits
/// an `i64`).
const MAX_DIGITS: usize = 18;

/// A qualifier after the common prefix, as a number: (digits before the
/// point, digits after it, the digits as one signed integer).
fn number(text: &[u8]) -> Option<(i64, i64, i64)> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (whole, fraction) = match digits.iter().position(|&b| b == b'.') {
        Some(point) => (&digits[..point], &digits[point + 1..]),
        None => (digits, &digits[..0]),
    };
    let has_point = whole.len() < digits.len();
    if whole.is_empty()
        || (has_point && fraction.is_empty())
        || whole.len() + fraction.len() > MAX_DIGITS
    {
        return None;
    }
    let mut n = 0i64;
    for &b in whole.iter().chain(fraction) {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(b - b'0');
    }
    if negative {
        // "-0" would read back as "0".
        if n == 0 {
            return None;
        }
        n = -n;
    }
    Some((whole.len() as i64, fraction.len() as i64, n))
}

/// Appends the text of a number with `whole` digits before the point and
/// `fraction` after it; `None` when it has more digits than that or the
/// widths are out of bounds.
fn put_number(whole: i64, fraction: i64, n: i64, out: &mut Vec<u8>) -> Option<()> {
    let whole = usize::try_from(whole).ok().filter(|w| *w >= 1)?;
    let fraction = usize::try_from(fraction).ok()?;
    if whole + fraction > MAX_DIGITS || n == i64::MIN {
        return None;
    }
    // The digits, zero-padded, written backwards two at a time; then the
    // whole ones, the point and the fraction's.
    let mut digits = [b'0'; MAX_DIGITS];
    let mut at = MAX_DIGITS;
    let mut magnitude = n.unsigned_abs();
    while magnitude >= 10 {
        let pair = (magnitude % 100) as usize * 2;
        magnitude /= 100;
        at = at.checked_sub(2)?;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if magnitude > 0 {
        at = at.checked_sub(1)?;
        digits[at] = b'0' + magnitude as u8;
    }
    let start = MAX_DIGITS - (whole + fraction);
    // (A pair's leading zero may lie before `start`: only zeros may.)
    if digits[..start].iter().any(|&d| d != b'0') {
        return None;
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[start..start + whole]);
    if fraction > 0 {
        out.push(b'.');
        out.extend_from_slice(&digits[start + whole..]);
    }
    Some(())
}

/// `00` to `99`, for writing numbers two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Appends a row's qualifiers (ascending, one per column), numbered when
/// that reads back exactly and takes less room than listing them.
pub(super) fn write<'q>(qualifiers: impl Iterator<Item = &'q [u8]> + Clone, out: &mut Vec<u8>) {
    let listed: usize = qualifiers
        .clone()
        .map(|q| varint_len(q.len() as u64) + q.len())
        .sum();
    if let Some(numbered) = numbered(qualifiers.clone())
        && numbered.size < listed
    {
        out.push(NUMBERED);
        put_varint(out, numbered.prefix.len() as u64);
        out.extend_from_slice(numbered.prefix);
        for (plan, run) in [
            (numbered.plans[0], &numbered.wholes),
            (numbered.plans[1], &numbered.fractions),
            (numbered.plans[2], &numbered.numbers),
        ] {
            plan.write(run, out);
        }
        return;
    }
    out.push(LISTED);
    for q in qualifiers {
        put_varint(out, q.len() as u64);
        out.extend_from_slice(q);
    }
}

/// Qualifiers as numbers, ready to write.
struct Numbered<'q> {
    prefix: &'q [u8],
    wholes: Vec<i64>,
    fractions: Vec<i64>,
    numbers: Vec<i64>,
    plans: [Plan; 3],
    /// Bytes written, the kind aside.
    size: usize,
}

/// The qualifiers as a common prefix and numbers, if each reads back
/// exactly that way.
fn numbered<'q>(mut qualifiers: impl Iterator<Item = &'q [u8]> + Clone) -> Option<Numbered<'q>> {
    let first = qualifiers.next()?;
    let last = qualifiers.clone().last()?;
    let common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    // Sorted, so the first and last share what all share. The prefix
    // stops before a run of digits (and a sign or point) it would cut.
    let common = first[..common]
        .iter()
        .rposition(|b| !(b.is_ascii_digit() || *b == b'-' || *b == b'.'))
        .map_or(0, |p| p + 1);
    let prefix = &first[..common];
    let mut out = Numbered {
        prefix,
        wholes: Vec::new(),
        fractions: Vec::new(),
        numbers: Vec::new(),
        plans: [Plan::of(&[]); 3],
        size: 0,
    };
    let mut text = Vec::new();
    for q in std::iter::once(first).chain(qualifiers) {
        if !q.starts_with(prefix) {
            return None;
        }
        let (whole, fraction, n) = number(&q[common..])?;
        // Read back: leading zeros and the like are in the widths.
        text.clear();
        put_number(whole, fraction, n, &mut text)?;
        if text != q[common..] {
            return None;
        }
        out.wholes.push(whole);
        out.fractions.push(fraction);
        out.numbers.push(n);
    }
    out.plans = [
        Plan::of_row(&out.wholes),
        Plan::of_row(&out.fractions),
        Plan::of_row(&out.numbers),
    ];
    let c = out.numbers.len();
    out.size = varint_len(prefix.len() as u64)
        + prefix.len()
        + out.plans.iter().map(|p| p.size(c)).sum::<usize>();
    Some(out)
}

/// A row's qualifiers being read, one column at a time.
pub(super) enum Qualifiers<'a> {
    /// Listed: the next one's length is at this offset of the value.
    Listed(usize),
    Numbered {
        /// The whole numbered section, after its kind.
        section: &'a [u8],
        prefix: &'a [u8],
        wholes: Run<'a>,
        fractions: Run<'a>,
        numbers: Run<'a>,
        next: usize,
    },
}

/// Where a qualifier read lies.
pub(super) enum Lies {
    /// In the packed value.
    Value(Range<usize>),
    /// Built into the buffer [`Qualifiers::next`] was given.
    Built(Range<usize>),
}

impl<'a> Qualifiers<'a> {
    /// Reads the qualifiers of `columns` columns at `*at` (where a
    /// version 2 value lists them, a later one says how), advancing
    /// past them; `None` when malformed.
    pub fn read(value: &'a [u8], at: &mut usize, columns: usize, version: u8) -> Option<Self> {
        let kind = if version == 2 {
            LISTED
        } else {
            let kind = *value.get(*at)?;
            *at += 1;
            kind
        };
        match kind {
            LISTED => {
                let start = *at;
                for _ in 0..columns {
                    let len = usize::try_from(varint(value, at)?).ok()?;
                    *at = at.checked_add(len).filter(|end| *end <= value.len())?;
                }
                Some(Qualifiers::Listed(start))
            }
            NUMBERED => {
                let start = *at;
                let len = usize::try_from(varint(value, at)?).ok()?;
                let end = at.checked_add(len)?;
                let prefix = value.get(*at..end)?;
                // The qualifiers built may not outgrow what a row holds.
                if prefix.len().checked_mul(columns)? > MAX_PACKED_LEN {
                    return None;
                }
                *at = end;
                let wholes = Run::read(value, at, columns)?;
                let fractions = Run::read(value, at, columns)?;
                let numbers = Run::read(value, at, columns)?;
                Some(Qualifiers::Numbered {
                    section: &value[start..*at],
                    prefix,
                    wholes,
                    fractions,
                    numbers,
                    next: 0,
                })
            }
            _ => None,
        }
    }

    /// The next column's qualifier: where it lies in `value` (the value
    /// it was read from), or built at the end of `built`; `None` when
    /// malformed. Call it once per column.
    #[inline]
    pub fn next(&mut self, value: &[u8], built: &mut Vec<u8>) -> Option<Lies> {
        match self {
            Qualifiers::Listed(at) => {
                let len = usize::try_from(varint(value, at)?).ok()?;
                let start = *at;
                *at = at.checked_add(len).filter(|end| *end <= value.len())?;
                Some(Lies::Value(start..*at))
            }
            Qualifiers::Numbered {
                prefix,
                wholes,
                fractions,
                numbers,
                next,
                ..
            } => {
                let i = *next;
                *next += 1;
                let start = built.len();
                built.extend_from_slice(prefix);
                let written = put_number(wholes.get(i), fractions.get(i), numbers.get(i), built);
                if written.is_none() {
                    built.truncate(start);
                    return None;
                }
                Some(Lies::Built(start..built.len()))
            }
        }
    }
}

/// Qualifiers built from numbered sections, kept while rows keep coming
/// with the same sections (a time bucket table's rows all have the minutes
/// `00` to `59`): a row whose section was seen finds its qualifiers built,
/// where building them costs a number's formatting a column.
#[derive(Default)]
pub(crate) struct Names {
    /// Each section seen: where its bytes are in `keys`, and the spans of
    /// its columns' qualifiers in `spans`.
    sections: Vec<(Range<usize>, Range<usize>)>,
    keys: Vec<u8>,
    spans: Vec<(u32, u32)>,
    bytes: Vec<u8>,
}

/// How much [`Names`] holds before it is emptied between rows.
const NAMES_KEPT: usize = 1 << 16;
const SECTIONS_KEPT: usize = 8;

impl Names {
    /// A qualifier built, by its span.
    pub fn bytes(&self, span: Range<usize>) -> &[u8] {
        &self.bytes[span]
    }

    /// Empties what outgrew its room; only between rows (no cell may
    /// point into it).
    pub fn trim(&mut self) {
        if self.bytes.len() + self.keys.len() > NAMES_KEPT || self.sections.len() > SECTIONS_KEPT {
            self.sections.clear();
            self.keys.clear();
            self.spans.clear();
            self.bytes.clear();
        }
    }

    /// Where the spans of `qualifiers`' (numbered, freshly read, of
    /// `columns` columns from `value`) start ([`Names::span`]): found, or
    /// built; `None` when they are malformed or too many to point at.
    pub(super) fn of(
        &mut self,
        value: &[u8],
        qualifiers: &mut Qualifiers<'_>,
        columns: usize,
    ) -> Option<usize> {
        let Qualifiers::Numbered { section, .. } = qualifiers else {
            return None;
        };
        let section = *section;
        let keys = &self.keys;
        let found = self
            .sections
            .iter()
            .find(|(s, r)| r.len() == columns && keys[s.clone()] == *section);
        let range = match found {
            Some((_, range)) => range.clone(),
            None => {
                let start = self.spans.len();
                for _ in 0..columns {
                    let Lies::Built(span) = qualifiers.next(value, &mut self.bytes)? else {
                        return None;
                    };
                    self.spans.push((
                        u32::try_from(span.start).ok()?,
                        u32::try_from(span.end).ok()?,
                    ));
                }
                let key = self.keys.len();
                self.keys.extend_from_slice(section);
                self.sections
                    .push((key..self.keys.len(), start..self.spans.len()));
                start..self.spans.len()
            }
        };
        Some(range.start)
    }

    /// Span `i` (of those [`Names::of`] gave the start of).
    pub fn span(&self, i: usize) -> Option<(u32, u32)> {
        self.spans.get(i).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(qualifiers: &[&[u8]]) -> (Vec<Vec<u8>>, usize) {
        let mut out = Vec::new();
        write(qualifiers.iter().copied(), &mut out);
        let mut at = 0;
        let mut read = Qualifiers::read(&out, &mut at, qualifiers.len(), 3).expect("reads back");
        assert_eq!(at, out.len(), "the section's length is what was written");
        let mut built = Vec::new();
        let back = (0..qualifiers.len())
            .map(
                |_| match read.next(&out, &mut built).expect("a qualifier") {
                    Lies::Value(r) => out[r].to_vec(),
                    Lies::Built(r) => built[r].to_vec(),
                },
            )
            .collect();
        (back, out.len())
    }

    fn texts_of(qualifiers: &[&[u8]]) -> Vec<Vec<u8>> {
        qualifiers.iter().map(|q| q.to_vec()).collect()
    }

    fn texts(qualifiers: &[String]) -> Vec<&[u8]> {
        qualifiers.iter().map(|q| q.as_bytes()).collect()
    }

    #[test]
    fn minutes_and_quarter_hours_take_a_few_bytes() {
        let minutes: Vec<String> = (0..60).map(|m| format!("{m:02}")).collect();
        let (back, size) = round_trip(&texts(&minutes));
        assert_eq!(back, texts(&minutes));
        assert!(size <= 12, "{size} bytes for 60 minutes");
        let quarters: Vec<String> = (0..96)
            .map(|q| format!("{:02}{:02}", q / 4, q % 4 * 15))
            .collect();
        let (back, size) = round_trip(&texts(&quarters));
        assert_eq!(back, texts(&quarters));
        // Hours and quarters: a 7-bit residue each, against 5 bytes listed.
        assert!(size <= 100, "{size} bytes for 96 quarter hours");
        let named: Vec<String> = (0..20).map(|i| format!("pressure#{i:03}")).collect();
        let (back, size) = round_trip(&texts(&named));
        assert_eq!(back, texts(&named));
        assert!(size < 30, "{size} bytes for a prefix and 20 numbers");
    }

    #[test]
    fn what_does_not_read_back_is_listed() {
        for qualifiers in [
            &[b"-0".as_slice(), b"1"][..],
            &[b"+1", b"+2", b"+3"],
            &[b"1.", b"2.", b"3."],
            &[b".5", b".6", b".7"],
            &[b"1e5", b"2e5", b"3e5"],
            &[b"1234567890123456789", b"2234567890123456789"],
            &[b"a", b"b", b"c"],
            &[b"", b"1", b"2"],
        ] {
            let (back, size) = round_trip(qualifiers);
            assert_eq!(back, qualifiers, "{qualifiers:?}");
            let listed: usize = 1 + qualifiers.iter().map(|q| 1 + q.len()).sum::<usize>();
            assert_eq!(size, listed, "{qualifiers:?} are listed");
        }
    }

    #[test]
    fn measurements_as_qualifiers_read_back() {
        let mut values = vec![
            "-40.25", "-3.5", "-3", "0", "0.007", "1013.25", "90012.5", "99", "007",
        ];
        values.sort();
        let qualifiers: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
        let (back, size) = round_trip(&qualifiers);
        assert_eq!(back, qualifiers);
        let listed: usize = 1 + qualifiers.iter().map(|q| 1 + q.len()).sum::<usize>();
        assert!(size < listed, "numbered: {size} bytes, listed {listed}");
        // The most digits a number holds read back; one more is listed.
        let mut longest: Vec<&[u8]> = vec![
            b"-99999999999999999.9",
            b"0.00000000000000001",
            b"123456789012345678",
            b"2",
        ];
        let (back, _) = round_trip(&longest);
        assert_eq!(back, longest);
        longest.push(b"9999999999999999999");
        let listed: usize = 1 + longest.iter().map(|q| 1 + q.len()).sum::<usize>();
        let (back, size) = round_trip(&longest);
        assert_eq!(
            (back, size),
            (texts_of(&longest), listed),
            "19 digits: listed"
        );
    }

    proptest! {
        #[test]
        fn any_qualifiers_read_back(mut qualifiers in prop::collection::btree_set(
            prop_oneof![
                "[0-9]{1,4}",
                "-?[0-9]{1,3}(\\.[0-9]{1,3})?",
                "p#[0-9]{2}",
                prop::collection::vec(any::<u8>(), 0..4)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ],
            1..40,
        ).prop_map(|s| s.into_iter().collect::<Vec<String>>())) {
            qualifiers.sort();
            let qualifiers = texts(&qualifiers);
            prop_assert_eq!(round_trip(&qualifiers).0, qualifiers);
        }

        #[test]
        fn damaged_sections_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40),
                                        columns in 0usize..20) {
            let mut bytes = bytes;
            if let Some(b) = bytes.first_mut() {
                *b %= 3;
            }
            let mut at = 0;
            if let Some(mut read) = Qualifiers::read(&bytes, &mut at, columns, 3) {
                let mut built = Vec::new();
                for _ in 0..columns {
                    if read.next(&bytes, &mut built).is_none() {
                        break;
                    }
                }
            }
        }
    }
}
