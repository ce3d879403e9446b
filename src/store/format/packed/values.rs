//! Value segments: a packed row's values, in cell order, in segments of
//! whole columns, each stored the way that takes least room.
//!
//! ```text
//! segment = varint cell count k
//!           u8 kind
//!           kind 0, raw:     the k values back to back (lengths come from
//!                            the row's length run)
//!           kind 1, decimal: u8 exponent e, run of k numbers; each value
//!                            is the 8-byte big-endian f64 number / 10^e,
//!                            except: varint count x, then x times a varint
//!                            position (after the previous one's) and the
//!                            value's 8 bytes
//!           kind 2, integer: run of k numbers; each value is the number
//!                            as 8-byte big-endian i64
//! ```
//!
//! Decimal is how DOUBLE columns of measurements (a pressure of 90012.5, a
//! temperature of -3.25) shrink: written with a few decimals they are small
//! integers scaled by a power of ten, and the run stores those integers in
//! the bits their spread needs. A value is stored as a number only when it
//! is exactly the f64 its number decodes to, bit for bit; the others (-0.0,
//! NaN, and sums like -40.0 + 0.07 that land a bit off the decimal) are
//! exceptions stored whole. The exponent is the one that makes the segment
//! smallest. Integer does the same for BIGINT columns and counters.

use super::runs::{Plan, Run, put_varint, varint};

const RAW: u8 = 0;
const DECIMAL: u8 = 1;
const INTEGER: u8 = 2;

/// Powers of ten a decimal segment may scale by; all exact in f64.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// A segment closes at the end of a column once it holds this many cells,
/// so that one-cell columns (a tall row's fields, a bucket's new column per
/// event) share a segment while long columns get one each.
pub(super) const SEGMENT_CELLS: usize = 16;

/// The number `v` is `number / 10^e` of, if exactly so.
fn scaled(v: f64, e: usize) -> Option<i64> {
    let x = (v * POW10[e]).round();
    // Below 2^53 every integer is exact, and the division rounds once
    // (NaN and infinities are no number).
    if x.is_nan() || x.abs() >= 9_007_199_254_740_992.0 {
        return None;
    }
    let n = x as i64;
    ((n as f64) / POW10[e])
        .to_bits()
        .eq(&v.to_bits())
        .then_some(n)
}

/// A segment's values as decimal numbers: the exponent, a number for each
/// value (exceptions hold the smallest number, widening nothing), and the
/// positions of the exceptions; `None` when decimal does not pay.
fn decimal(values: &[&[u8]]) -> Option<Decimal> {
    let floats: Vec<f64> = values
        .iter()
        .map(|v| Some(f64::from_be_bytes((*v).try_into().ok()?)))
        .collect::<Option<_>>()?;
    // The exponents worth trying: each value's smallest.
    let mut tried = [false; POW10.len()];
    for &v in &floats {
        if let Some(e) = (0..POW10.len()).find(|&e| scaled(v, e).is_some()) {
            tried[e] = true;
        }
    }
    let mut best: Option<Decimal> = None;
    for e in (0..POW10.len()).filter(|&e| tried[e]) {
        let scaled: Vec<Option<i64>> = floats.iter().map(|&v| scaled(v, e)).collect();
        let floor = scaled.iter().flatten().copied().min().unwrap_or(0);
        let numbers: Vec<i64> = scaled.iter().map(|n| n.unwrap_or(floor)).collect();
        let exceptions: Vec<usize> = (0..scaled.len()).filter(|&i| scaled[i].is_none()).collect();
        let plan = Plan::of(&numbers);
        let size = 2 + plan.size(numbers.len()) + exceptions.len() * 10;
        if best.as_ref().is_none_or(|b| size < b.size) {
            best = Some(Decimal {
                size,
                exponent: e as u8,
                numbers,
                plan,
                exceptions,
            });
        }
    }
    best
}

/// A segment's values as decimal numbers (see [`decimal`]).
struct Decimal {
    /// At most how many bytes the segment takes, its count aside.
    size: usize,
    exponent: u8,
    numbers: Vec<i64>,
    plan: Plan,
    exceptions: Vec<usize>,
}

/// The values of a segment as big-endian integers, if all are 8 bytes.
fn integers(values: &[&[u8]]) -> Option<Vec<i64>> {
    values
        .iter()
        .map(|v| Some(i64::from_be_bytes((*v).try_into().ok()?)))
        .collect()
}

/// Appends a segment holding `values`, in the kind that takes least room.
pub(super) fn write_segment(values: &[&[u8]], out: &mut Vec<u8>) {
    put_varint(out, values.len() as u64);
    let raw: usize = values.iter().map(|v| v.len()).sum();
    let decimal = decimal(values).filter(|d| d.size < raw);
    let integer = integers(values)
        .map(|n| (Plan::of(&n), n))
        .filter(|(plan, n)| plan.size(n.len()) < decimal.as_ref().map_or(raw, |d| d.size));
    if let Some((plan, numbers)) = integer {
        out.push(INTEGER);
        plan.write(&numbers, out);
    } else if let Some(d) = decimal {
        out.push(DECIMAL);
        out.push(d.exponent);
        d.plan.write(&d.numbers, out);
        put_varint(out, d.exceptions.len() as u64);
        let mut previous = 0;
        for i in d.exceptions {
            put_varint(out, (i - previous) as u64);
            out.extend_from_slice(values[i]);
            previous = i;
        }
    } else {
        out.push(RAW);
        for v in values {
            out.extend_from_slice(v);
        }
    }
}

/// Where a decoded value lies.
pub(super) enum Piece {
    /// In the packed value, `start..end`.
    Value(usize, usize),
    /// Decoded: these 8 bytes.
    Bytes([u8; 8]),
}

enum Kind<'a> {
    Raw,
    Decimal(f64, Run<'a>, Exceptions),
    Integer(Run<'a>),
}

/// The exceptions of a decimal segment not yet reached.
struct Exceptions {
    /// Where the entry after the pending one starts, and how many follow.
    at: usize,
    left: usize,
    /// The pending exception's position in the segment (`usize::MAX`:
    /// none) and where its 8 bytes are.
    next: usize,
    bytes: usize,
}

impl Exceptions {
    /// Reads the next entry as the pending exception; `previous` is the
    /// position of the one before, `count` the segment's cell count.
    fn advance(&mut self, value: &[u8], previous: Option<usize>, count: usize) -> Option<()> {
        if self.left == 0 {
            self.next = usize::MAX;
            return Some(());
        }
        self.left -= 1;
        let gap = usize::try_from(varint(value, &mut self.at)?).ok()?;
        self.next = match previous {
            None => gap,
            Some(p) if gap > 0 => p.checked_add(gap)?,
            Some(_) => return None,
        };
        if self.next >= count {
            return None;
        }
        self.bytes = self.at;
        self.at = self.at.checked_add(8).filter(|e| *e <= value.len())?;
        Some(())
    }
}

/// Reads the segments of a packed value one value at a time.
pub(super) struct Segments<'a> {
    bytes: &'a [u8],
    at: usize,
    kind: Kind<'a>,
    /// The current segment's next value and its cell count.
    index: usize,
    count: usize,
}

impl<'a> Segments<'a> {
    /// The segments starting at `at` of `bytes`.
    pub fn new(bytes: &'a [u8], at: usize) -> Segments<'a> {
        Segments {
            bytes,
            at,
            kind: Kind::Raw,
            index: 0,
            count: 0,
        }
    }

    /// The next value, `len` bytes long; `None` when the segments are
    /// malformed.
    #[inline]
    pub fn next(&mut self, len: usize) -> Option<Piece> {
        if self.index == self.count {
            self.open()?;
        }
        let i = self.index;
        self.index += 1;
        let value = self.bytes;
        match &mut self.kind {
            Kind::Raw => {
                let start = self.at;
                let end = start.checked_add(len).filter(|e| *e <= value.len())?;
                self.at = end;
                Some(Piece::Value(start, end))
            }
            _ if len != 8 => None,
            Kind::Decimal(_, _, x) if x.next == i => {
                let start = x.bytes;
                x.advance(value, Some(i), self.count)?;
                Some(Piece::Value(start, start + 8))
            }
            Kind::Decimal(scale, run, _) => Some(Piece::Bytes(
                ((run.get(i) as f64) / *scale).to_bits().to_be_bytes(),
            )),
            Kind::Integer(run) => Some(Piece::Bytes(run.get(i).to_be_bytes())),
        }
    }

    /// Reads the next segment's header.
    fn open(&mut self) -> Option<()> {
        let value = self.bytes;
        let count = usize::try_from(varint(value, &mut self.at)?).ok()?;
        if count == 0 {
            return None;
        }
        let kind = *value.get(self.at)?;
        self.at += 1;
        self.kind = match kind {
            RAW => Kind::Raw,
            DECIMAL => {
                let scale = *POW10.get(usize::from(*value.get(self.at)?))?;
                self.at += 1;
                let run = Run::read(value, &mut self.at, count)?;
                let left = usize::try_from(varint(value, &mut self.at)?).ok()?;
                let mut x = Exceptions {
                    at: self.at,
                    left,
                    next: usize::MAX,
                    bytes: 0,
                };
                x.advance(value, None, count)?;
                // The segment ends after its last exception.
                for _ in 0..left {
                    varint(value, &mut self.at)?;
                    self.at = self.at.checked_add(8).filter(|e| *e <= value.len())?;
                }
                Kind::Decimal(scale, run, x)
            }
            INTEGER => Kind::Integer(Run::read(value, &mut self.at, count)?),
            _ => return None,
        };
        self.index = 0;
        self.count = count;
        Some(())
    }

    /// Where the segments end, once every value was read; `None` when the
    /// last segment holds more values than were read.
    pub fn end(&self) -> Option<usize> {
        (self.index == self.count).then_some(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(values: &[&[u8]]) -> (Vec<Vec<u8>>, usize) {
        let mut out = Vec::new();
        write_segment(values, &mut out);
        let mut segments = Segments::new(&out, 0);
        let got = values
            .iter()
            .map(
                |v| match segments.next(v.len()).expect("the value reads back") {
                    Piece::Value(s, e) => out[s..e].to_vec(),
                    Piece::Bytes(b) => b.to_vec(),
                },
            )
            .collect();
        assert_eq!(segments.end(), Some(out.len()));
        (got, out.len())
    }

    #[test]
    fn measurements_shrink_to_their_decimals() {
        let floats: Vec<[u8; 8]> = (0..60)
            .map(|i| (90_000.0 + f64::from(i * 37 % 1000) / 10.0).to_be_bytes())
            .collect();
        let values: Vec<&[u8]> = floats.iter().map(|f| f.as_slice()).collect();
        let (got, size) = read_back(&values);
        assert_eq!(got, values);
        // 60 numbers below 1000 in 10 bits each, and a few header bytes.
        assert!(size <= 60 * 10 / 8 + 12, "{size} bytes");
    }

    #[test]
    fn sums_off_their_decimal_are_exceptions() {
        // -40.0 + k / 100.0 lands a bit off k/100 for about one k in ten.
        let floats: Vec<[u8; 8]> = (0..60)
            .map(|k| (-40.0 + f64::from(k * 131 % 8000) / 100.0).to_be_bytes())
            .collect();
        let values: Vec<&[u8]> = floats.iter().map(|f| f.as_slice()).collect();
        let off = floats
            .iter()
            .filter(|f| scaled(f64::from_be_bytes(**f), 2).is_none())
            .count();
        assert!(off > 0, "the test needs an exception");
        let (got, size) = read_back(&values);
        assert_eq!(got, values);
        assert!(
            size <= 60 * 13 / 8 + off * 10 + 16,
            "{size} bytes, {off} exceptions"
        );
    }

    #[test]
    fn odd_floats_stay_exact() {
        let floats: Vec<[u8; 8]> = [-0.0, f64::NAN, 0.1 + 0.2, 1e300, f64::MIN_POSITIVE, 3.5]
            .iter()
            .map(|f: &f64| f.to_be_bytes())
            .collect();
        let values: Vec<&[u8]> = floats.iter().map(|f| f.as_slice()).collect();
        assert_eq!(read_back(&values).0, values);
        let counters: Vec<[u8; 8]> = [5i64, 7, -3, i64::MAX]
            .iter()
            .map(|n| n.to_be_bytes())
            .collect();
        let values: Vec<&[u8]> = counters.iter().map(|f| f.as_slice()).collect();
        assert_eq!(read_back(&values).0, values);
        let mixed: Vec<&[u8]> = vec![b"abc", b"", &[1, 2, 3, 4, 5, 6, 7, 8]];
        assert_eq!(read_back(&mixed).0, mixed);
    }
}
