//! [`Sample`]: rows read from across a table, every version of every
//! cell, for what the advisor's rules measure in the data itself: sizes
//! of cells and rows, cells per row and columns per family, and the
//! values columns repeat (candidates to promote into the key).
//!
//! The rows come in runs from up to [`PIECES`] points spread over the
//! table by size (the store's block indexes, or Bigtable's
//! `SampleRowKeys`), so a large table is looked at all along its keys
//! without being read whole; the reads are not counted in the key
//! activity ([`ReadRequest::unmetered`]).

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;

use crate::codec::RowRange;
use crate::error::Result;
use crate::store::{ReadFilter, ReadRequest, RowSet, Store};

/// Points the table is sampled from, at most.
const PIECES: usize = 16;
/// Rows sampled, at most.
pub(super) const SAMPLE_ROWS: usize = 4096;
/// Bytes of cells the sample stops after (a table of 100 MB rows is
/// sampled a few rows deep).
const SAMPLE_BYTES: u64 = 1 << 30;
/// Distinct values remembered per column: enough to tell an entity (a
/// few values, each repeated) from a unique or constant one.
pub(super) const DISTINCT_CAP: usize = 1024;

/// A cell or a row and its size.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Sized {
    /// The row key.
    pub key: Vec<u8>,
    /// The column (`family:qualifier`), for a cell.
    pub column: String,
    /// Bytes: values, qualifiers, timestamps (and the key, for a row).
    pub bytes: u64,
    /// Cells, for a row.
    pub cells: u64,
}

/// How one column's values spread over the sampled rows.
#[derive(Debug, Clone, Default)]
pub(super) struct Spread {
    /// Rows holding the column.
    pub rows: u64,
    /// Hashes of the distinct latest values seen (at most
    /// [`DISTINCT_CAP`]).
    pub distinct: HashSet<u64>,
}

/// What a sample of a table's rows showed.
#[derive(Debug, Clone, Default)]
pub(super) struct Sample {
    /// The sampled rows' keys, in key order within each run.
    pub keys: Vec<Vec<u8>>,
    /// Cells read (every version).
    pub cells: u64,
    /// The largest cell.
    pub largest_cell: Sized,
    /// The largest row.
    pub largest_row: Sized,
    /// The row with the most cells (its `cells`).
    pub widest_row: Sized,
    /// Per family: the row with the most distinct qualifiers in it (its
    /// `cells` is that count).
    pub widest_family: BTreeMap<String, Sized>,
    /// Per column (`family:qualifier`): how its latest values spread.
    pub columns: BTreeMap<String, Spread>,
}

impl Sample {
    /// Rows sampled.
    pub fn rows(&self) -> u64 {
        self.keys.len() as u64
    }

    /// Samples `table` of `store`; where the store knows no points
    /// spread over the table by size (all of it in memory), from
    /// `fallback`'s keys (the key activity's range boundaries, which
    /// follow the table's keys).
    pub fn take(store: &Store, table: &str, fallback: &[&[u8]]) -> Result<Sample> {
        let starts = starts(store, table, fallback)?;
        let per_run = (SAMPLE_ROWS / starts.len()).max(1);
        let mut sample = Sample::default();
        let mut bytes = 0u64;
        for (i, start) in starts.iter().enumerate() {
            let end = match starts.get(i + 1) {
                Some(next) => Bound::Excluded(next.clone()),
                None => Bound::Unbounded,
            };
            let request = ReadRequest {
                rows: RowSet::range(RowRange {
                    start: Bound::Included(start.clone()),
                    end,
                }),
                filter: ReadFilter::all(),
                reverse: false,
                limit: Some(per_run),
                unmetered: true,
            };
            let mut rows = store.read_rows(table, request)?;
            let names = rows.family_names();
            while let Some(row) = rows.next_view()? {
                let mut row_bytes = row.key().len() as u64;
                let mut qualifiers: BTreeMap<usize, HashSet<&[u8]>> = BTreeMap::new();
                for cell in row.cells() {
                    let family = &names[cell.family];
                    let size = (cell.value.len() + cell.qualifier.len() + 8) as u64;
                    row_bytes += size;
                    if size > sample.largest_cell.bytes {
                        sample.largest_cell = Sized {
                            key: row.key().to_vec(),
                            column: column_name(family, cell.qualifier),
                            bytes: size,
                            cells: 1,
                        };
                    }
                    qualifiers
                        .entry(cell.family)
                        .or_default()
                        .insert(cell.qualifier);
                    if cell.first {
                        let spread = sample
                            .columns
                            .entry(column_name(family, cell.qualifier))
                            .or_default();
                        spread.rows += 1;
                        if spread.distinct.len() < DISTINCT_CAP {
                            spread
                                .distinct
                                .insert(xxhash_rust::xxh3::xxh3_64(cell.value));
                        }
                    }
                }
                let cells = row.len() as u64;
                sample.cells += cells;
                bytes += row_bytes;
                let key = row.key();
                if row_bytes > sample.largest_row.bytes {
                    sample.largest_row = sized_row(key, row_bytes, cells);
                }
                if cells > sample.widest_row.cells {
                    sample.widest_row = sized_row(key, row_bytes, cells);
                }
                for (family, qualifiers) in qualifiers {
                    let n = qualifiers.len() as u64;
                    let widest = sample
                        .widest_family
                        .entry(names[family].to_string())
                        .or_default();
                    if n > widest.cells {
                        *widest = sized_row(key, row_bytes, n);
                    }
                }
                sample.keys.push(key.to_vec());
                if bytes >= SAMPLE_BYTES {
                    return Ok(sample);
                }
            }
        }
        Ok(sample)
    }
}

fn sized_row(key: &[u8], bytes: u64, cells: u64) -> Sized {
    Sized {
        key: key.to_vec(),
        column: String::new(),
        bytes,
        cells,
    }
}

fn column_name(family: &str, qualifier: &[u8]) -> String {
    format!("{family}:{}", crate::codec::show_bytes(qualifier))
}

/// Where the runs of sampled rows start: the first key, then points
/// cutting the table into pieces of about equal size.
fn starts(store: &Store, table: &str, fallback: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
    let points = match store.range_size(table, None, &RowRange::all(), PIECES)? {
        Some(size) if size.points.is_empty() => {
            let step = fallback.len().div_ceil(PIECES).max(1);
            fallback.iter().step_by(step).map(|k| k.to_vec()).collect()
        }
        Some(size) => size.points,
        None => {
            // Bigtable's sample: the end of each piece; the last is the
            // empty key (the end). Every n-th, for at most PIECES.
            let keys: Vec<Vec<u8>> = store
                .sample_row_keys(table)?
                .into_iter()
                .map(|(k, _)| k)
                .filter(|k| !k.is_empty())
                .collect();
            let step = keys.len().div_ceil(PIECES).max(1);
            keys.into_iter().step_by(step).collect()
        }
    };
    let mut starts = vec![Vec::new()];
    starts.extend(points.into_iter().filter(|p| !p.is_empty()));
    starts.dedup();
    Ok(starts)
}
