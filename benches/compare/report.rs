//! What was measured, the answer check, and the printed tables.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::answers::{self, Answer};
use crate::layouts::{LAYOUTS, Query};

/// One measurement: seconds (a median for queries) and, for queries, the
/// answer.
pub struct Measured {
    pub seconds: f64,
    pub answer: Option<Answer>,
}

impl Measured {
    pub fn time(seconds: f64) -> Measured {
        Measured {
            seconds,
            answer: None,
        }
    }
}

const PEERS: [&str; 3] = ["SQLite", "DuckDB", "DataFusion/Parquet"];

pub struct Report {
    rows: u64,
    names: Vec<String>,
    /// engine → (ingest seconds, bytes on disk)
    ingest: BTreeMap<String, (f64, u64)>,
    /// (engine, query) → measurement, in-process
    local: BTreeMap<(String, String), Measured>,
    /// (cellar layout, query) → measurement over Flight SQL
    remote: BTreeMap<(String, String), Measured>,
    /// cellar layout → (seconds a pass over its pairs takes on all cores,
    /// pairs): what fjall alone costs, the floor of any full scan.
    floor: BTreeMap<String, (f64, u64)>,
    /// Ways of loading the readings into a tall PACKED table: (what,
    /// seconds, rows written).
    loads: Vec<(String, f64, u64)>,
    /// Flight ingest's rows a second over COPY FROM's, loads taken in
    /// turns: every round's.
    paired: Vec<f64>,
    /// Layouts left to the background compaction after their load: how
    /// long it took to fold them, in seconds.
    settled: Vec<(String, f64)>,
    /// (cellar layout, query) → seconds, planned afresh with other
    /// literals each run.
    afresh: BTreeMap<(String, String), f64>,
}

impl Report {
    pub fn new(rows: u64, queries: &[Query]) -> Report {
        Report {
            rows,
            names: queries.iter().map(|q| q.name.clone()).collect(),
            ingest: BTreeMap::new(),
            local: BTreeMap::new(),
            remote: BTreeMap::new(),
            floor: BTreeMap::new(),
            loads: Vec::new(),
            paired: Vec::new(),
            settled: Vec::new(),
            afresh: BTreeMap::new(),
        }
    }

    /// Query `query` on `layout` planned afresh (other literals each run)
    /// took `seconds` (median).
    pub fn afresh(&mut self, layout: &str, query: &str, seconds: f64) {
        self.afresh
            .insert((layout.to_string(), query.to_string()), seconds);
    }

    /// Layout `layout` was folded by the background compaction `seconds`
    /// after its load ended.
    pub fn settled(&mut self, layout: &str, seconds: f64) {
        self.settled.push((layout.to_string(), seconds));
    }

    /// A load path: `rows` written in `seconds`.
    pub fn load(&mut self, what: &str, seconds: f64, rows: u64) {
        self.loads.push((what.to_string(), seconds, rows));
    }

    /// Flight ingest against COPY FROM, loaded in turns: each round's
    /// ratio (rows a second).
    pub fn paired_ratio(&mut self, rounds: Vec<f64>) {
        self.paired = rounds;
    }

    /// A layout's floor: `seconds` to iterate its `pairs` on all cores.
    pub fn floor(&mut self, layout: &str, seconds: f64, pairs: u64) {
        self.floor.insert(layout.to_string(), (seconds, pairs));
    }

    pub fn ingest(&mut self, engine: &str, m: Measured, bytes: u64) {
        self.ingest.insert(engine.to_string(), (m.seconds, bytes));
    }

    pub fn query(&mut self, engine: &str, query: &str, m: Measured) {
        self.local
            .insert((engine.to_string(), query.to_string()), m);
    }

    pub fn flight(&mut self, engine: &str, query: &str, m: Measured) {
        self.remote
            .insert((engine.to_string(), query.to_string()), m);
    }

    /// Takes the Python peers' results (`{engine: {ingest: {seconds,
    /// bytes}, queries: {name: {seconds, rows}}}}`).
    pub fn peers(&mut self, json: &Json) {
        let Some(engines) = json.as_object() else {
            panic!("the peers' results are not an object: {json}");
        };
        for (engine, results) in engines {
            let seconds = results["ingest"]["seconds"].as_f64().unwrap_or(f64::NAN);
            let bytes = results["ingest"]["bytes"].as_u64().unwrap_or(0);
            self.ingest.insert(engine.clone(), (seconds, bytes));
            if let Some(queries) = results["queries"].as_object() {
                for (name, r) in queries {
                    let answer = answers::from_json(&r["rows"])
                        .unwrap_or_else(|e| panic!("{engine}, {name}: {e}"));
                    self.query(
                        engine,
                        name,
                        Measured {
                            seconds: r["seconds"].as_f64().unwrap_or(f64::NAN),
                            answer: Some(answer),
                        },
                    );
                }
            }
        }
    }

    /// Every answer against the reference engine's: the mismatches.
    pub fn check(&self, reference: &str) -> Vec<String> {
        let mut out = Vec::new();
        for name in &self.names {
            let Some(expected) = self
                .local
                .get(&(reference.to_string(), name.clone()))
                .and_then(|m| m.answer.as_ref())
            else {
                out.push(format!("{reference} has no answer to {name}"));
                continue;
            };
            for (how, map) in [("", &self.local), (" over Flight", &self.remote)] {
                for ((engine, query), m) in map {
                    if query != name || engine == reference {
                        continue;
                    }
                    if let Some(d) = m
                        .answer
                        .as_ref()
                        .and_then(|got| answers::difference(expected, got))
                    {
                        out.push(format!("{engine}{how}, {name}: {d}"));
                    }
                }
            }
        }
        out
    }

    fn seconds(&self, engine: &str, query: &str) -> Option<f64> {
        self.local
            .get(&(engine.to_string(), query.to_string()))
            .map(|m| m.seconds)
    }

    fn best_peer(&self, query: &str) -> Option<f64> {
        PEERS
            .iter()
            .filter_map(|p| self.seconds(p, query))
            .min_by(f64::total_cmp)
    }

    pub fn print(&self) {
        println!(
            "\n{} readings; query times are medians in ms of a statement run again (cellar \
             runs it from the plan it kept for its text, SQLite from its Python module's \
             statement cache; DuckDB and DataFusion plan each time); lines \"planned afresh\": \
             cellar plans the statement each run, with other literals each time (another key, \
             another range of the same size); (×) = cellar / best peer, lower is better\n",
            self.rows
        );
        let mut head = format!("{:<20}", "");
        for p in PEERS {
            head += &format!("{:>12}", short(p));
        }
        head += " |";
        for l in &LAYOUTS {
            head += &format!("{:>19}", l.name);
        }
        println!("{head}");

        // Ingest: rows per second (higher is better, the ratio is of times).
        let rows = self.rows as f64;
        let best_ingest = PEERS
            .iter()
            .filter_map(|p| self.ingest.get(*p).map(|i| i.0))
            .min_by(f64::total_cmp);
        let best_bytes = PEERS
            .iter()
            .filter_map(|p| self.ingest.get(*p).map(|i| i.1))
            .min();
        let mut line = format!("{:<20}", "ingest, K rows/s");
        for p in PEERS {
            line += &cell(self.ingest.get(p).map(|i| rows / i.0 / 1e3));
        }
        line += " |";
        for l in &LAYOUTS {
            let i = self.ingest.get(l.name);
            line += &wide(
                i.map(|i| rows / i.0 / 1e3),
                i.zip(best_ingest).map(|(i, b)| i.0 / b),
            );
        }
        println!("{line}");
        let mut line = format!("{:<20}", "bytes per reading");
        for p in PEERS {
            line += &cell(self.ingest.get(p).map(|i| i.1 as f64 / rows));
        }
        line += " |";
        for l in &LAYOUTS {
            let i = self.ingest.get(l.name);
            line += &wide(
                i.map(|i| i.1 as f64 / rows),
                i.zip(best_bytes).map(|(i, b)| i.1 as f64 / b as f64),
            );
        }
        println!("{line}");
        if !self.floor.is_empty() {
            for (label, of) in [("fjall pairs/reading", 1usize), ("fjall pass, ms", 0usize)] {
                let mut line = format!("{label:<20}{:>36} |", "");
                for l in &LAYOUTS {
                    let f = self.floor.get(l.name);
                    let x = f.map(|(s, pairs)| {
                        if of == 1 {
                            *pairs as f64 / rows
                        } else {
                            s * 1e3
                        }
                    });
                    line += &format!("{:>19}", x.map_or("-".to_string(), num));
                }
                println!("{line}");
            }
        }

        for name in &self.names {
            let best = self.best_peer(name);
            let mut line = format!("{:<20}", name);
            for p in PEERS {
                line += &cell(self.seconds(p, name).map(|s| s * 1e3));
            }
            line += " |";
            for l in &LAYOUTS {
                let s = self.seconds(l.name, name);
                line += &wide(s.map(|s| s * 1e3), s.zip(best).map(|(s, b)| s / b));
            }
            println!("{line}");
            if self.afresh.keys().any(|(_, q)| q == name) {
                // The same query typed ad hoc: planned afresh, other
                // literals each run (the peers' figures as above).
                let mut line = format!("{:<20}{:>36} |", "  planned afresh", "");
                for l in &LAYOUTS {
                    let s = self
                        .afresh
                        .get(&(l.name.to_string(), name.clone()))
                        .copied();
                    line += &wide(s.map(|s| s * 1e3), s.zip(best).map(|(s, b)| s / b));
                }
                println!("{line}");
            }
        }

        if !self.remote.is_empty() {
            println!(
                "\nover Flight SQL (loopback): ms, and (+ms) over the same query in-process\n"
            );
            let mut head = format!("{:<20}", "");
            for l in &LAYOUTS {
                head += &format!("{:>19}", l.name);
            }
            println!("{head}");
            let mut names = self.names.clone();
            names.push("SELECT 1".into());
            for name in &names {
                let mut line = format!("{:<20}", name);
                let engines: Vec<&str> = if name == "SELECT 1" {
                    vec!["cellar"]
                } else {
                    LAYOUTS.iter().map(|l| l.name).collect()
                };
                for e in engines {
                    let key = (e.to_string(), name.clone());
                    let r = self.remote.get(&key).map(|m| m.seconds * 1e3);
                    let l = self.local.get(&key).map(|m| m.seconds * 1e3);
                    line += &match (r, l) {
                        (Some(r), Some(l)) => {
                            let sign = if r < l { "−" } else { "+" };
                            let text = format!("{} ({sign}{})", num(r), num((r - l).abs()));
                            format!("{text:>19}")
                        }
                        _ => format!("{:>19}", "-"),
                    };
                }
                println!("{line}");
            }
        }
        self.print_targets();
    }

    /// The load paths, as rows and cells per second and against DuckDB's
    /// CREATE TABLE AS SELECT from the same Parquet file.
    fn print_loads(&self) {
        if self.loads.is_empty() {
            return;
        }
        let duck = self.ingest.get("DuckDB").map(|i| self.rows as f64 / i.0);
        println!("\nload paths into a tall PACKED table (4 cells a row)");
        for (what, seconds, rows) in &self.loads {
            let per_s = *rows as f64 / seconds;
            let mut line = format!(
                "  {what:<44} {:>9.0} K rows/s {:>6.2} M cells/s",
                per_s / 1e3,
                per_s * 4.0 / 1e6
            );
            if what.starts_with("COPY FROM")
                && let Some(d) = duck
            {
                line += &format!("  {:.2}× DuckDB CTAS (target ≥ 0.7×)", per_s / d);
            }
            if what.starts_with("fjall alone")
                && let Some(d) = duck
            {
                line += &format!("  {:.2}× DuckDB CTAS: the journal's floor", per_s / d);
            }
            if what.starts_with("fjall ingestion alone")
                && let Some(d) = duck
            {
                line += &format!(
                    "  {:.2}× DuckDB CTAS: the floor of a load into blocks",
                    per_s / d
                );
            }
            if what.ends_with("planned once")
                && let Some(per_row) = self.loads.iter().find(|l| l.0.ends_with("a plan per row"))
            {
                line += &format!(
                    "  {:.0}× a plan per row (target ≥ 50×)",
                    per_row.1 / seconds
                );
            }
            if what.starts_with("Flight ingest") && !self.paired.is_empty() {
                let mut sorted = self.paired.clone();
                sorted.sort_by(f64::total_cmp);
                let rounds: Vec<_> = self.paired.iter().map(|r| format!("{r:.2}")).collect();
                line += &format!(
                    "  {:.2}× COPY FROM (target ≥ 0.8×; the median round of {} taken in \
                     turns: {})",
                    sorted[sorted.len() / 2],
                    rounds.len(),
                    rounds.join(" ")
                );
            }
            println!("{line}");
        }
    }

    /// A cellar layout's time for `query` as the targets judge it:
    /// planned afresh where measured so, else from its kept plan.
    fn judged(&self, layout: &str, query: &str) -> Option<f64> {
        self.afresh
            .get(&(layout.to_string(), query.to_string()))
            .copied()
            .or_else(|| self.seconds(layout, query))
    }

    fn print_targets(&self) {
        let ratio = |engine: &str, query: &str, peer: &str| {
            Some(self.judged(engine, query)? / self.seconds(peer, query)?)
        };
        // (cellar layout, query, peer, most): cellar's time / the peer's.
        let times = [
            ("tall default", "hourly avg 100 %", "DuckDB", 1.5),
            ("tall default", "count+avg 100 %", "DuckDB", 5.0),
            ("tall PACKED", "count+avg 100 %", "DuckDB", 5.0),
            ("bucket cells", "hourly avg 100 %", "DuckDB", 1.2),
            ("bucket columns", "hourly avg 100 %", "DuckDB", 1.2),
            ("tall PACKED", "hourly avg 100 %", "DuckDB", 2.0),
            ("tall CELLS", "hourly avg 100 %", "DuckDB", 5.0),
            ("tall CELLS", "count+avg 0.1 %", "SQLite", 2.0),
            ("tall PACKED", "count+avg 0.1 %", "SQLite", 2.0),
            ("tall PACKED", "hourly avg natural 100 %", "DuckDB", 1.5),
            ("tall default", "hourly avg natural 100 %", "DuckDB", 1.5),
        ];
        let mut targets: Vec<(String, Option<f64>, f64)> = times
            .iter()
            .map(|(layout, query, peer, most)| {
                (
                    format!("{query}, {layout} / {peer}"),
                    ratio(layout, query, peer),
                    *most,
                )
            })
            .collect();
        // The query as a user writes it against the shape tuned for it.
        for l in ["tall PACKED", "tall default"] {
            targets.push((
                format!("hourly avg natural / _key shape, {l}"),
                self.judged(l, "hourly avg natural 100 %")
                    .zip(self.judged(l, "hourly avg 100 %"))
                    .map(|(n, t)| n / t),
                1.2,
            ));
        }
        let parquet = self.ingest.get("DataFusion/Parquet").map(|i| i.1 as f64);
        for l in ["tall default", "bucket cells", "bucket columns"] {
            let bytes = self.ingest.get(l).map(|i| i.1 as f64);
            targets.push((
                format!("bytes, {l} / Parquet"),
                bytes.zip(parquet).map(|(b, p)| b / p),
                1.0,
            ));
        }
        self.print_loads();
        for (layout, seconds) in &self.settled {
            println!(
                "\n{layout}: created with no format (AUTO), loaded, then folded into blocks by \
                 the background compaction {seconds:.1} s after its load ended (no COMPACT)"
            );
        }
        println!("\ntargets (ratio, target, met?; cellar's times planned afresh)");
        for (what, r, target) in targets {
            match r {
                Some(r) => println!(
                    "  {what:<44} {r:>6.2}×  ≤ {target:.1}×  {}",
                    if r <= target { "yes" } else { "NO" }
                ),
                None => println!("  {what:<44}      -  (no peer measured)"),
            }
        }
        // What fjall alone takes to iterate a layout's pairs, against the
        // peer: a target below it is out of reach of any scan of that layout.
        for (layout, query, peer, most) in &times[..4] {
            if let (Some((floor, _)), Some(peer_s)) =
                (self.floor.get(*layout), self.seconds(peer, query))
            {
                println!(
                    "  {:<44} {:>6.2}×  (a {query} target of {most:.1}× is {})",
                    format!("fjall pass alone, {layout} / {peer}"),
                    floor / peer_s,
                    if floor / peer_s <= *most {
                        "above it"
                    } else {
                        "below it: out of reach"
                    }
                );
            }
        }
        for l in ["tall PACKED", "tall CELLS"] {
            let key = (l.to_string(), "point lookup".to_string());
            if let (Some(r), Some(i)) = (self.remote.get(&key), self.local.get(&key)) {
                let extra = (r.seconds - i.seconds) * 1e3;
                println!(
                    "  {:<44} {extra:>5.2} ms  ≤ 1 ms  {}",
                    format!("point lookup over Flight − in-process, {l}"),
                    if extra <= 1.0 { "yes" } else { "NO" }
                );
            }
        }
    }
}

fn short(engine: &str) -> &str {
    if engine == "DataFusion/Parquet" {
        "DF/Parquet"
    } else {
        engine
    }
}

/// A number with about three significant digits.
fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn cell(x: Option<f64>) -> String {
    format!("{:>12}", x.map_or("-".into(), num))
}

fn wide(x: Option<f64>, ratio: Option<f64>) -> String {
    let text = match (x, ratio) {
        (Some(x), Some(r)) => format!("{} ({}×)", num(x), num(r)),
        (Some(x), None) => num(x),
        _ => "-".into(),
    };
    format!("{text:>19}")
}
