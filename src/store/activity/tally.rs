//! [`ReadTally`]: what one read counts as it goes, per range, handed to
//! its table's [`KeyBuckets`] now and then and at its end; the cost per
//! row is a check that the key is still in the range of the row before.

use super::buckets::{Bounds, KeyBuckets, SAMPLE_BYTES, Segment, ShortKey};
use std::sync::{Arc, Mutex, PoisonError};

/// Microseconds since the epoch, now (a test's clock may differ).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Rows a read counts before it hands them over, so that a long scan
/// shows in the minutes it runs in (and counts as a read per this many
/// rows).
const HAND_OVER_ROWS: u64 = 1 << 16;
/// Ranges a read meets before it hands them over.
const HAND_OVER_SEGMENTS: usize = 256;
/// Keys a read keeps of one range for its sample.
const SEGMENT_SAMPLES: usize = 24;

/// One read's counts per range, handed over when it is dropped.
pub struct ReadTally {
    buckets: Arc<Mutex<KeyBuckets>>,
    bounds: Arc<Bounds>,
    clock: Clock,
    /// When the read (or the part of it not yet handed over) began.
    began: i64,
    /// Where the read starts: a read that meets no row counts there.
    start: ShortKey,
    /// Whether the read goes in descending key order.
    reverse: bool,
    /// The range the read is in (most reads meet one: no allocation).
    current: Option<Segment>,
    /// The ranges it left.
    segments: Vec<Segment>,
    rows: u64,
    /// Whether part of the read was handed over already.
    handed_over: bool,
}

impl ReadTally {
    /// A tally of a read that began at `began` (by `clock`) at key
    /// `start` of the table whose ranges are `buckets`, `reverse` when it
    /// goes in descending key order.
    pub fn new(
        buckets: Arc<Mutex<KeyBuckets>>,
        bounds: Arc<Bounds>,
        clock: Clock,
        began: i64,
        start: &[u8],
        reverse: bool,
    ) -> Self {
        ReadTally {
            start: ShortKey::new(start),
            buckets,
            bounds,
            clock,
            began,
            reverse,
            current: None,
            segments: Vec::new(),
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
    /// in the range of the first one's `key`.
    pub fn rows_at(&mut self, key: &[u8], rows: u64, cells: u64, bytes: u64) {
        let still = self
            .current
            .as_ref()
            .is_some_and(|s| self.bounds.still_in(s.bucket, key, self.reverse));
        if !still {
            self.open(key);
        }
        let Some(s) = &mut self.current else {
            return;
        };
        let before = s.counters.rows_read;
        s.counters.rows_read += rows;
        s.counters.cells_scanned += cells;
        s.counters.bytes_read = s.counters.bytes_read.saturating_add(bytes);
        // The keys of the 2nd, 4th, 8th ... row of the range (the 1st is
        // its `first`).
        if before > 0 && (before + 1).is_power_of_two() && s.samples.len() < SEGMENT_SAMPLES {
            s.samples.push(key[..key.len().min(SAMPLE_BYTES)].into());
        }
        self.rows += rows;
        if self.rows >= HAND_OVER_ROWS {
            self.hand_over(true);
        }
    }

    /// Leaves the current range for the one holding `key`.
    fn open(&mut self, key: &[u8]) {
        if let Some(left) = self.current.take() {
            self.segments.push(left);
        }
        if self.segments.len() >= HAND_OVER_SEGMENTS {
            self.hand_over(true);
        }
        self.current = Some(Segment {
            bucket: self.bounds.bucket_of(key),
            first: ShortKey::new(key),
            ..Segment::default()
        });
    }

    /// Adds what was counted to the table's ranges, as one read;
    /// `going_on` when the read goes on (and needs the ranges as they are
    /// now).
    fn hand_over(&mut self, going_on: bool) {
        let now = (self.clock)();
        let micros = u64::try_from(now - self.began).unwrap_or(0);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        buckets.read(
            now,
            micros,
            self.bounds.generation,
            self.segments.iter().chain(&self.current),
            &self.start,
            self.reverse,
        );
        if going_on {
            self.bounds = Arc::clone(buckets.bounds());
        }
        drop(buckets);
        self.segments.clear();
        self.current = None;
        self.rows = 0;
        self.began = now;
        self.handed_over = true;
    }
}

impl Drop for ReadTally {
    fn drop(&mut self) {
        // A hand-over of nothing after a hand-over is no second read.
        if self.current.is_some() || !self.handed_over {
            self.hand_over(false);
        }
    }
}
