//! The values a batch is built of: a cell placed in its output row
//! ([`Placed`], read by index through [`CellsAt`]), where a column's cells
//! go ([`Target`]), one value on its way into a builder ([`Datum`]), and
//! the typed appenders chosen once per scan ([`Appender`], with
//! `append_run` for runs of numbers).

use crate::codec::show_bytes;
use crate::schema::{Encoding, KeyValue, Value, ValueType, decode_as};
use crate::store::RowView;
use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, BinaryBuilder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use std::sync::Arc;

/// A cell on its way to the output, borrowed from an owned row or a
/// lent one: `decl` is its family's declaration index.
pub(super) struct Placed<'a> {
    pub(super) decl: usize,
    pub(super) family: &'a str,
    pub(super) qualifier: &'a [u8],
    pub(super) timestamp: i64,
    pub(super) value: &'a [u8],
    /// Whether the cell starts its column (same family and qualifier as
    /// the cell before it otherwise).
    pub(super) first: bool,
}

impl<'a> Placed<'a> {
    /// What [`ViewBatchBuilder::place_cells`] takes.
    pub(super) fn coordinates(&self) -> (usize, &'a [u8], &'a [u8]) {
        (self.decl, self.qualifier, self.value)
    }
}

/// A row's cells by index, as the versions view reads them: only what a
/// run needs is looked at (qualifiers at column starts, values of the
/// columns the query reads).
pub(super) trait CellsAt<'a> {
    fn timestamp(&self, i: usize) -> i64;
    fn qualifier(&self, i: usize) -> &'a [u8];
    fn value(&self, i: usize) -> &'a [u8];
}

impl<'a> CellsAt<'a> for [Placed<'a>] {
    fn timestamp(&self, i: usize) -> i64 {
        self[i].timestamp
    }
    fn qualifier(&self, i: usize) -> &'a [u8] {
        self[i].qualifier
    }
    fn value(&self, i: usize) -> &'a [u8] {
        self[i].value
    }
}

impl<'a> CellsAt<'a> for RowView<'a> {
    fn timestamp(&self, i: usize) -> i64 {
        RowView::timestamp(self, i)
    }
    fn qualifier(&self, i: usize) -> &'a [u8] {
        RowView::qualifier(self, i)
    }
    fn value(&self, i: usize) -> &'a [u8] {
        RowView::value(self, i)
    }
}

/// Where a column's cells go in an output row.
#[derive(Clone, Copy)]
pub(super) enum Target {
    Declared(usize),
    /// The family map of the family with this declaration index.
    Map(usize),
    Nowhere,
}

/// One value on its way into a builder.
#[derive(Clone, Copy)]
pub(crate) enum Datum<'a> {
    Int(i64),
    Float(f64),
    Text(&'a str),
    Bytes(&'a [u8]),
    Time(i64),
    Bool(bool),
    Decimal(i128),
}

impl<'a> Datum<'a> {
    pub(super) fn of(value: &'a Value) -> Datum<'a> {
        match value {
            Value::Int64(n) => Datum::Int(*n),
            Value::Float64(f) => Datum::Float(*f),
            Value::Text(t) => Datum::Text(t),
            Value::Bytes(b) => Datum::Bytes(b),
            Value::Boolean(b) => Datum::Bool(*b),
            Value::Decimal(n) => Datum::Decimal(*n),
        }
    }

    pub(crate) fn key(value: &'a KeyValue) -> Datum<'a> {
        match value {
            KeyValue::Text(t) => Datum::Text(t),
            KeyValue::Int(n) => Datum::Int(*n),
            KeyValue::Time(n) => Datum::Time(*n),
        }
    }
}

/// Appends to a builder made by `make_builder` for one of our types; a
/// value of another type, or `None`, appends NULL.
pub(super) fn put(builder: &mut dyn ArrayBuilder, value: Option<Datum>) {
    let any = builder.as_any_mut();
    if let Some(b) = any.downcast_mut::<StringBuilder>() {
        match value {
            Some(Datum::Text(t)) => b.append_value(t),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<Int64Builder>() {
        match value {
            Some(Datum::Int(n)) => b.append_value(n),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<Float64Builder>() {
        match value {
            Some(Datum::Float(f)) => b.append_value(f),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<BinaryBuilder>() {
        match value {
            Some(Datum::Bytes(v)) => b.append_value(v),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<TimestampMicrosecondBuilder>() {
        match value {
            Some(Datum::Time(n)) => b.append_value(n),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<datafusion::arrow::array::BooleanBuilder>() {
        match value {
            Some(Datum::Bool(v)) => b.append_value(v),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<datafusion::arrow::array::Decimal128Builder>() {
        match value {
            Some(Datum::Decimal(n)) => b.append_value(n),
            _ => b.append_null(),
        }
    }
}

/// A column's builder, its type decided once: appending is a match on
/// this enum, never a downcast.
pub(crate) enum Appender {
    Text(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bytes(BinaryBuilder),
    Time(TimestampMicrosecondBuilder),
    Bool(datafusion::arrow::array::BooleanBuilder),
    /// With the column's type, which says its precision and scale.
    Decimal(datafusion::arrow::array::Decimal128Builder, ValueType),
}

/// Appends a run of 8-byte big-endian numbers to `builder`; the
/// positions (in the run) of those that are not 8 bytes, which read as
/// NULL, and why.
pub(super) fn append_run<'v, T: datafusion::arrow::datatypes::ArrowPrimitiveType>(
    builder: &mut datafusion::arrow::array::PrimitiveBuilder<T>,
    values: impl Iterator<Item = &'v [u8]>,
    from_be: fn([u8; 8]) -> T::Native,
    what: &'static str,
) -> Vec<(usize, String)> {
    let mut bad = Vec::new();
    for (k, bytes) in values.enumerate() {
        match <[u8; 8]>::try_from(bytes) {
            Ok(v) => builder.append_value(from_be(v)),
            Err(_) => {
                builder.append_null();
                bad.push((k, format!("is not an 8-byte big-endian {what}")));
            }
        }
    }
    bad
}

impl Appender {
    pub(crate) fn for_type(data_type: &DataType) -> Option<Appender> {
        Self::with_capacity(data_type, 1024)
    }

    /// An appender with room for `rows` values before it grows: a read
    /// that wants one row should not allocate (and fault in) a thousand.
    pub(crate) fn with_capacity(data_type: &DataType, rows: usize) -> Option<Appender> {
        use datafusion::arrow::array::{BooleanBuilder, Decimal128Builder};
        // Text and bytes: a guess of 16 bytes a value.
        Some(match data_type {
            DataType::Utf8 => Appender::Text(StringBuilder::with_capacity(rows, rows * 16)),
            DataType::Int64 => Appender::Int(Int64Builder::with_capacity(rows)),
            DataType::Float64 => Appender::Float(Float64Builder::with_capacity(rows)),
            DataType::Binary => Appender::Bytes(BinaryBuilder::with_capacity(rows, rows * 16)),
            DataType::Boolean => Appender::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Decimal128(precision, scale) => {
                let precision_u8 = *precision;
                let scale_u8 = u8::try_from(*scale).ok()?;
                Appender::Decimal(
                    Decimal128Builder::with_capacity(rows)
                        .with_precision_and_scale(*precision, *scale)
                        .ok()?,
                    ValueType::Decimal {
                        precision: precision_u8,
                        scale: scale_u8,
                    },
                )
            }
            DataType::Timestamp(TimeUnit::Microsecond, None) => {
                Appender::Time(TimestampMicrosecondBuilder::with_capacity(rows))
            }
            _ => return None,
        })
    }

    /// Appends a value; one of another type, or `None`, appends NULL.
    pub(crate) fn put(&mut self, value: Option<Datum>) {
        match (self, value) {
            (Appender::Text(b), Some(Datum::Text(t))) => b.append_value(t),
            (Appender::Int(b), Some(Datum::Int(n))) => b.append_value(n),
            (Appender::Float(b), Some(Datum::Float(f))) => b.append_value(f),
            (Appender::Bytes(b), Some(Datum::Bytes(v))) => b.append_value(v),
            (Appender::Time(b), Some(Datum::Time(n))) => b.append_value(n),
            (Appender::Bool(b), Some(Datum::Bool(v))) => b.append_value(v),
            (Appender::Decimal(b, _), Some(Datum::Decimal(n))) => b.append_value(n),
            (appender, _) => appender.put_null(),
        }
    }

    pub(super) fn put_null(&mut self) {
        match self {
            Appender::Text(b) => b.append_null(),
            Appender::Int(b) => b.append_null(),
            Appender::Float(b) => b.append_null(),
            Appender::Bytes(b) => b.append_null(),
            Appender::Time(b) => b.append_null(),
            Appender::Bool(b) => b.append_null(),
            Appender::Decimal(b, _) => b.append_null(),
        }
    }

    /// Decodes a cell's bytes straight into the builder.
    pub(crate) fn put_cell(
        &mut self,
        encoding: Encoding,
        bytes: &[u8],
    ) -> Result<(), &'static str> {
        match (self, encoding) {
            (Appender::Text(b), _) => {
                b.append_value(std::str::from_utf8(bytes).map_err(|_| "is not UTF-8")?)
            }
            (Appender::Bytes(b), _) => b.append_value(bytes),
            (Appender::Int(b), Encoding::Binary) => b.append_value(i64::from_be_bytes(
                bytes
                    .try_into()
                    .map_err(|_| "is not an 8-byte big-endian integer")?,
            )),
            (Appender::Float(b), Encoding::Binary) => b.append_value(f64::from_be_bytes(
                bytes
                    .try_into()
                    .map_err(|_| "is not an 8-byte big-endian float")?,
            )),
            (appender, _) => match decode_as(appender.value_type(), encoding, bytes)? {
                Value::Int64(n) => appender.put(Some(Datum::Int(n))),
                Value::Float64(f) => appender.put(Some(Datum::Float(f))),
                Value::Boolean(v) => appender.put(Some(Datum::Bool(v))),
                Value::Decimal(n) => appender.put(Some(Datum::Decimal(n))),
                _ => appender.put_null(),
            },
        }
        Ok(())
    }

    pub(super) fn value_type(&self) -> ValueType {
        match self {
            Appender::Int(_) | Appender::Time(_) => ValueType::Int64,
            Appender::Float(_) => ValueType::Float64,
            Appender::Text(_) => ValueType::Text,
            Appender::Bytes(_) => ValueType::Bytes,
            Appender::Bool(_) => ValueType::Boolean,
            Appender::Decimal(_, t) => *t,
        }
    }

    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            Appender::Text(b) => Arc::new(b.finish()),
            Appender::Int(b) => Arc::new(b.finish()),
            Appender::Float(b) => Arc::new(b.finish()),
            Appender::Bytes(b) => Arc::new(b.finish()),
            Appender::Time(b) => Arc::new(b.finish()),
            Appender::Bool(b) => Arc::new(b.finish()),
            Appender::Decimal(b, _) => Arc::new(b.finish()),
        }
    }
}

pub(crate) fn decode_error(key: &[u8], e: String) -> crate::error::Error {
    crate::error::Error::InvalidArgument(format!("row {}: {e}", show_bytes(key)))
}

/// A qualifier or value of the cells view that does not decode.
pub(super) fn cell_error(key: &[u8], what: String, why: &str, bytes: &[u8]) -> crate::error::Error {
    decode_error(key, format!("{what} {why}: {}", show_bytes(bytes)))
}
