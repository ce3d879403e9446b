//! Query results as text, for tests that compare answers.

use cellar::SqlSession;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;

/// The answer to `sql` as a printed table; a failed query panics with
/// the statement and its error.
pub async fn text(session: &SqlSession, sql: &str) -> String {
    let batches = session
        .query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pretty_format_batches(&batches).unwrap().to_string()
}

/// The value of `name` in `session`'s SHOW STATS.
pub async fn stat(session: &SqlSession, name: &str) -> u64 {
    let out = text(session, "SHOW STATS").await;
    let line = out
        .lines()
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("no {name} in {out}"));
    line.split('|').nth(2).unwrap().trim().parse().unwrap()
}

/// Rows as text, one `Vec` per row; NULL as `NULL`.
pub fn texts(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            out.push(
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect(),
            );
        }
    }
    out
}
