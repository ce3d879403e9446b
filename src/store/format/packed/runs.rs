//! Integer runs: a sequence of `i64` stored as frame of reference, common
//! divisor and bit packing, so that runs of equal or evenly spaced numbers
//! (cell counts, value lengths, timestamps a minute apart) take next to
//! nothing and random ones take the bits their spread needs.
//!
//! ```text
//! run = varint zigzag(base)     the smallest number (of the residues)
//!       varint step             every number is base + k · step
//!       u8 width                bits per k, 0..=64; bit 7 set: linear
//!       [varint zigzag(slope)]  linear only: number i is base + k_i · step
//!                               + i · slope
//!       ceil(n · width / 8) bytes: the k's, least significant bit first
//! ```
//!
//! A linear run takes an arithmetic progression (each column's newest
//! timestamp in a time bucket with a new column per minute, qualifiers
//! `00` to `59`) in its header, where a plain one needs the bits of its
//! whole spread; the writer of a row's runs picks the smaller. Arithmetic
//! wraps, both ways alike, so every number comes back. A run does not
//! store its length; its reader is told.

/// Appends a varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// How many bytes the varint of `n` takes.
pub(super) fn varint_len(n: u64) -> usize {
    (64 - n.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a varint at `*at`, advancing it.
#[inline]
pub(super) fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    // Counts, lengths and widths: mostly one byte.
    if let Some(&b) = bytes.get(*at)
        && b < 0x80
    {
        *at += 1;
        return Some(u64::from(b));
    }
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        n |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Some(n);
        }
    }
    None
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// The greatest common divisor; `gcd(0, b)` is `b`. One division brings
/// the larger down below the smaller (a run's step is soon small, and
/// each further number then costs that division and a few steps), then
/// the binary algorithm (shifts and subtractions) finishes.
fn gcd(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 {
        return a | b;
    }
    let (small, large) = if a < b { (a, b) } else { (b, a) };
    let (mut a, mut b) = (small, large % small);
    if b == 0 {
        return a;
    }
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

/// The width byte's flag for a linear run.
const LINEAR: u8 = 0x80;

/// How a run of numbers is stored: chosen from the numbers, then written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    base: i64,
    step: u64,
    width: u8,
    /// What number i adds to its residue (0: a plain run).
    slope: i64,
}

/// Number `i`'s share of a linear run's slope.
#[inline(always)]
fn along(slope: i64, i: usize) -> i64 {
    slope.wrapping_mul(i as i64)
}

impl Plan {
    /// The plan for `numbers`.
    pub fn of(numbers: &[i64]) -> Plan {
        Plan::of_iter(numbers.iter().copied())
    }

    /// The plan for the numbers `numbers` yields, in one pass: the base is
    /// the smallest, the step the greatest common divisor of the
    /// differences (from the first, which divides those from the base
    /// alike), the width what the largest multiple needs.
    pub fn of_iter(numbers: impl Iterator<Item = i64>) -> Plan {
        let mut planning = Planning::default();
        numbers.for_each(|n| planning.push(n));
        planning.plan()
    }

    /// The smaller of the plain plan for `numbers` and the linear one
    /// through its first and last number: what a row's own runs are
    /// written with.
    pub fn of_row(numbers: &[i64]) -> Plan {
        let plain = Plan::of(numbers);
        let n = numbers.len();
        if plain.width == 0 || n < 3 {
            return plain;
        }
        let rise = i128::from(numbers[n - 1]) - i128::from(numbers[0]);
        let Ok(slope) = i64::try_from(rise / (n as i128 - 1)) else {
            return plain;
        };
        if slope == 0 {
            return plain;
        }
        let residues = numbers
            .iter()
            .enumerate()
            .map(|(i, x)| x.wrapping_sub(along(slope, i)));
        let linear = Plan {
            slope,
            ..Plan::of_iter(residues)
        };
        if linear.size(n) < plain.size(n) {
            linear
        } else {
            plain
        }
    }

    /// Bits a number takes.
    pub fn width(&self) -> u8 {
        self.width
    }

    /// How many bytes the run of `n` numbers takes.
    pub fn size(&self, n: usize) -> usize {
        let mut header = varint_len(zigzag(self.base)) + varint_len(self.step) + 1;
        if self.slope != 0 {
            header += varint_len(zigzag(self.slope));
        }
        header + (n * usize::from(self.width)).div_ceil(8)
    }

    fn write_header(&self, out: &mut Vec<u8>) {
        put_varint(out, zigzag(self.base));
        put_varint(out, self.step);
        if self.slope == 0 {
            out.push(self.width);
        } else {
            out.push(self.width | LINEAR);
            put_varint(out, zigzag(self.slope));
        }
    }

    /// Writes `numbers` (those the plan was made for) as a run.
    pub fn write(&self, numbers: &[i64], out: &mut Vec<u8>) {
        self.write_iter(numbers.iter().copied(), out);
    }

    /// [`Plan::write`] of the numbers an iterator yields.
    pub fn write_iter(&self, numbers: impl Iterator<Item = i64>, out: &mut Vec<u8>) {
        self.write_header(out);
        if self.width == 0 {
            return;
        }
        let width = u32::from(self.width);
        let (mut acc, mut filled) = (0u128, 0u32);
        for (i, n) in numbers.enumerate() {
            let offset = n.wrapping_sub(along(self.slope, i)).wrapping_sub(self.base) as u64;
            let k = if self.step == 1 {
                offset
            } else {
                offset / self.step
            };
            acc |= u128::from(k) << filled;
            filled += width;
            while filled >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                filled -= 8;
            }
        }
        if filled > 0 {
            out.push(acc as u8);
        }
    }

    /// Writes `numbers` as a run with the plan that suits them, linear
    /// or not ([`Plan::of_row`]).
    pub fn write_run(numbers: &[i64], out: &mut Vec<u8>) {
        Plan::of_row(numbers).write(numbers, out);
    }
}

/// A [`Plan`] being made, a number at a time.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Planning {
    first: Option<i64>,
    min: i64,
    max: i64,
    step: u64,
}

impl Planning {
    pub fn push(&mut self, n: i64) {
        let Some(first) = self.first else {
            *self = Planning {
                first: Some(n),
                min: n,
                max: n,
                step: 0,
            };
            return;
        };
        self.min = self.min.min(n);
        self.max = self.max.max(n);
        if self.step != 1 {
            self.step = gcd(self.step, n.abs_diff(first));
        }
    }

    /// The least a run of `n` numbers takes with those pushed so far
    /// among them: its width only grows as numbers are pushed (their
    /// spread widens, their common step shrinks), and its header takes at
    /// least 3 bytes.
    pub fn least_size(&self, n: usize) -> usize {
        3 + (n * usize::from(self.width())).div_ceil(8)
    }

    /// Bits a number of those pushed so far takes (none pushed: none).
    fn width(&self) -> u8 {
        (64 - (self.max.abs_diff(self.min) / self.step.max(1)).leading_zeros()) as u8
    }

    pub fn plan(&self) -> Plan {
        if self.first.is_none() {
            return Plan {
                base: 0,
                step: 1,
                width: 0,
                slope: 0,
            };
        }
        Plan {
            base: self.min,
            step: self.step.max(1),
            width: self.width(),
            slope: 0,
        }
    }
}

/// A run being read: random access to its numbers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run<'a> {
    base: i64,
    step: u64,
    width: u32,
    slope: i64,
    bits: &'a [u8],
}

impl<'a> Run<'a> {
    /// Reads the header of a run of `n` numbers at `*at`, advancing past
    /// the run; `None` when it is malformed or runs past the end.
    #[inline]
    pub fn read(bytes: &'a [u8], at: &mut usize, n: usize) -> Option<Run<'a>> {
        let base = unzigzag(varint(bytes, at)?);
        let step = varint(bytes, at)?;
        let flags = *bytes.get(*at)?;
        *at += 1;
        let width = u32::from(flags & !LINEAR);
        if width > 64 {
            return None;
        }
        let slope = if flags & LINEAR == 0 {
            0
        } else {
            unzigzag(varint(bytes, at)?)
        };
        let len = n.checked_mul(width as usize)?.div_ceil(8);
        let end = at.checked_add(len)?;
        bytes.get(*at..end)?;
        // With up to 7 bytes of what follows, so that reading a number
        // near the run's end takes a whole word too (`get` masks them off).
        let bits = &bytes[*at..end.saturating_add(7).min(bytes.len())];
        *at = end;
        Some(Run {
            base,
            step,
            width,
            slope,
            bits,
        })
    }

    /// The `i`th number; `i` must be below the run's length.
    #[inline(always)]
    pub fn get(&self, i: usize) -> i64 {
        if self.width == 0 {
            return self.base.wrapping_add(along(self.slope, i));
        }
        let bit = i * self.width as usize;
        let (byte, shift) = (bit / 8, (bit % 8) as u32);
        let k = match self.bits.get(byte..byte + 8) {
            Some(word) if shift + self.width <= 64 => {
                let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
                (word >> shift) & mask(self.width)
            }
            _ => self.slow(byte, shift),
        };
        self.base
            .wrapping_add(k.wrapping_mul(self.step) as i64)
            .wrapping_add(along(self.slope, i))
    }

    /// Whether numbers `from..from + n` all equal `value` (at once when
    /// every number of the run is the same).
    pub fn all_equal(&self, from: usize, n: usize, value: i64) -> bool {
        if self.width == 0 && self.slope == 0 {
            return n == 0 || self.base == value;
        }
        (from..from + n).all(|i| self.get(i) == value)
    }

    /// The number every number of the run is, when they are all one.
    pub fn constant(&self) -> Option<i64> {
        (self.width == 0 && self.slope == 0).then_some(self.base)
    }

    /// Whether every number of the run is zero.
    pub fn all_zero(&self) -> bool {
        self.constant() == Some(0)
    }

    /// `get` near the end of the run, or for widths over 56 bits.
    fn slow(&self, byte: usize, shift: u32) -> u64 {
        let mut word = 0u128;
        for (i, b) in self.bits.iter().skip(byte).take(9).enumerate() {
            word |= u128::from(*b) << (8 * i);
        }
        ((word >> shift) as u64) & mask(self.width)
    }
}

fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(numbers: &[i64]) -> Vec<i64> {
        let mut out = Vec::new();
        Plan::write_run(numbers, &mut out);
        let mut at = 0;
        let run = Run::read(&out, &mut at, numbers.len()).expect("a run reads back");
        assert_eq!(at, out.len(), "the run's length is what was written");
        (0..numbers.len()).map(|i| run.get(i)).collect()
    }

    #[test]
    fn even_spacing_takes_a_few_bits() {
        let minutes: Vec<i64> = (0..60)
            .map(|m| 1_767_225_600_000_000 + m * 60_000_000)
            .collect();
        let plan = Plan::of(&minutes);
        assert_eq!(plan.width, 6);
        assert_eq!(plan.step, 60_000_000);
        assert_eq!(round_trip(&minutes), minutes);
        assert_eq!(Plan::of(&[8; 240]).size(240), 3, "equal numbers: a header");
    }

    /// The plan as first written: base, then the divisor of the offsets
    /// from it by Euclid's algorithm.
    fn plan_slowly(numbers: &[i64]) -> Plan {
        fn euclid(mut a: u64, mut b: u64) -> u64 {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        let base = numbers.iter().copied().min().unwrap_or(0);
        let (mut step, mut top) = (0u64, 0u64);
        for &n in numbers {
            let offset = n.wrapping_sub(base) as u64;
            step = euclid(step, offset);
            top = top.max(offset);
        }
        let step = step.max(1);
        let width = (64 - (top / step).leading_zeros()) as u8;
        Plan {
            base,
            step,
            width,
            slope: 0,
        }
    }

    #[test]
    fn a_progression_takes_a_header() {
        let minutes: Vec<i64> = (0..60)
            .map(|m| 1_767_225_600_000_000 + m * 60_000_000)
            .collect();
        let plan = Plan::of_row(&minutes);
        assert_eq!((plan.width, plan.slope), (0, 60_000_000));
        assert_eq!(plan.size(60), 8 + 1 + 1 + 4);
        assert_eq!(round_trip(&minutes), minutes);
        // A progression a few numbers stray from still fits in few bits.
        let mut bent = minutes.clone();
        bent[7] += 3;
        bent[30] -= 2;
        let plan = Plan::of_row(&bent);
        assert!(plan.slope != 0 && plan.width <= 3, "{plan:?}");
        assert_eq!(round_trip(&bent), bent);
        // Numbers with no trend stay plain.
        assert_eq!(Plan::of_row(&[5, 1, 9, 2, 8]).slope, 0);
    }

    #[test]
    fn varint_lengths() {
        for n in [0, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            assert_eq!(varint_len(n), out.len(), "{n}");
        }
    }

    #[test]
    fn extremes_survive() {
        let numbers = [i64::MIN, i64::MAX, 0, -1, 1, i64::MIN + 1];
        assert_eq!(round_trip(&numbers), numbers);
        assert_eq!(Plan::of(&numbers).width, 64);
    }

    proptest! {
        #[test]
        fn runs_round_trip(numbers in prop::collection::vec(any::<i64>(), 0..80),
                           spread in 0u32..64) {
            let numbers: Vec<i64> = numbers.iter().map(|n| n >> spread).collect();
            prop_assert_eq!(round_trip(&numbers), numbers);
        }

        #[test]
        fn progressions_round_trip(start in any::<i64>(), slope in any::<i64>(),
                                   noise in prop::collection::vec(-4i64..4, 0..80)) {
            let numbers: Vec<i64> = noise
                .iter()
                .enumerate()
                .map(|(i, e)| start.wrapping_add(slope.wrapping_mul(i as i64)).wrapping_add(*e))
                .collect();
            prop_assert_eq!(round_trip(&numbers), numbers);
        }

        #[test]
        fn plans_are_those_of_two_passes(numbers in prop::collection::vec(any::<i64>(), 0..40),
                                         spread in 0u32..64, scale in 1i64..1000) {
            let numbers: Vec<i64> = numbers.iter().map(|n| (n >> spread).wrapping_mul(scale)).collect();
            prop_assert_eq!(Plan::of(&numbers), plan_slowly(&numbers));
        }

        #[test]
        fn a_run_takes_no_less_than_its_first_numbers_need(
            numbers in prop::collection::vec(any::<i64>(), 1..40),
            spread in 0u32..64,
            scale in 1i64..1000,
        ) {
            let numbers: Vec<i64> = numbers.iter().map(|n| (n >> spread).wrapping_mul(scale)).collect();
            let n = numbers.len();
            let whole = Plan::of(&numbers).size(n);
            let mut planning = Planning::default();
            let mut least = planning.least_size(n);
            for &number in &numbers {
                planning.push(number);
                let now = planning.least_size(n);
                prop_assert!(least <= now && now <= whole, "{least} {now} {whole}");
                least = now;
            }
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40), n in 0usize..100) {
            let mut at = 0;
            if let Some(run) = Run::read(&bytes, &mut at, n) {
                for i in 0..n {
                    let _ = run.get(i);
                }
            }
        }
    }
}
