//! [`Load`]: a table's key activity summed for the advisor: per piece of
//! the key space over the whole span, and how many reads covered the
//! whole table.

use crate::keys::heatmap::minute_text;
use crate::keys::pieces::KeyPieces;
use crate::store::{ActivityCounters as Counters, ActivityRecord, COUNTERS};

/// Ranges a minute must have, at least, for a read covering all of them
/// to count as a whole-table scan (of one range, every read is one).
const WHOLE_RANGES: usize = 4;

/// What the key activity of a span showed.
#[derive(Debug, Clone, Default)]
pub(super) struct Load {
    /// Minutes with activity.
    pub minutes: u64,
    /// The first and the last of them (their starts, microseconds since
    /// the epoch).
    pub span: Option<(i64, i64)>,
    /// Everything counted.
    pub total: Counters,
    /// The key space cut at every range boundary.
    pub pieces: Option<KeyPieces>,
    /// Per piece, each counter (in `METRICS` order), a range's counts
    /// spread evenly over the pieces it covers.
    pub per_piece: Vec<[f64; COUNTERS]>,
    /// Minutes with rows written.
    pub write_minutes: u64,
    /// Reads that covered every range of the table (whole-table scans),
    /// at least: per minute with at least [`WHOLE_RANGES`] ranges, the
    /// fewest reads over a piece of its key space.
    pub whole_scans: u64,
    /// Read requests, at least: per minute, the most reads over a piece
    /// of its key space.
    pub read_requests: u64,
}

impl Load {
    /// The summary of `records` (a table's, ordered by minute).
    pub fn of(records: &[ActivityRecord]) -> Load {
        let pieces = KeyPieces::of(records);
        let mut load = Load {
            per_piece: vec![[0.0; COUNTERS]; pieces.len()],
            ..Load::default()
        };
        for r in records {
            load.total.add(&r.counters);
            let covered = pieces.covered(r);
            let share = 1.0 / covered.len() as f64;
            let values = r.counters.values();
            for piece in &mut load.per_piece[covered] {
                for (p, v) in piece.iter_mut().zip(values) {
                    *p += v as f64 * share;
                }
            }
        }
        // Records come ordered by minute.
        for minute in records.chunk_by(|a, b| a.minute == b.minute) {
            load.add_minute(minute);
        }
        if let (Some(first), Some(last)) = (records.first(), records.last()) {
            load.pieces = Some(pieces);
            load.span = Some((first.minute, last.minute));
        }
        load
    }

    /// What it counted, in words: the minutes with activity (not every
    /// minute of the span need have any) and the rows written and read.
    pub fn describe(&self) -> String {
        let when = match self.span {
            None => "no minute with activity".to_string(),
            Some((first, _)) if self.minutes == 1 => {
                format!("1 minute ({} UTC)", minute_text(first))
            }
            Some((first, last)) => format!(
                "{} minutes with activity, from {} to {} UTC",
                self.minutes,
                minute_text(first),
                minute_text(last)
            ),
        };
        let reads = self.total.reads;
        format!(
            "key activity of {when}: {} rows written, {} rows read in {reads} read{}",
            self.total.rows_written,
            self.total.rows_read,
            if reads == 1 { "" } else { "s" }
        )
    }

    fn add_minute(&mut self, records: &[ActivityRecord]) {
        self.minutes += 1;
        if records.iter().any(|r| r.counters.rows_written > 0) {
            self.write_minutes += 1;
        }
        // The reads over each piece of the minute's key space: a range cut
        // within the minute is listed twice (before and after the cut),
        // both covering the keys the cut split.
        let pieces = KeyPieces::of(records);
        let mut reads = vec![0u64; pieces.len()];
        for r in records {
            for n in &mut reads[pieces.covered(r)] {
                *n += r.counters.reads;
            }
        }
        self.read_requests += reads.iter().copied().max().unwrap_or(0);
        if records.len() >= WHOLE_RANGES {
            self.whole_scans += reads.iter().copied().min().unwrap_or(0);
        }
    }

    /// Metric `i`'s total over the pieces and the piece holding the most
    /// of it with its value.
    pub fn busiest(&self, metric: usize) -> Option<(usize, f64, f64)> {
        let total: f64 = self.per_piece.iter().map(|p| p[metric]).sum();
        let (i, most) = self
            .per_piece
            .iter()
            .map(|p| p[metric])
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        Some((i, most, total))
    }
}

#[cfg(test)]
mod tests {
    use super::Load;
    use crate::store::{ActivityCounters, ActivityRecord};

    const MINUTE: i64 = 60_000_000;

    fn record(minute: i64, rows_written: u64, reads: u64) -> ActivityRecord {
        ActivityRecord {
            minute,
            start: Vec::new(),
            end: None,
            counters: ActivityCounters {
                rows_written,
                reads,
                rows_read: reads * 10,
                ..ActivityCounters::default()
            },
        }
    }

    /// The summary names the minutes with activity and the span they lie
    /// in, which may be far longer (activity kept across restarts).
    #[test]
    fn the_description_gives_the_minutes_with_activity_and_their_span() {
        // 2026-12-05 15:25 and 17:31 UTC.
        let first = 1_796_484_300 * 1_000_000;
        let last = first + 126 * MINUTE;
        let load = Load::of(&[record(first, 40, 0), record(last, 0, 3)]);
        assert_eq!(
            load.describe(),
            "key activity of 2 minutes with activity, from 2026-12-05 15:25 to \
             2026-12-05 17:31 UTC: 40 rows written, 30 rows read in 3 reads"
        );
        let one = Load::of(&[record(first, 5, 1)]);
        assert_eq!(
            one.describe(),
            "key activity of 1 minute (2026-12-05 15:25 UTC): 5 rows written, 10 rows read in 1 read"
        );
        assert_eq!(
            Load::of(&[]).describe(),
            "key activity of no minute with activity: 0 rows written, 0 rows read in 0 reads"
        );
    }
}
