//! The schema advisor (`ADVISE TABLE t`, `cellar advise t`): reads a
//! table's schema, a sample of its rows ([`sample`]) and its key activity
//! ([`load`]), and checks them against the schema-design guides' rules,
//! each a function in [`key_rules`] (where reads and writes land: a
//! timestamp first, a hot range, uneven salt buckets, reversed timestamps,
//! field promotion) or [`row_rules`] (what rows hold: cell and row sizes,
//! wide rows, empty families). A finding carries a severity, the figures
//! it rests on and the guide's advice.

mod key_rules;
mod load;
mod row_rules;
mod sample;
mod shape;

use std::collections::BTreeMap;

use crate::codec::RowRange;
use crate::error::Result;
use crate::schema::TableSchema;
use crate::store::{ReadFilter, ReadRequest, RowSet, Store};
use load::Load;
use sample::Sample;
use shape::KeyShape;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Over one of the guides' limits: fix it.
    Critical,
    /// Against one of the guides' rules: it will cost throughput or
    /// storage as the table grows.
    Warning,
    /// A pattern from the guides that would suit what the table sees.
    Suggestion,
    /// What the advisor looked at.
    Info,
}

impl Severity {
    /// The severity's name as shown.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Suggestion => "suggestion",
            Severity::Info => "info",
        }
    }
}

/// One thing the advisor found.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// The rule that found it (`timestamp-first-key`, `hot-range`, ...).
    pub rule: &'static str,
    /// What it is about: a key prefix, a row, a family.
    pub subject: String,
    /// The figures it rests on.
    pub evidence: String,
    /// What the guides advise.
    pub advice: String,
}

/// Every rule's name, in the order findings are looked for.
pub const RULES: [&str; 9] = [
    "timestamp-first-key",
    "hot-range",
    "salt-balance",
    "reversed-timestamp",
    "field-promotion",
    "cell-size",
    "row-size",
    "wide-rows",
    "unused-family",
];

/// What the rules look at.
struct Evidence {
    /// The table.
    table: String,
    /// Its row keys' shape.
    shape: KeyShape,
    /// Rows sampled from it.
    sample: Sample,
    /// Its key activity; `None` when the store counts none.
    load: Option<Load>,
    /// Families holding no cell.
    empty_families: Vec<String>,
    /// Rows each salt bucket holds (where the key leads with one and the
    /// store counts them cheaply; `None` past `BUCKET_ROWS` in one).
    bucket_rows: Option<Vec<u64>>,
    /// Declared columns' SQL names by `family:qualifier`.
    column_names: BTreeMap<String, String>,
}

/// The findings for `table` in `store`, with activity from minute
/// `since` (microseconds since the epoch) on, most severe first; the
/// last says what was looked at.
pub fn advise(store: &Store, table: &str, since: i64) -> Result<Vec<Finding>> {
    let def = store.table(table)?;
    let schema = TableSchema::of(&def)?;
    let load = store
        .key_activity(table, since)?
        .map(|records| Load::of(&records));
    let bounds: Vec<&[u8]> = load
        .as_ref()
        .and_then(|l| l.pieces.as_ref())
        .map(|p| (1..p.len()).filter_map(|i| p.bound(i)).collect())
        .unwrap_or_default();
    let sample = Sample::take(store, table, &bounds)?;
    let shape = KeyShape::of(schema.key.as_ref(), &sample.keys);
    let mut empty_families = Vec::new();
    if sample.rows() > 0 {
        for family in &def.families {
            if is_empty(store, table, &family.name)? {
                empty_families.push(family.name.clone());
            }
        }
    }
    let bucket_rows = match def
        .families
        .iter()
        .find(|f| !empty_families.contains(&f.name))
    {
        Some(family) if shape.lead == shape::Lead::Salt => {
            bucket_rows(store, table, &family.name, &shape)?
        }
        _ => None,
    };
    let column_names = schema
        .columns
        .iter()
        .map(|c| (format!("{}:{}", c.family, c.qualifier), c.name.clone()))
        .collect();
    let evidence = Evidence {
        bucket_rows,
        column_names,
        table: table.to_string(),
        shape,
        sample,
        load,
        empty_families,
    };
    let mut findings = key_rules::findings(&evidence);
    findings.extend(row_rules::findings(&evidence));
    findings.sort_by_key(|f| f.severity);
    findings.push(looked_at(&evidence, findings.is_empty()));
    Ok(findings)
}

/// Whether `family` of `table` holds no cell.
fn is_empty(store: &Store, table: &str, family: &str) -> Result<bool> {
    let request = ReadRequest {
        rows: RowSet::all(),
        filter: ReadFilter {
            families: Some(vec![family.to_string()]),
            cells_per_column: Some(1),
            ..ReadFilter::default()
        },
        reverse: false,
        limit: Some(1),
        unmetered: true,
    };
    Ok(store.read_rows(table, request)?.next_view()?.is_none())
}

/// Rows counted in one salt bucket, at most: the count reads a few pairs
/// a row.
const BUCKET_ROWS: usize = 100_000;

/// The rows each of `shape`'s salt buckets holds in `family`; `None`
/// where the store cannot count them cheaply or a bucket holds more than
/// [`BUCKET_ROWS`].
fn bucket_rows(
    store: &Store,
    table: &str,
    family: &str,
    shape: &KeyShape,
) -> Result<Option<Vec<u64>>> {
    let mut rows = Vec::new();
    for bucket in &shape.salt_buckets {
        let mut prefix = shape.salt_prefix.clone();
        prefix.extend_from_slice(bucket.as_bytes());
        prefix.push(shape.delimiter as u8);
        let Some(probe) =
            store.probe_rows(table, family, &RowRange::prefix(prefix), BUCKET_ROWS)?
        else {
            return Ok(None);
        };
        if probe.rows >= BUCKET_ROWS {
            return Ok(None);
        }
        rows.push(probe.rows as u64);
    }
    Ok(Some(rows))
}

/// The closing line: what the advisor looked at.
fn looked_at(e: &Evidence, clean: bool) -> Finding {
    let activity = match &e.load {
        None => "no key activity (the store counts none: counting is off, or Cloud Bigtable, \
                 whose Key Visualizer shows it)"
            .to_string(),
        Some(load) => load.describe(),
    };
    Finding {
        severity: Severity::Info,
        rule: "summary",
        subject: e.table.clone(),
        evidence: format!(
            "{} sampled rows ({} cells), the key's shape ({}), {activity}",
            e.sample.rows(),
            e.sample.cells,
            e.shape.describe()
        ),
        advice: if clean {
            "nothing to change: no rule of the guides found a problem".into()
        } else {
            "the findings above, most severe first".into()
        },
    }
}

/// `part` of `whole` as a percentage, for evidence.
pub(super) fn percent(part: f64, whole: f64) -> String {
    if whole <= 0.0 {
        return "0%".into();
    }
    let p = 100.0 * part / whole;
    if p >= 10.0 || p == 0.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// Bytes as MB (2^20), for evidence.
pub(super) fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / (1u64 << 20) as f64)
}
