//! Value segments: a packed row's values, in cell order, in segments of
//! whole columns, each stored the way that takes least room.
//!
//! ```text
//! segment = varint cell count k
//!           u8 kind
//!           kind 0, raw:     the k values back to back (lengths come from
//!                            the row's length run)
//!           kind 1, decimal: u8 exponent e, run of k numbers, run of k
//!                            corrections; each value is the 8-byte
//!                            big-endian f64 whose bits are those of
//!                            number / 10^e plus the correction
//!           kind 2, integer: run of k numbers; each value is the number
//!                            as 8-byte big-endian i64
//! ```
//!
//! Decimal is how DOUBLE columns of measurements (a pressure of 90012.5, a
//! temperature of -3.25) shrink: written with a few decimals they are small
//! integers scaled by a power of ten, and the run stores those integers in
//! the bits their spread needs. Every value comes back bit for bit: one
//! that is not exactly the f64 nearest its decimal (a computed -40.0 +
//! 0.07 often lands an ulp off) carries the difference of its bits as a
//! correction, so corrections are a run of zeros and ones where decimals
//! were parsed or computed, and wide where values have no short decimal
//! form (then raw is smaller and wins). The exponents tried are those
//! that make some value of a sample exact, and when the best of them
//! leaves wide corrections, those that make any value exact (see
//! [`decimal`]); the smallest segment wins. Integer does the same for
//! BIGINT columns and counters.

use super::runs::{Plan, Planning, Run, put_varint, varint};

const RAW: u8 = 0;
const DECIMAL: u8 = 1;
const INTEGER: u8 = 2;

/// Powers of ten a decimal segment may scale by; all exact in f64.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// A segment closes at the end of a column once it holds this many cells,
/// so that one-cell columns (a tall row's fields) share a segment while
/// long columns get one each.
pub(super) const SEGMENT_CELLS: usize = 16;

/// A segment of one-cell columns holding 8-byte values (a time bucket's
/// new column per event, all of one measure) closes only at this many:
/// one header for a bucket's values instead of one per 16, worth more
/// than the bit or so a wider spread may cost each value.
pub(super) const SINGLE_CELLS: usize = 256;

/// The number `v` is `number / 10^e` of, if exactly so.
fn scaled(v: f64, e: usize) -> Option<i64> {
    let n = nearest(v, e)?;
    (decoded(n, e).to_bits() == v.to_bits()).then_some(n)
}

/// 2^50: below it, a value exact at an exponent is exact at the next too
/// (see [`smallest_exact`]).
const MONOTONE: f64 = 1_125_899_906_842_624.0;

/// Values between two looks at whether a run being planned is already
/// larger than what it must beat.
const LOOK: usize = 8;

/// Exponents [`smallest_exact`] tries one by one before it halves.
const FEW_DECIMALS: usize = 3;

/// The smallest exponent at which `v` is exact ([`scaled`]), found in a
/// few tries: while `v · 10^e` stays below 2^50, a value exact at `e` is
/// exact at `e + 1` too (its number times ten, which the product finds
/// within a quarter, over a power of ten: the same fraction, rounded
/// once), so the exponents below 2^50 are searched by halves from the
/// largest; above it lies at most one more, tried alone.
fn smallest_exact(v: f64) -> Option<usize> {
    // Measurements mostly carry a few decimals: the first exponents are
    // tried in turn first (the first exact one is the smallest), which
    // takes fewer tries than halving from the largest.
    smallest_exact_from(v, 0, FEW_DECIMALS)
}

/// [`smallest_exact`] of a value exact at no exponent below `low`: the
/// `linear` exponents from `low` are tried in turn, then the rest by
/// halves.
fn smallest_exact_from(v: f64, low: usize, linear: usize) -> Option<usize> {
    let exact = |e: usize| scaled(v, e).is_some();
    let few = (low + linear).min(POW10.len());
    if let Some(e) = (low..few).find(|&e| exact(e)) {
        return Some(e);
    }
    let Some(top) = (few..POW10.len())
        .rev()
        .find(|&e| (v * POW10[e]).abs() < MONOTONE)
    else {
        return (few..POW10.len()).find(|&e| exact(e));
    };
    if !exact(top) {
        return (top + 1..POW10.len()).find(|&e| exact(e));
    }
    // (`top` is past the exponents tried already: it is exact.)
    let (mut low, mut high) = (few, top);
    while low < high {
        let middle = (low + high) / 2;
        if exact(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    Some(high)
}

/// [`smallest_exact`], found from `hint` (a neighbour's, in a column of
/// values with about as many decimals): below 2^50 (see there) a value
/// exact at `hint` is exact at every larger exponent and one not exact
/// there at no smaller one, so the search walks down from `hint` while
/// the exponents stay exact, or tries the one above it before it halves
/// the rest (a value with no short decimal form, an ulp off one, is
/// exact only near 2^50 if at all).
fn smallest_exact_near(v: f64, hint: usize) -> Option<usize> {
    let exact = |e: usize| scaled(v, e).is_some();
    if hint >= POW10.len() || (v * POW10[hint]).abs() >= MONOTONE {
        return smallest_exact(v);
    }
    if exact(hint) {
        let mut e = hint;
        while e > 0 && exact(e - 1) {
            e -= 1;
        }
        return Some(e);
    }
    smallest_exact_from(v, hint + 1, 1)
}

/// The integer nearest `v · 10^e`, if it is below 2^53 (where every
/// integer is exact and the division back rounds once).
fn nearest(v: f64, e: usize) -> Option<i64> {
    const LIMIT: f64 = 9_007_199_254_740_992.0;
    let x = v * POW10[e];
    // Also false for NaN.
    if x.abs().partial_cmp(&LIMIT) != Some(std::cmp::Ordering::Less) {
        return None;
    }
    // `x.round()` (halves away from zero) without the library call: below
    // 2^53 the integer part is exact and so is the fraction left.
    let whole = x as i64;
    let fraction = x - whole as f64;
    // (Without branches: the fraction of a value scaled at too small an
    // exponent is anything, and a branch on it mispredicted half the
    // time cost more than the rest of the rounding.)
    let n = whole + i64::from(fraction >= 0.5) - i64::from(fraction <= -0.5);
    (n.unsigned_abs() < 1 << 53).then_some(n)
}

fn decoded(n: i64, e: usize) -> f64 {
    (n as f64) / POW10[e]
}

/// What a segment is written from: anything that holds a value's bytes
/// (the values themselves, or a row's cells).
pub(super) trait Value {
    fn bytes(&self) -> &[u8];
}

impl Value for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl Value for (&[u8], i64, &[u8]) {
    fn bytes(&self) -> &[u8] {
        self.2
    }
}

/// The f64 a value holds, if it is 8 bytes.
fn float(v: &[u8]) -> Option<f64> {
    Some(f64::from_be_bytes(v.try_into().ok()?))
}

/// The correction of `v` written as `n / 10^e`: the difference of bits.
fn correction(v: f64, n: i64, e: usize) -> i64 {
    (v.to_bits() as i64).wrapping_sub(decoded(n, e).to_bits() as i64)
}

/// Values whose smallest exact exponents are the ones a segment tries
/// first, spread over it.
const SAMPLE: usize = 8;

/// Corrections this many bits wide or fewer (values exact at the
/// exponent, or a few ulps off it) make the exponents the sample chose
/// final.
const SMALL_CORRECTIONS: u8 = 8;

/// A segment's values as decimal numbers and bit corrections; `None`
/// when a value is not 8 bytes or none has a decimal form. The values are
/// all 8 bytes when it is `Some`, and the chosen exponent's numbers and
/// corrections are left in `scratch` (`best_numbers`,
/// `best_corrections`).
///
/// The exponent is the one that takes least room (the smallest such)
/// among the smallest exact exponents of a [`SAMPLE`] of the values, when
/// its corrections take at most [`SMALL_CORRECTIONS`] bits: what a column of
/// measurements with a few decimals gets, at the cost of a division a
/// value. Otherwise it is the one that takes least room among every
/// value's smallest exact exponent.
fn decimal(values: &[impl Value], scratch: &mut Scratch) -> Option<Decimal> {
    if values.iter().any(|v| v.bytes().len() != 8) {
        return None;
    }
    let floats = &mut scratch.floats;
    floats.clear();
    floats.extend(values.iter().map(|v| float(v.bytes()).unwrap_or_default()));
    let n = floats.len();
    let m = n.min(SAMPLE);
    let mut sampled = [false; POW10.len()];
    for k in 0..m {
        if let Some(e) = smallest_exact(floats[k * n / m]) {
            sampled[e] = true;
        }
    }
    let best = search(scratch, &sampled, false);
    if best
        .as_ref()
        .is_some_and(|b| b.plans.1.width() <= SMALL_CORRECTIONS)
    {
        return best;
    }
    let Scratch {
        floats, smallest, ..
    } = scratch;
    let mut tried = [false; POW10.len()];
    let mut hint = 0;
    smallest.clear();
    for &v in floats.iter() {
        let e = smallest_exact_near(v, hint);
        if let Some(e) = e {
            tried[e] = true;
            hint = e;
        }
        smallest.push(e.map_or(u8::MAX, |e| e as u8));
    }
    search(scratch, &tried, true)
}

/// The exponent among `tried` at which `scratch.floats` take least room
/// as decimal numbers and corrections (the smallest such). With `known`,
/// `scratch.smallest` holds each value's smallest exact exponent: a value
/// exact at an exponent (its smallest no larger, and below 2^50, see
/// [`smallest_exact`]) has no correction to compute.
///
/// The exponents are tried from the largest at which every value stays
/// below 2^50 down (the first is mostly the best), then the larger ones;
/// an exponent is given up as soon as what its runs already need (their
/// width only grows as numbers come) exceeds the best size.
fn search(scratch: &mut Scratch, tried: &[bool; POW10.len()], known: bool) -> Option<Decimal> {
    let Scratch {
        floats,
        smallest,
        numbers,
        corrections,
        best_numbers,
        best_corrections,
    } = scratch;
    let count = floats.len();
    let largest = floats
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f64, |m, v| m.max(v.abs()));
    let order = (0..POW10.len())
        .rev()
        .filter(|&e| largest * POW10[e] < MONOTONE)
        .chain((0..POW10.len()).filter(|&e| largest * POW10[e] >= MONOTONE))
        .filter(|&e| tried[e]);
    // Of two exponents alike in size, the smaller wins.
    let beats = |size: usize, e: usize, best: &Option<Decimal>| {
        best.as_ref()
            .is_none_or(|b| (size, e) < (b.size, usize::from(b.exponent)))
    };
    let mut best: Option<Decimal> = None;
    'exponents: for e in order {
        let lost = |least: usize, best: &Option<Decimal>| !beats(least, e, best);
        let exact = |i: usize, v: f64| {
            known && usize::from(smallest[i]) <= e && (v * POW10[e]).abs() < MONOTONE
        };
        let (mut planning, mut planning_corrections) = (Planning::default(), Planning::default());
        numbers.clear();
        corrections.clear();
        for (i, &v) in floats.iter().enumerate() {
            // An exponent that takes a finite value past 2^53 is not
            // tried: that value would be all correction (one of
            // 4.909999999999997, exact only at 10^15, beside a pressure
            // of 90753.5).
            let n = match nearest(v, e) {
                Some(n) => n,
                None if v.is_finite() => continue 'exponents,
                None => 0,
            };
            let c = if exact(i, v) { 0 } else { correction(v, n, e) };
            numbers.push(n);
            corrections.push(c);
            planning.push(n);
            planning_corrections.push(c);
            if i % LOOK == LOOK - 1
                && lost(
                    1 + planning.least_size(count) + planning_corrections.least_size(count),
                    &best,
                )
            {
                continue 'exponents;
            }
        }
        let plans = (planning.plan(), planning_corrections.plan());
        let size = 1 + plans.0.size(count) + plans.1.size(count);
        if beats(size, e, &best) {
            best = Some(Decimal {
                size,
                exponent: e as u8,
                plans,
            });
            std::mem::swap(numbers, best_numbers);
            std::mem::swap(corrections, best_corrections);
        }
    }
    best
}

/// What [`decimal`] works in, kept per thread.
#[derive(Default)]
struct Scratch {
    floats: Vec<f64>,
    /// Each value's smallest exact exponent (`u8::MAX`: none).
    smallest: Vec<u8>,
    numbers: Vec<i64>,
    corrections: Vec<i64>,
    best_numbers: Vec<i64>,
    best_corrections: Vec<i64>,
}

/// Values a segment's scratch keeps room for after it: a larger one's goes.
const SCRATCH_KEPT: usize = 1 << 12;

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// A segment's values as decimal numbers (see [`decimal`]).
struct Decimal {
    /// How many bytes the segment takes, its count and kind aside.
    size: usize,
    exponent: u8,
    plans: (Plan, Plan),
}

/// The values of a segment as big-endian integers, if all are 8 bytes.
fn integers<V: Value>(values: &[V]) -> Option<impl ExactSizeIterator<Item = i64> + Clone + '_> {
    values.iter().all(|v| v.bytes().len() == 8).then(|| {
        values
            .iter()
            .map(|v| i64::from_be_bytes(v.bytes().try_into().unwrap_or_default()))
    })
}

/// The plan of a run of `numbers` if it takes less than `bound` bytes;
/// given up as soon as what it already needs does not (as a double's
/// bits do at once).
fn integer_plan(numbers: impl ExactSizeIterator<Item = i64>, bound: usize) -> Option<Plan> {
    let count = numbers.len();
    let mut planning = Planning::default();
    for (i, n) in numbers.enumerate() {
        planning.push(n);
        if i % LOOK == LOOK - 1 && planning.least_size(count) >= bound {
            return None;
        }
    }
    Some(planning.plan()).filter(|plan| plan.size(count) < bound)
}

/// Appends a segment holding `values`, in the kind that takes least room.
pub(super) fn write_segment<V: Value>(values: &[V], out: &mut Vec<u8>) {
    put_varint(out, values.len() as u64);
    let raw: usize = values.iter().map(|v| v.bytes().len()).sum();
    SCRATCH.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        let decimal = decimal(values, scratch).filter(|d| d.size < raw);
        let integer = integers(values).and_then(|numbers| {
            let plan = integer_plan(numbers.clone(), decimal.as_ref().map_or(raw, |d| d.size))?;
            Some((plan, numbers))
        });
        if let Some((plan, numbers)) = integer {
            out.push(INTEGER);
            plan.write_iter(numbers, out);
        } else if let Some(d) = decimal {
            out.push(DECIMAL);
            out.push(d.exponent);
            d.plans.0.write(&scratch.best_numbers, out);
            d.plans.1.write(&scratch.best_corrections, out);
        } else {
            out.push(RAW);
            for v in values {
                out.extend_from_slice(v.bytes());
            }
        }
        if scratch.floats.capacity() > SCRATCH_KEPT {
            *scratch = Scratch::default();
        }
    });
}

/// Starts a raw segment of `count` values (at least one): the values
/// follow, back to back.
pub(super) fn write_raw_header(count: usize, out: &mut Vec<u8>) {
    put_varint(out, count as u64);
    out.push(RAW);
}

/// Where a decoded value lies.
#[derive(Clone, Copy)]
pub(super) enum Piece {
    /// In the packed value, `start..end`.
    Value(usize, usize),
    /// Decoded: these 8 bytes.
    Bytes([u8; 8]),
}

enum Kind<'a> {
    Raw,
    Decimal(f64, Run<'a>, Run<'a>),
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
    #[inline(always)]
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
            Kind::Decimal(scale, numbers, corrections) => {
                let bits = ((numbers.get(i) as f64) / *scale).to_bits() as i64;
                Some(Piece::Bytes(
                    bits.wrapping_add(corrections.get(i)).to_be_bytes(),
                ))
            }
            Kind::Integer(run) => Some(Piece::Bytes(run.get(i).to_be_bytes())),
        }
    }

    /// The next value, `len` bytes long, as the big-endian number its 8
    /// bytes are (what [`Segments::next`] would give, read as a word), or
    /// where it lies when it is not 8 bytes long; `None` when the segments
    /// are malformed.
    #[inline(always)]
    pub fn next_word(&mut self, len: usize) -> Option<Result<u64, (usize, usize)>> {
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
                Some(match self.bytes.get(start..end)?.try_into() {
                    Ok(bytes) => Ok(u64::from_be_bytes(bytes)),
                    Err(_) => Err((start, end)),
                })
            }
            _ if len != 8 => None,
            Kind::Decimal(scale, numbers, corrections) => {
                let bits = ((numbers.get(i) as f64) / *scale).to_bits() as i64;
                Some(Ok(bits.wrapping_add(corrections.get(i)) as u64))
            }
            Kind::Integer(run) => Some(Ok(run.get(i) as u64)),
        }
    }

    /// Passes over the next `n` values, whose lengths are numbers
    /// `cell..cell + n` of `lengths`; the checks `skip` makes still hold,
    /// made a segment at a time where its values are numbers.
    pub fn skip_many(&mut self, lengths: &Run<'_>, mut cell: usize, mut n: usize) -> Option<()> {
        while n > 0 {
            if self.index == self.count {
                self.open()?;
            }
            let k = n.min(self.count - self.index);
            match self.kind {
                Kind::Raw => {
                    for i in cell..cell + k {
                        let len = usize::try_from(lengths.get(i)).ok()?;
                        self.at = self
                            .at
                            .checked_add(len)
                            .filter(|e| *e <= self.bytes.len())?;
                    }
                }
                _ => {
                    if !lengths.all_equal(cell, k, 8) {
                        return None;
                    }
                }
            }
            self.index += k;
            cell += k;
            n -= k;
        }
        Some(())
    }

    /// Appends the next `n` values, whose lengths are numbers
    /// `cell..cell + n` of `lengths`, to `out` as words (see
    /// [`Segments::next_word`]), a segment of numbers at a time. Stops at
    /// a value that is not 8 bytes long: `Err` with where it lies, the
    /// values after it not read.
    pub fn words(
        &mut self,
        lengths: &Run<'_>,
        mut cell: usize,
        mut n: usize,
        out: &mut Vec<u64>,
    ) -> Option<Result<(), (usize, usize)>> {
        while n > 0 {
            if self.index == self.count {
                self.open()?;
            }
            let k = n.min(self.count - self.index);
            let from = self.index;
            match &self.kind {
                Kind::Raw => {
                    for i in cell..cell + k {
                        let len = usize::try_from(lengths.get(i)).ok()?;
                        match self.next_word(len)? {
                            Ok(word) => out.push(word),
                            Err(at) => return Some(Err(at)),
                        }
                    }
                }
                kind => {
                    if !lengths.all_equal(cell, k, 8) {
                        return None;
                    }
                    let start = out.len();
                    match kind {
                        Kind::Decimal(scale, numbers, corrections) => {
                            let scale = *scale;
                            out.extend(
                                (from..from + k)
                                    .map(|i| ((numbers.get(i) as f64) / scale).to_bits()),
                            );
                            if !corrections.all_zero() {
                                for (w, i) in out[start..].iter_mut().zip(from..) {
                                    *w = (*w as i64).wrapping_add(corrections.get(i)) as u64;
                                }
                            }
                        }
                        Kind::Integer(run) => {
                            out.extend((from..from + k).map(|i| run.get(i) as u64));
                        }
                        Kind::Raw => {}
                    }
                    self.index += k;
                }
            }
            cell += k;
            n -= k;
        }
        Some(Ok(()))
    }

    /// Passes over the next value (of length `len`) without computing it;
    /// the checks `next` makes still hold.
    #[inline(always)]
    pub fn skip(&mut self, len: usize) -> Option<()> {
        if self.index == self.count {
            self.open()?;
        }
        self.index += 1;
        match self.kind {
            Kind::Raw => {
                self.at = self
                    .at
                    .checked_add(len)
                    .filter(|e| *e <= self.bytes.len())?;
                Some(())
            }
            _ => (len == 8).then_some(()),
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
                let numbers = Run::read(value, &mut self.at, count)?;
                Kind::Decimal(scale, numbers, Run::read(value, &mut self.at, count)?)
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

    use proptest::strategy::Strategy;

    /// The segment as [`decimal`] describes it, with every number
    /// collected and every exponent tried in full.
    fn segment_slowly(values: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, values.len() as u64);
        let raw: usize = values.iter().map(|v| v.len()).sum();
        let floats: Option<Vec<f64>> = values.iter().map(|v| float(v)).collect();
        let mut best: Option<(usize, usize, Vec<i64>, Vec<i64>)> = None;
        if let Some(floats) = &floats {
            let first_exact = |v: &f64| (0..POW10.len()).find(|&e| scaled(*v, e).is_some());
            // The smallest (size, exponent) among `exponents`.
            let best_of = |exponents: std::collections::BTreeSet<usize>| {
                let mut best: Option<(usize, usize, Vec<i64>, Vec<i64>)> = None;
                for e in exponents {
                    if floats
                        .iter()
                        .any(|&v| v.is_finite() && nearest(v, e).is_none())
                    {
                        continue;
                    }
                    let numbers: Vec<i64> =
                        floats.iter().map(|&v| nearest(v, e).unwrap_or(0)).collect();
                    let corrections: Vec<i64> = floats
                        .iter()
                        .zip(&numbers)
                        .map(|(&v, &n)| correction(v, n, e))
                        .collect();
                    let size = 1
                        + Plan::of(&numbers).size(numbers.len())
                        + Plan::of(&corrections).size(corrections.len());
                    if best.as_ref().is_none_or(|b| size < b.0) {
                        best = Some((size, e, numbers, corrections));
                    }
                }
                best
            };
            let n = floats.len();
            let m = n.min(SAMPLE);
            let sample = (0..m)
                .filter_map(|k| first_exact(&floats[k * n / m]))
                .collect();
            best = best_of(sample);
            if best
                .as_ref()
                .is_none_or(|b| Plan::of(&b.3).width() > SMALL_CORRECTIONS)
            {
                best = best_of(floats.iter().filter_map(first_exact).collect());
            }
        }
        let best = best.filter(|b| b.0 < raw);
        let integers: Option<Vec<i64>> = values
            .iter()
            .map(|v| Some(i64::from_be_bytes((*v).try_into().ok()?)))
            .collect();
        let integer =
            integers.filter(|n| Plan::of(n).size(n.len()) < best.as_ref().map_or(raw, |b| b.0));
        if let Some(n) = integer {
            out.push(INTEGER);
            Plan::of(&n).write(&n, &mut out);
        } else if let Some((_, e, numbers, corrections)) = best {
            out.push(DECIMAL);
            out.push(e as u8);
            Plan::of(&numbers).write(&numbers, &mut out);
            Plan::of(&corrections).write(&corrections, &mut out);
        } else {
            out.push(RAW);
            for v in values {
                out.extend_from_slice(v);
            }
        }
        out
    }

    /// Any f64, or one with a few decimals (perhaps an ulp off, as
    /// computed measurements are).
    fn measures() -> impl proptest::strategy::Strategy<Value = f64> {
        proptest::prop_oneof![
            proptest::num::f64::ANY,
            (-10_000_000_000i64..10_000_000_000, 0i32..16)
                .prop_map(|(n, e)| n as f64 / 10f64.powi(e)),
            (-1000i64..1000, 0i32..4, 0i64..100)
                .prop_map(|(n, e, k)| n as f64 / 10f64.powi(e) + k as f64 * 0.07),
        ]
    }

    proptest::proptest! {
        #[test]
        fn smallest_exact_exponents_are_found_by_halves(
            v in measures(),
        ) {
            let linear = (0..POW10.len()).find(|&e| scaled(v, e).is_some());
            proptest::prop_assert_eq!(smallest_exact(v), linear);
        }

        #[test]
        fn a_hint_finds_the_smallest_exact_exponent_too(
            v in measures(),
            hint in 0usize..17,
        ) {
            proptest::prop_assert_eq!(smallest_exact_near(v, hint), smallest_exact(v));
        }

        #[test]
        fn nearest_rounds_as_round_does(v in proptest::num::f64::ANY, e in 0usize..16) {
            let x = (v * POW10[e]).round();
            let expected = (x.abs() < 9_007_199_254_740_992.0).then_some(x as i64);
            proptest::prop_assert_eq!(nearest(v, e), expected);
        }

        #[test]
        fn segments_are_those_written_slowly(
            decimals in proptest::collection::vec((-100_000i64..100_000, 0u32..4), 1..40),
            odd in proptest::collection::vec(proptest::num::u64::ANY, 0..3),
            kind in 0u8..3,
        ) {
            let mut owned: Vec<Vec<u8>> = decimals
                .iter()
                .map(|&(n, e)| match kind {
                    0 if n % 3 == 0 => (n as f64 * 0.07 - 4.0).to_be_bytes().to_vec(),
                    0 => (n as f64 / 10f64.powi(e as i32)).to_be_bytes().to_vec(),
                    1 => (n * 7).to_be_bytes().to_vec(),
                    _ => n.to_string().into_bytes(),
                })
                .collect();
            owned.extend(odd.iter().map(|b| b.to_be_bytes().to_vec()));
            let values: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut out = Vec::new();
            write_segment(&values, &mut out);
            proptest::prop_assert_eq!(&out, &segment_slowly(&values));
            proptest::prop_assert_eq!(read_back(&values).0, owned);
        }
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
    fn sums_off_their_decimal_are_corrected() {
        // -40.0 + k / 100.0 lands an ulp off (k - 4000) / 100 for about
        // half the k below 8000.
        let floats: Vec<[u8; 8]> = (0..60)
            .map(|k| (-40.0 + f64::from(k * 131 % 8000) / 100.0).to_be_bytes())
            .collect();
        let values: Vec<&[u8]> = floats.iter().map(|f| f.as_slice()).collect();
        let off = floats
            .iter()
            .filter(|f| scaled(f64::from_be_bytes(**f), 2).is_none())
            .count();
        assert!(off > 0, "the test needs a value off its decimal");
        let (got, size) = read_back(&values);
        assert_eq!(got, values);
        // 13 bits a number, 2 bits a correction, and headers.
        assert!(size <= 60 * 15 / 8 + 16, "{size} bytes, {off} corrected");
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
