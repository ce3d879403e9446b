//! `cellar demo`: the schema-design guides' example tables, filled with
//! generated data large enough that key-range pushdown shows (millions of
//! cells), written through SQL in chunks with a progress bar.
//!
//! Each family takes the format its guide's layout calls for: PACKED for
//! rows written once and scanned (tall rows of several columns, time
//! buckets with a new cell or column per event, orders); the default,
//! AUTO, for rows updated a cell at a time (the current metrics
//! overwritten every minute, a friends list that grows a friend at a
//! time). A backend without PACKED (Bigtable) gets CELLS for those.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::sql::SqlSession;

/// One step: what it does, and its SQL.
struct Step {
    label: String,
    sql: String,
}

fn step(label: impl Into<String>, sql: impl Into<String>) -> Step {
    Step {
        label: label.into(),
        sql: sql.into(),
    }
}

const LOCATIONS: [&str; 4] = ["us-west2", "us-east1", "europe-west1", "asia-south2"];

/// How much of each data set the demo writes.
#[derive(Clone, Copy)]
struct Size {
    balloons: i64,
    minutes: i64,
    symbols: i64,
    quotes: i64,
    host_chunks: i64,
    host_minutes: i64,
    days: i64,
    last_meter: i64,
    people: i64,
    tenants: i64,
    orders: i64,
}

/// The full demo, and a tiny version of the same data for tests.
const FULL: Size = Size {
    balloons: 25,
    minutes: 10079,
    symbols: 20,
    quotes: 4999,
    host_chunks: 10,
    host_minutes: 1440,
    days: 30,
    last_meter: 987999,
    people: 1000,
    tenants: 50,
    orders: 2000,
};
const SMALL: Size = Size {
    balloons: 2,
    minutes: 99,
    symbols: 2,
    quotes: 49,
    host_chunks: 1,
    host_minutes: 240,
    days: 2,
    last_meter: 987009,
    people: 100,
    tenants: 5,
    orders: 200,
};

/// The guides' tables, each family in the format its layout calls for.
const TABLES: [&str; 10] = [
    "CREATE SERIES weather (
                KEY (location TEXT, balloon INT(5)),
                TIME ts,
                pressure BIGINT,
                temperature DOUBLE,
                humidity BIGINT,
                altitude BIGINT
            ) LAYOUT BUCKET '1 hour' CELL PER EVENT FORMAT PACKED",
    "CREATE TABLE balloon_week (
                ROW KEY (week TEXT, location TEXT, balloon INT(5)),
                FAMILY measurements FORMAT PACKED,
                pressure BIGINT IN measurements,
                temperature DOUBLE IN measurements
            )",
    "CREATE TABLE quote (
                ROW KEY (exchange TEXT, symbol TEXT, quotetime TIMESTAMP MILLIS),
                FAMILY md FORMAT PACKED,
                bid DOUBLE AS TEXT IN md QUALIFIER 'BID',
                ask DOUBLE AS TEXT IN md QUALIFIER 'ASK',
                bidsize BIGINT AS TEXT IN md QUALIFIER 'BIDSIZE',
                asksize BIGINT AS TEXT IN md QUALIFIER 'ASKSIZE'
            )",
    "CREATE TABLE metric (
                ROW KEY (hostname TEXT, ts TIMESTAMP MILLIS),
                FAMILY metric VALUES DOUBLE AS TEXT FORMAT PACKED,
                cpu DOUBLE AS TEXT IN metric QUALIFIER 'CPU/CPU1_USR',
                mem DOUBLE AS TEXT IN metric QUALIFIER 'MEM/USED_PCT'
            )",
    "CREATE TABLE current_metric (
                ROW KEY (hostname TEXT),
                FAMILY metric GC MAX_VERSIONS 1 VALUES DOUBLE AS TEXT,
                cpu DOUBLE AS TEXT IN metric QUALIFIER 'CPU/CPU1_USR',
                mem DOUBLE AS TEXT IN metric QUALIFIER 'MEM/USED_PCT'
            )",
    "CREATE TABLE sensor (
                ROW KEY (meter_id INT(10), date TIMESTAMP '%Y%m%d'),
                FAMILY meter QUALIFIERS TEXT VALUES DOUBLE AS TEXT FORMAT PACKED
            )",
    "CREATE TABLE friends (ROW KEY (person TEXT), FAMILY friends QUALIFIERS TEXT VALUES TEXT)",
    "CREATE TABLE purchases (
                ROW KEY (tenant TEXT, order_id INT(8)),
                FAMILY p FORMAT PACKED,
                item TEXT IN p,
                amount DOUBLE IN p
            )",
    // The guides' hotspot: a timestamp first in the key sends every new
    // write to the end of the key space; a salt in front spreads them.
    "CREATE TABLE clicks (
                ROW KEY (ts TEXT, user_id INT(6)),
                FAMILY c,
                page TEXT IN c
            )",
    "CREATE TABLE clicks_salted (
                ROW KEY (salt INT(1), ts TEXT, user_id INT(6)),
                FAMILY c,
                page TEXT IN c
            )",
];

/// Every step of the demo, in order: the tables, then their data.
fn steps(size: &Size, packed: bool) -> Vec<Step> {
    let mut s: Vec<Step> = TABLES
        .iter()
        .map(|sql| {
            let sql = if packed {
                sql.to_string()
            } else {
                sql.replace("FORMAT PACKED", "FORMAT CELLS")
            };
            step("tables", sql)
        })
        .collect();
    weather(&mut s, size);
    quotes(&mut s, size);
    metrics(&mut s, size);
    sensors(&mut s, size);
    friends_and_purchases(&mut s, size);
    clicks(&mut s, size);
    s
}

/// A scripted workload on the two click tables, in rounds: each round's
/// clicks in both, and a look at the latest ones of each. `\keys clicks`
/// then shows the hotspot at the end of the key space, `\keys
/// clicks_salted` the writes spread over its eight salts.
fn clicks(s: &mut Vec<Step>, size: &Size) {
    let per_round = size.people * 4;
    for round in 0..size.days.min(10) {
        let first = round * per_round;
        let rows = format!("FROM generate_series({first}, {first} + {per_round} - 1) AS clicks(n)");
        let ts = "'2026-12-01T' || lpad(CAST(n AS VARCHAR), 9, '0')";
        let page = "CASE n % 3 WHEN 0 THEN 'home' WHEN 1 THEN 'cart' ELSE 'search' END";
        s.push(step(
            "click workload",
            format!(
                "INSERT INTO clicks (ts, user_id, page) SELECT {ts}, n * 7919 % 1000000, {page} {rows}"
            ),
        ));
        s.push(step(
            "click workload",
            format!(
                "INSERT INTO clicks_salted (salt, ts, user_id, page)
                 SELECT n % 8, {ts}, n * 7919 % 1000000, {page} {rows}"
            ),
        ));
        s.push(step(
            "click workload",
            format!(
                "SELECT count(*) FROM clicks WHERE ts >= '2026-12-01T' || lpad(CAST({first} AS VARCHAR), 9, '0')"
            ),
        ));
    }
}

/// The weather series and the same readings as week rows.
fn weather(s: &mut Vec<Step>, size: &Size) {
    let Size {
        balloons, minutes, ..
    } = *size;
    // Weather: 4 locations x 25 balloons x one week of minutes = 1M
    // events, a series in hour buckets (a row per balloon and hour, a cell
    // per minute in each measure's column).
    for location in LOCATIONS {
        for balloon in 0..balloons {
            let id = 3600 + balloon;
            s.push(step(
                "weather (1M events, 4M cells)",
                format!(
                    "INSERT INTO weather (location, balloon, ts, pressure, temperature, humidity, altitude)
                     SELECT '{location}', {id}, to_timestamp_seconds(1614556800 + m * 60),
                            94000 + (m * 37 + {id}) % 2500,
                            round(5.0 + ((m + {id}) % 600) / 60.0, 1),
                            40 + (m * 7 + {id}) % 50,
                            500 + (m * 3 + {id}) % 200
                     FROM generate_series(0, {minutes}) AS t(m)"
                ),
            ));
        }
    }
    // The same readings as one row per balloon and week, a cell per minute.
    for location in LOCATIONS {
        s.push(step(
            "balloon_week (new cell per event)",
            format!(
                "INSERT INTO balloon_week (week, location, balloon, _timestamp, pressure, temperature)
                 SELECT 'week09', location, balloon, ts, pressure, temperature
                 FROM weather WHERE location = '{location}' AND balloon < 3605
                   AND ts < TIMESTAMP '2021-03-01T06:00:00'"
            ),
        ));
    }
}

/// Market data.
fn quotes(s: &mut Vec<Step>, size: &Size) {
    let Size {
        symbols, quotes, ..
    } = *size;
    // Market data: 3 exchanges x 20 symbols x 5000 quotes.
    for exchange in ["NASDAQ", "NYSE", "LSE"] {
        for sym in 0..symbols {
            let symbol = format!("S{sym:03}");
            s.push(step(
                "quote (300k rows)",
                format!(
                    "INSERT INTO quote (exchange, symbol, quotetime, bid, ask, bidsize, asksize)
                     SELECT '{exchange}', '{symbol}', to_timestamp_millis(1426535612156 + q * 250),
                            round(100 + {sym} * 10 + (q % 97) / 10.0, 2),
                            round(100.05 + {sym} * 10 + (q % 97) / 10.0, 2),
                            100 * (1 + q % 9), 100 * (1 + q % 13)
                     FROM generate_series(0, {quotes}) AS t(q)"
                ),
            ));
        }
    }
}

/// Server metrics and the latest per host.
fn metrics(s: &mut Vec<Step>, size: &Size) {
    let Size {
        host_chunks,
        host_minutes,
        ..
    } = *size;
    let last = host_minutes - 1;
    // Server metrics: 200 hosts x 1440 minutes, and the latest per host.
    for chunk in 0..host_chunks {
        s.push(step(
            "metric (288k rows)",
            format!(
                "INSERT INTO metric (hostname, ts, cpu, mem, metric)
                 SELECT 'server' || CAST(h AS VARCHAR) || '.aaa.bbb.com',
                        to_timestamp_millis(1426535612045 + m * 60000),
                        round(((h * 31 + m * 7) % 100) / 100.0, 2),
                        round(20 + (h * 13 + m) % 70, 1),
                        MAP {{'CPU/CPU1_NICE': round(((h + m) % 10) / 100.0, 2)}}
                 FROM generate_series({}, {}) AS hosts(h), generate_series(0, {last}) AS mins(m)",
                chunk * 20,
                chunk * 20 + 19
            ),
        ));
    }
    s.push(step(
        "current_metric",
        format!(
            "INSERT INTO current_metric (hostname, _timestamp, cpu, mem)
             SELECT hostname, ts, cpu, mem FROM metric
             WHERE ts = to_timestamp_millis(1426535612045 + {last} * 60000)"
        ),
    ));
}

/// Smart meters, a column per quarter hour.
fn sensors(s: &mut Vec<Step>, size: &Size) {
    let Size {
        days, last_meter, ..
    } = *size;
    // Smart meters: 1000 meters x 30 days x 96 quarter hours.
    for day in 0..days {
        s.push(step(
            "sensor (30k rows, 2.9M cells)",
            format!(
                "INSERT INTO sensor (meter_id, date, meter)
                 SELECT m, to_timestamp_seconds(1498867200 + 86400 * {day}),
                        map(array_agg(lpad(CAST(q / 4 AS VARCHAR), 2, '0') || lpad(CAST(q % 4 * 15 AS VARCHAR), 2, '0')),
                            array_agg(round(5.0 + (m * 7 + q * 3 + {day}) % 400 / 10.0, 2)))
                 FROM generate_series(987000, {last_meter}) AS meters(m), generate_series(0, 95) AS qs(q)
                 GROUP BY m"
            ),
        ));
    }
}

/// The friends list and the tenants' orders.
fn friends_and_purchases(s: &mut Vec<Step>, size: &Size) {
    let Size {
        people,
        tenants,
        orders,
        ..
    } = *size;
    s.push(step(
        "friends",
        format!(
            "INSERT INTO friends (person, friends)
             SELECT 'user' || CAST(p AS VARCHAR),
                    map(array_agg('user' || CAST((p * 7 + f * 13) % {people} AS VARCHAR)),
                        array_agg(CASE f % 4 WHEN 0 THEN 'work' WHEN 1 THEN 'school' WHEN 2 THEN 'tennis' ELSE 'book-club' END))
             FROM generate_series(0, {people} - 1) AS people(p), generate_series(1, 20) AS fs(f)
             GROUP BY p"
        ),
    ));
    s.push(step(
        "purchases",
        format!(
            "INSERT INTO purchases (tenant, order_id, item, amount)
             SELECT 'tenant' || lpad(CAST(t AS VARCHAR), 3, '0'), o,
                    CASE o % 5 WHEN 0 THEN 'anvil' WHEN 1 THEN 'rope' WHEN 2 THEN 'rocket' WHEN 3 THEN 'magnet' ELSE 'glue' END,
                    round(1 + (t * 17 + o * 3) % 500 / 3.0, 2)
             FROM generate_series(1, {tenants}) AS tenants(t), generate_series(1, {orders}) AS orders(o)"
        ),
    ));
}

/// Queries printed at the end.
pub const TRY: &str = "\
Try these (EXPLAIN shows the key ranges each one reads):
  SELECT ts, pressure, temperature FROM weather
   WHERE location = 'us-west2' AND balloon = 3610
     AND ts BETWEEN '2021-03-03T12:00:00' AND '2021-03-03T12:10:00';
  SELECT date_trunc('hour', ts) AS hour, avg(pressure) FROM weather
   WHERE location = 'asia-south2' GROUP BY 1 ORDER BY 1 LIMIT 5;
  SELECT ts, pressure FROM weather WHERE location = 'us-west2' AND balloon = 3610
   ORDER BY ts DESC LIMIT 3;
  ALTER SERIES weather SET LAYOUT ROW PER EVENT FORMAT PACKED;   -- same queries, tall rows
  SELECT avg(bid), max(ask) FROM quote WHERE exchange = 'NASDAQ' AND symbol = 'S007';
  SELECT hostname, cpu, mem FROM current_metric ORDER BY cpu DESC LIMIT 5;
  SELECT qualifier, value FROM cells('sensor', 'meter')
   WHERE meter_id = 987123 AND date = '2017-07-04' AND qualifier BETWEEN '0800' AND '0900';
  SELECT _timestamp, pressure FROM versions('balloon_week') WHERE location = 'asia-south2' LIMIT 5;
  SELECT friends FROM friends WHERE person = 'user1';
  DELETE FROM purchases WHERE tenant = 'tenant042';
  EXPLAIN ANALYZE SELECT count(*) FROM weather WHERE location = 'europe-west1' AND balloon = 3601;
Where the reads and writes landed (a heatmap per key range and minute):
  \\keys clicks            -- a timestamp first in the key: every write at the end
  \\keys clicks_salted     -- a salt first: the writes spread over eight ranges
  ADVISE TABLE clicks;     -- the schema advisor: findings, evidence, the guides' advice
  SELECT range_start, sum(rows_written) FROM key_activity('clicks_salted') GROUP BY 1 ORDER BY 1;";

/// Creates and fills the demo tables; when they are already there, only
/// prints the queries to try.
pub fn run(session: &SqlSession, runtime: &tokio::runtime::Runtime) -> Result<(), String> {
    let existing = session.store().list_tables();
    if existing.iter().any(|t| t == "weather") {
        println!(
            "the demo tables are already here ({})\n{TRY}",
            existing.join(", ")
        );
        return Ok(());
    }
    let packed = session.store().capabilities().packed_families;
    let size = if std::env::var_os("CELLAR_DEMO_SMALL").is_some() {
        SMALL
    } else {
        FULL
    };
    let steps = steps(&size, packed);
    let terminal = std::io::stderr().is_terminal();
    let started = Instant::now();
    for (i, s) in steps.iter().enumerate() {
        if terminal {
            let done = (i * 30) / steps.len();
            eprint!(
                "\r[{}{}] {:>3}% {:<40}",
                "#".repeat(done),
                " ".repeat(30 - done),
                i * 100 / steps.len(),
                s.label
            );
            let _ = std::io::stderr().flush();
        } else if i == 0 || steps[i - 1].label != s.label {
            eprintln!("demo: {}", s.label);
        }
        runtime
            .block_on(session.query(&s.sql))
            .map_err(|e| format!("demo step {:?} failed: {}", s.label, super::error_line(&e)))?;
    }
    session
        .store()
        .checkpoint()
        .map_err(|e| format!("demo: writing the tables out: {e}"))?;
    if terminal {
        eprintln!("\r[{}] 100% {:<40}", "#".repeat(30), "done");
    }
    println!(
        "demo tables written in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        session.store().list_tables().join(", ")
    );
    // What the advisor makes of the click workload's hotspot.
    if let Ok(findings) = crate::keys::advise(session.store(), "clicks", i64::MIN)
        && let Some(f) = findings.first().filter(|f| f.rule != "summary")
    {
        println!(
            "the advisor on clicks (ADVISE TABLE clicks): {} {}: {}",
            f.severity.name(),
            f.rule,
            f.evidence
        );
    }
    println!("{TRY}");
    Ok(())
}
