//! Cutting one large key range into pieces that partitions read in
//! parallel, and counting a small range's rows so that DataFusion does
//! not spread so few over threads.

use crate::store::{RowRange, Store};

/// Tables with fewer pairs than this and fewer bytes on disk than
/// [`SPLIT_MIN_BYTES`] (compressed blocks counted as uncompressed, see
/// `RangeSize::on_disk`) are read by one partition per range. Bytes count
/// too because a PACKED pair may hold thousands of cells: 256 KiB of time
/// buckets hold about 100 K of them, of folded tall rows (some 3 to 9
/// bytes each) 30 K to 90 K, a millisecond's decoding.
const SPLIT_MIN_CELLS: u64 = 200_000;
const SPLIT_MIN_BYTES: u64 = 256 << 10;
/// A range of fewer rows than this is read by one partition: handing
/// rows between threads would cost more than reading them (one series'
/// hour or day).
const SPLIT_MIN_ROWS: usize = 256;
/// A range holding at most this many bytes (on disk, compressed blocks
/// counted as uncompressed, and in memory) is
/// read by one partition, and runs as a light query: some 30 000 to
/// 90 000 folded tall rows, a millisecond's reading at most, less than
/// handing its rows between threads would cost.
const SPLIT_MIN_RANGE_BYTES: u64 = 256 << 10;

/// Cuts a single range of a large table into up to `n` ranges of about
/// equal size, so that several partitions read it in parallel: where the
/// store's own size information puts equal shares of the range's bytes
/// (`Backend::range_size`), else at equal steps of the key space between
/// its first and last row. A range the store's size information puts at
/// most [`SPLIT_MIN_RANGE_BYTES`] is read whole and not looked at; a
/// larger one has the keys of its first [`SPLIT_MIN_ROWS`] rows and of
/// its last probed (`FjallStore::probe_rows`). `None` when there is
/// nothing worth splitting.
pub(crate) fn split_ranges(
    store: &Store,
    table: &str,
    families: &[String],
    ranges: Option<&Vec<RowRange>>,
    n: usize,
) -> Split {
    let mut rows = None;
    let pieces = cut_range(store, table, families, ranges, n, &mut rows);
    Split { pieces, rows }
}

/// How a scan reads its one range: in pieces, or whole.
pub(crate) struct Split {
    /// The pieces, when it is worth cutting.
    pub pieces: Option<Vec<RowRange>>,
    /// Rows the range held when planned, when it is small: counted
    /// (fewer than [`SPLIT_MIN_ROWS`]), or estimated from its bytes when
    /// the store says it holds at most [`SPLIT_MIN_RANGE_BYTES`].
    pub rows: Option<usize>,
}

fn cut_range(
    store: &Store,
    table: &str,
    families: &[String],
    ranges: Option<&Vec<RowRange>>,
    n: usize,
    counted: &mut Option<usize>,
) -> Option<Vec<RowRange>> {
    use std::ops::Bound;
    let range = match ranges {
        None => RowRange::all(),
        Some(r) if r.len() == 1 => r[0].clone(),
        Some(_) => return None,
    };
    let single_key =
        matches!((&range.start, &range.end), (Bound::Included(a), Bound::Included(b)) if a == b);
    if single_key {
        return None;
    }
    // With one partition wanted nothing is cut, but a range of few rows
    // is counted all the same: it makes the query light (`is_bounded`).
    let cut = n >= 2;
    let family = families.first()?;
    // What the store knows of the range's size, from its index alone: a
    // range of a few blocks is read whole, by one partition, without a
    // look at its rows (a probe would read them twice). Rows as dense
    // rows take bytes (a folded tall row of a few measures, some 3 to 9
    // bytes): an estimate that errs high but for columns of a pattern (a
    // counter's take under a byte, and a range of 256 KiB of them is more
    // rows, still read at once).
    let size = store
        .range_size(table, Some(families), &range, n)
        .ok()
        .flatten();
    if let Some(size) = size.as_ref().filter(|s| s.at_most(SPLIT_MIN_RANGE_BYTES)) {
        let bytes = size.on_disk.saturating_add(size.in_memory);
        *counted = Some(usize::try_from(bytes / 3).unwrap_or(usize::MAX));
        return None;
    }
    let Some(probe) = store
        .probe_rows(table, family, &range, SPLIT_MIN_ROWS)
        .ok()?
    else {
        // A backend that cannot look at a range's rows cheaply splits it
        // where its sample row keys fall.
        let pieces = cut
            .then(|| split_at_samples(store, table, range.clone(), n))
            .flatten();
        if pieces.is_none() {
            *counted = count_few_rows(store, table, families, range);
        }
        return pieces;
    };
    // The table's bytes: on disk, or the range's as the store's index
    // counts them (compressed blocks as uncompressed), whichever is more.
    let bytes = store
        .table_disk_space(table)
        .ok()?
        .max(size.as_ref().map_or(0, |s| s.on_disk));
    let small = store.approximate_cells(table).ok()? < SPLIT_MIN_CELLS && bytes < SPLIT_MIN_BYTES;
    // The first rows of the range: a range that ends within them is read
    // by one partition, and says so (its row count keeps DataFusion from
    // spreading a few rows over threads, which costs more than reading
    // them). A small table is read by one partition in any case, but
    // counted all the same.
    let (Some(first), Some(last)) = (probe.first, probe.last) else {
        *counted = Some(0);
        return None;
    };
    if probe.rows < SPLIT_MIN_ROWS {
        *counted = Some(probe.rows);
        return None;
    }
    if small || !cut {
        return None;
    }
    // Cut where the bytes on disk lie, unless much of the range may
    // still be in memory (just written or folded, not yet flushed), where
    // the disk's share says little of the rest; then evenly over the key
    // space between its ends.
    let points = match size {
        Some(size) if !size.points.is_empty() && size.in_memory <= size.on_disk / 4 => size.points,
        _ => interpolate(&first, &last, n),
    };
    if points.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut start = range.start.clone();
    for p in points {
        out.push(RowRange::between(start, Bound::Excluded(p.clone())));
        start = Bound::Included(p);
    }
    out.push(RowRange::between(start, range.end.clone()));
    Some(out)
}

/// The rows of `range`, when fewer than [`SPLIT_MIN_ROWS`]: a backend
/// without [`FjallStore::probe_rows`](crate::store::FjallStore::probe_rows)
/// reads up to that many rows' newest cell of the first family. What the
/// embedded store's probe tells a plan that reads one partition anyway.
fn count_few_rows(
    store: &Store,
    table: &str,
    families: &[String],
    range: RowRange,
) -> Option<usize> {
    use crate::store::{ReadFilter, ReadRequest, RowSet};
    let family = families.first()?;
    let request = ReadRequest::rows(RowSet::range(range))
        .filter(
            ReadFilter::all()
                .families([family.as_str()])
                .cells_per_column(1),
        )
        .limit(SPLIT_MIN_ROWS);
    let mut rows = store.read_rows(table, request).ok()?;
    let mut count = 0;
    while rows.next_view().ok()?.is_some() {
        count += 1;
    }
    (count < SPLIT_MIN_ROWS).then_some(count)
}

/// Cuts `range` at up to `n - 1` of the keys the backend samples its table
/// at (Bigtable's `SampleRowKeys`: the ends of pieces of about equal
/// size, each with the bytes before it), evenly chosen among those inside
/// the range; `None` when none is, or when the table holds fewer than
/// [`SPLIT_MIN_BYTES`] (small tables are read by one partition, in key
/// order, as on the embedded store).
fn split_at_samples(
    store: &Store,
    table: &str,
    range: RowRange,
    n: usize,
) -> Option<Vec<RowRange>> {
    use std::ops::Bound;
    let samples = store.sample_row_keys(table).ok()?;
    if samples.last().map_or(0, |(_, bytes)| *bytes) < SPLIT_MIN_BYTES {
        return None;
    }
    let inside: Vec<Vec<u8>> = samples
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| range.cuts_at(key))
        .collect();
    if inside.is_empty() {
        return None;
    }
    let mut points: Vec<Vec<u8>> = (1..n)
        .map(|i| inside[(i * inside.len() / n).min(inside.len() - 1)].clone())
        .collect();
    points.dedup();
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut start = range.start.clone();
    for p in points {
        out.push(RowRange::between(start, Bound::Excluded(p.clone())));
        start = Bound::Included(p);
    }
    out.push(RowRange::between(start, range.end));
    Some(out)
}

/// `n - 1` keys strictly between `a` and `b` (a < b), evenly spaced over
/// the eight bytes after their common prefix (fewer where they lie too
/// close). Keys whose bytes there are ASCII are spaced as numbers of
/// eight base-128 digits, so that every point is ASCII text too: spaced
/// over whole bytes, a point between `…1083#…` and `…1084#…` has a byte
/// of 0x80 or more after the `3`, which is not text, and cut back to
/// text (`…1083`) it fell before `a` and the range was not split.
fn interpolate(a: &[u8], b: &[u8], n: usize) -> Vec<Vec<u8>> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = |k: &[u8]| {
        let mut buf = [0u8; 8];
        for (i, byte) in k.iter().skip(common).take(8).enumerate() {
            buf[i] = *byte;
        }
        buf
    };
    let (ta, tb) = (tail(a), tail(b));
    let ascii = ta.iter().chain(&tb).all(|b| b.is_ascii());
    let radix: u64 = if ascii { 128 } else { 256 };
    let number = |t: &[u8; 8]| t.iter().fold(0u64, |x, &d| x * radix + u64::from(d));
    let digits = |mut x: u64| {
        let mut out = [0u8; 8];
        for d in out.iter_mut().rev() {
            *d = (x % radix) as u8;
            x /= radix;
        }
        out
    };
    let (lo, hi) = (number(&ta), number(&tb));
    let parts = n as u64;
    if hi <= lo || hi - lo < parts * 2 {
        return Vec::new();
    }
    let step = (hi - lo) / parts;
    let mut out: Vec<Vec<u8>> = Vec::new();
    for i in 1..parts {
        let mut key = a[..common].to_vec();
        key.extend(digits(lo + step * i));
        while key.len() > common + 1 && key.last() == Some(&0) {
            key.pop();
        }
        // Text split points, so that the plan can name them (`key_ranges`).
        if let Err(e) = std::str::from_utf8(&key) {
            key.truncate(e.valid_up_to());
        }
        if key.as_slice() > a && key.as_slice() <= b && out.last().is_none_or(|p| *p < key) {
            out.push(key);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::interpolate;

    #[test]
    fn split_points_lie_strictly_between() {
        let (a, b): (&[u8], &[u8]) = (b"h00#00000000", b"h99#00009999");
        let points = interpolate(a, b, 4);
        assert_eq!(points.len(), 3);
        let mut last = a;
        for p in &points {
            assert!(p.as_slice() > last && p.as_slice() <= b, "{p:?}");
            last = p;
        }
        assert!(interpolate(b"a", b"a\x00", 4).is_empty());
        // Neighbouring text keys split into text between them.
        for (a, b) in [
            (
                &b"europe-west1#1083#2026-01-01-0000"[..],
                &b"europe-west1#1084#2026-01-03-1839"[..],
            ),
            (
                b"europe-west1#1083#2026-01-01-0000",
                b"europe-west1#1092#2026-01-03-1839",
            ),
            (b"a", b"b"),
        ] {
            let points = interpolate(a, b, 2);
            assert_eq!(points.len(), 1, "{a:?} {b:?}");
            let p = &points[0];
            assert!(
                p.as_slice() > a && p.as_slice() <= b && p.is_ascii(),
                "{p:?}"
            );
        }
        // Bytes that are not text still split, over whole bytes.
        let (a, b): (&[u8], &[u8]) = (b"\x10\xff", b"\x90\x00");
        let points = interpolate(a, b, 2);
        assert_eq!(points.len(), 1);
        assert!(
            points[0].as_slice() > a && points[0].as_slice() <= b,
            "{points:?}"
        );
        assert!(interpolate(b"b", b"a", 2).is_empty());
    }
}
