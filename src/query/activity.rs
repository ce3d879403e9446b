//! `key_activity('table' [, 'metric'] [, 'since'])`: a table's reads and
//! writes per key range and minute, as the store counted them, for SQL
//! (the shell, Flight clients, embedding code) to query and plot.
//!
//! With no metric, one row per range and minute with every counter and
//! the average latencies; with a metric (one of
//! [`metric_names`]), the range, the minute and that metric as `value`.
//! `since` is a span back from now (`6h`, `30m`, `2d`) or `all`; the
//! default is `all` (what the retention kept).

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::Expr;

use crate::codec::show_bytes;
use crate::error::Error;
use crate::store::{ActivityRecord, METRICS, Store, metric_names, now_micros, parse_since};

/// The `key_activity` table function.
#[derive(Debug)]
pub struct KeyActivityFunction {
    store: Store,
}

const USAGE: &str = "key_activity('table' [, 'metric'] [, 'since']), since as 6h, 30m, 2d or all";

fn bad(what: String) -> datafusion::error::DataFusionError {
    Error::InvalidArgument(format!("key_activity: {what}; usage: {USAGE}")).into()
}

impl KeyActivityFunction {
    /// The function over `store`'s tables.
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(KeyActivityFunction { store })
    }
}

fn text_argument(expr: &Expr, i: usize) -> DfResult<String> {
    match expr {
        Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _) => {
            Ok(s.clone())
        }
        e => Err(bad(format!("argument {} must be a string, not {e}", i + 1))),
    }
}

impl TableFunctionImpl for KeyActivityFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if exprs.is_empty() || exprs.len() > 3 {
            return Err(bad(format!("takes 1 to 3 arguments, got {}", exprs.len())));
        }
        let texts = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| text_argument(e, i))
            .collect::<DfResult<Vec<_>>>()?;
        let table = &texts[0];
        let names = metric_names();
        let (metric, since) = match &texts[1..] {
            [] => (None, None),
            [one] if names.contains(&one.as_str()) => (Some(one.clone()), None),
            [one] => (None, Some(one.clone())),
            [metric, since] => (Some(metric.clone()), Some(since.clone())),
            _ => (None, None),
        };
        if let Some(m) = &metric
            && !names.contains(&m.as_str())
        {
            return Err(bad(format!("no metric '{m}': one of {}", names.join(", "))));
        }
        let since = match &since {
            Some(s) => parse_since(s, now_micros())?,
            None => i64::MIN,
        };
        let records = self.store.activity_records(table, since)?;
        let batch = match &metric {
            None => all_counters(&records)?,
            Some(m) => one_metric(&records, m)?,
        };
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        Ok(Arc::new(table))
    }
}

/// The columns every answer starts with: the minute and the range.
fn range_fields() -> Vec<Field> {
    vec![
        Field::new(
            "minute",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("range_start", DataType::Utf8, false),
        Field::new("range_end", DataType::Utf8, true),
        Field::new("start_key", DataType::Binary, false),
        Field::new("end_key", DataType::Binary, true),
    ]
}

fn range_columns(records: &[ActivityRecord]) -> Vec<ArrayRef> {
    let mut minute = TimestampMicrosecondBuilder::new().with_timezone("UTC");
    let mut start = StringBuilder::new();
    let mut end = StringBuilder::new();
    let mut start_key = BinaryBuilder::new();
    let mut end_key = BinaryBuilder::new();
    for r in records {
        minute.append_value(r.minute);
        start.append_value(show_bytes(&r.start));
        end.append_option(r.end.as_deref().map(show_bytes));
        start_key.append_value(&r.start);
        end_key.append_option(r.end.as_deref());
    }
    vec![
        Arc::new(minute.finish()),
        Arc::new(start.finish()),
        Arc::new(end.finish()),
        Arc::new(start_key.finish()),
        Arc::new(end_key.finish()),
    ]
}

fn all_counters(records: &[ActivityRecord]) -> DfResult<RecordBatch> {
    let mut fields = range_fields();
    let mut columns = range_columns(records);
    for (i, name) in METRICS.iter().enumerate() {
        fields.push(Field::new(*name, DataType::Int64, false));
        let mut b = Int64Builder::with_capacity(records.len());
        for r in records {
            b.append_value(i64::try_from(r.counters.values()[i]).unwrap_or(i64::MAX));
        }
        columns.push(Arc::new(b.finish()));
    }
    for name in ["read_latency", "write_latency"] {
        fields.push(Field::new(name, DataType::Float64, false));
        let mut b = Float64Builder::with_capacity(records.len());
        for r in records {
            b.append_value(r.counters.metric(name).unwrap_or_default());
        }
        columns.push(Arc::new(b.finish()));
    }
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn one_metric(records: &[ActivityRecord], metric: &str) -> DfResult<RecordBatch> {
    let mut fields = range_fields();
    let mut columns = range_columns(records);
    fields.push(Field::new("value", DataType::Float64, false));
    let mut b = Float64Builder::with_capacity(records.len());
    for r in records {
        b.append_value(r.counters.metric(metric).unwrap_or_default());
    }
    columns.push(Arc::new(b.finish()));
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    Ok(RecordBatch::try_new(schema, columns)?)
}
