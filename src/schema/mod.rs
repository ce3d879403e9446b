//! What SQL knows about a table beyond the store's families: the row-key
//! schema and the declared qualifier columns with their types. Kept in the
//! table's catalog metadata as JSON; no DataFusion here.

mod column;
mod key;
mod key_cursor;
mod key_ranges;
mod series;
mod time_pattern;

pub use column::{ColumnDef, Encoding, ProtoColumn, Value, ValueType, decode_as, format_decimal};
pub use key::{
    Constraint, KeyRef, KeySchema, KeyValue, Segment, SegmentKind, TimeFormat, format_salt,
};
pub use key_cursor::KeyCursor;
pub use key_ranges::KeyOrder;
pub(crate) use series::WEEK_ORIGIN;
pub use series::{SeriesDecl, SeriesDef, SeriesLayout, Shape};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{FamilyKind, MAX_QUALIFIER_LEN, TableDef};

/// Metadata key under which the SQL schema of a table is stored.
pub const SCHEMA_METADATA_KEY: &str = "sql.schema";

/// How a family's undeclared qualifiers and values read in SQL: for
/// families that keep data in their qualifiers (a friend's name, a time of
/// day such as `0015`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyTypes {
    /// The type qualifiers decode to (in the cells view).
    pub qualifier: ColumnDef,
    /// The type values decode to (cells view and the family's map column).
    pub value: ColumnDef,
}

impl FamilyTypes {
    /// The untyped default: qualifiers as text, values as bytes.
    pub fn untyped(family: &str) -> FamilyTypes {
        let def = |value_type, name: &str| ColumnDef {
            name: name.into(),
            family: family.into(),
            qualifier: String::new(),
            value_type,
            encoding: Encoding::Binary,
            proto: None,
        };
        FamilyTypes {
            qualifier: def(ValueType::Text, "qualifier"),
            value: def(ValueType::Bytes, "value"),
        }
    }
}

/// The SQL schema of a table.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TableSchema {
    /// The row key's segments, if declared.
    pub key: Option<KeySchema>,
    /// Declared qualifier columns.
    pub columns: Vec<ColumnDef>,
    /// Families with typed qualifiers or values.
    #[serde(default)]
    pub family_types: std::collections::BTreeMap<String, FamilyTypes>,
    /// When the table holds a time series: how its rows map to events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<SeriesDef>,
}

/// Longest column name, in bytes.
pub const MAX_COLUMN_NAME: usize = 128;

impl TableSchema {
    /// The types of a family's qualifiers and values.
    pub fn family_types(&self, family: &str) -> FamilyTypes {
        self.family_types
            .get(family)
            .cloned()
            .unwrap_or_else(|| FamilyTypes::untyped(family))
    }
}

impl TableSchema {
    /// The wide view's column holding a family's cells as a map: the
    /// family's name, or `name:` (Bigtable's `family:qualifier` spelling)
    /// when a key segment or declared column already has that name, in
    /// any case. Families and columns are separate name spaces, so the
    /// guides' family GAME can sit beside a key segment `game`.
    pub fn map_column(&self, family: &str) -> String {
        let taken = |name: &str| name.eq_ignore_ascii_case(family);
        let clash = taken("_key")
            || taken("_timestamp")
            || self
                .key
                .as_ref()
                .is_some_and(|k| k.fields().any(|(_, n, _)| taken(n)))
            || self.columns.iter().any(|c| taken(&c.name));
        if clash {
            format!("{family}:")
        } else {
            family.to_string()
        }
    }

    /// The schema stored with a table (empty when none was declared).
    pub fn of(def: &TableDef) -> Result<TableSchema> {
        match def.metadata.get(SCHEMA_METADATA_KEY) {
            None => Ok(TableSchema::default()),
            Some(json) => serde_json::from_str(json).map_err(|e| Error::Corrupt {
                reason: format!("SQL schema of table {:?} does not parse: {e}", def.name),
            }),
        }
    }

    /// The JSON form stored in the catalog.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|e| Error::Internal(format!("the schema of a table did not serialize: {e}")))
    }

    /// Checks names: no duplicates between segments, columns, the reserved
    /// `_key`/`_timestamp`, and the families' map columns (a family named
    /// like a column gets the map column `name:`); no two families differ
    /// only in case; columns name existing families,
    /// and the columns and value types of aggregate families are what
    /// their accumulators hold.
    pub fn validate(&self, families: &[(String, FamilyKind)]) -> Result<()> {
        let mut names: Vec<String> = vec!["_key".into(), "_timestamp".into()];
        let mut add = |name: &str| {
            if name.is_empty() || name.len() > MAX_COLUMN_NAME {
                return Err(Error::InvalidName {
                    what: "column",
                    name: name.to_string(),
                    reason: format!(
                        "it is {} bytes; names are 1 to {MAX_COLUMN_NAME} bytes",
                        name.len()
                    ),
                });
            }
            let lower = name.to_ascii_lowercase();
            if names.contains(&lower) {
                return Err(Error::InvalidArgument(format!(
                    "column name {name:?} is used twice (or is reserved)"
                )));
            }
            names.push(lower);
            Ok(())
        };
        if let Some(key) = &self.key {
            key.validate()?;
            for (_, name, _) in key.fields() {
                add(name)?;
            }
        }
        for (i, column) in self.columns.iter().enumerate() {
            add(&column.name)?;
            let Some((_, kind)) = families.iter().find(|(f, _)| *f == column.family) else {
                return Err(Error::FamilyNotFound {
                    table: String::new(),
                    family: column.family.clone(),
                });
            };
            check_aggregate_column(*kind, &format!("column {}", column.name), column)?;
            if column.qualifier.len() > MAX_QUALIFIER_LEN {
                return Err(Error::InvalidArgument(format!(
                    "column {}: its qualifier is {} bytes; the limit is {MAX_QUALIFIER_LEN}",
                    column.name,
                    column.qualifier.len()
                )));
            }
            if let Some(other) = self.columns[..i]
                .iter()
                .find(|c| c.family == column.family && c.qualifier == column.qualifier)
            {
                return Err(Error::InvalidArgument(format!(
                    "columns {} and {} both name qualifier {:?} of family {}; a qualifier holds one column",
                    other.name, column.name, column.qualifier, column.family
                )));
            }
        }
        let mut family_names: Vec<String> = Vec::new();
        for (family, kind) in families {
            let lower = family.to_ascii_lowercase();
            if family_names.contains(&lower) {
                return Err(Error::InvalidArgument(format!(
                    "family name {family:?} is used twice (family names differ in more than case)"
                )));
            }
            family_names.push(lower);
            add(&self.map_column(family))?;
            if let Some(types) = self.family_types.get(family) {
                check_aggregate_column(*kind, &format!("VALUES of family {family}"), &types.value)?;
            }
        }
        Ok(())
    }
}

/// Refuses a column type an aggregate family cannot hold: SUM, MIN and MAX
/// cells are 64-bit integer accumulators (8 bytes, big-endian, as in
/// Bigtable), and a HyperLogLog cell is a sketch read as bytes.
fn check_aggregate_column(kind: FamilyKind, what: &str, column: &ColumnDef) -> Result<()> {
    let family = &column.family;
    let ok = match kind {
        FamilyKind::Normal => true,
        FamilyKind::Sum | FamilyKind::Min | FamilyKind::Max => {
            column.value_type == ValueType::Int64
                && column.encoding == Encoding::Binary
                && column.proto.is_none()
        }
        FamilyKind::HyperLogLog => column.value_type == ValueType::Bytes && column.proto.is_none(),
    };
    if ok {
        return Ok(());
    }
    let shown = match (&column.proto, column.value_type, column.encoding) {
        (Some(p), _, _) => format!("PROTO '{}'", p.message),
        (None, t, Encoding::Text) => format!("{} AS TEXT", t.sql_name()),
        (None, t, Encoding::Binary) => t.sql_name(),
    };
    let reason = match kind {
        FamilyKind::HyperLogLog => format!(
            "family {family} is an HLL family, whose cells are sketches read as BYTES; declare it BYTES (and read the estimate with hll_count)"
        ),
        _ => format!(
            "family {family} is a {} family, whose cells are 64-bit integer accumulators; declare it BIGINT (binary), or keep {shown} values in a normal family",
            kind.to_string().to_uppercase()
        ),
    };
    Err(Error::InvalidArgument(format!(
        "{what} cannot be {shown}: {reason}"
    )))
}

#[cfg(test)]
mod tests {
    use super::column::{format_decimal, parse_decimal};

    #[test]
    fn decimal_text_round_trips_at_its_scale() {
        assert_eq!(format_decimal(60060, 2), "600.60");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert_eq!(format_decimal(7, 0), "7");
        assert_eq!(parse_decimal("600.60", 10, 2), Some(60060));
        assert_eq!(parse_decimal(" -0.5 ", 10, 2), Some(-50));
        assert_eq!(parse_decimal("12", 10, 2), Some(1200));
        assert_eq!(parse_decimal("0012.500", 4, 2), Some(1250));
        // Never rounded: more fraction digits, or more digits in all.
        assert_eq!(parse_decimal("1.235", 10, 2), None);
        assert_eq!(parse_decimal("123.4", 4, 2), None);
        for bad in ["", ".", "1e3", "1.2.3", "--1", "abc"] {
            assert_eq!(parse_decimal(bad, 10, 2), None, "{bad:?}");
        }
        for n in [0i128, 1, -1, 99_999, -12_345] {
            assert_eq!(parse_decimal(&format_decimal(n, 3), 10, 3), Some(n));
        }
    }
}
