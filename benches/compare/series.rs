//! The series section (`--layouts`): the same events written through
//! `CREATE SERIES` in each of the guides' layouts, the same series SQL
//! asked of every layout, and SQLite (primary key region, balloon, ts)
//! and DuckDB on the same events. Prints, per layout, bytes on disk per
//! event, ingest events/s and each query's time, every answer checked
//! equal, and draws the figures as an SVG chart.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cellar::SqlSession;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use crate::answers::{self, Answer};
use crate::data::{self, Size, sql_time};

/// A series layout of the bench: its name in the report and its clause.
pub struct SeriesLayout {
    pub name: &'static str,
    pub clause: &'static str,
}

/// Every layout measured, in the guide's order: tall and narrow, then
/// time buckets.
pub const SERIES_LAYOUTS: [SeriesLayout; 10] = [
    SeriesLayout {
        name: "row per event, CELLS",
        clause: "ROW PER EVENT FORMAT CELLS",
    },
    SeriesLayout {
        name: "row per event, PACKED",
        clause: "ROW PER EVENT FORMAT PACKED",
    },
    SeriesLayout {
        name: "row per event, salt 4, reversed",
        clause: "ROW PER EVENT SALT 4 REVERSED FORMAT PACKED",
    },
    SeriesLayout {
        name: "serialized (protobuf), row per event",
        clause: "SERIALIZED FORMAT PACKED",
    },
    SeriesLayout {
        name: "hour buckets, cell per event, CELLS",
        clause: "BUCKET '1 hour' CELL PER EVENT FORMAT CELLS",
    },
    SeriesLayout {
        name: "hour buckets, cell per event",
        clause: "BUCKET '1 hour' CELL PER EVENT FORMAT PACKED",
    },
    SeriesLayout {
        name: "day buckets, cell per event",
        clause: "BUCKET '1 day' CELL PER EVENT FORMAT PACKED",
    },
    SeriesLayout {
        name: "day buckets, cell per event, no FORMAT",
        clause: "BUCKET '1 day' CELL PER EVENT",
    },
    SeriesLayout {
        name: "serialized, hour buckets",
        clause: "SERIALIZED BUCKET '1 hour' FORMAT PACKED",
    },
    SeriesLayout {
        name: "hour buckets, column per event",
        clause: "BUCKET '1 hour' COLUMN PER EVENT FORMAT PACKED",
    },
];

/// The table of layout `i` of [`SERIES_LAYOUTS`].
fn series_table(i: usize) -> String {
    format!("series_{i}")
}

/// How many times the per-series questions are measured: the first with
/// the load, the others in turns with the peers' rounds after every
/// layout is loaded. Each engine keeps its best median. The machine's
/// slow spells last seconds to minutes and can double a query's time, so
/// a single median of one engine taken in a spell (and another's not)
/// decides a ratio; the best of rounds spread over minutes does not.
pub const ROUNDS: usize = 3;

/// The point lookup among [`queries`]: one event of one series.
const ONE_EVENT: &str = "one event";

/// One question, in cellar's series SQL (the same for every layout) and
/// in the peers' SQL over `events`.
pub struct SeriesQuery {
    pub name: &'static str,
    pub cellar: String,
    pub sqlite: String,
    pub duckdb: String,
    /// A question about one series (milliseconds at most): measured in
    /// every round, where the whole-table aggregate is measured once.
    pub per_series: bool,
}

/// The questions the guides' claims are about: the latest value of one
/// series, one series over an hour and over a day, and the per-hour
/// average over every series and all time.
pub fn queries(size: Size) -> Vec<SeriesQuery> {
    let (region, balloon, minute) = size.series_point();
    let hour = minute - minute.rem_euclid(3_600_000_000);
    let day = minute - minute.rem_euclid(86_400_000_000);
    let one = format!("region = '{region}' AND balloon = {balloon}");
    let span = |name: &'static str, from: i64, len: i64| SeriesQuery {
        name,
        cellar: format!(
            "SELECT CAST(ts AS BIGINT) AS t, pressure, temperature, humidity, altitude FROM {{t}} \
             WHERE {one} AND ts >= TIMESTAMP '{}' AND ts < TIMESTAMP '{}'",
            sql_time(from),
            sql_time(from + len)
        ),
        sqlite: format!(
            "SELECT ts, pressure, temperature, humidity, altitude FROM events \
             WHERE {one} AND ts >= {from} AND ts < {}",
            from + len
        ),
        duckdb: format!(
            "SELECT epoch_us(ts), pressure, temperature, humidity, altitude FROM events \
             WHERE {one} AND ts >= TIMESTAMP '{}' AND ts < TIMESTAMP '{}'",
            sql_time(from),
            sql_time(from + len)
        ),
        per_series: true,
    };
    vec![
        SeriesQuery {
            name: "latest of one series",
            cellar: format!(
                "SELECT CAST(ts AS BIGINT) AS t, pressure FROM {{t}} WHERE {one} ORDER BY ts DESC LIMIT 1"
            ),
            sqlite: format!("SELECT ts, pressure FROM events WHERE {one} ORDER BY ts DESC LIMIT 1"),
            duckdb: format!(
                "SELECT epoch_us(ts), pressure FROM events WHERE {one} ORDER BY ts DESC LIMIT 1"
            ),
            per_series: true,
        },
        SeriesQuery {
            name: ONE_EVENT,
            cellar: format!(
                "SELECT CAST(ts AS BIGINT) AS t, pressure, temperature, humidity, altitude FROM {{t}} \
                 WHERE {one} AND ts = TIMESTAMP '{}'",
                sql_time(minute)
            ),
            sqlite: format!(
                "SELECT ts, pressure, temperature, humidity, altitude FROM events \
                 WHERE {one} AND ts = {minute}"
            ),
            duckdb: format!(
                "SELECT epoch_us(ts), pressure, temperature, humidity, altitude FROM events \
                 WHERE {one} AND ts = TIMESTAMP '{}'",
                sql_time(minute)
            ),
            per_series: true,
        },
        span("one series, 1 hour", hour, 3_600_000_000),
        span("one series, 1 day", day, 86_400_000_000),
        SeriesQuery {
            name: "hourly avg, all series",
            cellar:
                "SELECT CAST(date_trunc('hour', ts) AS BIGINT), avg(pressure) FROM {t} GROUP BY 1"
                    .into(),
            sqlite: "SELECT ts / 3600000000 * 3600000000, avg(pressure) FROM events GROUP BY 1"
                .into(),
            duckdb: "SELECT epoch_us(date_trunc('hour', ts)), avg(pressure) FROM events GROUP BY 1"
                .into(),
            per_series: false,
        },
    ]
}

/// The events as a Parquet file: region, balloon, ts and four measures.
pub async fn write_events(size: Size, path: &Path) {
    let mut batches = Vec::new();
    let mut schema = None;
    for batch in data::batches(size) {
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let mut parts = keys.iter().map(|k| {
            let mut p = k.unwrap().split('#');
            (
                p.next().unwrap().to_string(),
                p.next().unwrap().parse::<i64>().unwrap(),
            )
        });
        let (regions, balloons): (Vec<String>, Vec<i64>) = parts.by_ref().unzip();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(regions)),
            Arc::new(Int64Array::from(balloons)),
        ];
        columns.extend(batch.columns()[1..].iter().cloned());
        let fields: Vec<Field> = [
            Field::new("region", DataType::Utf8, false),
            Field::new("balloon", DataType::Int64, false),
        ]
        .into_iter()
        .chain(
            batch.schema().fields()[1..]
                .iter()
                .map(|f| f.as_ref().clone()),
        )
        .collect();
        let s = schema.get_or_insert_with(|| Arc::new(Schema::new(fields)));
        batches.push(RecordBatch::try_new(Arc::clone(s), columns).unwrap());
    }
    let ctx = SessionContext::new();
    let table = MemTable::try_new(schema.unwrap(), vec![batches]).unwrap();
    ctx.read_table(Arc::new(table))
        .unwrap()
        .write_parquet(
            path.to_str().unwrap(),
            DataFrameWriteOptions::new().with_single_file_output(true),
            None,
        )
        .await
        .unwrap();
}

/// A layout's or a peer's figures.
#[derive(Default)]
pub struct Figures {
    /// Seconds to load the events, and bytes on disk after.
    pub ingest: Option<(f64, u64)>,
    /// Query name -> median seconds and answer.
    pub queries: BTreeMap<String, (f64, Answer)>,
}

/// The section's results: per engine (a layout's name, or a peer's).
pub struct SeriesReport {
    pub events: u64,
    /// cellar's `SELECT 1`: what running any query costs.
    pub floor: f64,
    /// Queries planned afresh each run (no kept plan): `SELECT 1`, and
    /// the first query on the first layout measured.
    pub planned: Vec<(String, f64)>,
    pub names: Vec<&'static str>,
    pub engines: Vec<(String, Figures)>,
    /// Answers of a later round that differ from the first's.
    pub mismatches: Vec<String>,
}

/// The median time of a query in-process and its answer, as the rest of
/// the bench measures.
async fn measure(session: &SqlSession, sql: &str) -> (f64, Answer) {
    let m = crate::measure(&mut crate::Runner::Cellar(session), sql)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (m.seconds, m.answer.unwrap_or_default())
}

/// [`measure`]'s seconds with the query planned afresh each run.
async fn measure_planned(session: &SqlSession, sql: &str) -> f64 {
    crate::measure_planned(&mut crate::Runner::Cellar(session), sql)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .seconds
}

/// Writes the events into every layout (or those whose name contains
/// `only`; COPY FROM the Parquet file) and asks each the questions.
pub async fn measure_layouts(
    session: &SqlSession,
    events: &Path,
    queries: &[SeriesQuery],
    only: Option<&str>,
    report: &mut SeriesReport,
) {
    for (i, layout) in SERIES_LAYOUTS.iter().enumerate() {
        if only.is_some_and(|o| !layout.name.contains(o)) {
            continue;
        }
        eprintln!("series, {} ...", layout.name);
        let table = series_table(i);
        session
            .query(&format!(
                "CREATE SERIES {table} (KEY (region TEXT, balloon INT(4)), TIME ts, \
                 pressure DOUBLE, temperature DOUBLE, humidity DOUBLE, altitude DOUBLE) \
                 LAYOUT {}",
                layout.clause
            ))
            .await
            .unwrap();
        let started = Instant::now();
        session
            .query(&format!("COPY {table} FROM '{}'", events.display()))
            .await
            .unwrap();
        session.store().checkpoint().unwrap();
        let took = started.elapsed().as_secs_f64();
        session.store().collect_and_compact(&table).unwrap();
        let bytes = crate::settled_disk_space(session, &table);
        let mut figures = Figures {
            ingest: Some((took, bytes)),
            ..Figures::default()
        };
        for q in queries {
            let sql = q.cellar.replace("{t}", &table);
            figures
                .queries
                .insert(q.name.to_string(), measure(session, &sql).await);
            // The first question on the first layout, and a point lookup
            // on every layout (its target is planned afresh).
            if report.planned.is_empty() || q.name == ONE_EVENT {
                let name = format!("{}, {}", q.name, layout.name);
                report
                    .planned
                    .push((name, measure_planned(session, &sql).await));
            }
        }
        report.engines.push((layout.name.to_string(), figures));
    }
    report.floor = measure(session, "SELECT 1").await.0;
    let select_1 = measure_planned(session, "SELECT 1").await;
    report.planned.insert(0, ("SELECT 1".into(), select_1));
}

/// Another round of the per-series questions on every layout loaded
/// (see [`ROUNDS`]): each keeps its best median, and its answer must be
/// the first round's.
pub async fn measure_again(
    session: &SqlSession,
    queries: &[SeriesQuery],
    report: &mut SeriesReport,
) {
    for (i, layout) in SERIES_LAYOUTS.iter().enumerate() {
        if !report.engines.iter().any(|(e, _)| e == layout.name) {
            continue; // not loaded (`--only`)
        }
        let table = series_table(i);
        for q in queries.iter().filter(|q| q.per_series) {
            let sql = q.cellar.replace("{t}", &table);
            let (seconds, answer) = measure(session, &sql).await;
            report.take(layout.name, q.name, seconds, answer);
        }
    }
}

/// The peers' job for `peers.py`: with `again`, another round of the
/// per-series questions on the databases the first job loaded.
pub fn peers_job(
    events: &Path,
    dir: &Path,
    queries: &[SeriesQuery],
    again: bool,
) -> serde_json::Value {
    serde_json::json!({
        "events": events,
        "dir": dir,
        "again": again,
        "queries": queries.iter().filter(|q| q.per_series || !again).map(|q| serde_json::json!({
            "name": q.name, "sqlite": q.sqlite, "duckdb": q.duckdb,
        })).collect::<Vec<_>>(),
        "min_runs": crate::MIN_RUNS,
        "max_runs": crate::MAX_RUNS,
        "budget": crate::BUDGET.as_secs_f64(),
    })
}

impl SeriesReport {
    pub fn new(events: u64, queries: &[SeriesQuery]) -> Self {
        SeriesReport {
            events,
            floor: f64::NAN,
            planned: Vec::new(),
            names: queries.iter().map(|q| q.name).collect(),
            engines: Vec::new(),
            mismatches: Vec::new(),
        }
    }

    /// A later round's measurement of a query on an engine already in the
    /// report: the best median stays; a different answer is a mismatch.
    fn take(&mut self, engine: &str, query: &str, seconds: f64, answer: Answer) {
        let Some((_, figures)) = self.engines.iter_mut().find(|(e, _)| e == engine) else {
            return;
        };
        match figures.queries.get_mut(query) {
            Some((best, first)) => {
                if let Some(d) = answers::difference(first, &answer) {
                    self.mismatches.push(format!(
                        "{engine}, {query}: a later round answered otherwise: {d}"
                    ));
                }
                *best = best.min(seconds);
            }
            None => self
                .mismatches
                .push(format!("{engine}: no first answer to {query}")),
        }
    }

    /// Takes the peers' results (as `peers.py` writes them): a later
    /// round's ([`peers_job`] `again`) as [`SeriesReport::take`] does.
    pub fn peers(&mut self, json: &serde_json::Value) {
        for engine in ["SQLite", "DuckDB"] {
            let r = &json[engine];
            if self.engines.iter().any(|(e, _)| e == engine) {
                let Some(queries) = r["queries"].as_object() else {
                    continue;
                };
                for (name, q) in queries {
                    let answer = answers::from_json(&q["rows"]).unwrap();
                    let seconds = q["seconds"].as_f64().unwrap_or(f64::NAN);
                    self.take(engine, name, seconds, answer);
                }
                continue;
            }
            let mut figures = Figures {
                ingest: Some((
                    r["ingest"]["seconds"].as_f64().unwrap_or(f64::NAN),
                    r["ingest"]["bytes"].as_u64().unwrap_or(0),
                )),
                ..Figures::default()
            };
            for name in &self.names {
                let q = &r["queries"][*name];
                let answer = answers::from_json(&q["rows"]).unwrap();
                figures.queries.insert(
                    (*name).to_string(),
                    (q["seconds"].as_f64().unwrap_or(f64::NAN), answer),
                );
            }
            self.engines.push((engine.to_string(), figures));
        }
    }

    /// Every engine's answers against the first's: the differences.
    pub fn check(&self) -> Vec<String> {
        let mut out = self.mismatches.clone();
        let Some((reference, expected)) = self.engines.first() else {
            return out;
        };
        for (engine, figures) in &self.engines[1..] {
            for name in &self.names {
                let (Some((_, e)), Some((_, g))) =
                    (expected.queries.get(*name), figures.queries.get(*name))
                else {
                    out.push(format!("{engine}: no answer to {name}"));
                    continue;
                };
                if let Some(d) = answers::difference(e, g) {
                    out.push(format!("{engine}, {name} (against {reference}): {d}"));
                }
            }
        }
        out
    }

    fn seconds(&self, engine: &str, query: &str) -> Option<f64> {
        self.engines
            .iter()
            .find(|(e, _)| e == engine)
            .and_then(|(_, f)| f.queries.get(query))
            .map(|(s, _)| *s)
    }

    /// The table: per engine, bytes per event, ingest events/s and each
    /// query's time; then the targets.
    pub fn print(&self) {
        println!(
            "\n## Series layouts: {} events, one series SQL for every layout\n",
            self.events
        );
        print!("| layout | bytes/event | ingest events/s |");
        for n in &self.names {
            print!(" {n} |");
        }
        println!();
        println!("|---|---|---|{}", "---|".repeat(self.names.len()));
        for (engine, f) in &self.engines {
            let (seconds, bytes) = f.ingest.unwrap_or((f64::NAN, 0));
            print!(
                "| {engine} | {:.1} | {} |",
                bytes as f64 / self.events as f64,
                si(self.events as f64 / seconds)
            );
            for n in &self.names {
                match f.queries.get(*n) {
                    Some((s, _)) => print!(" {} |", millis(*s)),
                    None => print!(" - |"),
                }
            }
            println!();
        }
        println!(
            "\ncellar runs a repeated statement from the plan it kept for its text (as SQLite's \
             Python module does from its statement cache; DuckDB plans each time). Its floor, \
             SELECT 1 run again: {}",
            millis(self.floor)
        );
        let planned: Vec<String> = self
            .planned
            .iter()
            .map(|(name, s)| format!("{name} {}", millis(*s)))
            .collect();
        println!(
            "Planned afresh each run (parsing and planning included): {}",
            planned.join("; ")
        );
        println!(
            "Per-series questions: each engine's best median of {ROUNDS} rounds taken in turns \
             (the whole-table average: one round)."
        );
        println!("\nTargets (ratios in this run):");
        let layouts: Vec<&str> = SERIES_LAYOUTS.iter().map(|l| l.name).collect();
        let best = |query: &str| {
            layouts
                .iter()
                .filter_map(|l| self.seconds(l, query).map(|s| (s, *l)))
                .min_by(|a, b| a.0.total_cmp(&b.0))
        };
        let hourly = "hourly avg, all series";
        if let (Some((s, l)), Some(duck)) = (best(hourly), self.seconds("DuckDB", hourly)) {
            let ratio = s / duck;
            println!(
                "- {hourly}: best layout ({l}) {:.2}x DuckDB (target <= 1.2x): {}",
                ratio,
                if ratio <= 1.2 { "met" } else { "not met" }
            );
        }
        for (name, s) in &self.planned {
            if let Some(layout) = name.strip_prefix("one event, ") {
                println!(
                    "- {ONE_EVENT}, {layout}, planned afresh: {} (target <= 0.15 ms): {}",
                    millis(*s),
                    if *s <= 0.15e-3 { "met" } else { "not met" }
                );
            }
        }
        for q in [
            ONE_EVENT,
            "latest of one series",
            "one series, 1 hour",
            "one series, 1 day",
        ] {
            if let Some(lite) = self.seconds("SQLite", q) {
                for l in &layouts {
                    if let Some(s) = self.seconds(l, q) {
                        let ratio = s / lite;
                        println!(
                            "- {q}, {l}: {ratio:.2}x SQLite (target <= 2x): {}",
                            if ratio <= 2.0 { "met" } else { "not met" }
                        );
                    }
                }
            }
        }
    }

    /// The chart: a panel per figure (bytes per event, ingest rate, each
    /// query's time), a bar per engine, as SVG.
    pub fn svg(&self) -> String {
        let mut panels: Vec<Panel> = Vec::new();
        let per_engine = |f: &dyn Fn(&Figures) -> Option<f64>| -> Vec<(String, f64)> {
            self.engines
                .iter()
                .filter_map(|(e, fig)| f(fig).map(|v| (e.clone(), v)))
                .collect()
        };
        panels.push((
            "bytes on disk per event (lower is better)".into(),
            per_engine(&|f| f.ingest.map(|(_, b)| b as f64 / self.events as f64)),
            |v| format!("{v:.1}"),
        ));
        panels.push((
            "ingest, events per second (higher is better)".into(),
            per_engine(&|f| f.ingest.map(|(s, _)| self.events as f64 / s)),
            si,
        ));
        for n in &self.names {
            panels.push((
                format!("{n}, milliseconds (lower is better)"),
                per_engine(&|f| f.queries.get(*n).map(|(s, _)| s * 1e3)),
                |v| format!("{v:.3}"),
            ));
        }
        let (label_w, bar_w, row_h) = (250.0, 420.0, 18.0);
        let panel_h = |bars: usize| 28.0 + bars as f64 * row_h + 12.0;
        let height: f64 = panels.iter().map(|(_, b, _)| panel_h(b.len())).sum::<f64>() + 10.0;
        let width = label_w + bar_w + 90.0;
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        );
        let mut y = 10.0;
        for (title, bars, show) in &panels {
            out.push_str(&format!(
                "<text x=\"4\" y=\"{}\" font-weight=\"bold\">{}</text>\n",
                y + 14.0,
                escape(title)
            ));
            let max = bars.iter().map(|(_, v)| *v).fold(0.0, f64::max);
            for (i, (engine, v)) in bars.iter().enumerate() {
                let top = y + 24.0 + i as f64 * row_h;
                let w = if max > 0.0 { v / max * bar_w } else { 0.0 };
                let fill = if engine == "SQLite" || engine == "DuckDB" {
                    "#999999"
                } else {
                    "#3b7dd8"
                };
                out.push_str(&format!(
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
                     <rect x=\"{label_w}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"{fill}\"/>\n\
                     <text x=\"{}\" y=\"{}\">{}</text>\n",
                    label_w - 6.0,
                    top + 12.0,
                    escape(engine),
                    top + 2.0,
                    row_h - 4.0,
                    label_w + w + 4.0,
                    top + 12.0,
                    show(*v)
                ));
            }
            y += panel_h(bars.len());
        }
        out.push_str("</svg>\n");
        out
    }
}

/// A chart panel: its title, a bar per engine, how a value is written.
type Panel = (String, Vec<(String, f64)>, fn(f64) -> String);

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn millis(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1e3)
}

fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0} K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
