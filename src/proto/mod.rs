//! Protobuf blobs as Arrow structs.
//!
//! `.proto` sources registered with the store compile here, in pure Rust
//! (protox), into one descriptor pool. A column declared with a message
//! type reads as an Arrow struct: messages are structs, repeated fields
//! lists, maps Arrow maps, enums their value names. The decoder walks the
//! wire format itself and skips every field the query does not use, so a
//! projection of one field costs one field. Malformed bytes are an error
//! naming the column, or NULL when the column asks for that.

mod mask;
mod types;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array,
    Int64Array, ListArray, MapArray, StringArray, StructArray, UInt32Array, UInt64Array,
    new_null_array,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::DataType;
use prost_reflect::{DescriptorPool, MessageDescriptor};

pub use mask::FieldMask;
use types::first_depth;
pub use types::{MAX_SCHEMA_FIELDS, check_schema_size, levels, message_type, type_fields};
pub use wire::PValue;

use crate::error::{Error, Result};
use crate::store::Store;

/// Store setting prefix under which `.proto` sources are kept.
pub const PROTO_SETTING_PREFIX: &str = "proto/";

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
