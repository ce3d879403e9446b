//! cellar's mutations as Bigtable's: times in whole milliseconds, deletes
//! of time ranges on Bigtable's grain, adds to SUM, MIN and MAX cells as
//! int64 input, and an aggregate cell set as a delete and an add.

use super::data;
use crate::error::{Error, Result};
use crate::store::{FamilyKind, Mutation, TableDef, TimeRange, align_up};
use data::mutation::{DeleteFromColumn, DeleteFromFamily, DeleteFromRow, SetCell};

/// Refuses a timestamp Bigtable cannot keep.
fn whole_millis(timestamp: i64) -> Result<i64> {
    if timestamp % 1000 == 0 {
        Ok(timestamp)
    } else {
        Err(Error::InvalidArgument(format!(
            "cell timestamp {timestamp} is not a whole millisecond; Bigtable keeps timestamps in \
             milliseconds (the embedded store keeps microseconds): round it, for example with \
             date_trunc('millisecond', ...)"
        )))
    }
}

/// Bigtable's mutation for one of cellar's (validated already).
fn mutation(m: Mutation) -> Result<data::Mutation> {
    let m = match m {
        Mutation::SetCell {
            family,
            qualifier,
            timestamp,
            value,
        } => data::mutation::Mutation::SetCell(SetCell {
            family_name: family,
            column_qualifier: qualifier,
            // -1: the server's clock.
            timestamp_micros: timestamp.map_or(Ok(-1), whole_millis)?,
            value,
        }),
        Mutation::DeleteCells {
            family,
            qualifier,
            time_range,
        } => data::mutation::Mutation::DeleteFromColumn(DeleteFromColumn {
            family_name: family,
            column_qualifier: qualifier,
            // Cells stand on whole milliseconds, so rounding both ends up
            // keeps exactly the cells the range holds.
            time_range: (time_range != TimeRange::ALL).then(|| data::TimestampRange {
                start_timestamp_micros: align_up(time_range.start.max(0), 1000),
                end_timestamp_micros: time_range.end.map_or(0, |e| align_up(e.max(1), 1000)),
            }),
        }),
        Mutation::DeleteFamily { family } => {
            data::mutation::Mutation::DeleteFromFamily(DeleteFromFamily {
                family_name: family,
            })
        }
        Mutation::DeleteRow => data::mutation::Mutation::DeleteFromRow(DeleteFromRow {}),
        // Sum, Min and Max take an int64 (cellar's input is its 8
        // big-endian bytes, checked by `validate_mutation`).
        Mutation::AddToCell {
            family,
            qualifier,
            timestamp,
            input,
        } => {
            let n = <[u8; 8]>::try_from(input.as_slice()).map_err(|_| {
                Error::InvalidArgument(format!(
                    "family {family}: an aggregate's input is an 8-byte int64 on Bigtable, not {} bytes",
                    input.len()
                ))
            })?;
            let value = |kind| data::Value {
                r#type: None,
                kind: Some(kind),
            };
            data::mutation::Mutation::AddToCell(data::mutation::AddToCell {
                family_name: family,
                column_qualifier: Some(value(data::value::Kind::RawValue(qualifier))),
                timestamp: Some(value(data::value::Kind::RawTimestampMicros(
                    match timestamp {
                        Some(ts) => whole_millis(ts)?,
                        None => {
                            let now = crate::store::now_micros();
                            now - now.rem_euclid(1000)
                        }
                    },
                ))),
                input: Some(value(data::value::Kind::IntValue(i64::from_be_bytes(n)))),
            })
        }
    };
    Ok(data::Mutation { mutation: Some(m) })
}

/// Bigtable's mutations for one of cellar's (validated already) into
/// `out`. A cell set in a SUM, MIN or MAX family (UPDATE assigns an
/// accumulator) is that cell deleted and the value added to it anew:
/// Bigtable's aggregate cells take input, and Google's emulator adds a
/// SetCell's value to the cell where cellar replaces it; an add to a
/// deleted aggregate cell starts a new one, in Bigtable and in cellar.
pub(super) fn translate(def: &TableDef, m: Mutation, out: &mut Vec<data::Mutation>) -> Result<()> {
    match m {
        Mutation::SetCell {
            family,
            qualifier,
            timestamp,
            value,
        } if def.family(&family).is_ok_and(|f| {
            matches!(f.kind, FamilyKind::Sum | FamilyKind::Min | FamilyKind::Max)
        }) =>
        {
            let at = match timestamp {
                Some(ts) => whole_millis(ts)?,
                None => {
                    let now = crate::store::now_micros();
                    now - now.rem_euclid(1000)
                }
            };
            out.push(mutation(Mutation::DeleteCells {
                family: family.clone(),
                qualifier: qualifier.clone(),
                time_range: TimeRange {
                    start: at,
                    end: Some(at.saturating_add(1000)),
                },
            })?);
            out.push(mutation(Mutation::AddToCell {
                family,
                qualifier,
                timestamp: Some(at),
                input: value,
            })?);
        }
        // Bigtable refuses an empty time range, which deletes nothing.
        // (Cells stand on whole milliseconds: [1500, 1800) holds none.)
        Mutation::DeleteCells {
            time_range:
                TimeRange {
                    start,
                    end: Some(end),
                },
            ..
        } if end <= start || align_up(end, 1000) <= align_up(start.max(0), 1000) => {}
        m => out.push(mutation(m)?),
    }
    Ok(())
}
