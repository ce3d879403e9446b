//! Mutations: what they are, their limits, and how one row's mutations
//! apply to an [`Overlay`] of pending writes (the format decides which
//! pairs they touch).

use super::aggregate;
use super::definition::{FamilyKind, TableDef};
use super::request::TimeRange;
use crate::codec;
use crate::error::{Error, Result};

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

impl Mutation {
    /// The bytes it writes, as key activity counts them: a cell's
    /// qualifier, value and 8 bytes of timestamp; a delete's qualifier.
    pub fn bytes(&self) -> u64 {
        let n = match self {
            Mutation::SetCell {
                qualifier, value, ..
            } => qualifier.len() + value.len() + 8,
            Mutation::AddToCell {
                qualifier, input, ..
            } => qualifier.len() + input.len() + 8,
            Mutation::DeleteCells { qualifier, .. } => qualifier.len(),
            Mutation::DeleteFamily { .. } | Mutation::DeleteRow => 0,
        };
        n as u64
    }
}

impl RowMutation {
    /// What its mutations write, in bytes, with the key
    /// ([`Mutation::bytes`]).
    pub fn bytes(&self) -> u64 {
        self.key.len() as u64 + self.mutations.iter().map(Mutation::bytes).sum::<u64>()
    }

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

pub(crate) fn check_qualifier(qualifier: &[u8]) -> Result<()> {
    if qualifier.len() > MAX_QUALIFIER_LEN {
        return Err(Error::QualifierTooLarge {
            len: qualifier.len(),
            max: MAX_QUALIFIER_LEN,
        });
    }
    Ok(())
}

pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

pub(super) fn resolve_timestamp(timestamp: Option<i64>, now: i64) -> Result<i64> {
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
