//! A skewed key space: as many rows as the readings, 90 % of them under
//! one key prefix, beside the same rows spread evenly over the prefixes.
//! A full scan of each, split over the cores: the rows each partition
//! read (the split follows the table's sizes, so the skewed table's
//! partitions should read about equal shares) and the time, both tables
//! created with defaults and left to the background compaction.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar::SqlSession;
use datafusion::physical_plan::{ExecutionPlan, collect};

/// What a full scan of one table did.
pub struct Scan {
    /// Rows each partition of the scan read, in partition order.
    pub partitions: Vec<usize>,
    /// Median seconds of the query.
    pub seconds: f64,
    /// The answer (the sum), equal for both tables.
    pub answer: String,
}

/// The skewed table's scan, then the even one's.
pub struct Skew {
    pub rows: u64,
    pub skewed: Scan,
    pub even: Scan,
}

impl Skew {
    pub fn print(&self) {
        println!(
            "\nskewed key space ({} rows, 90 % under one prefix), full scan `SELECT sum(v)`:",
            self.rows
        );
        for (what, scan) in [("skewed", &self.skewed), ("even", &self.even)] {
            let least = scan.partitions.iter().min().copied().unwrap_or(0).max(1);
            let most = scan.partitions.iter().max().copied().unwrap_or(0);
            println!(
                "  {what:<7} partitions read {:?} rows ({:.2}× between them), {:.1} ms",
                scan.partitions,
                most as f64 / least as f64,
                scan.seconds * 1e3
            );
        }
        println!(
            "  skewed / even time {:.2}×; partitions within 1.5×: {}",
            self.skewed.seconds / self.even.seconds,
            match self.skewed.partitions.as_slice() {
                [a, b] if *a.max(b) as f64 <= 1.5 * *a.min(b) as f64 => "yes",
                _ => "NO",
            }
        );
    }
}

/// Loads both tables (`rows` rows each) and scans them.
pub async fn measure(session: &SqlSession, rows: u64) -> Skew {
    // Prefix `a` takes 9 rows in 10 in the skewed table; the even one
    // spreads its rows over 26 prefixes.
    let tables = [
        (
            "skewed",
            "CASE WHEN value % 10 = 0 THEN concat('p', value % 26) ELSE 'a' END",
        ),
        ("even", "concat('p', value % 26)"),
    ];
    let mut scans = Vec::new();
    for (table, prefix) in tables {
        eprintln!("cellar, {table} key space ...");
        session
            .query(&format!(
                "CREATE TABLE {table} (ROW KEY (p TEXT, n INT(8)), FAMILY m, v BIGINT IN m)"
            ))
            .await
            .unwrap();
        session
            .query(&format!(
                "INSERT INTO {table} (p, n, v) SELECT {prefix}, value, value % 1000 \
                 FROM generate_series(1, {rows})"
            ))
            .await
            .unwrap();
        session.store().checkpoint().unwrap();
        let local = session.store().local().expect("embedded store");
        let waiting = Instant::now();
        while !local.folded(table).unwrap() {
            assert!(waiting.elapsed() < Duration::from_secs(600), "never folded");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    crate::lsm_quiet(session);
    for (table, _) in tables {
        scans.push(scan(session, table).await);
    }
    let even = scans.pop().unwrap();
    let skewed = scans.pop().unwrap();
    assert_eq!(skewed.answer, even.answer, "skewed and even sums differ");
    Skew { rows, skewed, even }
}

/// Runs the full scan five times planned afresh (each run is a new plan,
/// so each run splits the table anew): the median time, the last run's
/// rows by partition.
async fn scan(session: &SqlSession, table: &str) -> Scan {
    let mut times = Vec::new();
    let mut partitions = Vec::new();
    let mut answer = String::new();
    for _ in 0..5 {
        let started = Instant::now();
        let plan = session
            .sql(&format!("SELECT sum(v) FROM {table}"))
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let batches = collect(Arc::clone(&plan), session.context().task_ctx())
            .await
            .unwrap();
        times.push(started.elapsed().as_secs_f64());
        answer = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
            .lines()
            .nth(3)
            .unwrap_or_default()
            .trim_matches(|c: char| c == '|' || c.is_whitespace())
            .to_string();
        partitions = rows_by_partition(plan);
    }
    times.sort_by(f64::total_cmp);
    Scan {
        partitions,
        seconds: times[times.len() / 2],
        answer,
    }
}

/// Rows each partition of the plan's scans read.
fn rows_by_partition(plan: Arc<dyn ExecutionPlan>) -> Vec<usize> {
    let mut stack = vec![plan];
    let mut rows = Vec::new();
    while let Some(node) = stack.pop() {
        if matches!(node.name(), "KeyScanExec" | "ScanAggregateExec")
            && let Some(metrics) = node.metrics()
        {
            let mut by_partition: Vec<(usize, usize)> = metrics
                .iter()
                .filter(|m| m.value().name() == "rows_scanned")
                .map(|m| (m.partition().unwrap_or(0), m.value().as_usize()))
                .collect();
            by_partition.sort_unstable();
            rows.extend(by_partition.into_iter().map(|(_, r)| r));
        }
        stack.extend(node.children().into_iter().cloned());
    }
    rows
}
