//! [`KeyActivity`]: every table's [`KeyBuckets`] of a store, the minutes
//! they end kept in the [`ActivityLog`], and what is asked of them.

use super::buckets::KeyBuckets;
use super::log::ActivityLog;
use super::record::{ActivityRecord, MINUTE_MICROS};
use super::tally::{Clock, ReadTally, TableActivity};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// Ranges a table's activity is counted in, at most (Key Visualizer's
/// number).
pub const MAX_RANGES: usize = 1000;
/// Ended minutes a table holds in memory while they cannot be kept (the
/// log failing): older ones are dropped.
const MAX_WAITING_MINUTES: usize = 60;

/// A table's split points by size, from the store: where a table's first
/// ranges are cut before its keys have been seen.
pub type SplitPoints = Box<dyn Fn(&str) -> Vec<Vec<u8>> + Send + Sync>;

/// Counters of reads and writes per key range and minute, for every
/// table of a store.
pub struct KeyActivity {
    /// Whether reads and writes are counted now (see
    /// [`KeyActivity::set_counting`]).
    counting: std::sync::atomic::AtomicBool,
    split_points: std::sync::OnceLock<SplitPoints>,
    tables: RwLock<HashMap<String, Arc<TableActivity>>>,
    log: Option<ActivityLog>,
    /// How long minutes are kept, in microseconds.
    retention: i64,
    max_ranges: usize,
    clock: Clock,
}

impl std::fmt::Debug for KeyActivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyActivity")
            .field("retention", &self.retention)
            .field("max_ranges", &self.max_ranges)
            .finish_non_exhaustive()
    }
}

impl KeyActivity {
    /// Activity kept in `log` (in memory only without one) for
    /// `retention`, in at most `max_ranges` ranges per table, timed by
    /// `clock`.
    pub fn new(
        log: Option<ActivityLog>,
        retention: std::time::Duration,
        max_ranges: usize,
        clock: Clock,
    ) -> Self {
        KeyActivity {
            counting: std::sync::atomic::AtomicBool::new(true),
            split_points: std::sync::OnceLock::new(),
            tables: RwLock::default(),
            log,
            retention: i64::try_from(retention.as_micros()).unwrap_or(i64::MAX),
            max_ranges,
            clock,
        }
    }

    /// Counts reads and writes from now on (`true`, as it starts) or
    /// not: for measuring what counting costs.
    pub fn set_counting(&self, on: bool) {
        self.counting
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether reads and writes are counted now.
    pub fn counting(&self) -> bool {
        self.counting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets where the store would split a table by size (once).
    pub fn set_split_points(&self, points: SplitPoints) {
        let _ = self.split_points.set(points);
    }

    /// Cuts a young table's ranges at the store's split points.
    fn seed(&self, table: &str, buckets: &mut KeyBuckets) {
        if buckets.wants_seed()
            && let Some(points) = self.split_points.get()
        {
            buckets.seed(&points(table));
        }
    }

    fn table(&self, table: &str) -> Arc<TableActivity> {
        if let Some(b) = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
        {
            return Arc::clone(b);
        }
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        let now = (self.clock)();
        Arc::clone(tables.entry(table.to_string()).or_insert_with(|| {
            let mut buckets = KeyBuckets::new(self.max_ranges, now);
            self.seed(table, &mut buckets);
            Arc::new(TableActivity::new(buckets, Arc::clone(&self.clock)))
        }))
    }

    /// A tally for a read of `table` starting at row key `start`
    /// (`reverse`: in descending key order).
    #[cfg(test)]
    pub fn read(&self, name: &str, start: &[u8], reverse: bool) -> ReadTally {
        self.read_from(name, start, reverse, (self.clock)())
    }

    /// [`KeyActivity::read`] of a read that began at `now` by this
    /// activity's clock (a reading the caller took anyway).
    pub fn read_from(&self, name: &str, start: &[u8], reverse: bool, now: i64) -> ReadTally {
        let table = self.table(name);
        if !table.kept_by(now) {
            self.keep_finished_at(name, &mut table.lock(), now);
            table.kept_at(now);
        }
        ReadTally::new(table, now, start, reverse)
    }

    /// Counts a write request to `table` that began at `began` (by this
    /// activity's clock) and wrote `rows` (each row's key and bytes).
    pub fn write<'a>(
        &self,
        table: &str,
        began: i64,
        rows: impl IntoIterator<Item = (&'a [u8], u64)>,
    ) {
        let activity = self.table(table);
        let now = (self.clock)();
        let mut b = activity.lock();
        b.write(now, u64::try_from(now - began).unwrap_or(0), rows);
        self.keep_finished_at(table, &mut b, now);
        activity.kept_at(now);
    }

    /// Now, by this activity's clock.
    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Writes the minutes `buckets` ended to the log, and forgets the
    /// table's minutes past the retention. A log that fails keeps them
    /// waiting (the newest [`MAX_WAITING_MINUTES`]) for the next time.
    fn keep_finished(&self, table: &str, buckets: &mut KeyBuckets) {
        self.keep_finished_at(table, buckets, (self.clock)());
    }

    /// [`KeyActivity::keep_finished`] at `now`.
    fn keep_finished_at(&self, table: &str, buckets: &mut KeyBuckets, now: i64) {
        let finished = buckets.take_finished(now);
        let Some(log) = &self.log else {
            // In memory only: ended minutes wait, within the retention.
            self.put_back(buckets, finished, now);
            return;
        };
        if finished.is_empty() {
            return;
        }
        // A minute ended: a table still young is cut where the store
        // would split it now.
        self.seed(table, buckets);
        let mut failed = Vec::new();
        for (minute, records) in finished {
            if log.add(table, minute, &records).is_err() {
                failed.push((minute, records));
            }
        }
        let _ = log.forget(table, now.saturating_sub(self.retention));
        self.put_back(buckets, failed, now);
    }

    fn put_back(
        &self,
        buckets: &mut KeyBuckets,
        minutes: Vec<(i64, Vec<ActivityRecord>)>,
        now: i64,
    ) {
        let oldest = now.saturating_sub(self.retention);
        let mut minutes: Vec<_> = minutes
            .into_iter()
            .filter(|(m, _)| *m + MINUTE_MICROS > oldest)
            .collect();
        let keep = if self.log.is_some() {
            MAX_WAITING_MINUTES
        } else {
            usize::MAX
        };
        if minutes.len() > keep {
            minutes.drain(..minutes.len() - keep);
        }
        buckets.wait(minutes);
    }

    /// `table`'s records from minute `since` on (microseconds since the
    /// epoch), the current minute's included, ordered by minute and key.
    pub fn records(&self, table: &str, since: i64) -> Result<Vec<ActivityRecord>> {
        let buckets = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned();
        let since = super::buckets::minute_of(since);
        let mut b = buckets.as_ref().map(|b| b.lock());
        if let Some(b) = b.as_mut() {
            self.keep_finished(table, b);
        }
        let mut out = match &self.log {
            Some(log) => log.read(table, since)?,
            None => Vec::new(),
        };
        if let Some(b) = &b {
            let waiting = b.finished().iter().flat_map(|(_, r)| r.iter().cloned());
            for r in waiting.chain(b.current()) {
                if r.minute < since {
                    continue;
                }
                match out
                    .iter_mut()
                    .find(|a| a.minute == r.minute && a.start == r.start && a.end == r.end)
                {
                    Some(a) => a.counters.add(&r.counters),
                    None => out.push(r),
                }
            }
        }
        out.sort_by(|a, b| (a.minute, &a.start).cmp(&(b.minute, &b.start)));
        Ok(out)
    }

    /// Writes every table's counts, the current minute's too, to the log
    /// (at close, so that a restart keeps them).
    pub fn keep(&self) -> Result<()> {
        let Some(log) = &self.log else { return Ok(()) };
        let tables: Vec<_> = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(t, b)| (t.clone(), Arc::clone(b)))
            .collect();
        for (table, buckets) in tables {
            let mut b = buckets.lock();
            self.keep_finished(&table, &mut b);
            let (minute, records) = b.take_current((self.clock)());
            log.add(&table, minute, &records)?;
        }
        Ok(())
    }

    /// Forgets everything counted of `table` (it was dropped).
    pub fn forget_table(&self, table: &str) -> Result<()> {
        self.tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(table);
        if let Some(log) = &self.log {
            log.forget(table, i64::MAX)?;
        }
        Ok(())
    }

    /// Forgets every table's minutes past the retention (at open).
    pub fn sweep(&self) -> Result<()> {
        let Some(log) = &self.log else { return Ok(()) };
        let oldest = (self.clock)().saturating_sub(self.retention);
        for table in log.tables()? {
            log.forget(&table, oldest)?;
        }
        Ok(())
    }

    /// About how many bytes `table`'s activity holds in memory.
    #[cfg(test)]
    pub fn memory(&self, table: &str) -> usize {
        self.tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .map_or(0, |b| b.lock().memory())
    }

    /// How many ranges `table`'s activity is counted in now.
    #[cfg(test)]
    pub fn ranges(&self, table: &str) -> usize {
        self.tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .map_or(0, |b| b.lock().bounds().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::activity::record::Counters;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    const DAY: Duration = Duration::from_secs(86_400);

    /// An activity in memory whose clock the test moves.
    fn activity(max: usize) -> (KeyActivity, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(1_000 * MINUTE_MICROS));
        let clock = Arc::clone(&now);
        let a = KeyActivity::new(
            None,
            DAY,
            max,
            Arc::new(move || clock.load(Ordering::SeqCst)),
        );
        (a, now)
    }

    fn total(records: &[ActivityRecord]) -> Counters {
        let mut t = Counters::default();
        for r in records {
            t.add(&r.counters);
        }
        t
    }

    #[test]
    fn a_scripted_workload_counts_exactly() {
        let (a, now) = activity(MAX_RANGES);
        // Minute 1000: a write of four rows taking 5 us (two of them in
        // one key, as a time bucket's readings are), a point read.
        a.write(
            "t",
            now.load(Ordering::SeqCst) - 5,
            [(&b"a"[..], 10), (b"b", 20), (b"b", 5), (b"c", 30)],
        );
        {
            let mut read = a.read("t", b"b", false);
            read.row(b"b", 2, 40);
        }
        now.fetch_add(MINUTE_MICROS + 7, Ordering::SeqCst);
        // Minute 1001: a read that found nothing, a scan of 4 rows
        // newest first (in descending key order), a write between keys
        // written before and one past them.
        drop(a.read("t", b"zz", false));
        {
            let mut scan = a.read("t", b"", true);
            for k in [b"d", b"c", b"b", b"a"] {
                scan.row(k, 1, 10);
            }
        }
        a.write(
            "t",
            now.load(Ordering::SeqCst),
            [(&b"bb"[..], 1), (b"d", 1)],
        );
        let records = a.records("t", i64::MIN).unwrap();
        let minutes: Vec<i64> = records.iter().map(|r| r.minute / MINUTE_MICROS).collect();
        assert_eq!(minutes, [1000, 1001], "{records:?}");
        let first = records[0].counters;
        assert_eq!(
            (
                first.writes,
                first.rows_written,
                first.bytes_written,
                first.write_micros
            ),
            (1, 4, 65, 5)
        );
        assert_eq!(
            (
                first.reads,
                first.rows_read,
                first.cells_scanned,
                first.bytes_read
            ),
            (1, 1, 2, 40)
        );
        // a, b and c each went past every key before them; b again did not.
        assert_eq!((first.edge_rows, first.reverse_reads), (3, 0));
        let second = records[1].counters;
        assert_eq!(
            (second.reads, second.rows_read, second.bytes_read),
            (2, 4, 40)
        );
        assert_eq!(second.reverse_reads, 1);
        assert_eq!(
            (second.writes, second.rows_written, second.edge_rows),
            (1, 2, 1)
        );
        assert!(
            a.records("t", 1001 * MINUTE_MICROS)
                .unwrap()
                .iter()
                .all(|r| r.minute == 1001 * MINUTE_MICROS)
        );
        assert!(a.records("other", i64::MIN).unwrap().is_empty());
    }

    #[test]
    fn ranges_follow_a_hotspot_and_totals_survive_every_cut_and_join() {
        let (a, now) = activity(16);
        let mut expected = Counters::default();
        let mut n = 0u64;
        for minute in 0..30 {
            for i in 0..2_000u64 {
                // Nine writes in ten go to the keys under `hot#`.
                let key = if i % 10 == 0 {
                    format!("cold#{:06}", (i * 7919 + minute) % 100_000)
                } else {
                    // Spread over the prefix (a hash, not a sequence).
                    n += 1;
                    format!("hot#{:016x}", n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                };
                a.write("t", now.load(Ordering::SeqCst), [(key.as_bytes(), 100)]);
                expected.writes += 1;
                expected.rows_written += 1;
                expected.bytes_written += 100;
                if i % 100 == 0 {
                    let mut scan = a.read("t", key.as_bytes(), false);
                    scan.row(key.as_bytes(), 1, 50);
                    expected.reads += 1;
                    expected.rows_read += 1;
                    expected.cells_scanned += 1;
                    expected.bytes_read += 50;
                }
            }
            now.fetch_add(MINUTE_MICROS, Ordering::SeqCst);
        }
        let records = a.records("t", i64::MIN).unwrap();
        // Keys spread by a hash seldom pass every key before them.
        let got = total(&records);
        assert!(
            (1..200).contains(&got.edge_rows),
            "{} rows beyond the keys before them",
            got.edge_rows
        );
        expected.edge_rows = got.edge_rows;
        assert_eq!(got, expected);
        assert!(a.ranges("t") <= 16, "{} ranges", a.ranges("t"));
        assert!(a.ranges("t") >= 8, "{} ranges", a.ranges("t"));
        // In the last minute, most ranges lie under `hot#`.
        let last = records.iter().map(|r| r.minute).max().unwrap();
        let hot = records
            .iter()
            .filter(|r| r.minute == last && r.start.starts_with(b"hot#"))
            .count();
        assert!(hot >= 6, "{hot} ranges under hot#");
    }

    #[test]
    fn a_read_counts_in_the_ranges_holding_its_rows() {
        let (a, now) = activity(16);
        // Keys spread over the key space, minute after minute, until the
        // table is cut into ranges.
        for minute in 0..5u64 {
            for i in 0..2_000u64 {
                let key = format!("k{:05}", (i * 7919 + minute * 13) % 10_000);
                a.write("t", now.load(Ordering::SeqCst), [(key.as_bytes(), 1)]);
            }
            now.fetch_add(MINUTE_MICROS, Ordering::SeqCst);
        }
        assert!(a.ranges("t") >= 8, "{} ranges", a.ranges("t"));
        let minute = now.load(Ordering::SeqCst);
        // Each read: the keys of the rows it met, or its start if none.
        let mut reads: Vec<(Vec<String>, String, bool)> = Vec::new();
        let k = |n: u64| format!("k{n:05}");
        for i in 0..300u64 {
            let at = (i * 337) % 10_000;
            let key = k(at);
            // A point read finds its range as it ends; a read of a second
            // row takes the ranges there; longer reads cross several
            // ranges, in key order or (every fifth) descending.
            let reverse = i % 5 == 1;
            let mut rows = vec![key.clone()];
            if i % 3 == 0 && key.as_str() < "k09000" {
                rows.push("k09500".to_string());
            }
            if i % 5 == 2 {
                rows = (0..6).map(|j| k(at % 4_000 + j * 1_100)).collect();
            }
            if reverse {
                rows = (0..6).map(|j| k(4_500 + at % 5_500 - j * 900)).collect();
            }
            if i % 7 == 0 {
                rows.clear();
            }
            let start = rows.first().unwrap_or(&key).clone();
            let mut read = a.read("t", start.as_bytes(), reverse);
            for row in &rows {
                read.row(row.as_bytes(), 2, 10);
            }
            reads.push((rows, start, reverse));
        }
        let records = a.records("t", minute).unwrap();
        let within = |r: &ActivityRecord, key: &str| {
            r.start.as_slice() <= key.as_bytes()
                && r.end.as_deref().is_none_or(|e| key.as_bytes() < e)
        };
        for r in &records {
            let rows = reads
                .iter()
                .flat_map(|(rows, _, _)| rows)
                .filter(|k| within(r, k))
                .count() as u64;
            let touching = || {
                reads
                    .iter()
                    .filter(|(rows, start, _)| match rows.is_empty() {
                        true => within(r, start),
                        false => rows.iter().any(|k| within(r, k)),
                    })
            };
            let touched = touching().count() as u64;
            let reversed = touching().filter(|(_, _, reverse)| *reverse).count() as u64;
            assert_eq!(
                (
                    r.counters.rows_read,
                    r.counters.cells_scanned,
                    r.counters.reads,
                    r.counters.reverse_reads
                ),
                (rows, 2 * rows, touched, reversed),
                "{r:?}"
            );
        }
        let total = total(&records);
        assert_eq!(
            total.rows_read,
            reads
                .iter()
                .map(|(rows, _, _)| rows.len() as u64)
                .sum::<u64>()
        );
        assert!(records.len() >= 8, "{} ranges read", records.len());
    }

    #[test]
    fn sequential_keys_write_to_the_last_range_only() {
        let (a, now) = activity(16);
        for n in 0..20_000u64 {
            if n % 1_000 == 0 {
                now.fetch_add(MINUTE_MICROS, Ordering::SeqCst);
            }
            let key = format!("event#{n:08}");
            a.write("t", now.load(Ordering::SeqCst), [(key.as_bytes(), 1)]);
        }
        let last = now.load(Ordering::SeqCst);
        let records = a.records("t", last).unwrap();
        assert!(a.ranges("t") > 4, "{} ranges", a.ranges("t"));
        // However the ranges were cut, the minute's writes all went to the
        // one range at the end of the key space.
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].end, None);
        assert_eq!(records[0].counters.rows_written, 1_000);
        // Each one beyond every key before it.
        assert_eq!(records[0].counters.edge_rows, 1_000);
    }

    #[test]
    fn a_million_distinct_prefixes_stay_in_bounded_memory() {
        let (a, now) = activity(MAX_RANGES);
        let mut written = 0;
        for minute in 0..10u64 {
            let keys: Vec<String> = (0..100_000u64)
                .map(|i| {
                    format!(
                        "{:016x}#item",
                        (minute * 100_000 + i).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    )
                })
                .collect();
            for chunk in keys.chunks(1_000) {
                a.write(
                    "t",
                    now.load(Ordering::SeqCst),
                    chunk.iter().map(|k| (k.as_bytes(), 10)),
                );
                written += chunk.len() as u64;
            }
            now.fetch_add(MINUTE_MICROS, Ordering::SeqCst);
        }
        let records = a.records("t", i64::MIN).unwrap();
        assert_eq!(total(&records).rows_written, written);
        assert!(a.ranges("t") <= MAX_RANGES);
        assert!(a.ranges("t") > 100, "{} ranges", a.ranges("t"));
        // Ranges, their samples and the ten minutes held (no log here).
        let memory = a.memory("t");
        assert!(memory < 4 << 20, "{memory} bytes");
    }

    #[test]
    fn a_new_table_shows_its_shape_within_its_first_minute() {
        let (a, now) = activity(MAX_RANGES);
        for i in 0..20_000u64 {
            let key = format!(
                "{}#{:016x}",
                if i % 4 == 0 { "cold" } else { "hot" },
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            );
            a.write("t", now.load(Ordering::SeqCst), [(key.as_bytes(), 1)]);
        }
        let records = a.records("t", i64::MIN).unwrap();
        assert!(records.iter().all(|r| r.minute == records[0].minute));
        assert_eq!(total(&records).rows_written, 20_000);
        assert_eq!(total(&records).writes, 20_000);
        // Cut within the minute: more than the one range it began with,
        // and ranges of its own for each prefix.
        let hot: u64 = records
            .iter()
            .filter(|r| r.start.starts_with(b"hot#"))
            .map(|r| r.counters.rows_written)
            .sum();
        assert!(records.len() > 8, "{} records", records.len());
        assert!(hot > 5_000, "{hot} rows in ranges under hot#");
    }

    #[test]
    fn a_hot_key_makes_its_range_the_brightest() {
        let (a, now) = activity(64);
        for _ in 0..10 {
            for i in 0..3_000 {
                // One write in three to user#0042, the rest spread.
                let key = if i % 3 == 0 {
                    "user#0042".to_string()
                } else {
                    format!("user#{:04}", (i * 37) % 2_000)
                };
                a.write("t", now.load(Ordering::SeqCst), [(key.as_bytes(), 1)]);
            }
            now.fetch_add(MINUTE_MICROS, Ordering::SeqCst);
        }
        // The ranges follow the keys, not the writes: the hot key's range
        // is about as wide as the others and takes far more.
        now.fetch_sub(MINUTE_MICROS, Ordering::SeqCst);
        let last = a.records("t", now.load(Ordering::SeqCst)).unwrap();
        assert!(last.len() > 16, "{} ranges", last.len());
        let hot = last
            .iter()
            .find(|r| {
                r.start[..] <= b"user#0042"[..]
                    && r.end.as_deref().is_none_or(|e| e > &b"user#0042"[..])
            })
            .unwrap();
        let others = last
            .iter()
            .filter(|r| r.start != hot.start)
            .map(|r| r.counters.rows_written);
        let most_other = others.max().unwrap();
        assert!(
            hot.counters.rows_written > 4 * most_other,
            "{} vs {most_other}",
            hot.counters.rows_written
        );
    }
}
