//! cellar as a library: open a store, declare a table with a row-key
//! schema, write through SQL, and read with a key-range query.
//!
//! cargo run --example embed [-- DIR]

use cellar::{SqlSession, Store};
use datafusion::arrow::util::pretty::print_batches;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("cellar-embed-{}", std::process::id())),
    };
    let session = SqlSession::new(Store::open(&dir)?);
    session
        .query(
            "CREATE TABLE IF NOT EXISTS metric (
                ROW KEY (host TEXT, ts TIMESTAMP MILLIS),
                FAMILY m GC MAX_AGE '30d',
                cpu DOUBLE IN m,
                mem BIGINT IN m
            )",
        )
        .await?;
    session
        .query(
            "INSERT INTO metric (host, ts, cpu, mem)
             SELECT 'host' || CAST(h AS VARCHAR), to_timestamp_millis(1700000000000 + s * 1000),
                    (h * 7 + s) % 100 / 100.0, 1000 + s
             FROM generate_series(1, 20) AS hosts(h), generate_series(1, 500) AS secs(s)",
        )
        .await?;
    // One host's last five seconds: a single key range, whatever the table size.
    let sql = "SELECT ts, cpu, mem FROM metric
               WHERE host = 'host7' AND ts > to_timestamp_millis(1700000000000 + 495000)
               ORDER BY ts";
    print_batches(&session.query(sql).await?)?;
    print_batches(&session.query(&format!("EXPLAIN ANALYZE {sql}")).await?)?;
    // The DataFusion context is there for anything else.
    let tables = session
        .context()
        .sql("SHOW TABLES")
        .await?
        .collect()
        .await?;
    print_batches(&tables)?;
    println!("store: {}", dir.display());
    Ok(())
}
