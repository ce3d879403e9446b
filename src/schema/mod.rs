//! What SQL knows about a table beyond the store's families: the row-key
//! schema and the declared qualifier columns with their types. Kept in the
//! table's catalog metadata as JSON; no DataFusion here.

mod key;
mod series;
mod time_pattern;

pub use key::{
    Constraint, KeyOrder, KeyRef, KeySchema, KeyValue, Segment, SegmentKind, TimeFormat,
};
pub(crate) use series::WEEK_ORIGIN;
pub use series::{SeriesDecl, SeriesDef, SeriesLayout, Shape};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{FamilyKind, MAX_QUALIFIER_LEN, TableDef};

/// Metadata key under which the SQL schema of a table is stored.
pub const SCHEMA_METADATA_KEY: &str = "sql.schema";

/// The SQL type of a qualifier column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueType {
    /// 64-bit signed integer.
    Int64,
    /// 64-bit float.
    Float64,
    /// UTF-8 text.
    Text,
    /// Raw bytes.
    Bytes,
    /// True or false: one byte (0 or 1), or `true`/`false` AS TEXT.
    Boolean,
    /// An exact decimal of `precision` digits, `scale` of them after the
    /// point: 16 bytes big-endian (the unscaled value), or its decimal
    /// text with exactly `scale` fraction digits AS TEXT (`600.60`).
    Decimal {
        /// Digits in all, 1 to 38.
        precision: u8,
        /// Digits after the point, 0 to `precision`.
        scale: u8,
    },
}

impl ValueType {
    /// The type's name in cellar's DDL.
    pub fn sql_name(self) -> String {
        match self {
            ValueType::Int64 => "BIGINT".into(),
            ValueType::Float64 => "DOUBLE".into(),
            ValueType::Text => "TEXT".into(),
            ValueType::Bytes => "BYTES".into(),
            ValueType::Boolean => "BOOLEAN".into(),
            ValueType::Decimal { precision, scale } => format!("DECIMAL({precision}, {scale})"),
        }
    }
}

/// `n` (unscaled) as decimal text with `scale` digits after the point.
pub fn format_decimal(n: i128, scale: u8) -> String {
    let digits = n.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let sign = if n < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{fraction}")
}

/// Decimal text (`-12.5`, `600.60`, `3`) as an unscaled value of
/// `scale` fraction digits and at most `precision` digits; `None` when
/// it is not such a number or needs more digits than the type has
/// (never rounded).
pub fn parse_decimal(text: &str, precision: u8, scale: u8) -> Option<i128> {
    let text = text.trim();
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = body.split_once('.').unwrap_or((body, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > usize::from(scale) {
        return None;
    }
    let whole = whole.trim_start_matches('0');
    if whole.len() + usize::from(scale) > usize::from(precision) {
        return None;
    }
    let mut digits = String::with_capacity(usize::from(precision) + 1);
    digits.push_str(whole);
    digits.push_str(fraction);
    digits.extend(std::iter::repeat_n(
        '0',
        usize::from(scale) - fraction.len(),
    ));
    let n: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some(if negative { -n } else { n })
}

/// How a value is laid out in the cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Encoding {
    /// Numbers as 8-byte big-endian; text as UTF-8; bytes as they are.
    #[default]
    Binary,
    /// Numbers written as decimal text (`"98"`).
    Text,
}

/// A declared qualifier column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// SQL column name.
    pub name: String,
    /// The family holding it.
    pub family: String,
    /// The qualifier (defaults to the column name).
    pub qualifier: String,
    /// Its type.
    pub value_type: ValueType,
    /// How the cell bytes encode it.
    pub encoding: Encoding,
    /// A protobuf message column (bytes in the cell, a struct in SQL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<ProtoColumn>,
}

/// A column holding serialized protobuf messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtoColumn {
    /// Full message type name, `package.Message`.
    pub message: String,
    /// Read malformed blobs as NULL instead of failing the query.
    pub null_on_error: bool,
}

impl ColumnDef {
    /// Decodes a cell value; the error names the column and the bytes.
    pub fn decode(&self, bytes: &[u8]) -> std::result::Result<Value, String> {
        decode_as(self.value_type, self.encoding, bytes).map_err(|why| self.failure(why, bytes))
    }

    /// Says why `bytes` are not a value of this column, naming the column
    /// and showing the bytes.
    pub fn failure(&self, why: &str, bytes: &[u8]) -> String {
        format!(
            "column {} ({}:{}) {why}: {}",
            self.name,
            self.family,
            self.qualifier,
            crate::codec::show_bytes(bytes)
        )
    }

    /// Encodes a value for this column.
    pub fn encode(&self, value: &Value) -> Result<Vec<u8>> {
        Ok(match (value, self.encoding) {
            (Value::Bytes(b), _) => b.clone(),
            (Value::Text(t), _) => t.clone().into_bytes(),
            (Value::Int64(n), Encoding::Binary) => n.to_be_bytes().to_vec(),
            (Value::Int64(n), Encoding::Text) => n.to_string().into_bytes(),
            (Value::Float64(f), Encoding::Binary) => f.to_be_bytes().to_vec(),
            (Value::Float64(f), Encoding::Text) => f.to_string().into_bytes(),
            (Value::Boolean(b), Encoding::Binary) => vec![u8::from(*b)],
            (Value::Boolean(b), Encoding::Text) => b.to_string().into_bytes(),
            (Value::Decimal(n), Encoding::Binary) => n.to_be_bytes().to_vec(),
            (Value::Decimal(n), Encoding::Text) => {
                let scale = match self.value_type {
                    ValueType::Decimal { scale, .. } => scale,
                    _ => 0,
                };
                format_decimal(*n, scale).into_bytes()
            }
        })
    }
}

/// Decodes bytes as a value of `value_type` laid out in `encoding`; the
/// error says why they do not hold one.
pub fn decode_as(
    value_type: ValueType,
    encoding: Encoding,
    bytes: &[u8],
) -> std::result::Result<Value, &'static str> {
    Ok(match (value_type, encoding) {
        (ValueType::Bytes, _) => Value::Bytes(bytes.to_vec()),
        (ValueType::Text, _) => Value::Text(
            std::str::from_utf8(bytes)
                .map_err(|_| "is not UTF-8")?
                .to_string(),
        ),
        (ValueType::Int64, Encoding::Binary) => Value::Int64(i64::from_be_bytes(
            bytes
                .try_into()
                .map_err(|_| "is not an 8-byte big-endian integer")?,
        )),
        (ValueType::Float64, Encoding::Binary) => Value::Float64(f64::from_be_bytes(
            bytes
                .try_into()
                .map_err(|_| "is not an 8-byte big-endian float")?,
        )),
        (ValueType::Int64, Encoding::Text) => Value::Int64(
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or("is not an integer")?,
        ),
        (ValueType::Float64, Encoding::Text) => Value::Float64(
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or("is not a number")?,
        ),
        (ValueType::Decimal { precision, .. }, Encoding::Binary) => {
            let n = i128::from_be_bytes(
                bytes
                    .try_into()
                    .map_err(|_| "is not a 16-byte big-endian decimal")?,
            );
            if n.unsigned_abs() >= 10u128.pow(u32::from(precision)) {
                return Err("has more digits than the column's precision");
            }
            Value::Decimal(n)
        }
        (ValueType::Decimal { precision, scale }, Encoding::Text) => Value::Decimal(
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| parse_decimal(s, precision, scale))
                .ok_or("is not a decimal of the column's precision and scale")?,
        ),
        (ValueType::Boolean, Encoding::Binary) => match bytes {
            [0] => Value::Boolean(false),
            [1] => Value::Boolean(true),
            _ => return Err("is not a one-byte boolean (0 or 1)"),
        },
        (ValueType::Boolean, Encoding::Text) => {
            let text = std::str::from_utf8(bytes)
                .map(str::trim)
                .unwrap_or_default();
            if text.eq_ignore_ascii_case("true") {
                Value::Boolean(true)
            } else if text.eq_ignore_ascii_case("false") {
                Value::Boolean(false)
            } else {
                return Err("is not true or false");
            }
        }
    })
}

/// A decoded cell value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Integer.
    Int64(i64),
    /// Float.
    Float64(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// True or false.
    Boolean(bool),
    /// A decimal, unscaled (its column says the scale).
    Decimal(i128),
}

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
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
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
    use super::{format_decimal, parse_decimal};

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
