//! Bigtable's messages as cellar's store vocabulary and back: resource
//! names, row sets, mutations, read-modify-write rules, rows, and errors
//! as gRPC statuses with Bigtable's codes.

use std::ops::Bound;

use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as data;
use tonic::Status;

use crate::codec::{self, RowRange};
use crate::error::Error;
use crate::store::{Mutation, ReadModifyWrite, Row, RowSet, TimeRange};
use data::mutation::Mutation as M;

/// Most row keys and ranges in one request's row set.
pub const MAX_ROW_SET: usize = 100_000;
/// Most mutations in one row's request (Bigtable's limit).
pub const MAX_MUTATIONS: usize = 100_000;

/// The status of one of cellar's errors, with Bigtable's codes.
pub fn status(e: &Error) -> Status {
    Status::new(e.grpc_code(), e.to_string())
}

/// A request's value refused: INVALID_ARGUMENT naming it.
pub fn invalid(reason: impl Into<String>) -> Status {
    Status::invalid_argument(reason.into())
}

/// The table of `projects/P/instances/I/tables/T`: any project and
/// instance name the one store this server serves.
pub fn table_of(name: &str) -> Result<String, Status> {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "instances", i, "tables", t]
            if !p.is_empty() && !i.is_empty() && !t.is_empty() =>
        {
            Ok((*t).to_string())
        }
        _ => Err(invalid(format!(
            "table name {name:?} is not of the form projects/PROJECT/instances/INSTANCE/tables/TABLE"
        ))),
    }
}

/// The `projects/P/instances/I` of a request's parent.
pub fn instance_of(parent: &str) -> Result<&str, Status> {
    let parts: Vec<&str> = parent.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "instances", i] if !p.is_empty() && !i.is_empty() => Ok(parent),
        _ => Err(invalid(format!(
            "parent {parent:?} is not of the form projects/PROJECT/instances/INSTANCE"
        ))),
    }
}

/// The table a data request names: its table, or UNIMPLEMENTED for an
/// authorized or materialized view.
pub fn data_table(table: &str, view: &str, what: &str) -> Result<String, Status> {
    if table.is_empty() && !view.is_empty() {
        return Err(Status::unimplemented(format!(
            "{what} through a view ({view}): cellar serves tables only"
        )));
    }
    table_of(table)
}

/// The rows a request's row set names; `None` or an empty set is every row.
pub fn row_set(rows: Option<&data::RowSet>) -> Result<RowSet, Status> {
    let Some(rows) = rows else {
        return Ok(RowSet::all());
    };
    if rows.row_keys.is_empty() && rows.row_ranges.is_empty() {
        return Ok(RowSet::all());
    }
    let count = rows.row_keys.len() + rows.row_ranges.len();
    if count > MAX_ROW_SET {
        return Err(invalid(format!(
            "the row set names {count} keys and ranges, more than {MAX_ROW_SET}"
        )));
    }
    let mut set = RowSet::default();
    for key in &rows.row_keys {
        if key.is_empty() {
            return Err(invalid("a row key of the row set is empty"));
        }
        set.ranges.push(RowRange::key(key.clone()));
    }
    for range in &rows.row_ranges {
        use data::row_range::{EndKey as E, StartKey as S};
        let start = match &range.start_key {
            Some(S::StartKeyClosed(k)) if !k.is_empty() => Bound::Included(k.clone()),
            Some(S::StartKeyOpen(k)) if !k.is_empty() => Bound::Excluded(k.clone()),
            _ => Bound::Unbounded,
        };
        let end = match &range.end_key {
            Some(E::EndKeyOpen(k)) if !k.is_empty() => Bound::Excluded(k.clone()),
            Some(E::EndKeyClosed(k)) if !k.is_empty() => Bound::Included(k.clone()),
            _ => Bound::Unbounded,
        };
        if let (
            Bound::Included(start) | Bound::Excluded(start),
            Bound::Included(end) | Bound::Excluded(end),
        ) = (&start, &end)
            && start > end
        {
            // Bigtable's (and its emulator's) rule.
            return Err(invalid(format!(
                "the row range starts at {} after its end {}",
                crate::codec::show_bytes(start),
                crate::codec::show_bytes(end)
            )));
        }
        set.ranges.push(RowRange::between(start, end));
    }
    Ok(set)
}

/// A Bigtable timestamp range as cellar's (end 0: no end).
fn delete_range(range: Option<&data::TimestampRange>) -> Result<TimeRange, Status> {
    let Some(range) = range else {
        return Ok(TimeRange::ALL);
    };
    let (start, end) = (range.start_timestamp_micros, range.end_timestamp_micros);
    // Bigtable's emulator refuses an empty range too (start == end).
    if start < 0 || end < 0 || (end != 0 && end <= start) {
        return Err(invalid(format!(
            "delete time range [{start}, {end}) is not a range of timestamps"
        )));
    }
    Ok(TimeRange {
        start,
        end: (end != 0).then_some(end),
    })
}

/// The bytes of an aggregate's `Value`: raw bytes, or an int64 as 8
/// big-endian bytes (what Sum/Min/Max take).
fn value_bytes(value: Option<&data::Value>, what: &str) -> Result<Vec<u8>, Status> {
    use data::value::Kind;
    match value.and_then(|v| v.kind.as_ref()) {
        Some(Kind::RawValue(bytes)) | Some(Kind::BytesValue(bytes)) => Ok(bytes.clone()),
        Some(Kind::StringValue(text)) => Ok(text.as_bytes().to_vec()),
        Some(Kind::IntValue(n)) => Ok(n.to_be_bytes().to_vec()),
        Some(_) => Err(invalid(format!(
            "{what}: only raw bytes, strings and int64 values are taken"
        ))),
        None => Err(invalid(format!("{what} is missing"))),
    }
}

fn value_timestamp(value: Option<&data::Value>) -> Result<Option<i64>, Status> {
    use data::value::Kind;
    match value.and_then(|v| v.kind.as_ref()) {
        None => Ok(None),
        Some(Kind::RawTimestampMicros(ts)) | Some(Kind::IntValue(ts)) => {
            Ok((*ts != -1).then_some(*ts))
        }
        Some(_) => Err(invalid(
            "add_to_cell timestamp must be raw_timestamp_micros or int_value",
        )),
    }
}

/// Now, in microseconds of whole milliseconds.
fn server_time() -> i64 {
    let now = crate::store::now_micros();
    now - now.rem_euclid(1000)
}

/// One of Bigtable's mutations as cellar's.
pub fn mutation(m: &data::Mutation) -> Result<Mutation, Status> {
    Ok(match &m.mutation {
        Some(M::SetCell(set)) => Mutation::SetCell {
            family: set.family_name.clone(),
            qualifier: set.column_qualifier.clone(),
            // -1: the server's clock, in whole milliseconds as Bigtable's
            // (a table's granularity is MILLIS).
            timestamp: Some(if set.timestamp_micros == -1 {
                server_time()
            } else {
                set.timestamp_micros
            }),
            value: set.value.clone(),
        },
        Some(M::DeleteFromColumn(d)) => Mutation::DeleteCells {
            family: d.family_name.clone(),
            qualifier: d.column_qualifier.clone(),
            time_range: delete_range(d.time_range.as_ref())?,
        },
        Some(M::DeleteFromFamily(d)) => Mutation::DeleteFamily {
            family: d.family_name.clone(),
        },
        Some(M::DeleteFromRow(_)) => Mutation::DeleteRow,
        Some(M::AddToCell(add)) => Mutation::AddToCell {
            family: add.family_name.clone(),
            qualifier: value_bytes(
                add.column_qualifier.as_ref(),
                "add_to_cell column_qualifier",
            )?,
            timestamp: value_timestamp(add.timestamp.as_ref())?,
            input: value_bytes(add.input.as_ref(), "add_to_cell input")?,
        },
        Some(M::MergeToCell(_)) => {
            return Err(Status::unimplemented(
                "merge_to_cell (merging aggregate states) is not supported by cellar; use add_to_cell",
            ));
        }
        None => return Err(invalid("a mutation has no operation set")),
    })
}

/// A row's mutations, checked for count.
pub fn mutations(list: &[data::Mutation]) -> Result<Vec<Mutation>, Status> {
    if list.len() > MAX_MUTATIONS {
        return Err(invalid(format!(
            "{} mutations in one row, more than {MAX_MUTATIONS}",
            list.len()
        )));
    }
    list.iter().map(mutation).collect()
}

/// A read-modify-write rule as cellar's.
pub fn rule(rule: &data::ReadModifyWriteRule) -> Result<ReadModifyWrite, Status> {
    use data::read_modify_write_rule::Rule;
    match &rule.rule {
        Some(Rule::AppendValue(suffix)) => Ok(ReadModifyWrite::Append {
            family: rule.family_name.clone(),
            qualifier: rule.column_qualifier.clone(),
            suffix: suffix.clone(),
        }),
        Some(Rule::IncrementAmount(delta)) => Ok(ReadModifyWrite::Increment {
            family: rule.family_name.clone(),
            qualifier: rule.column_qualifier.clone(),
            delta: *delta,
        }),
        None => Err(invalid(format!(
            "read-modify-write rule for {}:{} has neither append_value nor increment_amount",
            rule.family_name,
            codec::show_bytes(&rule.column_qualifier)
        ))),
    }
}

/// A row as Bigtable's nested message (families, columns, cells newest
/// first), as ReadModifyWriteRow answers.
pub fn row(row: Row) -> data::Row {
    let mut families: Vec<data::Family> = Vec::new();
    for cell in row.cells {
        if families.last().is_none_or(|f| f.name != *cell.family) {
            families.push(data::Family {
                name: cell.family.to_string(),
                columns: Vec::new(),
            });
        }
        let Some(family) = families.last_mut() else {
            continue;
        };
        if family
            .columns
            .last()
            .is_none_or(|c| c.qualifier != cell.qualifier)
        {
            family.columns.push(data::Column {
                qualifier: cell.qualifier.clone(),
                cells: Vec::new(),
            });
        }
        if let Some(column) = family.columns.last_mut() {
            column.cells.push(data::Cell {
                timestamp_micros: cell.timestamp,
                value: cell.value,
                labels: Vec::new(),
            });
        }
    }
    data::Row {
        key: row.key,
        families,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_row_sets() {
        assert_eq!(table_of("projects/p/instances/i/tables/t").unwrap(), "t");
        let bad = table_of("tables/t").unwrap_err();
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
        assert!(bad.message().contains("tables/t"));
        assert!(instance_of("projects/p/instances/").is_err());
        assert_eq!(row_set(None).unwrap(), RowSet::all());
        let set = row_set(Some(&data::RowSet {
            row_keys: vec![b"k".to_vec()],
            row_ranges: vec![data::RowRange {
                start_key: Some(data::row_range::StartKey::StartKeyOpen(b"a".to_vec())),
                end_key: Some(data::row_range::EndKey::EndKeyClosed(b"c".to_vec())),
            }],
        }))
        .unwrap();
        assert_eq!(set.ranges[0], RowRange::key(b"k".to_vec()));
        assert_eq!(
            set.ranges[1],
            RowRange::between(
                Bound::Excluded(b"a".to_vec()),
                Bound::Included(b"c".to_vec())
            )
        );
        let huge = data::RowSet {
            row_keys: vec![b"k".to_vec(); MAX_ROW_SET + 1],
            row_ranges: vec![],
        };
        assert!(
            row_set(Some(&huge))
                .unwrap_err()
                .message()
                .contains("more than")
        );
        let empty_key = data::RowSet {
            row_keys: vec![Vec::new()],
            row_ranges: vec![],
        };
        assert!(
            row_set(Some(&empty_key))
                .unwrap_err()
                .message()
                .contains("empty")
        );
        let range = |start: &[u8], end: &[u8]| data::RowSet {
            row_keys: vec![],
            row_ranges: vec![data::RowRange {
                start_key: Some(data::row_range::StartKey::StartKeyClosed(start.to_vec())),
                end_key: Some(data::row_range::EndKey::EndKeyOpen(end.to_vec())),
            }],
        };
        let inverted = row_set(Some(&range(b"b", b"a"))).unwrap_err();
        assert!(inverted.message().contains("after its end"), "{inverted}");
        assert!(row_set(Some(&range(b"a", b"a"))).is_ok());
    }

    #[test]
    fn mutations_and_their_errors() {
        let set = data::Mutation {
            mutation: Some(M::SetCell(data::mutation::SetCell {
                family_name: "cf".into(),
                column_qualifier: b"q".to_vec(),
                timestamp_micros: -1,
                value: b"v".to_vec(),
            })),
        };
        let before = crate::store::now_micros();
        let Mutation::SetCell { timestamp, .. } = mutation(&set).unwrap() else {
            panic!("a set cell");
        };
        let ts = timestamp.unwrap();
        assert_eq!(ts % 1000, 0, "{ts}");
        assert!(
            ts >= before - 1000 && ts <= crate::store::now_micros(),
            "{ts}"
        );
        let add = data::Mutation {
            mutation: Some(M::AddToCell(data::mutation::AddToCell {
                family_name: "sums".into(),
                column_qualifier: Some(data::Value {
                    r#type: None,
                    kind: Some(data::value::Kind::RawValue(b"n".to_vec())),
                }),
                timestamp: Some(data::Value {
                    r#type: None,
                    kind: Some(data::value::Kind::RawTimestampMicros(0)),
                }),
                input: Some(data::Value {
                    r#type: None,
                    kind: Some(data::value::Kind::IntValue(5)),
                }),
            })),
        };
        assert_eq!(mutation(&add).unwrap(), Mutation::add_i64("sums", "n", 5));
        let empty = data::Mutation { mutation: None };
        assert_eq!(
            mutation(&empty).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let range = data::Mutation {
            mutation: Some(M::DeleteFromColumn(data::mutation::DeleteFromColumn {
                family_name: "cf".into(),
                column_qualifier: b"q".to_vec(),
                time_range: Some(data::TimestampRange {
                    start_timestamp_micros: 10,
                    end_timestamp_micros: 5,
                }),
            })),
        };
        assert!(mutation(&range).unwrap_err().message().contains("[10, 5)"));
        let empty_range = |start, end| data::Mutation {
            mutation: Some(M::DeleteFromColumn(data::mutation::DeleteFromColumn {
                family_name: "cf".into(),
                column_qualifier: b"q".to_vec(),
                time_range: Some(data::TimestampRange {
                    start_timestamp_micros: start,
                    end_timestamp_micros: end,
                }),
            })),
        };
        assert!(mutation(&empty_range(7, 7)).is_err());
        assert!(mutation(&empty_range(7, 0)).is_ok());
    }
}
