//! Mutations and how one row's mutations become key-value writes.
//!
//! A row's mutations are applied in order to an [`Overlay`] of pending
//! writes over a snapshot, so later mutations see earlier ones (a delete
//! followed by a set, two adds to one cell). The overlay of a whole bulk
//! call becomes one fjall batch.

use super::TableHandle;
use super::aggregate;
use super::catalog::{FamilyKind, TableDef};
use super::read::TimeRange;
use crate::codec::{self, EncodedRange};
use crate::error::{Error, Result};
use fjall::{Readable, Snapshot};
use std::collections::BTreeMap;

/// Longest row key, in bytes.
pub const MAX_KEY_LEN: usize = 4 * 1024;
/// Longest qualifier, in bytes.
pub const MAX_QUALIFIER_LEN: usize = 16 * 1024;
/// Largest cell value, in bytes.
pub const MAX_VALUE_LEN: usize = 100 * 1024 * 1024;

/// One change to a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Write a cell; `timestamp: None` takes the server's clock.
    SetCell {
        /// Family name.
        family: String,
        /// Qualifier.
        qualifier: Vec<u8>,
        /// Microseconds, or `None` for now.
        timestamp: Option<i64>,
        /// The value.
        value: Vec<u8>,
    },
    /// Delete the cells of a column whose timestamp lies in a range.
    DeleteCells {
        /// Family name.
        family: String,
        /// Qualifier.
        qualifier: Vec<u8>,
        /// Which cells; [`TimeRange::ALL`] deletes the column.
        time_range: TimeRange,
    },
    /// Delete every cell of a family in this row.
    DeleteFamily {
        /// Family name.
        family: String,
    },
    /// Delete the whole row.
    DeleteRow,
    /// Merge input into an aggregate cell (Sum/Min/Max: an 8-byte big-endian
    /// int64; HyperLogLog: an item to count).
    AddToCell {
        /// Family name (an aggregate family).
        family: String,
        /// Qualifier.
        qualifier: Vec<u8>,
        /// Microseconds, or `None` for now.
        timestamp: Option<i64>,
        /// The input.
        input: Vec<u8>,
    },
}

impl Mutation {
    /// Set a cell at the server's time.
    pub fn set(
        family: impl Into<String>,
        qualifier: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: None,
            value: value.into(),
        }
    }

    /// Set a cell at an explicit time.
    pub fn set_at(
        family: impl Into<String>,
        qualifier: impl Into<Vec<u8>>,
        timestamp: i64,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: Some(timestamp),
            value: value.into(),
        }
    }

    /// Delete all cells of a column.
    pub fn delete_column(family: impl Into<String>, qualifier: impl Into<Vec<u8>>) -> Self {
        Mutation::DeleteCells {
            family: family.into(),
            qualifier: qualifier.into(),
            time_range: TimeRange::ALL,
        }
    }

    /// Add an int64 to a Sum/Min/Max cell at timestamp 0.
    pub fn add_i64(family: impl Into<String>, qualifier: impl Into<Vec<u8>>, value: i64) -> Self {
        Mutation::AddToCell {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: Some(0),
            input: value.to_be_bytes().to_vec(),
        }
    }
}

/// A row key and the mutations to apply to it atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMutation {
    /// The row key.
    pub key: Vec<u8>,
    /// Applied in order.
    pub mutations: Vec<Mutation>,
}

impl RowMutation {
    /// A row mutation.
    pub fn new(key: impl Into<Vec<u8>>, mutations: Vec<Mutation>) -> Self {
        RowMutation {
            key: key.into(),
            mutations,
        }
    }
}

/// A read-modify-write rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadModifyWrite {
    /// Append bytes to the latest value (or write them if there is none).
    Append {
        /// Family name.
        family: String,
        /// Qualifier.
        qualifier: Vec<u8>,
        /// Bytes to append.
        suffix: Vec<u8>,
    },
    /// Add to the latest value as an 8-byte big-endian int64 (absent = 0).
    Increment {
        /// Family name.
        family: String,
        /// Qualifier.
        qualifier: Vec<u8>,
        /// The amount.
        delta: i64,
    },
}

/// Checks a row key against the limits.
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::EmptyKey { max: MAX_KEY_LEN });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

fn check_qualifier(qualifier: &[u8]) -> Result<()> {
    if qualifier.len() > MAX_QUALIFIER_LEN {
        return Err(Error::QualifierTooLarge {
            len: qualifier.len(),
            max: MAX_QUALIFIER_LEN,
        });
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

fn resolve_timestamp(timestamp: Option<i64>, now: i64) -> Result<i64> {
    match timestamp {
        None => Ok(now),
        Some(ts) if ts < 0 => Err(Error::InvalidTimestamp { timestamp: ts }),
        Some(ts) => Ok(ts),
    }
}

/// `family:qualifier` for messages.
pub(crate) fn column_name(family: &str, qualifier: &[u8]) -> String {
    format!("{family}:{}", codec::show_bytes(qualifier))
}

/// Pending writes over a snapshot, keyed by (family index, cell key);
/// `None` is a delete.
#[derive(Default)]
pub(crate) struct Overlay {
    pub writes: BTreeMap<(usize, Vec<u8>), Option<Vec<u8>>>,
}

impl Overlay {
    fn get(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(pending) = self.writes.get(&(family, key.to_vec())) {
            return Ok(pending.clone());
        }
        Ok(snapshot
            .get(&table.keyspaces[family], key)?
            .map(|v| v.to_vec()))
    }

    /// The live cells of a key range, pending writes included, in key order.
    pub fn cells_in(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        range: &EncodedRange,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let keyspace = &table.keyspaces[family];
        let iter = match &range.end {
            Some(end) => snapshot.range(keyspace, range.start.as_slice()..end.as_slice()),
            None => snapshot.range(keyspace, range.start.as_slice()..),
        };
        let mut cells = BTreeMap::new();
        for guard in iter {
            let (k, v) = guard.into_inner()?;
            cells.insert(k.to_vec(), Some(v.to_vec()));
        }
        let lo = (family, range.start.clone());
        for ((_, k), v) in self.writes.range(lo..) {
            if !range.contains(k) {
                break;
            }
            cells.insert(k.clone(), v.clone());
        }
        Ok(cells
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    fn delete_where(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        range: &EncodedRange,
        time_range: TimeRange,
    ) -> Result<()> {
        for (key, _) in self.cells_in(snapshot, table, family, range)? {
            let ts = codec::CellKeyParts::split(&key)?.timestamp;
            if time_range.contains(ts) {
                self.writes.insert((family, key), None);
            }
        }
        Ok(())
    }

    pub fn put(&mut self, family: usize, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert((family, key), Some(value));
    }

    /// Moves `other`'s writes on top of this overlay's.
    pub fn absorb(&mut self, other: Overlay) {
        self.writes.extend(other.writes);
    }
}

/// Validates one row mutation before anything is read or written.
pub(crate) fn validate(def: &TableDef, row: &RowMutation) -> Result<()> {
    check_key(&row.key)?;
    for m in &row.mutations {
        match m {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp,
                value,
            } => {
                let f = def.family(family)?;
                check_qualifier(qualifier)?;
                check_value(value)?;
                resolve_timestamp(*timestamp, 0)?;
                aggregate::check_value(f.kind, &column_name(family, qualifier), value)?;
            }
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                input,
            } => {
                let f = def.family(family)?;
                check_qualifier(qualifier)?;
                check_value(input)?;
                resolve_timestamp(*timestamp, 0)?;
                if f.kind == FamilyKind::Normal {
                    return Err(Error::InvalidMutation {
                        reason: format!(
                            "cannot add to column {}: family {family:?} is not an aggregate family",
                            column_name(family, qualifier)
                        ),
                    });
                }
            }
            Mutation::DeleteCells {
                family,
                qualifier,
                time_range,
            } => {
                def.family(family)?;
                check_qualifier(qualifier)?;
                if time_range.start < 0 || time_range.end.is_some_and(|e| e < time_range.start) {
                    return Err(Error::InvalidArgument(format!(
                        "invalid delete time range [{}, {:?})",
                        time_range.start, time_range.end
                    )));
                }
            }
            Mutation::DeleteFamily { family } => {
                def.family(family)?;
            }
            Mutation::DeleteRow => {}
        }
    }
    Ok(())
}

/// Applies one validated row mutation to `pending` (a row-local overlay
/// that sits on top of `base`, the call's overlay).
pub(crate) fn apply(
    snapshot: &Snapshot,
    table: &TableHandle,
    base: &Overlay,
    row: &RowMutation,
    now: i64,
) -> Result<Overlay> {
    // Reads see base then the row's own earlier writes: work on a copy of
    // the base's entries for this row.
    let row_range = codec::single_row_range(&row.key);
    let mut pending = Overlay::default();
    for family in 0..table.keyspaces.len() {
        let entries = base.writes.range((family, row_range.start.clone())..);
        for ((f, key), value) in
            entries.take_while(|((f, k), _)| *f == family && row_range.contains(k))
        {
            pending.writes.insert((*f, key.clone()), value.clone());
        }
    }
    let family_index = |name: &str| -> Result<usize> {
        table
            .def
            .families
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| Error::FamilyNotFound {
                table: table.def.name.clone(),
                family: name.to_string(),
            })
    };
    for m in &row.mutations {
        match m {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp,
                value,
            } => {
                let f = family_index(family)?;
                let ts = resolve_timestamp(*timestamp, now)?;
                pending.put(
                    f,
                    codec::encode_cell_key(&row.key, qualifier, ts),
                    value.clone(),
                );
            }
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                input,
            } => {
                let f = family_index(family)?;
                let ts = resolve_timestamp(*timestamp, now)?;
                let key = codec::encode_cell_key(&row.key, qualifier, ts);
                let existing = pending.get(snapshot, table, f, &key)?;
                let kind = table.def.families[f].kind;
                let merged = aggregate::merge(
                    kind,
                    &column_name(family, qualifier),
                    existing.as_deref(),
                    input,
                )?;
                pending.put(f, key, merged);
            }
            Mutation::DeleteCells {
                family,
                qualifier,
                time_range,
            } => {
                let f = family_index(family)?;
                let mut prefix = codec::escape(&row.key);
                codec::escape_into(&mut prefix, qualifier);
                let range = EncodedRange {
                    end: codec::prefix_successor(&prefix),
                    start: prefix,
                };
                pending.delete_where(snapshot, table, f, &range, *time_range)?;
            }
            Mutation::DeleteFamily { family } => {
                let f = family_index(family)?;
                pending.delete_where(snapshot, table, f, &row_range, TimeRange::ALL)?;
            }
            Mutation::DeleteRow => {
                for f in 0..table.keyspaces.len() {
                    pending.delete_where(snapshot, table, f, &row_range, TimeRange::ALL)?;
                }
            }
        }
    }
    Ok(pending)
}
