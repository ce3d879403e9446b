//! One table's key activity: the key space cut into at most a fixed
//! number of ranges ([`Bounds`]), each range's counters for the current
//! minute, and the choice of where the ranges lie ([`KeyBuckets`]).
//!
//! The ranges follow the key space, as Key Visualizer's buckets follow a
//! table's data: each range estimates how many distinct keys it has seen
//! (a [`KeySketch`] of the keys written and some of those read), and when
//! a minute ends a range holding more than its share of the keys is cut
//! in two at the middle one of its sampled keys; when the ranges are as
//! many as allowed, the two neighbours with fewest keys become one. So a
//! range is about as wide as its keys make it, and its brightness on a
//! heatmap is the activity on those keys: a few keys taking many writes,
//! or new keys all at the end of the key space, stand out. The store's
//! own split points (by size) cut a table's ranges before it has been
//! seen much ([`KeyBuckets::seed`]).
//!
//! A range that holds far more than its share is cut within the minute
//! too (every [`CHECK_EVERY`] rows; at most [`CUTS_PER_MINUTE`] times a
//! minute once it has 64 ranges), so that a new table shows its shape in
//! its first minute: the
//! minute then has a record of the whole range for what came before the
//! cut and records of its parts for what came after. Every count is in
//! exactly one record.

use super::record::{ActivityRecord, Counters, MINUTE_MICROS};
use super::sketch::{KEY_BYTES, KeySketch, key_hash};
use std::sync::Arc;

/// A sampled key is kept to this many bytes, and no range start is
/// longer (a key cut to it lies in the range the whole key does).
pub(super) const SAMPLE_BYTES: usize = KEY_BYTES;
const _: () = assert!(SAMPLE_BYTES <= u8::MAX as usize);

/// A range is cut when it holds more than this many times an even share
/// of the keys among half the most ranges allowed.
const SHARE: u64 = 2;
/// Ranges with fewer keys than this (distinct, estimated) are not cut.
const MIN_SPLIT_KEYS: u64 = 16;
/// Cuts made at one minute's end, at most.
const SPLITS_PER_MINUTE: usize = 64;
/// Rows counted in a minute between two looks at whether a range must be
/// cut within the minute.
pub const CHECK_EVERY: u64 = 4096;
/// Times the ranges are cut within one minute, at most, once the table
/// has [`YOUNG_RANGES`] ranges.
pub const CUTS_PER_MINUTE: u32 = 3;
/// Below this many ranges a table is cut every [`CHECK_EVERY`] rows.
const YOUNG_RANGES: usize = 64;
/// Within a minute, a range is cut when it took this many times its
/// share.
const CUT_NOW_SHARES: u64 = 4;
/// A read offers the first key it meets in a range to the range's sketch
/// once in this many reads (its later sampled keys always): the distinct
/// keys of a table only read still reach the sketches, at an eighth of
/// the cost to a point read.
const READ_FIRST_KEYS: u64 = 8;

/// Where a table's ranges start, in key order; the first is the empty
/// key. A new `Bounds` (with a new generation) replaces it when ranges
/// are cut or joined, so a read may hold one without a lock.
#[derive(Debug)]
pub struct Bounds {
    starts: Vec<Box<[u8]>>,
    /// Each start's first sixteen bytes as a number ([`prefix`]): most of
    /// a search compares numbers, not byte strings (sixteen, as keys often
    /// share their first eight: `us-central1#...`).
    prefixes: Vec<u128>,
    /// Every [`STRIDE`]-th of `prefixes`: a search looks here first, in
    /// memory small enough to stay cached, then among `STRIDE` of them.
    top: Vec<u128>,
    /// Counts the changes of a table's ranges.
    pub generation: u64,
}

/// A key's first sixteen bytes, zero-padded, as a big-endian number: keys
/// whose numbers differ compare as their numbers do.
#[inline]
fn prefix(key: &[u8]) -> u128 {
    let mut bytes = [0; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

/// Prefixes of [`Bounds`] a search looks among after its first step.
const STRIDE: usize = 16;

impl Bounds {
    fn new(starts: Vec<Box<[u8]>>, generation: u64) -> Self {
        let prefixes: Vec<u128> = starts.iter().map(|s| prefix(s)).collect();
        Bounds {
            top: prefixes.iter().step_by(STRIDE).copied().collect(),
            prefixes,
            starts,
            generation,
        }
    }

    /// The range holding `key`.
    #[inline]
    pub fn bucket_of(&self, key: &[u8]) -> usize {
        // The starts below `key`'s number lie below it, those above it
        // above: only the starts of the same number are compared whole.
        let p = prefix(key);
        // The first start whose number is not below `p`: after the last
        // `top` one below it, at most `STRIDE` further.
        let lower = match self.top.partition_point(|s| *s < p) {
            0 => 0,
            t => {
                let from = (t - 1) * STRIDE + 1;
                let to = (t * STRIDE).min(self.prefixes.len());
                from + self.prefixes[from..to].partition_point(|s| *s < p)
            }
        };
        let same = self.prefixes[lower..].partition_point(|s| *s == p);
        let at_or_below = self.starts[lower..lower + same].partition_point(|s| &**s <= key);
        (lower + at_or_below).saturating_sub(1)
    }

    /// Whether range `i` holds `key`.
    #[inline]
    pub fn contains(&self, i: usize, key: &[u8]) -> bool {
        self.starts.get(i).is_some_and(|s| &**s <= key)
            && self.starts.get(i + 1).is_none_or(|next| key < &**next)
    }

    /// The edge of range `i` that a read in key order (descending when
    /// `reverse`) moves towards: its end going forwards (`None` for the
    /// table's end), its start going backwards.
    pub fn edge(&self, i: usize, reverse: bool) -> Option<ShortKey> {
        let at = if reverse { i } else { i.wrapping_add(1) };
        self.starts.get(at).map(|s| ShortKey::new(s))
    }

    /// How many ranges there are.
    pub fn count(&self) -> usize {
        self.starts.len()
    }

    /// Range `i` as (start, end); `None` for the end of the table.
    pub fn range(&self, i: usize) -> (&[u8], Option<&[u8]>) {
        (
            self.starts.get(i).map_or(&[][..], |s| &**s),
            self.starts.get(i + 1).map(|s| &**s),
        )
    }
}

/// A key cut to [`SAMPLE_BYTES`], held inline: a read's first key in a
/// range costs no allocation.
#[derive(Clone, Copy)]
pub struct ShortKey {
    len: u8,
    bytes: [u8; SAMPLE_BYTES],
}

impl ShortKey {
    /// `key`'s first [`SAMPLE_BYTES`] bytes.
    pub fn new(key: &[u8]) -> Self {
        let len = key.len().min(SAMPLE_BYTES);
        let mut bytes = [0; SAMPLE_BYTES];
        bytes[..len].copy_from_slice(&key[..len]);
        ShortKey {
            len: len as u8,
            bytes,
        }
    }
}

impl Default for ShortKey {
    fn default() -> Self {
        ShortKey::new(&[])
    }
}

impl std::ops::Deref for ShortKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for ShortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// What one read counted in one range, and how many keys of it it
/// sampled (after the first, of every power-of-two-th row), offered to
/// the range's sketch.
#[derive(Debug, Default)]
pub struct Segment {
    /// The range, in the [`Bounds`] generation the read held.
    pub bucket: usize,
    /// The first key the read met in it, cut to `SAMPLE_BYTES` (which
    /// places it in the same range: no range start is longer).
    pub first: ShortKey,
    /// What the read counted there (its `reads` is left at 0: a read is
    /// counted once per range when it is added).
    pub counters: Counters,
    /// How many keys met there after the first (of the 2nd, 4th, 8th ...
    /// row) the read sampled: the next this many of its sampled keys,
    /// kept in one buffer for all its ranges, in their order.
    pub samples: u32,
}

/// A table's ranges and their counters in the current minute.
#[derive(Debug)]
pub struct KeyBuckets {
    bounds: Arc<Bounds>,
    max: usize,
    /// The current minute's start (microseconds since the epoch).
    minute: i64,
    counts: Vec<RangeCount>,
    /// Per range, the distinct keys it has seen, estimated and sampled.
    sketches: Vec<KeySketch>,
    request: u64,
    /// Rows counted since the last look at cutting within the minute.
    since_check: u64,
    /// Whether a sketch changed since that look (if none did, it would
    /// find what it found then).
    grown: bool,
    /// Cuts within the current minute.
    cuts_now: u32,
    /// The minute the store's split points were last asked for.
    seeded: Option<i64>,
    /// Minutes ended whose records are not kept yet.
    finished: Vec<(i64, Vec<ActivityRecord>)>,
    /// The lowest and highest keys written since the store opened.
    written: Option<(Vec<u8>, Vec<u8>)>,
}

/// A range's counters in the current minute, beside the last request
/// counted in it (a request counts once per range): a read or write
/// counted in a range touches one place, not two.
#[derive(Debug, Clone, Copy, Default)]
struct RangeCount {
    counters: Counters,
    stamp: u64,
}

impl RangeCount {
    /// Whether `request` is counted here for the first time (then it is
    /// noted as counted).
    #[inline]
    fn first_of(&mut self, request: u64) -> bool {
        let first = self.stamp != request;
        self.stamp = request;
        first
    }
}

/// The start of the minute holding `micros`.
pub fn minute_of(micros: i64) -> i64 {
    micros
        .div_euclid(MINUTE_MICROS)
        .saturating_mul(MINUTE_MICROS)
}

impl KeyBuckets {
    /// One range over all keys, at most `max` ranges (at least 1), the
    /// current minute that of `now`.
    pub fn new(max: usize, now: i64) -> Self {
        KeyBuckets {
            bounds: Arc::new(Bounds::new(vec![Box::default()], 0)),
            max: max.max(1),
            minute: minute_of(now),
            counts: vec![RangeCount::default()],
            sketches: vec![KeySketch::default()],
            request: 0,
            since_check: 0,
            grown: false,
            cuts_now: 0,
            seeded: None,
            finished: Vec::new(),
            written: None,
        }
    }

    /// The ranges as they are now.
    pub fn bounds(&self) -> &Arc<Bounds> {
        &self.bounds
    }

    /// Ends the current minute if `now` is past it.
    fn at(&mut self, now: i64) {
        let minute = minute_of(now);
        if minute > self.minute {
            self.roll(minute);
        }
    }

    /// Counts one write request at `now` that took `micros` and wrote
    /// `rows` (each row's key and bytes).
    pub fn write<'a>(
        &mut self,
        now: i64,
        micros: u64,
        rows: impl IntoIterator<Item = (&'a [u8], u64)>,
    ) {
        self.at(now);
        self.request += 1;
        let bounds = Arc::clone(&self.bounds);
        let mut i = 0;
        let mut n = 0;
        let mut before: Option<&[u8]> = None;
        for (key, bytes) in rows {
            n += 1;
            // A key written again in the same request (a time bucket's
            // row, a reading a cell) is in the range it was, at no edge,
            // and already offered to its sketch.
            if before == Some(key) {
                let c = &mut self.counts[i].counters;
                c.rows_written += 1;
                c.bytes_written = c.bytes_written.saturating_add(bytes);
                continue;
            }
            before = Some(key);
            if !bounds.contains(i, key) {
                i = bounds.bucket_of(key);
            }
            let edge = self.beyond_written(key);
            let count = &mut self.counts[i];
            let first = count.first_of(self.request);
            let c = &mut count.counters;
            c.rows_written += 1;
            c.edge_rows += u64::from(edge);
            c.bytes_written = c.bytes_written.saturating_add(bytes);
            if first {
                c.writes += 1;
                c.write_micros = c.write_micros.saturating_add(micros);
            }
            self.grown |= self.sketches[i].offer(key_hash(key), key);
        }
        self.checked(n);
    }

    /// Whether `key` lies beyond every key written before (then it is
    /// the new lowest or highest).
    fn beyond_written(&mut self, key: &[u8]) -> bool {
        let Some((lowest, highest)) = &mut self.written else {
            self.written = Some((key.to_vec(), key.to_vec()));
            return true;
        };
        let edge = if key > &highest[..] {
            highest
        } else if key < &lowest[..] {
            lowest
        } else {
            return false;
        };
        edge.clear();
        edge.extend_from_slice(key);
        true
    }

    /// Counts what a read met (`segments`, in the ranges of `generation`,
    /// each with its sampled keys) at `now`, as one read request taking
    /// `micros` in every range it touched; a read that met no row counts
    /// where `start` falls.
    pub fn read<'a>(
        &mut self,
        now: i64,
        micros: u64,
        generation: u64,
        segments: impl IntoIterator<Item = (&'a Segment, &'a [ShortKey])>,
        start: &[u8],
        reverse: bool,
    ) {
        self.at(now);
        self.request += 1;
        let touch = |this: &mut Self, i: usize| {
            let count = &mut this.counts[i];
            if count.first_of(this.request) {
                let c = &mut count.counters;
                c.reads += 1;
                c.reverse_reads += u64::from(reverse);
                c.read_micros = c.read_micros.saturating_add(micros);
            }
        };
        let offer_first = self.request.is_multiple_of(READ_FIRST_KEYS);
        let mut n = 0;
        let mut met = false;
        for (s, samples) in segments {
            met = true;
            n += s.counters.rows_read;
            let same = generation == self.bounds.generation && s.bucket < self.bounds.count();
            let i = if same {
                s.bucket
            } else {
                self.bounds.bucket_of(&s.first)
            };
            touch(self, i);
            self.counts[i].counters.add(&s.counters);
            // The keys met in a range of these bounds lie in it. A read's
            // first key there is offered one read in [`READ_FIRST_KEYS`]
            // (its sketch is a line of memory a point read need not touch).
            if offer_first {
                self.grown |= self.sketches[i].offer(key_hash(&s.first), &s.first);
            }
            for key in samples.iter().map(|k| &k[..]) {
                let k = if same { i } else { self.bounds.bucket_of(key) };
                self.grown |= self.sketches[k].offer(key_hash(key), key);
            }
        }
        if !met {
            let i = self.bounds.bucket_of(start);
            touch(self, i);
            return;
        }
        self.checked(n);
    }

    /// What each range would hold of an even share of the keys.
    fn share(&self) -> u64 {
        let total: u64 = self.sketches.iter().map(KeySketch::estimate).sum();
        (total.saturating_mul(SHARE) / self.max as u64).max(MIN_SPLIT_KEYS)
    }

    /// Counts `rows` more rows, and every [`CHECK_EVERY`] rows looks
    /// whether a range holds so many more keys than its share that it is
    /// cut now rather than at the minute's end.
    fn checked(&mut self, rows: u64) {
        self.since_check += rows;
        // A young table (few ranges) is cut as often as it needs.
        let young = self.bounds.count() < YOUNG_RANGES;
        if self.since_check < CHECK_EVERY
            || !self.grown
            || (self.cuts_now >= CUTS_PER_MINUTE && !young)
        {
            return;
        }
        self.since_check = 0;
        self.grown = false;
        let limit = self.share().saturating_mul(CUT_NOW_SHARES);
        let cut = (0..self.sketches.len())
            .any(|i| self.sketches[i].estimate() > limit && self.cut_point(i).is_some());
        if cut {
            self.close_counts();
            self.cuts_now += 1;
            self.rebalance();
        }
    }

    /// Cuts the ranges at `keys` (the store's own split points of the
    /// table), as many as room allows for half the most ranges.
    pub fn seed(&mut self, keys: &[Vec<u8>]) {
        self.seeded = Some(self.minute);
        let room = (self.max / 2).saturating_sub(self.bounds.count());
        let mut cuts: Vec<&[u8]> = keys
            .iter()
            // No range start is longer than a sampled key.
            .map(|k| &k[..k.len().min(SAMPLE_BYTES)])
            .filter(|k| !k.is_empty())
            .filter(|k| {
                let i = self.bounds.bucket_of(k);
                self.bounds.range(i).0 != *k
            })
            .collect();
        if cuts.is_empty() || room == 0 {
            return;
        }
        // Evenly among them when there is not room for all.
        let step = cuts.len().div_ceil(room);
        cuts = cuts.into_iter().step_by(step).collect();
        self.close_counts();
        for key in cuts {
            let i = self.bounds.bucket_of(key);
            if self.bounds.range(i).0 != key {
                self.split(i, key.into());
            }
        }
        self.new_generation();
    }

    /// The current minute's records (ranges that saw something).
    pub fn current(&self) -> Vec<ActivityRecord> {
        self.records(self.minute)
    }

    fn records(&self, minute: i64) -> Vec<ActivityRecord> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.counters.is_zero())
            .map(|(i, c)| {
                let (start, end) = self.bounds.range(i);
                ActivityRecord {
                    minute,
                    start: start.to_vec(),
                    end: end.map(<[u8]>::to_vec),
                    counters: c.counters,
                }
            })
            .collect()
    }

    /// Sets what the minute counted so far aside (with the ranges it was
    /// counted in) before the ranges change.
    fn close_counts(&mut self) {
        let records = self.current();
        if !records.is_empty() {
            self.finished.push((self.minute, records));
        }
        self.counts
            .iter_mut()
            .for_each(|c| c.counters = Counters::default());
    }

    /// Takes the current minute's counts out (to be kept elsewhere):
    /// what is counted from now on adds to nothing counted before.
    pub fn take_current(&mut self, now: i64) -> (i64, Vec<ActivityRecord>) {
        self.at(now);
        let records = self.current();
        self.counts
            .iter_mut()
            .for_each(|c| c.counters = Counters::default());
        (self.minute, records)
    }

    /// Takes the ended minutes' records not kept yet, oldest first.
    pub fn take_finished(&mut self, now: i64) -> Vec<(i64, Vec<ActivityRecord>)> {
        self.at(now);
        std::mem::take(&mut self.finished)
    }

    /// Puts ended minutes back to wait before those ended since (they
    /// could not be kept).
    pub fn wait(&mut self, minutes: Vec<(i64, Vec<ActivityRecord>)>) {
        self.finished.splice(0..0, minutes);
    }

    /// Ended minutes' records not kept yet.
    pub fn finished(&self) -> &[(i64, Vec<ActivityRecord>)] {
        &self.finished
    }

    /// Ends the current minute: its records wait in `finished`, and the
    /// ranges are cut and joined for the minutes to come.
    fn roll(&mut self, minute: i64) {
        self.close_counts();
        self.minute = minute;
        self.cuts_now = 0;
        self.since_check = 0;
        self.rebalance();
    }

    /// Whether the table's ranges are still few enough that the store's
    /// split points should cut them ([`KeyBuckets::seed`]), and they were
    /// not asked for yet this minute.
    pub fn wants_seed(&self) -> bool {
        self.bounds.count() < 16.min(self.max) && self.seeded != Some(self.minute)
    }

    /// Cuts the ranges holding more than their share of the keys, most
    /// first, joining the neighbours with fewest keys to make room; then
    /// joins ranges beyond the maximum.
    fn rebalance(&mut self) {
        let share = self.share();
        let mut changed = false;
        for _ in 0..SPLITS_PER_MINUTE {
            let widest = (0..self.sketches.len())
                .map(|i| (i, self.sketches[i].estimate()))
                .filter(|(_, e)| *e > share)
                .filter_map(|(i, e)| self.cut_point(i).map(|k| (i, e, k)))
                .max_by_key(|(_, e, _)| *e);
            let Some((i, keys, key)) = widest else { break };
            if self.sketches.len() >= self.max {
                let Some(j) = self.narrowest_pair() else {
                    break;
                };
                if self.pair_keys(j) >= keys / 2 {
                    break;
                }
                self.join(j);
                let i = if i > j { i - 1 } else { i };
                self.split(i, key);
            } else {
                self.split(i, key);
            }
            changed = true;
        }
        while self.sketches.len() > self.max {
            let Some(j) = self.narrowest_pair() else {
                break;
            };
            self.join(j);
            changed = true;
        }
        if changed {
            self.new_generation();
        }
    }

    fn new_generation(&mut self) {
        self.bounds = Arc::new(Bounds::new(
            self.bounds.starts.clone(),
            self.bounds.generation + 1,
        ));
    }

    /// Where to cut range `i`: the middle one of its sampled keys when that
    /// lies inside it, else another inside it. `None` when no sampled key
    /// does.
    fn cut_point(&self, i: usize) -> Option<Box<[u8]>> {
        let (start, end) = self.bounds.range(i);
        let inside = |k: &[u8]| k > start && end.is_none_or(|e| k < e);
        let sketch = &self.sketches[i];
        match sketch.median() {
            Some(m) if inside(m) => Some(m.into()),
            _ => sketch.keys().filter(|k| inside(k)).min().map(Into::into),
        }
    }

    /// Cuts range `i` at `key` (inside it).
    fn split(&mut self, i: usize, key: Box<[u8]>) {
        let mut starts = self.bounds.starts.clone();
        starts.insert(i + 1, key.clone());
        self.bounds = Arc::new(Bounds::new(starts, self.bounds.generation));
        let right = self.sketches[i].split_off(&key);
        self.sketches.insert(i + 1, right);
        self.counts.insert(i + 1, RangeCount::default());
        self.grown = true;
    }

    fn pair_keys(&self, j: usize) -> u64 {
        self.sketches[j].estimate() + self.sketches[j + 1].estimate()
    }

    /// The neighbours `j`, `j + 1` with fewest keys together.
    fn narrowest_pair(&self) -> Option<usize> {
        (0..self.sketches.len().saturating_sub(1)).min_by_key(|&j| self.pair_keys(j))
    }

    /// Makes ranges `j` and `j + 1` one.
    fn join(&mut self, j: usize) {
        let mut starts = self.bounds.starts.clone();
        starts.remove(j + 1);
        self.bounds = Arc::new(Bounds::new(starts, self.bounds.generation));
        let c = self.counts.remove(j + 1);
        self.counts[j].counters.add(&c.counters);
        let s = self.sketches.remove(j + 1);
        self.sketches[j].join(s);
        self.grown = true;
    }

    /// The keys range `i`'s sketch keeps, in key order.
    #[cfg(test)]
    pub fn sketch_keys(&self, i: usize) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.sketches[i].keys().map(<[u8]>::to_vec).collect();
        keys.sort();
        keys
    }

    /// About how many bytes the table's activity holds in memory.
    #[cfg(test)]
    pub fn memory(&self) -> usize {
        let keys: usize = self.bounds.starts.iter().map(|s| s.len() + 16).sum();
        let sketches: usize = self.sketches.iter().map(KeySketch::memory).sum();
        let per_range = std::mem::size_of::<RangeCount>() + std::mem::size_of::<KeySketch>();
        let finished: usize = self
            .finished
            .iter()
            .flat_map(|(_, r)| r)
            .map(|r| r.start.len() + r.end.as_ref().map_or(0, Vec::len) + 128)
            .sum();
        keys + sketches + per_range * self.counts.len() + finished
    }
}

#[cfg(test)]
mod tests {
    use super::{Bounds, ShortKey};

    /// The search by sixteen-byte numbers finds what a search of the
    /// whole keys finds: starts sharing their first sixteen bytes, shorter
    /// than sixteen, with zero bytes (which the padding also gives), and keys
    /// equal to a start.
    #[test]
    fn bucket_of_agrees_with_a_search_of_whole_keys() {
        let mut starts: Vec<Box<[u8]>> = vec![Box::default()];
        for s in [
            &b"\x00"[..],
            b"\x00\x00",
            b"a",
            b"ab",
            b"ab\x00",
            b"abcdefgh",
            b"abcdefgh\x00",
            b"abcdefgha",
            b"abcdefghb",
            b"abcdefgi",
            b"abcdefghijklmnop",
            b"abcdefghijklmnop\x00",
            b"abcdefghijklmnopa",
            b"abcdefghijklmnopb",
            b"abcdefghijklmnoq",
            b"us-central1#1042",
            b"us-central1#1042#2026-01-01-0000",
            b"us-central1#1042#2026-01-02-0000",
            b"user0042#",
            b"user0042#2024",
            b"user0042#2025",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            starts.push(s.into());
        }
        let bounds = Bounds::new(starts.clone(), 0);
        let mut keys: Vec<Vec<u8>> = starts.iter().map(|s| s.to_vec()).collect();
        for s in &starts {
            let mut k = s.to_vec();
            k.push(0);
            keys.push(k.clone());
            k.push(b'z');
            keys.push(k);
            if let Some((last, head)) = s.split_last() {
                keys.push(head.to_vec());
                let mut below = head.to_vec();
                below.push(last.wrapping_sub(1));
                keys.push(below);
            }
        }
        keys.push(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff".to_vec());
        for key in &keys {
            let whole = starts.partition_point(|s| **s <= key[..]).saturating_sub(1);
            assert_eq!(bounds.bucket_of(key), whole, "{key:?}");
            // A key cut to a sample's length lies in the same range.
            assert_eq!(bounds.bucket_of(&ShortKey::new(key)), whole, "{key:?}");
        }
    }

    /// With as many ranges as a table may have, the search's first step
    /// (every sixteenth start) and its second find what a search of the
    /// whole keys finds: keys sharing their first sixteen bytes and more,
    /// at, between, below and beyond the starts.
    #[test]
    fn bucket_of_agrees_among_a_thousand_starts() {
        let key = |region: u64, balloon: u64, minute: u64| {
            format!("region-{region}-long-name#{balloon:04}#{minute:05}").into_bytes()
        };
        let mut starts: Vec<Box<[u8]>> = vec![Box::default()];
        for i in 1..1000u64 {
            starts.push(key(i / 300, i / 3 % 100, i % 3 * 1000 + i % 7).into());
        }
        starts.sort();
        starts.dedup();
        let bounds = Bounds::new(starts.clone(), 0);
        for region in 0..5 {
            for balloon in (0..110).step_by(3) {
                for minute in [0, 1, 999, 1000, 1003, 2006, 9999] {
                    let k = key(region, balloon, minute);
                    let whole = starts.partition_point(|s| **s <= k[..]).saturating_sub(1);
                    assert_eq!(
                        bounds.bucket_of(&k),
                        whole,
                        "{}",
                        String::from_utf8_lossy(&k)
                    );
                }
            }
        }
        for s in &starts {
            let whole = starts.partition_point(|x| **x <= s[..]).saturating_sub(1);
            assert_eq!(bounds.bucket_of(s), whole);
            assert!(bounds.contains(whole, s));
        }
        assert_eq!(bounds.bucket_of(b"zzz"), starts.len() - 1);
        assert_eq!(bounds.bucket_of(b""), 0);
    }
}
