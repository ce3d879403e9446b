//! A qualifier column's SQL type, its encoding in a cell, and the value
//! a cell decodes to.

use serde::{Deserialize, Serialize};

use crate::error::Result;

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
