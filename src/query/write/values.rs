//! A value column typed for one batch ([`Values`]): how each non-NULL
//! value of an Arrow array becomes the bytes of its cell, the accessor
//! chosen once per batch, not per value.

use crate::error::Error;
use crate::query::view::ProtoDecl;
use crate::schema::{ColumnDef, Encoding, ValueType, format_decimal};
use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
    StringArray,
};
use std::io::Write as _;

/// A value column typed for one batch: how a non-NULL value becomes the
/// bytes of its cell.
pub(crate) enum Values<'a> {
    Int64(&'a Int64Array, Encoding),
    Float64(&'a Float64Array, Encoding),
    Boolean(&'a BooleanArray, Encoding),
    Decimal(&'a Decimal128Array, u8, Encoding),
    Text(&'a StringArray),
    Bytes(&'a BinaryArray),
    Proto(&'a ArrayRef, &'a ProtoDecl),
}

impl<'a> Values<'a> {
    /// `array` (of the view's type for `def`) typed once.
    pub fn of(
        array: &'a ArrayRef,
        def: &ColumnDef,
        proto: Option<&'a ProtoDecl>,
    ) -> crate::error::Result<Self> {
        if let Some(p) = proto {
            return Ok(Values::Proto(array, p));
        }
        let any = array.as_any();
        let wrong = || {
            Error::Internal(format!(
                "column {} arrived as {}, not {:?}",
                def.name,
                array.data_type(),
                def.value_type
            ))
        };
        Ok(match def.value_type {
            ValueType::Int64 => Values::Int64(any.downcast_ref().ok_or_else(wrong)?, def.encoding),
            ValueType::Float64 => {
                Values::Float64(any.downcast_ref().ok_or_else(wrong)?, def.encoding)
            }
            ValueType::Boolean => {
                Values::Boolean(any.downcast_ref().ok_or_else(wrong)?, def.encoding)
            }
            ValueType::Decimal { scale, .. } => {
                Values::Decimal(any.downcast_ref().ok_or_else(wrong)?, scale, def.encoding)
            }
            ValueType::Text => Values::Text(any.downcast_ref().ok_or_else(wrong)?),
            ValueType::Bytes => Values::Bytes(any.downcast_ref().ok_or_else(wrong)?),
        })
    }

    /// Appends the bytes of value `i` (not NULL) to `out`.
    pub fn write(&self, i: usize, out: &mut Vec<u8>) -> crate::error::Result<()> {
        let text = |e: &Encoding| *e == Encoding::Text;
        match self {
            Values::Int64(a, e) if text(e) => display(out, a.value(i)),
            Values::Int64(a, _) => out.extend_from_slice(&a.value(i).to_be_bytes()),
            Values::Float64(a, e) if text(e) => display(out, a.value(i)),
            Values::Float64(a, _) => out.extend_from_slice(&a.value(i).to_be_bytes()),
            Values::Boolean(a, e) if text(e) => display(out, a.value(i)),
            Values::Boolean(a, _) => out.push(u8::from(a.value(i))),
            Values::Decimal(a, scale, e) if text(e) => {
                out.extend_from_slice(format_decimal(a.value(i), *scale).as_bytes())
            }
            Values::Decimal(a, _, _) => out.extend_from_slice(&a.value(i).to_be_bytes()),
            Values::Text(a) => out.extend_from_slice(a.value(i).as_bytes()),
            Values::Bytes(a) => out.extend_from_slice(a.value(i)),
            Values::Proto(a, p) => out.extend_from_slice(&crate::proto::encode(&p.message, a, i)?),
        }
        Ok(())
    }
}

impl Values<'_> {
    /// How many bytes every value takes, when all take as many.
    pub(super) fn width(&self) -> Option<usize> {
        match self {
            Values::Int64(_, e) | Values::Float64(_, e) if *e != Encoding::Text => Some(8),
            Values::Boolean(_, e) if *e != Encoding::Text => Some(1),
            Values::Decimal(_, _, e) if *e != Encoding::Text => Some(16),
            _ => None,
        }
    }

    /// Appends the bytes of the values of `rows` (none NULL) to `out`,
    /// one after another.
    pub(super) fn write_rows(&self, rows: &[usize], out: &mut Vec<u8>) -> crate::error::Result<()> {
        out.reserve(rows.len() * self.width().unwrap_or(8));
        let binary = |e: &Encoding| *e != Encoding::Text;
        match self {
            Values::Int64(a, e) if binary(e) => {
                let values = a.values();
                rows.iter()
                    .for_each(|&r| out.extend_from_slice(&values[r].to_be_bytes()));
            }
            Values::Float64(a, e) if binary(e) => {
                let values = a.values();
                rows.iter()
                    .for_each(|&r| out.extend_from_slice(&values[r].to_be_bytes()));
            }
            _ => {
                for &r in rows {
                    self.write(r, out)?;
                }
            }
        }
        Ok(())
    }
}

/// The error of a row whose `_timestamp` is before the epoch.
pub(super) fn negative_timestamp(micros: i64) -> Error {
    Error::InvalidArgument(format!(
        "_timestamp {micros} µs is before 1970-01-01; cell timestamps are not negative"
    ))
}

/// Appends a value's text (as `to_string` would make it) to `out`.
fn display(out: &mut Vec<u8>, value: impl std::fmt::Display) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{value}");
}
