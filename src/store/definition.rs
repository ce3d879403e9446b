//! Table and family definitions: what a table is (its families, their GC
//! policies, kinds and formats), what creating or altering one asks for,
//! and the rules names follow. Stored by `catalog.rs`.
//!
//! The catalog keyspace maps `table/<name>` to the table's definition as
//! JSON and `meta/format` to the store format version. Keyspace names for
//! family data are `f<id>` with ids from `meta/next_id`, so a user's names
//! never reach the file system and a dropped family's id is never reused.

use super::format::FamilyFormat;
use super::policy::GcPolicy;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The store format this build writes. A store with a larger number was
/// written by a newer cellar and is refused.
pub const FORMAT_VERSION: u32 = 1;

/// Most column families a table may have.
pub const MAX_FAMILIES: usize = 100;
/// Longest table name, in bytes.
pub const MAX_TABLE_NAME: usize = 128;
/// Longest family name, in bytes.
pub const MAX_FAMILY_NAME: usize = 64;
/// What a family's cells are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FamilyKind {
    /// Cells hold whatever is written.
    #[default]
    Normal,
    /// Aggregate: 8-byte big-endian int64, input is added.
    Sum,
    /// Aggregate: 8-byte big-endian int64, the smallest input is kept.
    Min,
    /// Aggregate: 8-byte big-endian int64, the largest input is kept.
    Max,
    /// Aggregate: a HyperLogLog sketch; input values are items to count.
    HyperLogLog,
}

impl FamilyKind {
    /// Whether cells of this kind merge new input on write.
    pub fn is_aggregate(self) -> bool {
        self != FamilyKind::Normal
    }
}

impl std::fmt::Display for FamilyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FamilyKind::Normal => "normal",
            FamilyKind::Sum => "sum",
            FamilyKind::Min => "min",
            FamilyKind::Max => "max",
            FamilyKind::HyperLogLog => "hll",
        })
    }
}

/// A column family of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyDef {
    /// Internal id; names the family's keyspace `f<id>`.
    pub id: u64,
    /// The family's name.
    pub name: String,
    /// Its garbage-collection policy.
    #[serde(default)]
    pub gc: GcPolicy,
    /// Normal or aggregate.
    #[serde(default)]
    pub kind: FamilyKind,
    /// How its cells are laid out on disk (CELLS for a family stored
    /// before formats were).
    #[serde(default = "FamilyFormat::stored_without_one")]
    pub format: FamilyFormat,
    /// A change of format under way (`ALTER ... SET FORMAT`): rows below
    /// its cursor are already in the new keyspace, the rest in this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub converting: Option<Conversion>,
    /// The keyspace (`f<id>`) of the family's blocks, once a merge has
    /// made them (PACKED only; see `format/blocks/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
}

/// A family's change of format under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversion {
    /// The id of the keyspace the rows move to (`f<id>`).
    pub id: u64,
    /// The format they take there.
    pub format: FamilyFormat,
}

impl FamilyDef {
    /// The name of the fjall keyspace that holds this family's cells.
    pub fn keyspace_name(&self) -> String {
        keyspace_name(self.id)
    }

    /// The names of every keyspace holding this family's cells.
    pub fn keyspace_names(&self) -> Vec<String> {
        self.ids().into_iter().map(keyspace_name).collect()
    }

    /// The ids of every keyspace holding this family's cells.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids = vec![self.id];
        ids.extend(self.converting.as_ref().map(|c| c.id));
        ids.extend(self.blocks);
        ids
    }
}

pub(crate) fn keyspace_name(id: u64) -> String {
    format!("f{id}")
}

/// The metadata key of a definition on the Bigtable backend whose rows are
/// in a Bigtable table not named as the table (after `ALTER SERIES ... SET
/// LAYOUT`, since Bigtable cannot rename): that table's id.
pub const BIGTABLE_TABLE_METADATA: &str = "bigtable.table";

/// A table: its families, and metadata owned by the layers above the store
/// (the SQL layer keeps its row-key schema and declared columns there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Internal id.
    pub id: u64,
    /// The table's name.
    pub name: String,
    /// Column families, in declaration order.
    pub families: Vec<FamilyDef>,
    /// Free-form metadata for higher layers; the store keeps it verbatim.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// Checks a table's families: how many, their names and GC policies, no
/// name twice.
pub(crate) fn check_families(table: &str, families: &[FamilySpec]) -> Result<()> {
    if families.len() > MAX_FAMILIES {
        return Err(Error::TooManyFamilies {
            table: table.to_string(),
            count: families.len(),
            max: MAX_FAMILIES,
        });
    }
    for (i, f) in families.iter().enumerate() {
        validate_family_name(&f.name)?;
        f.gc.validate()?;
        if families[..i].iter().any(|g| g.name == f.name) {
            return Err(Error::FamilyExists {
                table: table.to_string(),
                family: f.name.clone(),
            });
        }
    }
    Ok(())
}

impl TableDef {
    /// The definition `spec` asks for, its ids taken from `next_id` on.
    pub(crate) fn from_spec(spec: TableSpec, next_id: &mut u64) -> TableDef {
        let id = *next_id;
        *next_id += 1;
        let families = spec
            .families
            .into_iter()
            .map(|f| {
                *next_id += 1;
                FamilyDef {
                    id: *next_id - 1,
                    name: f.name,
                    gc: f.gc,
                    kind: f.kind,
                    format: f.format,
                    converting: None,
                    blocks: None,
                }
            })
            .collect();
        TableDef {
            id,
            name: spec.name,
            families,
            metadata: spec.metadata,
        }
    }

    /// Applies `ops` in order, new families taking ids from `next_id` on;
    /// the families as specs, for [`check_families`].
    pub(crate) fn apply(
        &mut self,
        ops: Vec<AlterOp>,
        next_id: &mut u64,
    ) -> Result<Vec<FamilySpec>> {
        let name = self.name.clone();
        for op in ops {
            match op {
                AlterOp::AddFamily(spec) => {
                    if self.families.iter().any(|f| f.name == spec.name) {
                        return Err(Error::FamilyExists {
                            table: name,
                            family: spec.name,
                        });
                    }
                    self.families.push(FamilyDef {
                        id: *next_id,
                        name: spec.name,
                        gc: spec.gc,
                        kind: spec.kind,
                        format: spec.format,
                        converting: None,
                        blocks: None,
                    });
                    *next_id += 1;
                }
                AlterOp::DropFamily(family) => {
                    self.family(&family)?;
                    self.families.retain(|f| f.name != family);
                }
                AlterOp::SetGc { family, gc } => {
                    gc.validate()?;
                    let index = self
                        .families
                        .iter()
                        .position(|f| f.name == family)
                        .ok_or_else(|| Error::FamilyNotFound {
                            table: name.clone(),
                            family: family.clone(),
                        })?;
                    self.families[index].gc = gc;
                }
                AlterOp::SetMetadata(key, Some(value)) => {
                    self.metadata.insert(key, value);
                }
                AlterOp::SetMetadata(key, None) => {
                    self.metadata.remove(&key);
                }
            }
        }
        Ok(self
            .families
            .iter()
            .map(|f| FamilySpec {
                name: f.name.clone(),
                gc: f.gc.clone(),
                kind: f.kind,
                format: f.format,
            })
            .collect())
    }

    /// Where the family of that name is among the table's families.
    pub fn family_index(&self, name: &str) -> Result<usize> {
        self.families
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| Error::FamilyNotFound {
                table: self.name.clone(),
                family: name.to_string(),
            })
    }

    /// The family of that name.
    pub fn family(&self, name: &str) -> Result<&FamilyDef> {
        self.family_index(name).map(|i| &self.families[i])
    }
}

/// What a caller asks for when creating a family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FamilySpec {
    /// The family's name.
    pub name: String,
    /// Its GC policy.
    pub gc: GcPolicy,
    /// Normal or aggregate.
    pub kind: FamilyKind,
    /// How its cells are laid out on disk.
    pub format: FamilyFormat,
}

impl FamilySpec {
    /// A normal family that keeps everything.
    pub fn new(name: impl Into<String>) -> Self {
        FamilySpec {
            name: name.into(),
            ..Default::default()
        }
    }

    /// With a GC policy.
    pub fn gc(mut self, gc: GcPolicy) -> Self {
        self.gc = gc;
        self
    }

    /// With a kind.
    pub fn kind(mut self, kind: FamilyKind) -> Self {
        self.kind = kind;
        self
    }

    /// With an on-disk format.
    pub fn format(mut self, format: FamilyFormat) -> Self {
        self.format = format;
        self
    }
}

/// Checks a table name: 1 to 128 bytes of letters, digits, `_`, `-`, `.`,
/// starting with a letter or `_`.
pub fn validate_table_name(name: &str) -> Result<()> {
    validate_name("table", name, MAX_TABLE_NAME, true)
}

/// Checks a family name: 1 to 64 bytes of letters, digits, `_`, `-`, `.`.
pub fn validate_family_name(name: &str) -> Result<()> {
    validate_name("column family", name, MAX_FAMILY_NAME, false)
}

fn validate_name(what: &'static str, name: &str, max: usize, letter_first: bool) -> Result<()> {
    let invalid = |reason: String| Error::InvalidName {
        what,
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("names cannot be empty".into()));
    }
    if name.len() > max {
        return Err(invalid(format!(
            "it is {} bytes; the limit is {max}",
            name.len()
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(invalid(format!(
            "character {bad:?} is not allowed; use letters, digits, '_', '-' and '.'"
        )));
    }
    if letter_first && !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return Err(invalid("it must start with a letter or '_'".into()));
    }
    Ok(())
}

/// What to create: a table's name, families and metadata.
#[derive(Debug, Clone, Default)]
pub struct TableSpec {
    /// The table's name.
    pub name: String,
    /// Its families.
    pub families: Vec<FamilySpec>,
    /// Metadata for higher layers.
    pub metadata: BTreeMap<String, String>,
}

impl TableSpec {
    /// A table with no families yet.
    pub fn new(name: impl Into<String>) -> Self {
        TableSpec {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Adds a family.
    pub fn family(mut self, family: FamilySpec) -> Self {
        self.families.push(family);
        self
    }

    /// Sets a metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// One change to a table's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterOp {
    /// Add a family.
    AddFamily(FamilySpec),
    /// Drop a family and all its cells.
    DropFamily(String),
    /// Change a family's GC policy.
    SetGc {
        /// The family.
        family: String,
        /// The new policy.
        gc: GcPolicy,
    },
    /// Set (`Some`) or remove (`None`) a metadata entry.
    SetMetadata(String, Option<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_refused_with_the_name() {
        for name in ["", "../x", "a/b", "a\0b", "1abc", "a b"] {
            let err = validate_table_name(name).unwrap_err().to_string();
            assert!(err.contains("invalid table name"), "{err}");
        }
        let long = "x".repeat(10_000);
        let err = validate_table_name(&long).unwrap_err().to_string();
        assert!(err.contains("10000 bytes") && err.len() < 300, "{err}");
        assert!(validate_table_name("weather_balloons").is_ok());
        assert!(validate_family_name("cf1").is_ok());
        assert!(validate_family_name("9lives").is_ok());
        assert!(validate_family_name("a:b").is_err());
    }
}
