//! The generated data: balloons of four regions reporting four measures
//! once a minute, keyed `region#balloon#YYYY-MM-DD-HHMM`, and the key
//! ranges the queries read.

use std::sync::Arc;

use datafusion::arrow::array::TimestampMicrosecondArray;
use datafusion::arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// The regions, in key order.
pub const REGIONS: [&str; 4] = ["asia-south1", "europe-west1", "us-central1", "us-west2"];

/// 2026-01-01T00:00:00Z in microseconds.
const START_MICROS: i64 = 1_767_225_600_000_000;

/// How much data: balloons per region and minutes per balloon.
#[derive(Clone, Copy)]
pub struct Size {
    pub balloons: u32,
    pub minutes: u32,
}

impl Size {
    pub fn rows(self) -> u64 {
        REGIONS.len() as u64 * u64::from(self.balloons) * u64::from(self.minutes)
    }

    /// Balloon number `i` of a region (4 digits in the key).
    fn balloon(i: u32) -> u32 {
        1000 + i
    }

    /// The key prefix of one balloon, `region#1042#`.
    pub fn balloon_prefix(self, region: usize, i: u32) -> String {
        format!("{}#{}#", REGIONS[region], Self::balloon(i))
    }

    /// The key range `[lo, hi)` of `n` consecutive balloons of the second
    /// region: a `n / (4 × balloons)` fraction of the rows.
    /// Starting `shift` balloons further gives another range of the same
    /// size: the same query typed with other literals.
    pub fn balloon_range_at(self, n: u32, shift: u32) -> (String, String) {
        let first = self.balloons / 3 + shift;
        (
            self.balloon_prefix(1, first),
            self.balloon_prefix(1, first + n),
        )
    }

    /// The balloon numbers `[lo, hi)` of [`Size::balloon_range_at`] (of
    /// the second region): the same rows as its key range.
    pub fn balloon_numbers_at(self, n: u32, shift: u32) -> (u32, u32) {
        let first = self.balloons / 3 + shift;
        (Self::balloon(first), Self::balloon(first + n))
    }

    /// One reading's key and its minute, for the point lookup (`shift`
    /// balloons and minutes further: another reading).
    pub fn point_at(self, shift: u32) -> (String, i64) {
        let minute = self.minutes / 2 + 7 + shift;
        let micros = START_MICROS + i64::from(minute) * 60_000_000;
        (
            format!(
                "{}{}",
                self.balloon_prefix(2, self.balloons / 2 + shift),
                minute_text(micros)
            ),
            micros,
        )
    }
}

impl Size {
    /// The series of the point lookup (region, balloon number) and the
    /// time of its reading.
    pub fn series_point(self) -> (&'static str, u32, i64) {
        let minute = self.minutes / 2 + 7;
        (
            REGIONS[2],
            Self::balloon(self.balloons / 2),
            START_MICROS + i64::from(minute) * 60_000_000,
        )
    }
}

/// `YYYY-MM-DD-HHMM` of a time.
pub fn minute_text(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d-%H%M").to_string())
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SS` of a time, for SQL literals.
pub fn sql_time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default()
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The schema of the readings: `key`, `ts`, four measures.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("pressure", DataType::Float64, false),
        Field::new("temperature", DataType::Float64, false),
        Field::new("humidity", DataType::Float64, false),
        Field::new("altitude", DataType::Float64, false),
    ]))
}

/// Every reading in key order, one batch per balloon.
pub fn batches(size: Size) -> Vec<RecordBatch> {
    let schema = schema();
    let mut out = Vec::new();
    for region in 0..REGIONS.len() {
        for b in 0..size.balloons {
            let prefix = size.balloon_prefix(region, b);
            let n = size.minutes as usize;
            let (mut keys, mut times) = (Vec::with_capacity(n), Vec::with_capacity(n));
            let mut measures: [Vec<f64>; 4] = Default::default();
            for m in 0..size.minutes {
                let micros = START_MICROS + i64::from(m) * 60_000_000;
                keys.push(format!("{prefix}{}", minute_text(micros)));
                times.push(micros);
                let h = splitmix(((region as u64) << 48) ^ (u64::from(b) << 24) ^ u64::from(m));
                measures[0].push(90_000.0 + (h % 100_000) as f64 / 10.0);
                measures[1].push(-40.0 + ((h >> 17) % 8_000) as f64 / 100.0);
                measures[2].push(((h >> 31) % 1_000) as f64 / 10.0);
                measures[3].push(10_000.0 + ((h >> 43) % 200_000) as f64 / 8.0);
            }
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(TimestampMicrosecondArray::from(times)),
            ];
            for m in measures {
                columns.push(Arc::new(Float64Array::from(m)));
            }
            match RecordBatch::try_new(Arc::clone(&schema), columns) {
                Ok(batch) => out.push(batch),
                Err(e) => panic!("the generated batch does not fit its schema: {e}"),
            }
        }
    }
    out
}
