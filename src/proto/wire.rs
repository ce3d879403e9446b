//! The protobuf wire format, read field by field so that unneeded fields
//! are skipped without decoding, and Arrow rows turned back into messages.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type,
};
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value};

use super::mask::FieldMask;
use super::types::{MAX_DEPTH, kind_type};
use crate::error::{Error, Result};

/// A decoded value: messages hold their fields in declaration order
/// (`Null` where absent or not decoded); lists and maps are `List`s, a map
/// entry a two-field message.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum PValue {
    /// Absent or not decoded.
    #[default]
    Null,
    /// bool
    Bool(bool),
    /// int32, sint32, sfixed32
    I32(i32),
    /// int64, sint64, sfixed64
    I64(i64),
    /// uint32, fixed32
    U32(u32),
    /// uint64, fixed64
    U64(u64),
    /// float
    F32(f32),
    /// double
    F64(f64),
    /// string, enum names
    Str(String),
    /// bytes, and messages nested too deep
    Bytes(Vec<u8>),
    /// A message's fields.
    Message(Vec<PValue>),
    /// Repeated fields and maps.
    List(Vec<PValue>),
}

type WireResult<T> = std::result::Result<T, String>;

fn varint(bytes: &[u8], pos: &mut usize) -> WireResult<u64> {
    let mut value = 0u64;
    for shift in 0..10 {
        let Some(&b) = bytes.get(*pos) else {
            return Err(format!("truncated varint at byte {}", *pos));
        };
        *pos += 1;
        value |= u64::from(b & 0x7f) << (7 * shift);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(format!("varint longer than 10 bytes before byte {}", *pos))
}

fn take<'a>(bytes: &'a [u8], pos: &mut usize, n: usize) -> WireResult<&'a [u8]> {
    let end = pos
        .checked_add(n)
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| {
            format!(
                "truncated: {n} bytes wanted at byte {}, {} left",
                *pos,
                bytes.len().saturating_sub(*pos)
            )
        })?;
    let out = &bytes[*pos..end];
    *pos = end;
    Ok(out)
}

fn length_delimited<'a>(bytes: &'a [u8], pos: &mut usize) -> WireResult<&'a [u8]> {
    let len = varint(bytes, pos)?;
    let len = usize::try_from(len).map_err(|_| format!("length {len} is too large"))?;
    take(bytes, pos, len)
}

fn skip(bytes: &[u8], pos: &mut usize, wire_type: u64, number: u64) -> WireResult<()> {
    match wire_type {
        0 => varint(bytes, pos).map(|_| ()),
        1 => take(bytes, pos, 8).map(|_| ()),
        2 => length_delimited(bytes, pos).map(|_| ()),
        5 => take(bytes, pos, 4).map(|_| ()),
        3 | 4 => Err(format!(
            "field {number} uses groups, which are not supported"
        )),
        other => Err(format!("field {number} has invalid wire type {other}")),
    }
}

/// The wire type a field kind is written with (unpacked).
fn wire_type_of(kind: &Kind) -> u64 {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => 1,
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => 5,
        Kind::String | Kind::Bytes | Kind::Message(_) => 2,
        _ => 0,
    }
}

fn default_value(kind: &Kind) -> PValue {
    match kind {
        Kind::Double => PValue::F64(0.0),
        Kind::Float => PValue::F32(0.0),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => PValue::I32(0),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => PValue::I64(0),
        Kind::Uint32 | Kind::Fixed32 => PValue::U32(0),
        Kind::Uint64 | Kind::Fixed64 => PValue::U64(0),
        Kind::Bool => PValue::Bool(false),
        Kind::String => PValue::Str(String::new()),
        Kind::Bytes => PValue::Bytes(Vec::new()),
        Kind::Enum(e) => e.get_value(0).map_or(PValue::Str("0".into()), |v| {
            PValue::Str(v.name().to_string())
        }),
        Kind::Message(_) => PValue::Null,
    }
}

fn scalar(kind: &Kind, bytes: &[u8], pos: &mut usize, depth: usize) -> WireResult<PValue> {
    let fixed32 = |pos: &mut usize| -> WireResult<[u8; 4]> {
        let b = take(bytes, pos, 4)?;
        Ok([b[0], b[1], b[2], b[3]])
    };
    let fixed64 = |pos: &mut usize| -> WireResult<[u8; 8]> {
        let b = take(bytes, pos, 8)?;
        Ok([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    };
    Ok(match kind {
        Kind::Double => PValue::F64(f64::from_le_bytes(fixed64(pos)?)),
        Kind::Float => PValue::F32(f32::from_le_bytes(fixed32(pos)?)),
        Kind::Fixed64 => PValue::U64(u64::from_le_bytes(fixed64(pos)?)),
        Kind::Sfixed64 => PValue::I64(i64::from_le_bytes(fixed64(pos)?)),
        Kind::Fixed32 => PValue::U32(u32::from_le_bytes(fixed32(pos)?)),
        Kind::Sfixed32 => PValue::I32(i32::from_le_bytes(fixed32(pos)?)),
        // Truncating casts are the wire format's own rules for 32-bit varints.
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the wire format truncates a 32-bit varint"
        )]
        Kind::Int32 => PValue::I32(varint(bytes, pos)? as i32),
        #[allow(
            clippy::cast_possible_wrap,
            reason = "a 64-bit varint holds the bits of a signed value"
        )]
        Kind::Int64 => PValue::I64(varint(bytes, pos)? as i64),
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the wire format truncates a 32-bit varint"
        )]
        Kind::Uint32 => PValue::U32(varint(bytes, pos)? as u32),
        Kind::Uint64 => PValue::U64(varint(bytes, pos)?),
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the wire format truncates a 32-bit varint"
        )]
        Kind::Sint32 => {
            let v = varint(bytes, pos)? as u32;
            PValue::I32((v >> 1) as i32 ^ -((v & 1) as i32))
        }
        #[allow(
            clippy::cast_possible_wrap,
            reason = "a 64-bit varint holds the bits of a signed value"
        )]
        Kind::Sint64 => {
            let v = varint(bytes, pos)?;
            PValue::I64((v >> 1) as i64 ^ -((v & 1) as i64))
        }
        Kind::Bool => PValue::Bool(varint(bytes, pos)? != 0),
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the wire format truncates a 32-bit varint"
        )]
        Kind::Enum(e) => {
            let n = varint(bytes, pos)? as i32;
            PValue::Str(
                e.get_value(n)
                    .map_or_else(|| n.to_string(), |v| v.name().to_string()),
            )
        }
        Kind::String => {
            let b = length_delimited(bytes, pos)?;
            PValue::Str(
                String::from_utf8(b.to_vec())
                    .map_err(|_| "a string field is not UTF-8".to_string())?,
            )
        }
        Kind::Bytes => PValue::Bytes(length_delimited(bytes, pos)?.to_vec()),
        Kind::Message(m) => {
            let b = length_delimited(bytes, pos)?;
            if depth < MAX_DEPTH {
                decode_message(m, b, &FieldMask::all(), depth)?
            } else {
                PValue::Bytes(b.to_vec())
            }
        }
    })
}

fn nested(
    kind: &Kind,
    bytes: &[u8],
    pos: &mut usize,
    mask: &FieldMask,
    depth: usize,
) -> WireResult<PValue> {
    match kind {
        Kind::Message(m) if depth < MAX_DEPTH => {
            let b = length_delimited(bytes, pos)?;
            decode_message(m, b, mask, depth)
        }
        other => scalar(other, bytes, pos, depth),
    }
}

/// Decodes the fields of `mask` of one message.
pub(super) fn decode_message(
    desc: &MessageDescriptor,
    bytes: &[u8],
    mask: &FieldMask,
    depth: usize,
) -> WireResult<PValue> {
    let fields: Vec<FieldDescriptor> = desc.fields().collect();
    let masks: Vec<Option<&FieldMask>> = fields.iter().map(|f| mask.child(f.name())).collect();
    let mut out = vec![PValue::Null; fields.len()];
    let mut pos = 0;
    while pos < bytes.len() {
        let key = varint(bytes, &mut pos)?;
        let (number, wire_type) = (key >> 3, key & 7);
        let field = u32::try_from(number)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("invalid field number {number}"))?;
        // Unknown fields and fields outside the mask are skipped undecoded.
        let Some((i, Some(child_mask))) = fields
            .iter()
            .position(|f| f.number() == field)
            .map(|i| (i, masks[i]))
        else {
            skip(bytes, &mut pos, wire_type, number)?;
            continue;
        };
        let f = &fields[i];
        let kind = f.kind();
        let expected = wire_type_of(&kind);
        let what = |got: u64| {
            format!(
                "field {} has wire type {got}, expected {expected}",
                f.name()
            )
        };
        if f.is_map() {
            if wire_type != 2 {
                return Err(what(wire_type));
            }
            let Kind::Message(entry) = kind else {
                return Err(format!("map field {} has no entry type", f.name()));
            };
            let b = length_delimited(bytes, &mut pos)?;
            let value = decode_message(&entry, b, &FieldMask::all(), depth)?;
            push(&mut out[i], value);
        } else if f.is_list() {
            if wire_type == 2 && expected != 2 {
                // packed
                let b = length_delimited(bytes, &mut pos)?;
                let mut p = 0;
                while p < b.len() {
                    let v = scalar(&kind, b, &mut p, depth + 1)?;
                    push(&mut out[i], v);
                }
            } else if wire_type == expected {
                let v = nested(&kind, bytes, &mut pos, child_mask, depth + 1)?;
                push(&mut out[i], v);
            } else {
                return Err(what(wire_type));
            }
        } else if wire_type == expected {
            out[i] = nested(&kind, bytes, &mut pos, child_mask, depth + 1)?;
        } else {
            return Err(what(wire_type));
        }
    }
    for (i, f) in fields.iter().enumerate() {
        if masks[i].is_none() || out[i] != PValue::Null {
            continue;
        }
        if f.is_list() || f.is_map() {
            out[i] = PValue::List(Vec::new());
        } else if !f.supports_presence() {
            out[i] = default_value(&f.kind());
        }
    }
    Ok(PValue::Message(out))
}

fn push(slot: &mut PValue, value: PValue) {
    match slot {
        PValue::List(items) => items.push(value),
        _ => *slot = PValue::List(vec![value]),
    }
}

/// Row `row` of a struct array as a message.
pub(super) fn to_dynamic(
    desc: &MessageDescriptor,
    array: &ArrayRef,
    row: usize,
) -> Result<DynamicMessage> {
    let bad = |what: String| Error::InvalidArgument(format!("{}: {what}", desc.full_name()));
    let Some(structs) = array.as_struct_opt() else {
        return Err(bad(format!("expected a struct, got {}", array.data_type())));
    };
    let mut message = DynamicMessage::new(desc.clone());
    for f in desc.fields() {
        let Some(column) = structs.column_by_name(f.name()) else {
            continue;
        };
        if column.is_null(row) {
            continue;
        }
        let value =
            field_value(&f, column, row).map_err(|e| bad(format!("field {}: {e}", f.name())))?;
        message
            .try_set_field(&f, value)
            .map_err(|e| bad(format!("field {}: {e}", f.name())))?;
    }
    Ok(message)
}

fn field_value(f: &FieldDescriptor, column: &ArrayRef, row: usize) -> Result<Value> {
    let kind = f.kind();
    if f.is_map() {
        let Kind::Message(entry) = kind else {
            return Err(Error::InvalidArgument("map without entry type".into()));
        };
        let (key_field, value_field) = (entry.map_entry_key_field(), entry.map_entry_value_field());
        let Some(map) = column.as_map_opt() else {
            return Err(Error::InvalidArgument(format!(
                "expected a map, got {}",
                column.data_type()
            )));
        };
        let entries = map.value(row);
        let keys = entries.column(0);
        let values = entries.column(1);
        let mut out = HashMap::new();
        for j in 0..entries.len() {
            let key = match kind_value(&key_field.kind(), keys, j)? {
                Value::Bool(b) => MapKey::Bool(b),
                Value::I32(n) => MapKey::I32(n),
                Value::I64(n) => MapKey::I64(n),
                Value::U32(n) => MapKey::U32(n),
                Value::U64(n) => MapKey::U64(n),
                Value::String(s) => MapKey::String(s),
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "{other:?} cannot be a map key"
                    )));
                }
            };
            if values.is_null(j) {
                continue;
            }
            out.insert(key, kind_value(&value_field.kind(), values, j)?);
        }
        return Ok(Value::Map(out));
    }
    if f.is_list() {
        let Some(list) = column.as_list_opt::<i32>() else {
            return Err(Error::InvalidArgument(format!(
                "expected a list, got {}",
                column.data_type()
            )));
        };
        let items = list.value(row);
        let mut out = Vec::with_capacity(items.len());
        for j in 0..items.len() {
            if !items.is_null(j) {
                out.push(kind_value(&kind, &items, j)?);
            }
        }
        return Ok(Value::List(out));
    }
    kind_value(&kind, column, row)
}

fn kind_value(kind: &Kind, column: &ArrayRef, row: usize) -> Result<Value> {
    let arrow = |e: datafusion::arrow::error::ArrowError| Error::InvalidArgument(e.to_string());
    if let Kind::Message(m) = kind {
        // A message nested past the column's levels is typed as its
        // bytes (see `levels`): the column's type says which.
        if column.as_struct_opt().is_some() {
            return Ok(Value::Message(to_dynamic(m, column, row)?));
        }
        let bytes = cast(column, &DataType::Binary).map_err(arrow)?;
        let bytes = bytes.as_binary::<i32>().value(row);
        let message = DynamicMessage::decode(m.clone(), bytes).map_err(|e| {
            Error::InvalidArgument(format!(
                "the bytes of a {} do not decode: {e}",
                m.full_name()
            ))
        })?;
        return Ok(Value::Message(message));
    }
    let target = match kind {
        Kind::Enum(_) => column.data_type().clone(),
        other => kind_type(other, MAX_DEPTH),
    };
    let c = if *column.data_type() == target {
        column.clone()
    } else {
        cast(column, &target).map_err(arrow)?
    };
    Ok(match kind {
        Kind::Double => Value::F64(c.as_primitive::<Float64Type>().value(row)),
        Kind::Float => Value::F32(c.as_primitive::<Float32Type>().value(row)),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(c.as_primitive::<Int32Type>().value(row))
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Value::I64(c.as_primitive::<Int64Type>().value(row))
        }
        Kind::Uint32 | Kind::Fixed32 => Value::U32(c.as_primitive::<UInt32Type>().value(row)),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(c.as_primitive::<UInt64Type>().value(row)),
        Kind::Bool => Value::Bool(c.as_boolean().value(row)),
        Kind::String => Value::String(c.as_string::<i32>().value(row).to_string()),
        Kind::Bytes | Kind::Message(_) => {
            Value::Bytes(c.as_binary::<i32>().value(row).to_vec().into())
        }
        Kind::Enum(e) => {
            let text = cast(&c, &DataType::Utf8).map_err(arrow)?;
            let name = text.as_string::<i32>().value(row);
            let number = match e.get_value_by_name(name) {
                Some(v) => v.number(),
                None => name.parse::<i32>().map_err(|_| {
                    let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
                    Error::InvalidArgument(format!(
                        "{name:?} is not a value of enum {} ({})",
                        e.full_name(),
                        names.join(", ")
                    ))
                })?,
            };
            Value::EnumNumber(number)
        }
    })
}
