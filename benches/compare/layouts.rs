//! The queries, written once for a plain relational table (the peers) and
//! once for each of cellar's layouts of the same readings.

use crate::data::{Size, minute_text, sql_time};

/// One measured question, with the SQL each engine answers it with.
pub struct Query {
    pub name: String,
    /// For a table `readings(key, ts, pressure, temperature, humidity,
    /// altitude)`: SQLite, DuckDB, DataFusion over Parquet.
    pub plain: String,
    /// Per cellar layout, in the order of [`LAYOUTS`].
    pub cellar: Vec<String>,
}

/// A cellar layout of the readings: how its table is made and filled.
pub struct Layout {
    pub name: &'static str,
    pub table: &'static str,
    pub create: &'static str,
    /// `INSERT ... SELECT` from `bench.readings` (the Parquet file).
    pub ingest: &'static str,
    /// Whether the table is left to the background compaction after its
    /// load (a table created with no format), rather than compacted.
    pub settles: bool,
}

/// The ingest of a tall layout: a row per reading, four columns.
macro_rules! tall_ingest {
    ($table:literal) => {
        concat!(
            "INSERT INTO ",
            $table,
            " (_key, pressure, temperature, humidity, altitude) \
             SELECT key, pressure, temperature, humidity, altitude FROM bench.readings"
        )
    };
}

/// The guide's layouts: tall and narrow in both formats, one serialized
/// protobuf per event, and the two time-bucket layouts (a row per balloon
/// and hour; a new cell per minute, or a new column per minute).
pub const LAYOUTS: [Layout; 6] = [
    Layout {
        name: "tall default",
        table: "tall_default",
        create: "CREATE TABLE tall_default (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
                 FAMILY m, pressure DOUBLE IN m, temperature DOUBLE IN m, humidity DOUBLE IN m, altitude DOUBLE IN m)",
        ingest: tall_ingest!("tall_default"),
        settles: true,
    },
    Layout {
        name: "tall CELLS",
        table: "tall_cells",
        create: "CREATE TABLE tall_cells (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
                 FAMILY m FORMAT CELLS, pressure DOUBLE IN m, temperature DOUBLE IN m, humidity DOUBLE IN m, altitude DOUBLE IN m)",
        ingest: tall_ingest!("tall_cells"),
        settles: false,
    },
    Layout {
        name: "tall PACKED",
        table: "tall_packed",
        create: "CREATE TABLE tall_packed (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
                 FAMILY m FORMAT PACKED, pressure DOUBLE IN m, temperature DOUBLE IN m, humidity DOUBLE IN m, altitude DOUBLE IN m)",
        ingest: tall_ingest!("tall_packed"),
        settles: false,
    },
    Layout {
        name: "protobuf",
        table: "serialized",
        create: "CREATE TABLE serialized (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
                 FAMILY m FORMAT PACKED, r PROTO 'bench.Reading' IN m)",
        ingest: "INSERT INTO serialized (_key, r) SELECT key, named_struct('pressure', pressure, 'temperature', temperature, \
                 'humidity', humidity, 'altitude', altitude) FROM bench.readings",
        settles: false,
    },
    Layout {
        name: "bucket cells",
        table: "bucket_cells",
        create: "CREATE TABLE bucket_cells (ROW KEY (region TEXT, balloon INT(4), hour TIMESTAMP '%Y-%m-%d-%H'), \
                 FAMILY m FORMAT PACKED, pressure DOUBLE IN m, temperature DOUBLE IN m, humidity DOUBLE IN m, altitude DOUBLE IN m)",
        ingest: "INSERT INTO bucket_cells (_key, _timestamp, pressure, temperature, humidity, altitude) \
                 SELECT substr(key, 1, length(key) - 2), ts, pressure, temperature, humidity, altitude FROM bench.readings",
        settles: false,
    },
    Layout {
        name: "bucket columns",
        table: "bucket_columns",
        create: "CREATE TABLE bucket_columns (ROW KEY (region TEXT, balloon INT(4), hour TIMESTAMP '%Y-%m-%d-%H'), \
                 FAMILY pressure QUALIFIERS TEXT VALUES DOUBLE FORMAT PACKED, \
                 FAMILY temperature QUALIFIERS TEXT VALUES DOUBLE FORMAT PACKED, \
                 FAMILY humidity QUALIFIERS TEXT VALUES DOUBLE FORMAT PACKED, \
                 FAMILY altitude QUALIFIERS TEXT VALUES DOUBLE FORMAT PACKED)",
        // Each minute's cells stamped with its minute, as a balloon's
        // writes a minute apart would be (and as the bucket cells are).
        ingest: "INSERT INTO bucket_columns (_key, _timestamp, pressure, temperature, humidity, altitude) \
                 SELECT substr(key, 1, length(key) - 2), ts, map([right(key, 2)], [pressure]), map([right(key, 2)], [temperature]), \
                 map([right(key, 2)], [humidity]), map([right(key, 2)], [altitude]) FROM bench.readings",
        settles: false,
    },
];

/// The protobuf message of the serialized layout.
pub const PROTO: &str = "CREATE PROTO 'bench.proto' AS 'syntax = \"proto3\"; package bench; \
    message Reading { double pressure = 1; double temperature = 2; double humidity = 3; double altitude = 4; }'";

fn range_filter(column: &str, range: Option<&(String, String)>) -> String {
    match range {
        Some((lo, hi)) => format!(" WHERE {column} >= '{lo}' AND {column} < '{hi}'"),
        None => String::new(),
    }
}

/// Every query of the comparison, for a data set of `size`.
pub fn queries(size: Size) -> Vec<Query> {
    queries_at(size, 0)
}

/// How many versions of each query with other literals a query planned
/// afresh cycles through.
pub const VARIANTS: u32 = 16;

/// [`queries`] with other literals: the point and the ranges `shift`
/// balloons (and the point `shift` minutes) further. The queries over
/// every row have none and stay as they are.
pub fn queries_at(size: Size, shift: u32) -> Vec<Query> {
    let mut out = Vec::new();
    let (key, micros) = size.point_at(shift);
    let hour_key = &key[..key.len() - 2];
    let minute = &minute_text(micros)[13..];
    let tall_point = |t: &str| {
        format!("SELECT pressure, temperature, humidity, altitude FROM {t} WHERE _key = '{key}'")
    };
    out.push(Query {
        name: "point lookup".into(),
        plain: format!(
            "SELECT pressure, temperature, humidity, altitude FROM readings WHERE key = '{key}'"
        ),
        cellar: vec![
            tall_point("tall_default"),
            tall_point("tall_cells"),
            tall_point("tall_packed"),
            format!(
                "SELECT r['pressure'], r['temperature'], r['humidity'], r['altitude'] FROM serialized WHERE _key = '{key}'"
            ),
            format!(
                "SELECT pressure, temperature, humidity, altitude FROM versions('bucket_cells') \
                 WHERE _key = '{hour_key}' AND _timestamp = TIMESTAMP '{}'",
                sql_time(micros)
            ),
            format!(
                "SELECT pressure['{minute}'], temperature['{minute}'], humidity['{minute}'], altitude['{minute}'] \
                 FROM bucket_columns WHERE _key = '{hour_key}'"
            ),
        ],
    });
    let total = 4 * size.balloons;
    let ranges = [(1, "0.1 %"), (10, "1 %"), (total, "100 %")];
    for (balloons, label) in ranges {
        let range = (balloons < total).then(|| size.balloon_range_at(balloons, shift));
        let range = range.as_ref();
        let tall = |t: &str, avg: &str| {
            format!(
                "SELECT count(*), avg({avg}) FROM {t}{}",
                range_filter("_key", range)
            )
        };
        out.push(Query {
            name: format!("count+avg {label}"),
            plain: format!(
                "SELECT count(*), avg(pressure) FROM readings{}",
                range_filter("key", range)
            ),
            cellar: vec![
                tall("tall_default", "pressure"),
                tall("tall_cells", "pressure"),
                tall("tall_packed", "pressure"),
                tall("serialized", "r['pressure']"),
                tall("versions('bucket_cells')", "pressure"),
                tall("cells('bucket_columns', 'pressure')", "value"),
            ],
        });
    }
    for (balloons, label) in [(1, "0.1 %"), (total, "100 %")] {
        let range = (balloons < total).then(|| size.balloon_range_at(balloons, shift));
        let range = range.as_ref();
        let tall = |t: &str, avg: &str| {
            format!(
                "SELECT substr(_key, 1, length(_key) - 2) AS hour, avg({avg}) FROM {t}{} GROUP BY 1",
                range_filter("_key", range)
            )
        };
        let bucket = |t: &str, avg: &str| {
            format!(
                "SELECT _key AS hour, avg({avg}) FROM {t}{} GROUP BY _key",
                range_filter("_key", range)
            )
        };
        out.push(Query {
            name: format!("hourly avg {label}"),
            plain: format!(
                "SELECT substr(key, 1, length(key) - 2) AS hour, avg(pressure) FROM readings{} GROUP BY 1",
                range_filter("key", range)
            ),
            cellar: vec![
                tall("tall_default", "pressure"),
                tall("tall_cells", "pressure"),
                tall("tall_packed", "pressure"),
                tall("serialized", "r['pressure']"),
                bucket("versions('bucket_cells')", "pressure"),
                bucket("cells('bucket_columns', 'pressure')", "value"),
            ],
        });
    }
    // The same question as the user writes it: grouped by the key's
    // segments and the hour of its time, filtered by segments; its
    // groups labelled as the key prefix the tuned shape groups by (on
    // the groups, not the rows), so that every engine's answer compares.
    for (balloons, label) in [(1, "0.1 %"), (total, "100 %")] {
        let range = (balloons < total).then(|| size.balloon_range_at(balloons, shift));
        let filter = match balloons < total {
            true => {
                let (lo, hi) = size.balloon_numbers_at(balloons, shift);
                format!(
                    " WHERE region = '{}' AND balloon >= {lo} AND balloon < {hi}",
                    crate::data::REGIONS[1]
                )
            }
            false => String::new(),
        };
        let natural = |t: &str, avg: &str| {
            format!(
                "SELECT concat(region, '#', CAST(balloon AS VARCHAR), '#', to_char(h, '%Y-%m-%d-%H')) AS hour, a \
                 FROM (SELECT region, balloon, date_trunc('hour', ts) AS h, avg({avg}) AS a FROM {t}{filter} \
                 GROUP BY region, balloon, date_trunc('hour', ts))"
            )
        };
        let bucket = |t: &str, avg: &str| {
            format!(
                "SELECT _key AS hour, avg({avg}) FROM {t}{} GROUP BY _key",
                range_filter("_key", range.as_ref())
            )
        };
        out.push(Query {
            name: format!("hourly avg natural {label}"),
            plain: format!(
                "SELECT substr(key, 1, length(key) - 2) AS hour, avg(pressure) FROM readings{} GROUP BY 1",
                range_filter("key", range.as_ref())
            ),
            cellar: vec![
                natural("tall_default", "pressure"),
                natural("tall_cells", "pressure"),
                natural("tall_packed", "pressure"),
                natural("serialized", "r['pressure']"),
                bucket("versions('bucket_cells')", "pressure"),
                bucket("cells('bucket_columns', 'pressure')", "value"),
            ],
        });
    }
    out
}
