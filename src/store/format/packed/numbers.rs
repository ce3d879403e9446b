//! A packed row's wanted columns decoded straight into runs of numbers
//! (`format/numbers.rs`): timestamps from the gap run, values from their
//! segments as words, with no cell in between.

use std::ops::Range;

use super::runs::Run;
use super::{Header, VERSION, corrupt, varint};
use crate::error::Result;
use crate::store::format::NumberRow;

/// Which cells of a packed row a numbers read selects: of the columns
/// whose qualifier `selects` takes, the cells `keep` chooses of each one's
/// timestamps (newest first); `keeps_all` when it chooses every cell.
pub(crate) struct Selection<'a> {
    pub selects: &'a dyn Fn(&[u8]) -> bool,
    pub keep: &'a dyn Fn(&[i64]) -> Range<usize>,
    pub keeps_all: bool,
}

/// Decodes the columns `wanted` of a packed pair into `out`: each as
/// (qualifier, the column's place in `out`), sorted by qualifier, and
/// among those `selection` selects. Returns whether the pair holds any
/// cell the selection selects, wanted or not; `None`, with `out`
/// untouched, when the value is of an older version (the caller decodes
/// its cells instead).
pub(crate) fn decode_numbers(
    key: &[u8],
    value: &[u8],
    wanted: &[(Vec<u8>, usize)],
    selection: &Selection<'_>,
    out: &mut NumberRow,
) -> Result<Option<bool>> {
    if value.len() < 9 || value[0] != VERSION {
        return if value.first() == Some(&1) && value.len() >= 9 {
            Ok(None)
        } else {
            Err(corrupt("the value is not a packed row", key))
        };
    }
    decode(value, wanted, selection, out)
        .map(Some)
        .ok_or_else(|| corrupt("the value is not a packed row", key))
}

/// Pushes a column's `count` timestamps into `out`: the newest `first`,
/// then each the one before minus the next of `gaps` (from `*gap` on).
fn push_times(
    out: &mut NumberRow,
    first: i64,
    gaps: &Run<'_>,
    gap: &mut usize,
    count: usize,
) -> Option<()> {
    let mut timestamp = first;
    if timestamp < 0 {
        return None;
    }
    out.push_time(timestamp);
    for _ in 1..count {
        let step = gaps.get(*gap);
        *gap += 1;
        timestamp = timestamp
            .checked_sub(step)
            .filter(|t| step > 0 && *t >= 0)?;
        out.push_time(timestamp);
    }
    Some(())
}

fn decode(
    value: &[u8],
    wanted: &[(Vec<u8>, usize)],
    selection: &Selection<'_>,
    out: &mut NumberRow,
) -> Option<bool> {
    let Header {
        columns,
        n,
        qualifiers: mut next_qualifier,
        counts,
        firsts,
        gaps,
        lengths,
        mut segments,
    } = Header::read(value)?;
    let (mut cell, mut gap) = (0usize, 0usize);
    let mut selected = false;
    for column in 0..columns {
        let len = usize::try_from(varint(value, &mut next_qualifier)?).ok()?;
        let qualifier = value.get(next_qualifier..next_qualifier.checked_add(len)?)?;
        next_qualifier += len;
        let count = usize::try_from(counts.get(column)).ok()?;
        if count == 0 || count > n - cell {
            return None;
        }
        let place = wanted
            .binary_search_by(|(q, _)| q.as_slice().cmp(qualifier))
            .ok()
            .map(|i| wanted[i].1);
        let Some(place) = place else {
            // Whether the row has a selected cell: in a column not
            // wanted, only its timestamps tell.
            if !selected && (selection.selects)(qualifier) {
                if selection.keeps_all {
                    selected = true;
                    gap += count - 1;
                } else {
                    let start = out.open();
                    push_times(out, firsts.get(column), &gaps, &mut gap, count)?;
                    selected = !(selection.keep)(out.times_since(start)).is_empty();
                    out.discard_times(start);
                }
            } else {
                gap += count - 1;
            }
            segments.skip_many(&lengths, cell, count)?;
            cell += count;
            continue;
        };
        let start = out.open();
        push_times(out, firsts.get(column), &gaps, &mut gap, count)?;
        let kept = (selection.keep)(out.times_since(start));
        selected |= !kept.is_empty();
        out.keep_times(start, kept.clone());
        segments.skip_many(&lengths, cell, kept.start)?;
        let read =
            out.words(|words| segments.words(&lengths, cell + kept.start, kept.len(), words))?;
        let rest = match read {
            Ok(()) => kept.end,
            Err((s, e)) => {
                out.set_misfit(place, value.get(s..e)?);
                // Where the value after the misfit lies.
                let at = cell + kept.start + out.cells() - start + 1;
                at - cell
            }
        };
        segments.skip_many(&lengths, cell + rest, count - rest)?;
        cell += count;
        out.close(place, start);
    }
    (cell == n && segments.end()? == value.len()).then_some(selected)
}

#[cfg(test)]
mod tests {
    use super::super::{Cells, encode};
    use super::*;
    use crate::store::format::numbers::window;
    use crate::store::format::{QualifierFilter, RowBuf, select};
    use crate::store::{GcPolicy, ReadFilter, TimeRange};
    use proptest::prelude::*;
    use std::cmp::Reverse;

    proptest! {
        /// The runs hold exactly the cells a read selects, their values
        /// read as words, whatever GC, time range, cells per column and
        /// mix of 8-byte and other values.
        #[test]
        fn numbers_are_the_selected_cells(
            columns in prop::collection::vec(
                (0u8..6, 1usize..40, any::<i64>(), 0u8..4, 1i64..1000), 1..5),
            wanted in prop::collection::vec(0u8..6, 0..4),
            read in prop::option::of(prop::collection::btree_set(0u8..6, 0..4)),
            versions in prop::option::of(1u32..30),
            age in prop::option::of(0i64..40_000),
            range in prop::option::of((0i64..40_000, 0i64..40_000)),
            per_column in prop::option::of(0usize..10),
        ) {
            let mut cells = Cells::new();
            for (q, count, seed, kind, spacing) in columns {
                for i in 0..count {
                    let x = seed.wrapping_add(i as i64 * 7919) % 100_000;
                    let value = match kind {
                        0 => (x as f64 / 100.0).to_be_bytes().to_vec(),
                        1 => x.to_be_bytes().to_vec(),
                        2 if i == count / 2 => b"odd".to_vec(),
                        _ => seed.wrapping_mul(i as i64).to_be_bytes().to_vec(),
                    };
                    cells.insert((vec![b'q', q], Reverse(i as i64 * spacing)), value);
                }
            }
            let value = encode(b"r", "f", &cells).unwrap().unwrap();
            let gc = match (versions, age) {
                (Some(v), Some(a)) => GcPolicy::Union(vec![GcPolicy::MaxVersions(v), GcPolicy::MaxAge(a)]),
                (Some(v), None) => GcPolicy::MaxVersions(v),
                (None, Some(a)) => GcPolicy::MaxAge(a),
                (None, None) => GcPolicy::KeepAll,
            };
            let now = 50_000;
            let mut filter = ReadFilter::all();
            if let Some((a, b)) = range {
                filter = filter.time_range(TimeRange::new(a.min(b), a.max(b)));
            }
            if let Some(n) = per_column {
                filter = filter.cells_per_column(n);
            }
            if let Some(read) = &read {
                filter = filter.qualifiers(QualifierFilter::Set(
                    read.iter().map(|q| vec![b'q', *q]).collect(),
                ));
            }
            // Wanted columns are among those read (as a numbers read asks).
            let mut names: Vec<Vec<u8>> = wanted
                .iter()
                .map(|q| vec![b'q', *q])
                .filter(|q| filter.qualifiers.matches(q))
                .collect();
            names.sort();
            names.dedup();
            let sorted: Vec<(Vec<u8>, usize)> =
                names.iter().cloned().enumerate().map(|(i, q)| (q, i)).collect();
            let mut got = NumberRow::default();
            got.reset(names.len());
            let keep = |times: &[i64]| window(&gc, &filter, now, times);
            let selects = |q: &[u8]| filter.qualifiers.matches(q);
            let keeps_all = gc == GcPolicy::KeepAll
                && filter.time_range == TimeRange::ALL
                && filter.cells_per_column != Some(0);
            let selection = Selection { selects: &selects, keep: &keep, keeps_all };
            let key = crate::codec::escape(b"r");
            let selected = decode_numbers(&key, &value, &sorted, &selection, &mut got)
                .unwrap()
                .expect("a version 2 value");

            let mut buf = RowBuf::default();
            buf.pairs.push((key.clone().into(), value.clone().into()));
            crate::store::format::packed::decode(0, &mut buf, 0, None, &QualifierFilter::All, None).unwrap();
            select(&gc, &filter, now, &mut buf, 0);
            let wanted: Vec<(usize, Vec<u8>)> = names.iter().map(|q| (0, q.clone())).collect();
            let mut want = NumberRow::default();
            want.reset(names.len());
            want.take_cells(&buf.view(), &wanted);
            for c in 0..names.len() {
                prop_assert_eq!(got.column(c), want.column(c), "column {}", c);
            }
            prop_assert_eq!(got.misfit(), want.misfit());
            prop_assert_eq!(selected, !buf.cells.is_empty(), "whether any cell is selected");
        }
    }
}
