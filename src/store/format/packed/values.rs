//! Value segments: a packed row's values, in cell order, in segments of
//! whole columns, each stored the way that takes least room.
//!
//! ```text
//! segment = varint cell count k
//!           u8 kind
//!           kind 0, raw:     the k values back to back (lengths come from
//!                            the row's length run)
//!           kind 1, decimal: u8 exponent e, run of k numbers; each value
//!                            is the 8-byte big-endian f64 number / 10^e
//!           kind 2, integer: run of k numbers; each value is the number
//!                            as 8-byte big-endian i64
//! ```
//!
//! Decimal is how DOUBLE columns of measurements (a pressure of 90012.5, a
//! temperature of -3.25) shrink: written with a few decimals they are small
//! integers scaled by a power of ten, and the run stores those integers in
//! the bits their spread needs. A segment is decimal only when every value
//! is exactly the f64 its number decodes to, bit for bit (so -0.0, NaN and
//! values with no short decimal form stay raw). Integer does the same for
//! BIGINT columns and counters.

use super::runs::{Plan, Run, varint};

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

/// The values of a segment as decimal numbers at one exponent, if they
/// all have one.
fn decimal(values: &[&[u8]]) -> Option<(u8, Vec<i64>)> {
    let floats: Vec<f64> = values
        .iter()
        .map(|v| Some(f64::from_be_bytes((*v).try_into().ok()?)))
        .collect::<Option<_>>()?;
    let mut e = 0;
    for &v in &floats {
        while scaled(v, e).is_none() {
            e += 1;
            if e == POW10.len() {
                return None;
            }
        }
    }
    let numbers = floats
        .iter()
        .map(|&v| scaled(v, e))
        .collect::<Option<_>>()?;
    Some((e as u8, numbers))
}

/// The values of a segment as big-endian integers, if all are 8 bytes.
fn integers(values: &[&[u8]]) -> Option<Vec<i64>> {
    values
        .iter()
        .map(|v| Some(i64::from_be_bytes((*v).try_into().ok()?)))
        .collect()
}

/// A typed way to store a segment's values.
enum Typed {
    Decimal(u8, Vec<i64>, Plan),
    Integer(Vec<i64>, Plan),
}

/// Appends a segment holding `values`, in the kind that takes least room.
pub(super) fn write_segment(values: &[&[u8]], out: &mut Vec<u8>) {
    super::runs::put_varint(out, values.len() as u64);
    let mut best: Option<(usize, Typed)> = None;
    if let Some((e, numbers)) = decimal(values) {
        let plan = Plan::of(&numbers);
        best = Some((
            1 + plan.size(numbers.len()),
            Typed::Decimal(e, numbers, plan),
        ));
    }
    if let Some(numbers) = integers(values) {
        let plan = Plan::of(&numbers);
        let size = plan.size(numbers.len());
        if best.as_ref().is_none_or(|(b, _)| size < *b) {
            best = Some((size, Typed::Integer(numbers, plan)));
        }
    }
    let raw: usize = values.iter().map(|v| v.len()).sum();
    match best {
        Some((size, Typed::Decimal(e, numbers, plan))) if size < raw => {
            out.push(DECIMAL);
            out.push(e);
            plan.write(&numbers, out);
        }
        Some((size, Typed::Integer(numbers, plan))) if size < raw => {
            out.push(INTEGER);
            plan.write(&numbers, out);
        }
        _ => {
            out.push(RAW);
            for v in values {
                out.extend_from_slice(v);
            }
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
    Decimal(f64, Run<'a>),
    Integer(Run<'a>),
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
        match &self.kind {
            Kind::Raw => {
                let start = self.at;
                let end = start.checked_add(len).filter(|e| *e <= self.bytes.len())?;
                self.at = end;
                Some(Piece::Value(start, end))
            }
            Kind::Decimal(scale, run) if len == 8 => Some(Piece::Bytes(
                ((run.get(i) as f64) / scale).to_bits().to_be_bytes(),
            )),
            Kind::Integer(run) if len == 8 => Some(Piece::Bytes(run.get(i).to_be_bytes())),
            _ => None,
        }
    }

    /// Reads the next segment's header.
    fn open(&mut self) -> Option<()> {
        let count = usize::try_from(varint(self.bytes, &mut self.at)?).ok()?;
        if count == 0 {
            return None;
        }
        let kind = *self.bytes.get(self.at)?;
        self.at += 1;
        self.kind = match kind {
            RAW => Kind::Raw,
            DECIMAL => {
                let e = usize::from(*self.bytes.get(self.at)?);
                self.at += 1;
                let scale = *POW10.get(e)?;
                Kind::Decimal(scale, Run::read(self.bytes, &mut self.at, count)?)
            }
            INTEGER => Kind::Integer(Run::read(self.bytes, &mut self.at, count)?),
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
