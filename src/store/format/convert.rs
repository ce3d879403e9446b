//! Re-encoding a row's pairs of a family in another format: what a change
//! of format (`ALTER ... SET FORMAT`) writes for each row it moves.

use super::{FamilyFormat, RowBuf, cells, packed, set_key};
use crate::codec;
use crate::error::Result;
use fjall::Slice;
use std::cmp::Reverse;

/// The pairs that hold, in format `to`, the cells of one row of a family
/// held by `pairs` (one row's pairs in format `from`, in key order). Every
/// cell is kept, garbage included: GC judges them the same either way.
pub(crate) fn reencode(
    from: FamilyFormat,
    to: FamilyFormat,
    family: &str,
    pairs: &[(Slice, Slice)],
    buf: &mut RowBuf,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    buf.clear();
    let Some((first, _)) = pairs.first() else {
        return Ok(Vec::new());
    };
    let escaped = from.row_of(first)?.to_vec();
    buf.pairs.extend(pairs.iter().cloned());
    from.decode_all(buf)?;
    set_key(buf, &escaped)?;
    let view = buf.view();
    let row = view.key();
    Ok(match to {
        FamilyFormat::Cells => view
            .cells()
            .map(|c| (cells::key(row, c.qualifier, c.timestamp), c.value.to_vec()))
            .collect(),
        FamilyFormat::Packed => {
            let mut all = packed::Cells::new();
            for c in view.cells() {
                all.insert(
                    (c.qualifier.to_vec(), Reverse(c.timestamp)),
                    c.value.to_vec(),
                );
            }
            packed::encode(row, family, &all)?
                .map(|value| (codec::escape(row), value))
                .into_iter()
                .collect()
        }
    })
}
