//! The Arrow type of a protobuf message: nested messages as structs down
//! to the depth that keeps the type within [`MAX_SCHEMA_FIELDS`] fields,
//! deeper ones as their bytes.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::error::{Error, Result};

/// Nesting below which messages read as raw bytes (recursive types).
pub(super) const MAX_DEPTH: usize = 16;

/// Most fields (at every level) in the Arrow type of one protobuf column:
/// a message nested deeper is shown as its bytes at the level that keeps
/// its type within this, so that a recursive type (`message T { T a = 1;
/// T b = 2; }`, doubling at each level) or a very wide one costs a
/// bounded schema wherever the table is listed or described.
pub const MAX_SCHEMA_FIELDS: usize = 4096;

/// The Arrow type of a message: nested messages become structs down to
/// [`levels`] levels, deeper ones their bytes.
pub fn message_type(message: &MessageDescriptor) -> DataType {
    DataType::Struct(message_fields(message, first_depth(message)))
}

/// How many levels of `message` are shown as structs: the most, up to 16,
/// whose type has at most [`MAX_SCHEMA_FIELDS`] fields (at least one: the
/// message's own fields).
pub fn levels(message: &MessageDescriptor) -> usize {
    let mut memo = std::collections::HashMap::new();
    (1..=MAX_DEPTH)
        .rev()
        .find(|&levels| schema_fields(message, MAX_DEPTH - levels, &mut memo) <= MAX_SCHEMA_FIELDS)
        .unwrap_or(1)
}

/// Where decoding and typing of `message` start counting depth: its
/// levels below the limit, so the usual `depth < MAX_DEPTH` test stops
/// them all at the same level.
pub(super) fn first_depth(message: &MessageDescriptor) -> usize {
    MAX_DEPTH - levels(message)
}

/// Fields in the Arrow type of `message` typed from `depth` (as
/// `message_fields` would make them), counted without building it; each
/// (message, depth) once, so a recursive type costs its size in messages,
/// not in fields.
fn schema_fields(
    message: &MessageDescriptor,
    depth: usize,
    memo: &mut std::collections::HashMap<(String, usize), usize>,
) -> usize {
    let key = (message.full_name().to_string(), depth);
    if let Some(&n) = memo.get(&key) {
        return n;
    }
    let nested =
        |kind: &Kind, memo: &mut std::collections::HashMap<(String, usize), usize>| match kind {
            Kind::Message(m) if depth + 1 < MAX_DEPTH => schema_fields(m, depth + 1, memo),
            _ => 0,
        };
    let mut n = 0usize;
    for f in message.fields() {
        n = n.saturating_add(1);
        match f.kind() {
            Kind::Message(entry) if f.is_map() => {
                // entries { key, value }
                let value = entry.map_entry_value_field().kind();
                n = n.saturating_add(3).saturating_add(nested(&value, memo));
            }
            kind => n = n.saturating_add(nested(&kind, memo)),
        }
    }
    memo.insert(key, n);
    n
}

/// Fields in the Arrow type of `message` (at every level shown).
pub fn type_fields(message: &MessageDescriptor) -> usize {
    schema_fields(message, first_depth(message), &mut Default::default())
}

/// Refuses a message whose own fields alone are more than a column's
/// type may hold ([`MAX_SCHEMA_FIELDS`]); the nested ones that do not fit
/// are shown as bytes instead (see [`levels`]).
pub fn check_schema_size(message: &MessageDescriptor) -> Result<()> {
    let own = schema_fields(message, MAX_DEPTH - 1, &mut Default::default());
    if own > MAX_SCHEMA_FIELDS {
        return Err(Error::InvalidArgument(format!(
            "message {} has {own} fields (counting map entries); a protobuf column's type holds at most {MAX_SCHEMA_FIELDS}: declare a message with fewer, or store it as BYTES",
            message.full_name()
        )));
    }
    Ok(())
}

fn message_fields(message: &MessageDescriptor, depth: usize) -> Fields {
    message
        .fields()
        .map(|f| Field::new(f.name(), field_type(&f, depth), true))
        .collect()
}

fn field_type(field: &FieldDescriptor, depth: usize) -> DataType {
    if field.is_map()
        && let Kind::Message(entry) = field.kind()
    {
        let key = entry.map_entry_key_field();
        let value = entry.map_entry_value_field();
        let entries = Fields::from(vec![
            Field::new("key", kind_type(&key.kind(), depth + 1), false),
            Field::new("value", kind_type(&value.kind(), depth + 1), true),
        ]);
        return DataType::Map(
            Arc::new(Field::new("entries", DataType::Struct(entries), false)),
            false,
        );
    }
    let item = kind_type(&field.kind(), depth + 1);
    if field.is_list() {
        DataType::List(Arc::new(Field::new("item", item, true)))
    } else {
        item
    }
}

pub(super) fn kind_type(kind: &Kind, depth: usize) -> DataType {
    match kind {
        Kind::Double => DataType::Float64,
        Kind::Float => DataType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => DataType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => DataType::Int64,
        Kind::Uint32 | Kind::Fixed32 => DataType::UInt32,
        Kind::Uint64 | Kind::Fixed64 => DataType::UInt64,
        Kind::Bool => DataType::Boolean,
        Kind::String | Kind::Enum(_) => DataType::Utf8,
        Kind::Bytes => DataType::Binary,
        Kind::Message(m) if depth < MAX_DEPTH => DataType::Struct(message_fields(m, depth)),
        Kind::Message(_) => DataType::Binary,
    }
}
