//! One table's key activity: the key space cut into at most a fixed
//! number of ranges ([`Bounds`]), each range's counters for the current
//! minute, and the choice of where the ranges lie ([`KeyBuckets`]).
//!
//! The ranges follow the activity, as Key Visualizer's buckets do: when a
//! minute ends, a range that took much more than its share of the recent
//! requests and rows is cut in two at a key seen in it (each range keeps a
//! small sample of the keys it saw), and when the ranges are as many as
//! allowed, the two neighbours that saw least become one. Ranges change
//! only between minutes, so a minute's counts are exact for its ranges.

use super::record::{ActivityRecord, Counters, MINUTE_MICROS};
use std::sync::Arc;

/// Keys a range keeps as candidates for where to cut it.
const SAMPLES: usize = 8;
/// A sampled key is kept to this many bytes: any byte string is a place to
/// cut, and the sample stays small whatever the keys.
const SAMPLE_BYTES: usize = 64;
/// A range is cut when it took more than this fraction of the largest
/// number of ranges' even share (`2 / max`) of the recent activity.
const SHARE: u64 = 2;
/// Activity below this (requests and rows, decayed) cuts nothing: a table
/// that saw a handful of rows keeps one range.
const MIN_SPLIT_WEIGHT: u64 = 16;
/// Cuts made at one minute's end, at most.
const SPLITS_PER_MINUTE: usize = 64;

/// Where a table's ranges start, in key order; the first is the empty
/// key. A new `Bounds` (with a new generation) replaces it when ranges
/// are cut or joined, so a read may hold one without a lock.
#[derive(Debug)]
pub struct Bounds {
    starts: Vec<Box<[u8]>>,
    /// Counts the changes of a table's ranges.
    pub generation: u64,
}

impl Bounds {
    /// The range holding `key`.
    #[inline]
    pub fn bucket_of(&self, key: &[u8]) -> usize {
        self.starts
            .partition_point(|s| &**s <= key)
            .saturating_sub(1)
    }

    /// Whether range `i` holds `key`.
    #[inline]
    pub fn contains(&self, i: usize, key: &[u8]) -> bool {
        self.starts.get(i).is_some_and(|s| &**s <= key)
            && self.starts.get(i + 1).is_none_or(|next| key < &**next)
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

/// What one read counted in one range, and keys of it seen (the first,
/// then every power-of-two-th row), offered to the range's sample.
#[derive(Debug, Default)]
pub struct Segment {
    /// The range, in the [`Bounds`] generation the read held.
    pub bucket: usize,
    /// The first key the read met in it.
    pub first: Box<[u8]>,
    /// What the read counted there (its `reads` is left at 0: a read is
    /// counted once per range when it is added).
    pub counters: Counters,
    /// Keys met there.
    pub samples: Vec<Box<[u8]>>,
}

/// A table's ranges and their counters in the current minute.
#[derive(Debug)]
pub struct KeyBuckets {
    bounds: Arc<Bounds>,
    max: usize,
    /// The current minute's start (microseconds since the epoch).
    minute: i64,
    counts: Vec<Counters>,
    /// Per range, its recent activity (halved every minute): what cuts
    /// and joins go by.
    weights: Vec<u64>,
    samples: Vec<Vec<Box<[u8]>>>,
    /// Per range, the keys offered to its sample since it was cut (a
    /// reservoir sample keeps each with the same chance).
    offered: Vec<u64>,
    /// Per range, the last request counted in it (a request counts once
    /// per range).
    stamps: Vec<u64>,
    request: u64,
    rng: u64,
    /// Minutes ended whose records are not kept yet.
    finished: Vec<(i64, Vec<ActivityRecord>)>,
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
            bounds: Arc::new(Bounds {
                starts: vec![Box::default()],
                generation: 0,
            }),
            max: max.max(1),
            minute: minute_of(now),
            counts: vec![Counters::default()],
            weights: vec![0],
            samples: vec![Vec::new()],
            offered: vec![0],
            stamps: vec![0],
            request: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            finished: Vec::new(),
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
        for (key, bytes) in rows {
            if !bounds.contains(i, key) {
                i = bounds.bucket_of(key);
            }
            let c = &mut self.counts[i];
            c.rows_written += 1;
            c.bytes_written = c.bytes_written.saturating_add(bytes);
            if self.stamps[i] != self.request {
                self.stamps[i] = self.request;
                c.writes += 1;
                c.write_micros = c.write_micros.saturating_add(micros);
            }
            self.sample(i, key);
        }
    }

    /// Counts what a read met (`segments`, in the ranges of `generation`)
    /// at `now`, as one read request taking `micros` in every range it
    /// touched; a read that met no row counts where `start` falls.
    pub fn read(
        &mut self,
        now: i64,
        micros: u64,
        generation: u64,
        segments: &[Segment],
        start: &[u8],
    ) {
        self.at(now);
        self.request += 1;
        let bounds = Arc::clone(&self.bounds);
        let touch = |this: &mut Self, i: usize| {
            if this.stamps[i] != this.request {
                this.stamps[i] = this.request;
                this.counts[i].reads += 1;
                this.counts[i].read_micros = this.counts[i].read_micros.saturating_add(micros);
            }
        };
        if segments.is_empty() {
            touch(self, bounds.bucket_of(start));
            return;
        }
        for s in segments {
            let i = if generation == bounds.generation && s.bucket < bounds.count() {
                s.bucket
            } else {
                bounds.bucket_of(&s.first)
            };
            touch(self, i);
            self.counts[i].add(&s.counters);
            for key in &s.samples {
                let i = bounds.bucket_of(key);
                self.sample(i, key);
            }
        }
    }

    /// Offers `key` to range `i`'s sample.
    #[inline]
    fn sample(&mut self, i: usize, key: &[u8]) {
        self.offered[i] += 1;
        let sample = &mut self.samples[i];
        let key = &key[..key.len().min(SAMPLE_BYTES)];
        if sample.len() < SAMPLES {
            sample.push(key.into());
            return;
        }
        // xorshift64: a reservoir sample needs no better randomness.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let pick = self.rng % self.offered[i];
        if let Some(slot) = usize::try_from(pick).ok().and_then(|p| sample.get_mut(p)) {
            *slot = key.into();
        }
    }

    /// The current minute's records (ranges that saw something).
    pub fn current(&self) -> Vec<ActivityRecord> {
        self.records(self.minute)
    }

    fn records(&self, minute: i64) -> Vec<ActivityRecord> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_zero())
            .map(|(i, c)| {
                let (start, end) = self.bounds.range(i);
                ActivityRecord {
                    minute,
                    start: start.to_vec(),
                    end: end.map(<[u8]>::to_vec),
                    counters: *c,
                }
            })
            .collect()
    }

    /// Takes the current minute's counts out (to be kept elsewhere):
    /// what is counted from now on adds to nothing counted before.
    pub fn take_current(&mut self, now: i64) -> (i64, Vec<ActivityRecord>) {
        self.at(now);
        let records = self.current();
        for (c, w) in self.counts.iter_mut().zip(&mut self.weights) {
            *w = w.saturating_add(c.weight());
            *c = Counters::default();
        }
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

    /// Ends the current minute: its records wait in `finished`, the
    /// weights take its counts and halve once per minute gone, and the
    /// ranges are cut and joined for the minutes to come.
    fn roll(&mut self, minute: i64) {
        let records = self.records(self.minute);
        if !records.is_empty() {
            self.finished.push((self.minute, records));
        }
        let gone = ((minute - self.minute) / MINUTE_MICROS).clamp(1, 63) as u32;
        for (c, w) in self.counts.iter_mut().zip(&mut self.weights) {
            *w = w.saturating_add(c.weight()) >> gone;
            *c = Counters::default();
        }
        self.minute = minute;
        self.rebalance();
    }

    /// Cuts the ranges that took more than their share, heaviest first,
    /// joining the quietest neighbours to make room; then joins ranges
    /// beyond the maximum.
    fn rebalance(&mut self) {
        let total: u64 = self.weights.iter().sum();
        if total < MIN_SPLIT_WEIGHT {
            return;
        }
        // A range's share: what each of `max / SHARE` even ranges would take.
        let share = (total.saturating_mul(SHARE) / self.max as u64).max(MIN_SPLIT_WEIGHT);
        let mut changed = false;
        for _ in 0..SPLITS_PER_MINUTE {
            let heaviest = (0..self.weights.len())
                .filter(|&i| self.weights[i] > share)
                .filter_map(|i| self.cut_point(i).map(|k| (i, k)))
                .max_by_key(|(i, _)| self.weights[*i]);
            let Some((i, key)) = heaviest else { break };
            if self.weights.len() >= self.max {
                let Some(j) = self.quietest_pair() else { break };
                if self.weights[j] + self.weights[j + 1] >= self.weights[i] / 2 {
                    break;
                }
                self.join(j);
                // The cut range moved down one if it was after the join.
                let i = if i > j { i - 1 } else { i };
                self.split(i, key);
            } else {
                self.split(i, key);
            }
            changed = true;
        }
        while self.weights.len() > self.max {
            let Some(j) = self.quietest_pair() else { break };
            self.join(j);
            changed = true;
        }
        if changed {
            self.bounds = Arc::new(Bounds {
                starts: self.bounds.starts.clone(),
                generation: self.bounds.generation + 1,
            });
        }
    }

    /// Where to cut range `i`: the median key of its sample when that lies
    /// inside it; a key met alone at the range's start is cut off on its
    /// own (`key · 0x00`). `None` when the sample has nothing to cut at.
    fn cut_point(&self, i: usize) -> Option<Box<[u8]>> {
        let (start, end) = self.bounds.range(i);
        let mut keys: Vec<&[u8]> = self.samples[i].iter().map(|k| &**k).collect();
        keys.sort_unstable();
        keys.dedup();
        let inside = |k: &[u8]| k > start && end.is_none_or(|e| k < e);
        let median = keys.get(keys.len() / 2).copied()?;
        if inside(median) {
            return Some(median.into());
        }
        if let Some(k) = keys.iter().copied().find(|k| inside(k)) {
            return Some(k.into());
        }
        // Every key sampled is the start: cut that one key off.
        let mut alone = start.to_vec();
        alone.push(0);
        inside(&alone).then(|| alone.into())
    }

    /// Cuts range `i` at `key` (inside it).
    fn split(&mut self, i: usize, key: Box<[u8]>) {
        let mut starts = self.bounds.starts.clone();
        starts.insert(i + 1, key.clone());
        self.bounds = Arc::new(Bounds {
            starts,
            generation: self.bounds.generation,
        });
        let (left, right): (Vec<_>, Vec<_>) = std::mem::take(&mut self.samples[i])
            .into_iter()
            .partition(|k| *k < key);
        let offered = self.offered[i];
        let share = |n: usize| offered / (SAMPLES as u64) * n as u64 + n as u64;
        let (lo, ro) = (share(left.len()), share(right.len()));
        self.samples[i] = left;
        self.samples.insert(i + 1, right);
        self.offered[i] = lo;
        self.offered.insert(i + 1, ro);
        let half = self.weights[i] / 2;
        self.weights[i] -= half;
        self.weights.insert(i + 1, half);
        self.counts.insert(i + 1, Counters::default());
        self.stamps.insert(i + 1, 0);
    }

    /// The neighbours `j`, `j + 1` that saw least together.
    fn quietest_pair(&self) -> Option<usize> {
        (0..self.weights.len().saturating_sub(1))
            .min_by_key(|&j| self.weights[j] + self.weights[j + 1])
    }

    /// Makes ranges `j` and `j + 1` one.
    fn join(&mut self, j: usize) {
        let mut starts = self.bounds.starts.clone();
        starts.remove(j + 1);
        self.bounds = Arc::new(Bounds {
            starts,
            generation: self.bounds.generation,
        });
        let w = self.weights.remove(j + 1);
        self.weights[j] = self.weights[j].saturating_add(w);
        let c = self.counts.remove(j + 1);
        self.counts[j].add(&c);
        let mut s = self.samples.remove(j + 1);
        self.samples[j].append(&mut s);
        self.samples[j].truncate(SAMPLES);
        let o = self.offered.remove(j + 1);
        self.offered[j] = self.offered[j].saturating_add(o);
        self.stamps.remove(j + 1);
    }

    /// About how many bytes the table's activity holds in memory.
    #[cfg(test)]
    pub fn memory(&self) -> usize {
        let keys: usize = self.bounds.starts.iter().map(|s| s.len() + 16).sum();
        let samples: usize = self.samples.iter().flatten().map(|s| s.len() + 16).sum();
        let per_range = std::mem::size_of::<Counters>() + 8 * 3 + 24;
        let finished: usize = self
            .finished
            .iter()
            .flat_map(|(_, r)| r)
            .map(|r| r.start.len() + r.end.as_ref().map_or(0, Vec::len) + 128)
            .sum();
        keys + samples + per_range * self.counts.len() + finished
    }
}
