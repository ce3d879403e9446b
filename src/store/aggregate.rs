//! Aggregate families: cells that merge new input into the stored value.
//!
//! Sum, Min and Max cells hold an 8-byte big-endian int64. HyperLogLog cells
//! hold a sketch (one version byte, one precision byte, then 2^precision
//! one-byte registers); input to a HyperLogLog cell is an item to count.

use super::definition::FamilyKind;
use crate::error::{Error, Result};

/// Precision of new HyperLogLog sketches: 2^12 registers, about 1.6 % error.
pub const HLL_PRECISION: u8 = 12;
const HLL_VERSION: u8 = 1;

/// Decodes an 8-byte big-endian int64, or says which column was wrong.
pub fn decode_i64(op: &'static str, column: &str, value: &[u8]) -> Result<i64> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| Error::NotAnInt64 {
        op,
        column: column.to_string(),
        len: value.len(),
    })?;
    Ok(i64::from_be_bytes(bytes))
}

/// Checks `input` for an aggregate family and returns the cell value it
/// becomes when merged into `existing` (`None` when the cell is new).
pub fn merge(
    kind: FamilyKind,
    column: &str,
    existing: Option<&[u8]>,
    input: &[u8],
) -> Result<Vec<u8>> {
    match kind {
        FamilyKind::Normal => Err(Error::InvalidMutation {
            reason: format!(
                "cannot add to column {column}: its family is not an aggregate family; use a set or an increment"
            ),
        }),
        FamilyKind::Sum | FamilyKind::Min | FamilyKind::Max => {
            let add = decode_i64("add to", column, input)?;
            let Some(existing) = existing else {
                return Ok(add.to_be_bytes().to_vec());
            };
            let old = decode_i64("add to", column, existing)?;
            let new = match kind {
                FamilyKind::Sum => old.checked_add(add).ok_or_else(|| Error::Overflow {
                    op: "sum",
                    column: column.to_string(),
                })?,
                FamilyKind::Min => old.min(add),
                _ => old.max(add),
            };
            Ok(new.to_be_bytes().to_vec())
        }
        FamilyKind::HyperLogLog => {
            let mut sketch = match existing {
                Some(bytes) => {
                    check_sketch(column, bytes)?;
                    bytes.to_vec()
                }
                None => new_sketch(),
            };
            hll_insert(&mut sketch, input);
            Ok(sketch)
        }
    }
}

/// Checks a value written directly (not merged) into a family of `kind`.
pub fn check_value(kind: FamilyKind, column: &str, value: &[u8]) -> Result<()> {
    match kind {
        FamilyKind::Normal => Ok(()),
        FamilyKind::Sum | FamilyKind::Min | FamilyKind::Max => {
            decode_i64("set", column, value).map(|_| ())
        }
        FamilyKind::HyperLogLog => check_sketch(column, value),
    }
}

fn new_sketch() -> Vec<u8> {
    let mut sketch = vec![0u8; 2 + (1 << HLL_PRECISION)];
    sketch[0] = HLL_VERSION;
    sketch[1] = HLL_PRECISION;
    sketch
}

fn check_sketch(column: &str, bytes: &[u8]) -> Result<()> {
    match bytes {
        [HLL_VERSION, p @ 4..=18, registers @ ..] if registers.len() == 1 << p => Ok(()),
        _ => Err(Error::InvalidMutation {
            reason: format!(
                "column {column} holds {} bytes that are not a cellar HyperLogLog sketch",
                bytes.len()
            ),
        }),
    }
}

fn hll_insert(sketch: &mut [u8], item: &[u8]) {
    let p = u32::from(sketch[1]);
    let hash = xxhash_rust::xxh3::xxh3_64(item);
    let index = (hash >> (64 - p)) as usize;
    // Rank: position of the first 1 bit in the remaining 64 - p bits.
    let rest = (hash << p) | (1 << (p - 1));
    let rank = rest.leading_zeros() as u8 + 1;
    if let Some(register) = sketch.get_mut(2 + index) {
        *register = (*register).max(rank);
    }
}

/// Estimated number of distinct items in a HyperLogLog cell value.
pub fn hll_estimate(sketch: &[u8]) -> Result<u64> {
    check_sketch("(sketch)", sketch)?;
    let registers = &sketch[2..];
    let m = registers.len() as f64;
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let sum: f64 = registers.iter().map(|&r| 2f64.powi(-i32::from(r))).sum();
    let raw = alpha * m * m / sum;
    let zeros = registers.iter().filter(|&&r| r == 0).count();
    let estimate = if raw <= 2.5 * m && zeros > 0 {
        m * (m / zeros as f64).ln()
    } else {
        raw
    };
    Ok(estimate.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i64) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }

    #[test]
    fn sum_min_max_merge() {
        let s = merge(FamilyKind::Sum, "a:x", Some(&int(5)), &int(-7)).unwrap();
        assert_eq!(s, int(-2));
        assert_eq!(
            merge(FamilyKind::Min, "a:x", Some(&int(5)), &int(9)).unwrap(),
            int(5)
        );
        assert_eq!(
            merge(FamilyKind::Max, "a:x", Some(&int(5)), &int(9)).unwrap(),
            int(9)
        );
        assert_eq!(
            merge(FamilyKind::Max, "a:x", None, &int(9)).unwrap(),
            int(9)
        );
    }

    #[test]
    fn bad_inputs_name_the_column() {
        let err = merge(FamilyKind::Sum, "agg:clicks", None, b"abc").unwrap_err();
        assert!(err.to_string().contains("agg:clicks") && err.to_string().contains("3 bytes"));
        let err = merge(FamilyKind::Sum, "agg:c", Some(&int(i64::MAX)), &int(1)).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
        assert!(merge(FamilyKind::HyperLogLog, "h:q", Some(b"junk"), b"x").is_err());
        assert!(merge(FamilyKind::Normal, "n:q", None, &int(1)).is_err());
    }

    #[test]
    fn hll_counts_distinct_items_within_a_few_percent() {
        let mut sketch: Option<Vec<u8>> = None;
        // Every item twice: duplicates must not count.
        for _ in 0..2 {
            for i in 0..20_000u32 {
                let next = merge(
                    FamilyKind::HyperLogLog,
                    "h:q",
                    sketch.as_deref(),
                    &i.to_be_bytes(),
                )
                .unwrap();
                sketch = Some(next);
            }
        }
        let estimate = hll_estimate(sketch.as_deref().unwrap()).unwrap() as f64;
        assert!(
            (estimate - 20_000.0).abs() / 20_000.0 < 0.05,
            "estimate {estimate}"
        );
        let small = merge(FamilyKind::HyperLogLog, "h:q", None, b"one").unwrap();
        assert_eq!(hll_estimate(&small).unwrap(), 1);
    }
}
