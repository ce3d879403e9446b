//! Protobuf blobs as Arrow structs.
//!
//! `.proto` sources registered with the store compile here, in pure Rust
//! (protox), into one descriptor pool. A column declared with a message
//! type reads as an Arrow struct: messages are structs, repeated fields
//! lists, maps Arrow maps, enums their value names. The decoder walks the
//! wire format itself and skips every field the query does not use, so a
//! projection of one field costs one field. Malformed bytes are an error
//! naming the column, or NULL when the column asks for that.

mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array,
    Int64Array, ListArray, MapArray, StringArray, StructArray, UInt32Array, UInt64Array,
    new_null_array,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};

pub use wire::PValue;

use crate::error::{Error, Result};
use crate::store::Store;

/// Store setting prefix under which `.proto` sources are kept.
pub const PROTO_SETTING_PREFIX: &str = "proto/";

/// Nesting below which messages read as raw bytes (recursive types).
const MAX_DEPTH: usize = 16;

/// Most fields (at every level) in the Arrow type of one protobuf column:
/// a message nested deeper is shown as its bytes at the level that keeps
/// its type within this, so that a recursive type (`message T { T a = 1;
/// T b = 2; }`, doubling at each level) or a very wide one costs a
/// bounded schema wherever the table is listed or described.
pub const MAX_SCHEMA_FIELDS: usize = 4096;

/// The compiled `.proto` files of a store.
#[derive(Debug, Clone)]
pub struct ProtoRegistry {
    pool: DescriptorPool,
    files: BTreeMap<String, String>,
}

/// Resolves imports against the registered sources, then the well-known
/// Google types.
struct Sources {
    files: BTreeMap<String, String>,
    google: protox::file::GoogleFileResolver,
}

impl protox::file::FileResolver for Sources {
    fn open_file(&self, name: &str) -> std::result::Result<protox::file::File, protox::Error> {
        match self.files.get(name) {
            Some(source) => protox::file::File::from_source(name, source),
            None => self.google.open_file(name),
        }
    }
}

impl ProtoRegistry {
    /// Compiles a set of sources, by file name.
    pub fn compile(files: BTreeMap<String, String>) -> Result<ProtoRegistry> {
        let mut compiler = protox::Compiler::with_file_resolver(Sources {
            files: files.clone(),
            google: protox::file::GoogleFileResolver::new(),
        });
        for name in files.keys() {
            compiler
                .open_file(name)
                .map_err(|e| Error::InvalidArgument(format!("proto file {name}: {e}")))?;
        }
        Ok(ProtoRegistry {
            pool: compiler.descriptor_pool(),
            files,
        })
    }

    /// The registry of the sources registered with `store`.
    pub fn load(store: &Store) -> Result<ProtoRegistry> {
        let files = store
            .settings(PROTO_SETTING_PREFIX)?
            .into_iter()
            .map(|(k, v)| (k[PROTO_SETTING_PREFIX.len()..].to_string(), v))
            .collect();
        Self::compile(files)
    }

    /// Registers (or replaces) a source after checking that everything
    /// still compiles with it.
    pub fn register(store: &Store, name: &str, source: &str) -> Result<ProtoRegistry> {
        if name.is_empty() || name.len() > 1024 || name.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "proto file name {name:?} must be 1 to 1024 characters without NUL"
            )));
        }
        let mut files = Self::load(store)?.files;
        files.insert(name.to_string(), source.to_string());
        let registry = Self::compile(files)?;
        store.put_setting(&format!("{PROTO_SETTING_PREFIX}{name}"), Some(source))?;
        Ok(registry)
    }

    /// Removes a source; fails when another file imports it.
    pub fn unregister(store: &Store, name: &str) -> Result<()> {
        let mut files = Self::load(store)?.files;
        if files.remove(name).is_none() {
            return Err(Error::InvalidArgument(format!(
                "no proto file named {name:?} is registered"
            )));
        }
        Self::compile(files)?;
        store.put_setting(&format!("{PROTO_SETTING_PREFIX}{name}"), None)
    }

    /// Registered file names.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// Message type names.
    pub fn messages(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .pool
            .all_messages()
            .filter(|m| !m.full_name().starts_with("google.protobuf.") && !m.is_map_entry())
            .map(|m| m.full_name().to_string())
            .collect();
        names.sort();
        names
    }

    /// A message type by its full name (`package.Message`).
    pub fn message(&self, name: &str) -> Result<MessageDescriptor> {
        self.pool.get_message_by_name(name).ok_or_else(|| {
            let known = self.messages();
            Error::InvalidArgument(format!(
                "no protobuf message type {name:?} is registered (known: {})",
                if known.is_empty() {
                    "none; register a .proto with CREATE PROTO".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    }
}

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
fn first_depth(message: &MessageDescriptor) -> usize {
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

fn kind_type(kind: &Kind, depth: usize) -> DataType {
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

/// The mask of every field, to borrow.
static ALL_FIELDS: FieldMask = FieldMask { fields: None };

/// Which fields of a message to decode: all of them, or some, each with a
/// mask of its own.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct FieldMask {
    /// `None`: every field.
    pub fields: Option<HashMap<String, FieldMask>>,
}

impl FieldMask {
    /// Every field.
    pub fn all() -> FieldMask {
        FieldMask { fields: None }
    }

    /// The mask of a child field; `None` when it is not needed.
    pub fn child(&self, name: &str) -> Option<&FieldMask> {
        match &self.fields {
            None => Some(&ALL_FIELDS),
            Some(f) => f.get(name),
        }
    }

    /// Adds a path of field names.
    pub fn add_path(&mut self, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            self.fields = None;
            return;
        };
        let Some(fields) = &mut self.fields else {
            return; // already everything
        };
        let child = fields.entry(first.clone()).or_insert_with(|| FieldMask {
            fields: Some(HashMap::new()),
        });
        child.add_path(rest);
    }

    /// Display form, for EXPLAIN.
    pub fn describe(&self) -> String {
        match &self.fields {
            None => "*".into(),
            Some(f) => {
                let mut parts: Vec<String> = f
                    .iter()
                    .map(|(k, v)| match &v.fields {
                        None => k.clone(),
                        Some(_) => format!("{k}.{}", v.describe()),
                    })
                    .collect();
                parts.sort();
                format!("{{{}}}", parts.join(", "))
            }
        }
    }
}

/// Decodes one blob of `message` into a tree of the fields in `mask`.
pub fn decode(message: &MessageDescriptor, bytes: &[u8], mask: &FieldMask) -> Result<PValue> {
    wire::decode_message(message, bytes, mask, first_depth(message))
        .map_err(|e| Error::InvalidArgument(format!("malformed {}: {e}", message.full_name())))
}

/// The array of one copyable scalar variant; other values are NULL.
macro_rules! scalars {
    ($values:expr, $array:ty, $variant:ident) => {
        Arc::new(
            $values
                .iter()
                .map(|v| match v {
                    PValue::$variant(x) => Some(*x),
                    _ => None,
                })
                .collect::<$array>(),
        )
    };
}

/// Builds the Arrow array of type `data_type` from decoded values (`None`
/// or `PValue::Null` is NULL).
pub fn to_array(data_type: &DataType, values: &[PValue]) -> Result<ArrayRef> {
    let bad = |e: datafusion::arrow::error::ArrowError| Error::InvalidArgument(e.to_string());
    Ok(match data_type {
        DataType::Struct(fields) => {
            let nulls =
                NullBuffer::from_iter(values.iter().map(|v| matches!(v, PValue::Message(_))));
            let mut children = Vec::with_capacity(fields.len());
            for (i, field) in fields.iter().enumerate() {
                let column: Vec<PValue> = values
                    .iter()
                    .map(|v| match v {
                        PValue::Message(m) => m.get(i).cloned().unwrap_or(PValue::Null),
                        _ => PValue::Null,
                    })
                    .collect();
                children.push(to_array(field.data_type(), &column)?);
            }
            Arc::new(StructArray::try_new(fields.clone(), children, Some(nulls)).map_err(bad)?)
        }
        DataType::List(item) => {
            let (offsets, flat, nulls) = flatten(values);
            let child = to_array(item.data_type(), &flat)?;
            Arc::new(
                ListArray::try_new(Arc::clone(item), offsets, child, Some(nulls)).map_err(bad)?,
            )
        }
        DataType::Map(entries, sorted) => {
            let (offsets, flat, nulls) = flatten(values);
            let DataType::Struct(fields) = entries.data_type() else {
                return Err(Error::InvalidArgument(
                    "map entries must be a struct".into(),
                ));
            };
            let entry_array = to_array(entries.data_type(), &flat)?;
            let entry_struct = entry_array.as_struct().clone();
            let entry_struct =
                StructArray::try_new(fields.clone(), entry_struct.columns().to_vec(), None)
                    .map_err(bad)?;
            Arc::new(
                MapArray::try_new(
                    Arc::clone(entries),
                    offsets,
                    entry_struct,
                    Some(nulls),
                    *sorted,
                )
                .map_err(bad)?,
            )
        }
        DataType::Int32 => scalars!(values, Int32Array, I32),
        DataType::Int64 => scalars!(values, Int64Array, I64),
        DataType::UInt32 => scalars!(values, UInt32Array, U32),
        DataType::UInt64 => scalars!(values, UInt64Array, U64),
        DataType::Float32 => scalars!(values, Float32Array, F32),
        DataType::Float64 => scalars!(values, Float64Array, F64),
        DataType::Boolean => scalars!(values, BooleanArray, Bool),
        DataType::Utf8 => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    PValue::Str(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect::<StringArray>(),
        ),
        DataType::Binary => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    PValue::Bytes(b) => Some(b.as_slice()),
                    _ => None,
                })
                .collect::<BinaryArray>(),
        ),
        other => new_null_array(other, values.len()),
    })
}

/// Offsets, flattened items and validity of list-like values.
fn flatten(values: &[PValue]) -> (OffsetBuffer<i32>, Vec<PValue>, NullBuffer) {
    let mut lengths = Vec::with_capacity(values.len());
    let mut flat = Vec::new();
    let mut valid = Vec::with_capacity(values.len());
    for v in values {
        match v {
            PValue::List(items) => {
                lengths.push(items.len());
                flat.extend(items.iter().cloned());
                valid.push(true);
            }
            _ => {
                lengths.push(0);
                valid.push(false);
            }
        }
    }
    (
        OffsetBuffer::from_lengths(lengths),
        flat,
        NullBuffer::from(valid),
    )
}

/// Encodes row `row` of a struct array (of this message's Arrow type) as a
/// protobuf blob.
pub fn encode(message: &MessageDescriptor, array: &ArrayRef, row: usize) -> Result<Vec<u8>> {
    let value = wire::to_dynamic(message, array, row)?;
    Ok(prost_reflect::prost::Message::encode_to_vec(&value))
}

#[cfg(test)]
mod tests;
