//! The rules about where reads and writes land in the key space, from
//! the guides' row-key advice: a timestamp (or a sequential id) first
//! sends every write to one end; one range taking most of the load is a
//! hotspot; a salt spreads load only as evenly as its buckets fill;
//! "latest first" reads suit a reversed timestamp; reads that scan the
//! whole table for one entity suit field promotion.

use super::load::Load;
use super::sample::DISTINCT_CAP;
use super::shape::Lead;
use super::{Evidence, Finding, Severity, percent};
use crate::codec::show_bytes;
use crate::keys::pieces::prefix_label;
use crate::store::METRICS;

/// Rows (or reads) counted, at least, before a share of them is evidence.
const MIN_COUNTED: f64 = 100.0;
/// The share of rows written beyond every key before them that makes a
/// timestamp-first finding, where the key leads with a time or a number ...
const END_SHARE: f64 = 0.5;
/// ... and where it leads with text, over at least this many minutes.
const OTHER_END_SHARE: f64 = 0.9;
const OTHER_MINUTES: u64 = 5;
/// Pieces of the key space, at least, for one to be called hot.
const HOT_PIECES: usize = 8;
/// A hot piece's share of a metric, at least ...
const HOT_SHARE: f64 = 0.25;
/// ... and its multiple of the even share, at least.
const HOT_MULTIPLE: f64 = 5.0;
/// How far a salt bucket's load may stray from the mean, as a share of
/// the mean, before the buckets are called uneven.
const SALT_SPREAD: f64 = 0.5;
/// The share of a metric pieces reaching over several salt buckets may
/// hold, at most, for the rest to compare the buckets.
const SPANNING_SHARE: f64 = 0.1;
/// Reads, at least, before their direction or reach is evidence.
const MIN_READS: u64 = 10;
/// The share of reads that must go newest first (or scan everything).
const READ_SHARE: f64 = 0.5;

/// The position of `name` in [`METRICS`] (a test checks that each name
/// used here is there).
fn metric(name: &str) -> Option<usize> {
    METRICS.iter().position(|m| *m == name)
}

/// Every finding of these rules.
pub(super) fn findings(e: &Evidence) -> Vec<Finding> {
    let mut out = Vec::new();
    let first = timestamp_first(e);
    let at_an_end = first.is_some();
    out.extend(first);
    out.extend(hot_ranges(e, at_an_end));
    out.extend(salt_balance(e));
    out.extend(reversed_timestamp(e));
    out.extend(field_promotion(e));
    out
}

fn timestamp_first(e: &Evidence) -> Option<Finding> {
    let shape = &e.shape;
    let lead = match shape.lead {
        Lead::Time { reversed: false } => "a timestamp",
        Lead::Time { reversed: true } => "a reversed timestamp",
        Lead::Number => "a number",
        Lead::Salt | Lead::Other => "a growing segment",
    };
    let advice = "Never put a timestamp or a sequential id first in the row key: every new row \
                  lands at the same end of the key space, so one node takes every write while \
                  the others idle. Promote the entity ahead of it (field promotion: \
                  DEVICE#TIMESTAMP) or, with no entity to promote, put a salt first \
                  (SALT(n) OF (...)), at the cost of reading every bucket."
        .to_string();
    // Rows written beyond every key before them: appends at an end.
    let at_end = e.load.as_ref().and_then(|load| {
        let (edge, rows) = (load.total.edge_rows as f64, load.total.rows_written as f64);
        let share = match shape.lead {
            Lead::Time { .. } | Lead::Number => END_SHARE,
            // Text that only grows (an order number with a prefix) shows
            // by its writes alone, over longer than a sorted bulk load.
            Lead::Other if load.write_minutes >= OTHER_MINUTES => OTHER_END_SHARE,
            _ => return None,
        };
        (rows >= MIN_COUNTED && edge >= share * rows).then_some((edge, rows))
    });
    match at_end {
        Some((edge, rows)) => Some(Finding {
            severity: Severity::Warning,
            rule: "timestamp-first-key",
            subject: format!("{} ({lead})", shape.lead_name),
            evidence: format!(
                "{edge:.0} of the {rows:.0} rows written ({}) went beyond every key written \
                 before them, to an end of the key space; the key is {}",
                percent(edge, rows),
                shape.describe()
            ),
            advice,
        }),
        None if matches!(shape.lead, Lead::Time { .. }) => Some(Finding {
            severity: Severity::Warning,
            rule: "timestamp-first-key",
            subject: format!("{} ({lead})", shape.lead_name),
            evidence: format!(
                "the key is {} (no writes counted yet to show where they land)",
                shape.describe()
            ),
            advice,
        }),
        None => None,
    }
}

fn hot_ranges(e: &Evidence, writes_at_an_end: bool) -> Vec<Finding> {
    let Some(load) = &e.load else {
        return Vec::new();
    };
    let Some(pieces) = &load.pieces else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, what) in [("rows_written", "rows written"), ("reads", "reads")] {
        if name == "rows_written" && writes_at_an_end {
            continue;
        }
        let Some((i, most, total)) = metric(name).and_then(|m| load.busiest(m)) else {
            continue;
        };
        let n = pieces.len();
        let even = 1.0 / n as f64;
        if n < HOT_PIECES
            || total < MIN_COUNTED
            || most < HOT_SHARE * total
            || most < HOT_MULTIPLE * even * total
        {
            continue;
        }
        let start = pieces.bound(i).unwrap_or_default();
        let end = pieces
            .bound(i + 1)
            .map_or("the end".to_string(), |e| format!("'{}'", show_bytes(e)));
        // The key prefix, or the two the piece lies between.
        let subject = {
            let first = prefix_label(start, e.shape.delimiter);
            match pieces
                .bound(i + 1)
                .map(|b| prefix_label(b, e.shape.delimiter))
            {
                Some(last) if last != first => format!("{first} to {last}"),
                _ => first,
            }
        };
        out.push(Finding {
            severity: Severity::Warning,
            rule: "hot-range",
            subject,
            evidence: format!(
                "the keys from '{}' to {end} (1 of {n} pieces of the key space) took {} of the \
                 {total:.0} {what}; an even share is {}",
                show_bytes(start),
                percent(most, total),
                percent(1.0, n as f64)
            ),
            advice: format!(
                "One range taking most of the {what} is a hotspot: that node's throughput is \
                 the table's. If one row takes them, spread it (rows per time bucket, or a \
                 copy per reader); if a prefix does, put a field that varies more ahead of it \
                 in the key, or salt it."
            ),
        });
    }
    out
}

fn salt_balance(e: &Evidence) -> Vec<Finding> {
    let shape = &e.shape;
    let buckets = shape.salt_buckets.len();
    if shape.lead != Lead::Salt || buckets < 2 {
        return Vec::new();
    }
    // The rows each bucket holds, where the store counts them cheaply
    // (exact); else the key activity per bucket, where its ranges are
    // fine enough to tell the buckets apart.
    let mut loads: Vec<(Vec<f64>, &str)> = Vec::new();
    if let Some(rows) = &e.bucket_rows {
        loads.push((rows.iter().map(|&r| r as f64).collect(), "rows held"));
    } else if let Some(load) = &e.load {
        for (name, what) in [("rows_written", "rows written"), ("reads", "reads")] {
            if let Some(per_bucket) = metric(name).and_then(|m| by_bucket(e, load, m)) {
                loads.push((per_bucket, what));
            }
        }
    }
    let mut out = Vec::new();
    for (per_bucket, what) in loads {
        let total: f64 = per_bucket.iter().sum();
        if total < MIN_COUNTED.max(20.0 * buckets as f64) {
            continue;
        }
        let mean = total / buckets as f64;
        let (hi, most) = extreme(&per_bucket, f64::total_cmp);
        let (lo, least) = extreme(&per_bucket, |a, b| b.total_cmp(a));
        if most <= mean * (1.0 + SALT_SPREAD) && least >= mean * (1.0 - SALT_SPREAD) {
            continue;
        }
        let each: Vec<String> = shape
            .salt_buckets
            .iter()
            .zip(&per_bucket)
            .map(|(b, v)| format!("{b} {}", percent(*v, total)))
            .collect();
        out.push(Finding {
            severity: Severity::Warning,
            rule: "salt-balance",
            subject: format!("{} ({buckets} buckets)", shape.lead_name),
            evidence: format!(
                "bucket '{}' took {} of the {total:.0} {what} and bucket '{}' {}; an even \
                 share is {}, and a bucket may stray from it by {} of it (every bucket: {})",
                shape.salt_buckets[hi],
                percent(most, total),
                shape.salt_buckets[lo],
                percent(least, total),
                percent(1.0, buckets as f64),
                percent(SALT_SPREAD, 1.0),
                each.join(", ")
            ),
            advice: "A salt spreads load only as evenly as its buckets fill: derive it from a \
                     hash of what varies with every row (SALT(n) OF (ts, id) hashes those \
                     segments), not from a value a few rows share; and keep as few buckets as \
                     the load needs, since a read of a time range reads every bucket."
                .into(),
        });
    }
    out
}

/// Metric `m` of the key activity per salt bucket; `None` while the
/// ranges are too few to tell the buckets apart (a piece reaching over
/// several buckets says nothing of how they compare, and is left out;
/// when such pieces hold more than [`SPANNING_SHARE`] of the metric, the
/// rest is no evidence).
fn by_bucket(e: &Evidence, load: &Load, m: usize) -> Option<Vec<f64>> {
    let shape = &e.shape;
    let pieces = load.pieces.as_ref()?;
    let buckets = shape.salt_buckets.len();
    let mut per_bucket = vec![0.0f64; buckets];
    let mut spanning = 0.0;
    for (i, piece) in load.per_piece.iter().enumerate() {
        let from = shape
            .salt_of(pieces.bound(i).unwrap_or_default())
            .unwrap_or(0);
        let to = match pieces.bound(i + 1) {
            None => buckets - 1,
            Some(end) => shape.salt_before(end).unwrap_or(0),
        };
        if from == to {
            per_bucket[from] += piece[m];
        } else {
            spanning += piece[m];
        }
    }
    let total: f64 = per_bucket.iter().sum();
    (spanning <= SPANNING_SHARE * (total + spanning)).then_some(per_bucket)
}

/// The index and value of the first largest element by `order`.
fn extreme(values: &[f64], order: impl Fn(&f64, &f64) -> std::cmp::Ordering) -> (usize, f64) {
    let mut best = (0, values.first().copied().unwrap_or_default());
    for (i, v) in values.iter().enumerate() {
        if order(v, &best.1).is_gt() {
            best = (i, *v);
        }
    }
    best
}

fn reversed_timestamp(e: &Evidence) -> Option<Finding> {
    let load = e.load.as_ref()?;
    let time = e.shape.ascending_time_last.as_ref()?;
    let (reverse, reads) = (load.total.reverse_reads, load.total.reads);
    if reverse < MIN_READS || (reverse as f64) < READ_SHARE * reads as f64 {
        return None;
    }
    Some(Finding {
        severity: Severity::Suggestion,
        rule: "reversed-timestamp",
        subject: time.clone(),
        evidence: format!(
            "{reverse} of the {reads} range reads ({}) went in descending key order, newest \
             first, over keys ending in {time}, an ascending time",
            percent(reverse as f64, reads as f64)
        ),
        advice: "Where the usual question is an entity's latest events, write the time reversed \
                 (TIMESTAMP ... REVERSED: i64::MAX - t) so the newest row sorts first and a \
                 forward read with a LIMIT finds it at once (the guides' reversed timestamps); \
                 keep it ascending if ranges of time are read oldest first as often."
            .into(),
    })
}

fn field_promotion(e: &Evidence) -> Option<Finding> {
    let load: &Load = e.load.as_ref()?;
    let (whole, requests) = (load.whole_scans, load.read_requests);
    if whole < MIN_READS || (whole as f64) < READ_SHARE * requests as f64 {
        return None;
    }
    let rows = e.sample.rows();
    if (rows as f64) < MIN_COUNTED {
        return None;
    }
    // A column most rows hold, whose values repeat: an entity.
    let entity = e
        .sample
        .columns
        .iter()
        .filter(|(_, s)| {
            // (A column whose distinct values filled the sample's memory
            // of them is not known to repeat.)
            let distinct = s.distinct.len() as u64;
            s.distinct.len() < DISTINCT_CAP
                && s.rows * 10 >= rows * 9
                && distinct >= 2
                && distinct * 4 <= rows
        })
        .max_by_key(|(_, s)| s.distinct.len());
    let per_scan = load.total.rows_read as f64 / whole.max(1) as f64;
    let (subject, which) = match entity {
        Some((column, s)) => {
            let name = e
                .column_names
                .get(column)
                .cloned()
                .unwrap_or(column.clone());
            (
                name.clone(),
                format!(
                    "; column {name} holds {} distinct values over the {rows} sampled rows, \
                     each repeated: an entity such reads may pick",
                    s.distinct.len()
                ),
            )
        }
        None => (e.table.clone(), String::new()),
    };
    Some(Finding {
        severity: Severity::Suggestion,
        rule: "field-promotion",
        subject,
        evidence: format!(
            "{whole} of at least {requests} reads scanned every range of the table (about \
             {per_scan:.0} rows each){which}"
        ),
        advice: "If these reads ask for one entity (a user, a device) by a column, each one \
                 scans the whole table: promote that field into the row key, ahead of the time \
                 (field promotion: USER#TIMESTAMP), so reading one entity is a prefix scan of \
                 its rows. Analytic scans of everything are fine as they are."
            .into(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_metric_named_here_is_counted() {
        for name in ["rows_written", "reads"] {
            assert!(super::metric(name).is_some(), "{name}");
        }
    }
}
