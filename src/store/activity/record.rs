//! What key activity counts ([`Counters`]), one key range's counters in
//! one minute ([`ActivityRecord`]), and the bytes a minute's records are
//! kept in.

use crate::error::{Error, Result};

/// Microseconds in a minute: key activity is counted per minute.
pub const MINUTE_MICROS: i64 = 60_000_000;

/// The counters kept per key range and minute.
///
/// A read or a write is counted once in every range it touches (a scan of
/// three ranges is a read in each), with its time; the average latency
/// of the reads touching a range is `read_micros / reads`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Read requests that touched the range (a point read that found
    /// nothing counts where its key falls).
    pub reads: u64,
    /// Rows the reads returned from the range.
    pub rows_read: u64,
    /// Key-value pairs the reads scanned in the range.
    pub cells_scanned: u64,
    /// Bytes of those pairs (keys and values as stored).
    pub bytes_read: u64,
    /// Microseconds of the reads that touched the range, summed.
    pub read_micros: u64,
    /// Write requests that touched the range.
    pub writes: u64,
    /// Rows written in the range.
    pub rows_written: u64,
    /// Bytes written in the range (keys, qualifiers, values and a
    /// timestamp's 8 bytes per cell).
    pub bytes_written: u64,
    /// Microseconds of the writes that touched the range, summed.
    pub write_micros: u64,
    /// Of the reads, those in descending key order ("latest first" over
    /// a key that ends in a timestamp).
    pub reverse_reads: u64,
    /// Of the rows written, those beyond every key written to the table
    /// before them (since the store opened): after the highest or before
    /// the lowest, where a timestamp-first key sends every write.
    pub edge_rows: u64,
}

/// The counters' names, in [`Counters::values`] order: the metrics a
/// heatmap or `key_activity` can pick.
pub const METRICS: [&str; COUNTERS] = [
    "reads",
    "rows_read",
    "cells_scanned",
    "bytes_read",
    "read_micros",
    "writes",
    "rows_written",
    "bytes_written",
    "write_micros",
    "reverse_reads",
    "edge_rows",
];

/// How many counters there are.
pub const COUNTERS: usize = 11;

impl Counters {
    /// Adds `other` to these.
    pub fn add(&mut self, other: &Counters) {
        let mut values = self.values();
        for (v, o) in values.iter_mut().zip(other.values()) {
            *v = v.saturating_add(o);
        }
        *self = Counters::from_values(values);
    }

    /// Whether nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == Counters::default()
    }

    /// How busy the range was, for choosing where to split: requests and
    /// rows, read or written.
    pub fn weight(&self) -> u64 {
        self.reads
            .saturating_add(self.writes)
            .saturating_add(self.rows_read)
            .saturating_add(self.rows_written)
    }

    /// The counters in [`METRICS`] order.
    pub fn values(&self) -> [u64; COUNTERS] {
        [
            self.reads,
            self.rows_read,
            self.cells_scanned,
            self.bytes_read,
            self.read_micros,
            self.writes,
            self.rows_written,
            self.bytes_written,
            self.write_micros,
            self.reverse_reads,
            self.edge_rows,
        ]
    }

    /// Counters from values in [`METRICS`] order.
    pub fn from_values(v: [u64; COUNTERS]) -> Counters {
        Counters {
            reads: v[0],
            rows_read: v[1],
            cells_scanned: v[2],
            bytes_read: v[3],
            read_micros: v[4],
            writes: v[5],
            rows_written: v[6],
            bytes_written: v[7],
            write_micros: v[8],
            reverse_reads: v[9],
            edge_rows: v[10],
        }
    }

    /// The value of metric `name` (one of [`METRICS`]), or of the average
    /// latencies `read_latency` and `write_latency` (microseconds, 0 with
    /// no request); `None` for another name.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let average = |micros: u64, n: u64| {
            if n == 0 {
                0.0
            } else {
                micros as f64 / n as f64
            }
        };
        match name {
            "read_latency" => Some(average(self.read_micros, self.reads)),
            "write_latency" => Some(average(self.write_micros, self.writes)),
            _ => {
                let i = METRICS.iter().position(|m| *m == name)?;
                Some(self.values()[i] as f64)
            }
        }
    }
}

/// Every metric name [`Counters::metric`] knows, for error messages and
/// help.
pub fn metric_names() -> Vec<&'static str> {
    let mut names = METRICS.to_vec();
    names.extend(["read_latency", "write_latency"]);
    names
}

/// One key range's counters in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityRecord {
    /// The minute's start, microseconds since the epoch.
    pub minute: i64,
    /// The range's first row key (inclusive; empty: the first key).
    pub start: Vec<u8>,
    /// The key the range ends before; `None`: the end of the table.
    pub end: Option<Vec<u8>>,
    /// What was counted.
    pub counters: Counters,
}

/// The bytes of one minute's records of a table (the minute is in the
/// key they are kept under): a header, then the records in key order.
///
/// ```text
/// u8 1            the format (the first, without a header, began with a
///                 0 byte and had 9 counters)
/// varint c        counters per record (a reader takes those it knows
///                 and skips the rest; those missing are 0)
/// each record:
///   varint shared     bytes the start shares with the record before's start
///   varint n, n bytes the rest of the start
///   u8 end            0: the end of the table; 1: the next record's start;
///                     2: varint n, n bytes, the end key
///   c varints         the counters, in METRICS order
/// ```
///
/// A minute of a busy table's thousand ranges takes a few tens of bytes
/// per range.
pub fn encode(records: &[ActivityRecord], out: &mut Vec<u8>) {
    out.push(FORMAT);
    put_varint(out, COUNTERS as u64);
    let mut before: &[u8] = &[];
    for (i, r) in records.iter().enumerate() {
        let shared = before
            .iter()
            .zip(&r.start)
            .take_while(|(a, b)| a == b)
            .count();
        put_varint(out, shared as u64);
        put_bytes(out, &r.start[shared..]);
        match &r.end {
            None => out.push(0),
            Some(end) if records.get(i + 1).is_some_and(|n| n.start == *end) => out.push(1),
            Some(end) => {
                out.push(2);
                put_bytes(out, end);
            }
        }
        for v in r.counters.values() {
            put_varint(out, v);
        }
        before = &r.start;
    }
}

/// The header byte of [`encode`]'s format.
const FORMAT: u8 = 1;
/// Counters per record in the first format, which had no header.
const FIRST_FORMAT_COUNTERS: u64 = 9;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The records [`encode`] wrote for `minute`; an error naming what is
/// wrong when the bytes are not such records.
pub fn decode(minute: i64, bytes: &[u8]) -> Result<Vec<ActivityRecord>> {
    decode_records(minute, bytes).map_err(|what| Error::Corrupt {
        reason: format!("a key activity record of minute {minute}: {what}"),
    })
}

fn decode_records(
    minute: i64,
    mut bytes: &[u8],
) -> std::result::Result<Vec<ActivityRecord>, String> {
    let counters = match bytes.first() {
        None => return Ok(Vec::new()),
        // The first format: a record's first byte is its shared length, 0.
        Some(0) => FIRST_FORMAT_COUNTERS,
        Some(&FORMAT) => {
            bytes = &bytes[1..];
            take_varint(&mut bytes)?
        }
        Some(b) => return Err(format!("the format is marked {b}, not {FORMAT}")),
    };
    let mut records: Vec<ActivityRecord> = Vec::new();
    // Records whose end is the next record's start.
    let mut open: Option<usize> = None;
    while !bytes.is_empty() {
        let shared = usize::try_from(take_varint(&mut bytes)?).map_err(|e| e.to_string())?;
        let before = records.last().map_or(&[][..], |r| &r.start[..]);
        if shared > before.len() {
            return Err(format!(
                "a start shares {shared} bytes with one of {}",
                before.len()
            ));
        }
        let mut start = before[..shared].to_vec();
        start.extend_from_slice(take_bytes(&mut bytes)?);
        if let Some(i) = open.take() {
            records[i].end = Some(start.clone());
        }
        let (&tag, rest) = bytes
            .split_first()
            .ok_or("the end of a range is cut short")?;
        bytes = rest;
        let end = match tag {
            0 => None,
            1 => {
                open = Some(records.len());
                None
            }
            2 => Some(take_bytes(&mut bytes)?.to_vec()),
            t => return Err(format!("the end of a range is marked {t}, not 0, 1 or 2")),
        };
        let mut values = [0u64; COUNTERS];
        for i in 0..counters {
            let v = take_varint(&mut bytes)?;
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| values.get_mut(i)) {
                *slot = v;
            }
        }
        records.push(ActivityRecord {
            minute,
            start,
            end,
            counters: Counters::from_values(values),
        });
    }
    if open.is_some() {
        return Err("the last range ends at a next one that is missing".into());
    }
    Ok(records)
}

fn take_varint(bytes: &mut &[u8]) -> std::result::Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first().ok_or("a number is cut short")?;
        *bytes = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a number runs over 64 bits".into())
}

fn take_bytes<'a>(bytes: &mut &'a [u8]) -> std::result::Result<&'a [u8], String> {
    let len = take_varint(bytes)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= bytes.len())
        .ok_or_else(|| format!("a key of {len} bytes is cut short at {}", bytes.len()))?;
    let (key, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_bytes_are_refused() {
        let records = vec![
            ActivityRecord {
                minute: 120 * MINUTE_MICROS,
                start: Vec::new(),
                end: Some(b"l".to_vec()),
                counters: Counters {
                    reads: 3,
                    rows_written: u64::MAX,
                    ..Counters::default()
                },
            },
            ActivityRecord {
                minute: 120 * MINUTE_MICROS,
                start: b"m".to_vec(),
                end: Some(b"m\0\xff".to_vec()),
                counters: Counters {
                    bytes_read: 300,
                    ..Counters::default()
                },
            },
            ActivityRecord {
                minute: 120 * MINUTE_MICROS,
                start: b"m\0\xff".to_vec(),
                end: None,
                counters: Counters {
                    write_micros: 7,
                    ..Counters::default()
                },
            },
        ];
        let mut bytes = Vec::new();
        encode(&records, &mut bytes);
        assert_eq!(decode(120 * MINUTE_MICROS, &bytes).unwrap(), records);
        // Cut anywhere, the bytes are refused or decode to whole records
        // that are a beginning of the list; never a panic.
        for cut in 0..bytes.len() {
            if let Ok(got) = decode(0, &bytes[..cut]) {
                assert!(got.len() < records.len(), "cut at {cut}");
            }
        }
        let mut bad = bytes.clone();
        bad[0] = 9;
        assert!(decode(0, &bad).is_err());
    }

    #[test]
    fn records_of_the_first_format_still_read() {
        // The first format: no header, 9 counters per record.
        let mut first = vec![0, 1, b'a', 0];
        first.extend(1..=9u8);
        let got = decode(0, &first).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].start, b"a");
        assert_eq!(got[0].end, None);
        assert_eq!(got[0].counters.reads, 1);
        assert_eq!(got[0].counters.write_micros, 9);
        assert_eq!(got[0].counters.reverse_reads, 0);
        // A later format with a counter this one does not know: skipped.
        let mut later = vec![FORMAT, 12, 0, 1, b'a', 0];
        later.extend(1..=12u8);
        let got = decode(0, &later).unwrap();
        assert_eq!(got[0].counters.reverse_reads, 10);
        assert_eq!(got[0].counters.edge_rows, 11);
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn metrics_by_name() {
        let c = Counters {
            reads: 4,
            read_micros: 10,
            bytes_written: 9,
            ..Counters::default()
        };
        assert_eq!(c.metric("read_latency"), Some(2.5));
        assert_eq!(c.metric("write_latency"), Some(0.0));
        assert_eq!(c.metric("bytes_written"), Some(9.0));
        assert_eq!(c.metric("heat"), None);
    }
}
