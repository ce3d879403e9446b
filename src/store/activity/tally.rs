//! [`ReadTally`]: what one read counts as it goes, per range, handed to
//! its table's [`KeyBuckets`] now and then and at its end; the cost per
//! row is a check that the key is still in the range of the row before.
//! A read that meets one row (a point read) takes its table's lock once,
//! at its end, and looks for its range only there.

use super::buckets::{Bounds, KeyBuckets, Segment, ShortKey, minute_of};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Microseconds since the epoch, now (a test's clock may differ).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Rows a read counts before it hands them over, so that a long scan
/// shows in the minutes it runs in (and counts as a read per this many
/// rows).
const HAND_OVER_ROWS: u64 = 1 << 16;
/// Ranges a read meets before it hands them over.
const HAND_OVER_SEGMENTS: usize = 32;
/// Keys a read keeps of one range for its sample.
const SEGMENT_SAMPLES: u32 = 24;
/// Sampled keys a read holds without an allocation: those of a range it
/// reads 255 rows of (a short read pays no allocation for them).
const INLINE_SAMPLES: usize = 8;

/// A table's ranges, as its reads and writes share them.
pub struct TableActivity {
    buckets: Mutex<KeyBuckets>,
    /// The store's clock, held here so that a read need not hold its own.
    clock: Clock,
    /// The minute (start, in microseconds) the table's ended minutes were
    /// last kept in: a read beginning in a later one keeps them first,
    /// and one in the same minute takes no lock to begin.
    kept_in: AtomicI64,
}

impl std::fmt::Debug for TableActivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableActivity")
            .field("buckets", &self.buckets)
            .field("kept_in", &self.kept_in)
            .finish_non_exhaustive()
    }
}

impl TableActivity {
    /// A table's ranges `buckets`, timed by `clock`.
    pub fn new(buckets: KeyBuckets, clock: Clock) -> Self {
        TableActivity {
            buckets: Mutex::new(buckets),
            clock,
            kept_in: AtomicI64::new(i64::MIN),
        }
    }

    /// Its ranges, locked.
    pub fn lock(&self) -> MutexGuard<'_, KeyBuckets> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether its ended minutes were kept in the minute of `now` already.
    pub fn kept_by(&self, now: i64) -> bool {
        self.kept_in.load(Ordering::Relaxed) >= minute_of(now)
    }

    /// Notes that its ended minutes were kept at `now`.
    pub fn kept_at(&self, now: i64) {
        self.kept_in.fetch_max(minute_of(now), Ordering::Relaxed);
    }
}

/// One read's counts per range, handed over when it is dropped.
pub struct ReadTally {
    table: Arc<TableActivity>,
    /// The table's ranges as the read last took them: none until it
    /// meets a second row (its first row's range is found when it is
    /// handed over).
    bounds: Option<Arc<Bounds>>,
    /// When the read (or the part of it not yet handed over) began.
    began: i64,
    /// Where the read starts: a read that meets no row counts there.
    start: ShortKey,
    /// Whether the read goes in descending key order.
    reverse: bool,
    /// The range the read is in (most reads meet one: no allocation).
    current: Option<Segment>,
    /// The edge of the current range that the read moves towards (see
    /// [`Bounds::edge`]), copied out of the ranges when the range is
    /// found, so that a row's check reads only the tally.
    edge: Option<ShortKey>,
    /// The ranges it left.
    segments: Vec<Segment>,
    /// The keys sampled in those ranges and the current one, in order
    /// (each range says how many are its).
    samples: SmallVec<[ShortKey; INLINE_SAMPLES]>,
    rows: u64,
    /// Whether part of the read was handed over already.
    handed_over: bool,
}

impl ReadTally {
    /// A tally of a read that began at `began` (by the table's clock) at
    /// key `start` of `table`, `reverse` when it goes in descending key
    /// order.
    pub fn new(table: Arc<TableActivity>, began: i64, start: &[u8], reverse: bool) -> Self {
        ReadTally {
            start: ShortKey::new(start),
            table,
            bounds: None,
            began,
            reverse,
            current: None,
            edge: None,
            segments: Vec::new(),
            samples: SmallVec::new(),
            rows: 0,
            handed_over: false,
        }
    }

    /// Counts a row read: its key, the pairs scanned for it and their
    /// bytes.
    #[inline]
    pub fn row(&mut self, key: &[u8], cells: u64, bytes: u64) {
        self.rows_at(key, 1, cells, bytes);
    }

    /// Counts `rows` rows read at once (a run of a column-wise block),
    /// in the range of `key` (one of theirs, or near them: see
    /// `TallRow::key_in_run`).
    pub fn rows_at(&mut self, key: &[u8], rows: u64, cells: u64, bytes: u64) {
        if self.current.is_some() && self.bounds.is_none() {
            self.take_bounds();
        }
        if !(self.current.is_some() && self.bounds.is_some() && self.still_in(key)) {
            self.open(key);
        }
        self.add(key, rows, cells, bytes);
    }

    /// Whether `key`, met after the current range's keys, is still in
    /// it (when the range was found in the ranges).
    #[inline]
    fn still_in(&self, key: &[u8]) -> bool {
        match (&self.edge, self.reverse) {
            (Some(end), false) => key < &end[..],
            (None, false) => true,
            (Some(start), true) => &start[..] <= key,
            (None, true) => false,
        }
    }

    /// Adds a run of `rows` rows at `key` to the current range's counts,
    /// `key` kept as a sample when one is due.
    fn add(&mut self, key: &[u8], rows: u64, cells: u64, bytes: u64) {
        let Some(s) = &mut self.current else {
            return;
        };
        if sample_due(s) && s.samples < SEGMENT_SAMPLES {
            s.samples += 1;
            self.samples.push(ShortKey::new(key));
        }
        s.counters.rows_read += rows;
        s.counters.cells_scanned += cells;
        s.counters.bytes_read = s.counters.bytes_read.saturating_add(bytes);
        self.rows += rows;
        if self.rows >= HAND_OVER_ROWS {
            self.hand_over(true);
        }
    }

    /// [`ReadTally::rows_at`] of a run whose key is at hand escaped
    /// (`codec::escape`): a read going forwards whose range still holds
    /// it counts it without unescaping it (an escaped key orders at or
    /// after its own key, so one before the range's end says its key is
    /// too); otherwise the key is unescaped into `scratch` and placed
    /// exactly.
    pub fn escaped_rows_at(
        &mut self,
        escaped: &[u8],
        rows: u64,
        cells: u64,
        bytes: u64,
        scratch: &mut Vec<u8>,
    ) -> crate::error::Result<()> {
        if let Some(s) = &self.current
            && self.bounds.is_some()
            && !self.reverse
            && self.still_in(escaped)
            // (A run whose key is kept as a sample takes the exact way.)
            && !sample_due(s)
        {
            self.add(escaped, rows, cells, bytes);
            return Ok(());
        }
        let key = match crate::codec::plain_body(escaped) {
            Some(plain) => plain,
            None => {
                scratch.clear();
                crate::codec::unescape_into(escaped, scratch)?;
                scratch
            }
        };
        self.rows_at(key, rows, cells, bytes);
        Ok(())
    }

    /// Takes the table's ranges as they are now, at a read's second row,
    /// and finds the range of its first.
    #[cold]
    fn take_bounds(&mut self) {
        let bounds = Arc::clone(self.table.lock().bounds());
        if let Some(s) = &mut self.current {
            s.bucket = bounds.bucket_of(&s.first);
            self.edge = bounds.edge(s.bucket, self.reverse);
        }
        self.bounds = Some(bounds);
    }

    /// Leaves the current range for the one holding `key`.
    fn open(&mut self, key: &[u8]) {
        let left_bucket = self.current.as_ref().map_or(usize::MAX, |s| s.bucket);
        if let Some(left) = self.current.take() {
            if self.segments.capacity() == 0 {
                // A read that leaves one range often leaves many: room
                // for all it keeps at once, not grown a step at a time.
                self.segments.reserve_exact(HAND_OVER_SEGMENTS);
            }
            self.segments.push(left);
        }
        if self.segments.len() >= HAND_OVER_SEGMENTS {
            self.hand_over(true);
        }
        // Without the ranges, found when handed over; a read in key
        // order most often moves on to the next range.
        let bucket = self.bounds.as_ref().map_or(usize::MAX, |b| {
            let next = if self.reverse {
                left_bucket.wrapping_sub(1)
            } else {
                left_bucket.wrapping_add(1)
            };
            let bucket = if b.contains(next, key) {
                next
            } else {
                b.bucket_of(key)
            };
            self.edge = b.edge(bucket, self.reverse);
            bucket
        });
        self.current = Some(Segment {
            bucket,
            first: ShortKey::new(key),
            ..Segment::default()
        });
    }

    /// Adds what was counted to the table's ranges, as one read;
    /// `going_on` when the read goes on (and needs the ranges as they are
    /// now).
    fn hand_over(&mut self, going_on: bool) {
        let now = (self.table.clock)();
        let micros = u64::try_from(now - self.began).unwrap_or(0);
        let mut buckets = self.table.lock();
        buckets.read(
            now,
            micros,
            // No generation: every range is looked for.
            self.bounds.as_ref().map_or(u64::MAX, |b| b.generation),
            with_samples(self.segments.iter().chain(&self.current), &self.samples),
            &self.start,
            self.reverse,
        );
        if going_on {
            self.bounds = Some(Arc::clone(buckets.bounds()));
        }
        drop(buckets);
        self.segments.clear();
        self.samples.clear();
        self.current = None;
        self.rows = 0;
        self.began = now;
        self.handed_over = true;
    }
}

/// `segments`, each beside its keys of `samples` (theirs, in order).
fn with_samples<'a>(
    segments: impl Iterator<Item = &'a Segment>,
    samples: &'a [ShortKey],
) -> impl Iterator<Item = (&'a Segment, &'a [ShortKey])> {
    let mut rest = samples;
    segments.map(move |s| {
        let (theirs, after) = rest.split_at((s.samples as usize).min(rest.len()));
        rest = after;
        (s, theirs)
    })
}

/// Whether the next run counted in `segment` gives its sample a key:
/// the keys of the 2nd, 4th, 8th ... row of the range (the 1st is its
/// `first`).
fn sample_due(segment: &Segment) -> bool {
    let before = segment.counters.rows_read;
    before > 0 && (before + 1).is_power_of_two()
}

impl Drop for ReadTally {
    fn drop(&mut self) {
        // A hand-over of nothing after a hand-over is no second read.
        if self.current.is_some() || !self.handed_over {
            self.hand_over(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ReadTally, TableActivity};
    use crate::codec;
    use crate::store::activity::buckets::KeyBuckets;
    use std::sync::Arc;

    /// A table of ranges starting at `starts`, at a fixed minute.
    fn table(starts: &[&[u8]]) -> Arc<TableActivity> {
        let mut buckets = KeyBuckets::new(100, 60_000_000);
        buckets.seed(&starts.iter().map(|s| s.to_vec()).collect::<Vec<_>>());
        Arc::new(TableActivity::new(buckets, Arc::new(|| 60_000_001)))
    }

    /// Runs counted by their escaped keys land in the ranges their own
    /// keys lie in, as counted by those keys: keys with zero bytes
    /// (whose escaped form orders after them) just below and at a range's
    /// start, keys leaving a range for the next and for one further on.
    #[test]
    fn runs_counted_by_escaped_keys_land_where_their_keys_do() {
        let starts: [&[u8]; 4] = [b"b\x00", b"b\x00\x05", b"c", b"e"];
        let runs: [(&[u8], u64); 9] = [
            (b"a", 3),
            (b"a\x00\xff", 5),
            (b"b", 7),
            (b"b\x00", 11),
            (b"b\x00\x04", 13),
            (b"b\x00\x05", 17),
            (b"b\x01", 19),
            (b"d\x00", 23),
            (b"f", 29),
        ];
        let (raw, escaped) = (table(&starts), table(&starts));
        {
            let mut by_raw = ReadTally::new(Arc::clone(&raw), 60_000_000, b"", false);
            let mut by_escaped = ReadTally::new(Arc::clone(&escaped), 60_000_000, b"", false);
            let mut scratch = Vec::new();
            for (key, rows) in runs {
                by_raw.rows_at(key, rows, rows, rows * 10);
                by_escaped
                    .escaped_rows_at(&codec::escape(key), rows, rows, rows * 10, &mut scratch)
                    .unwrap();
            }
        }
        let (raw, escaped) = (raw.lock().current(), escaped.lock().current());
        let rows = |records: &[crate::store::activity::record::ActivityRecord]| {
            records
                .iter()
                .map(|r| (r.start.clone(), r.counters.rows_read))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            rows(&raw),
            [
                (b"".to_vec(), 3 + 5 + 7),
                (b"b\x00".to_vec(), 11 + 13),
                (b"b\x00\x05".to_vec(), 17 + 19),
                (b"c".to_vec(), 23),
                (b"e".to_vec(), 29),
            ]
        );
        assert_eq!(rows(&escaped), rows(&raw));
        assert_eq!(escaped, raw);
    }

    /// A read through three ranges offers each range's sketch the keys
    /// it sampled there, and only those: the 2nd, 4th, 8th ... row of
    /// each range (more keys than a read holds without an allocation).
    #[test]
    fn sampled_keys_reach_their_own_ranges() {
        let table = table(&[b"c", b"e"]);
        let key = |prefix: char, i: u32| format!("{prefix}{i:03}").into_bytes();
        {
            let mut read = ReadTally::new(Arc::clone(&table), 60_000_000, b"", false);
            for (prefix, rows) in [('a', 100), ('c', 3), ('e', 50)] {
                for i in 0..rows {
                    read.row(&key(prefix, i), 1, 10);
                }
            }
        }
        let sampled = |prefix, rows: &[u32]| rows.iter().map(|&i| key(prefix, i - 1)).collect();
        let buckets = table.lock();
        let kept: Vec<Vec<Vec<u8>>> = (0..3).map(|i| buckets.sketch_keys(i)).collect();
        let want: Vec<Vec<Vec<u8>>> = vec![
            sampled('a', &[2, 4, 8, 16, 32, 64]),
            sampled('c', &[2]),
            sampled('e', &[2, 4, 8, 16, 32]),
        ];
        assert_eq!(kept, want);
    }
}
