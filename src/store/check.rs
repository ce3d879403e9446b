//! `FjallStore::check`: read every cell of every family and report what is
//! damaged, by table and family, so a user learns what a damaged file
//! cost before deciding what to do.

use super::engine::FjallStore;
use super::format::{FamilyFormat, blocks};
use super::segments::{self, Depth, FileDamage, SetAside};
use crate::codec::show_bytes;
use crate::error::{Result, engine_words};
use fjall::Readable;
use std::sync::PoisonError;

/// What a check found in one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyCheck {
    /// The family.
    pub family: String,
    /// Its fjall keyspace (`f<id>`).
    pub keyspace: String,
    /// Whether the keyspace holds the family's blocks (a PACKED family
    /// merged by `COMPACT`); `cells` then counts rows, `bad_keys` damaged
    /// blocks (`first_bad_key` the first one's key and why).
    pub blocks: bool,
    /// Cells read.
    pub cells: u64,
    /// Cells whose key does not parse as a cell key.
    pub bad_keys: u64,
    /// The first bad key, shown.
    pub first_bad_key: Option<String>,
    /// The read error that stopped the check of this family (a damaged
    /// block or file), if any: the cells after it were not read.
    pub error: Option<String>,
}

impl FamilyCheck {
    /// Whether nothing was found wrong.
    pub fn healthy(&self) -> bool {
        self.bad_keys == 0 && self.error.is_none()
    }
}

/// What a check found in the whole store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Per table, its families.
    pub tables: Vec<(String, Vec<FamilyCheck>)>,
    /// Tables that could not be opened (a catalog entry that does not
    /// parse, a keyspace set aside as damaged), with the reason.
    pub damaged_tables: Vec<(String, String)>,
    /// Segment and version files whose bytes do not match their
    /// checksums, or that are missing, each with the table and family
    /// whose cells it holds when known.
    pub files: Vec<(FileDamage, Option<String>)>,
    /// Keyspace directories set aside as damaged, at this or an earlier
    /// open.
    pub set_aside: Vec<SetAside>,
}

impl CheckReport {
    /// Whether nothing was found wrong.
    pub fn healthy(&self) -> bool {
        self.damaged_tables.is_empty()
            && self.files.is_empty()
            && self
                .tables
                .iter()
                .all(|(_, families)| families.iter().all(FamilyCheck::healthy))
    }
}

impl FjallStore {
    /// Reads every cell of every family through one snapshot, checking
    /// each block's checksum (fjall verifies them as it reads) and that
    /// every key is a cell key. Slow on a large store: it reads it all.
    pub fn check(&self) -> Result<CheckReport> {
        let mut report = CheckReport {
            damaged_tables: self.damaged_tables(),
            files: self.check_files()?,
            set_aside: self.inner.set_aside.clone(),
            ..CheckReport::default()
        };
        let snapshot = self.inner.db.snapshot();
        let tables = self
            .inner
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (name, handle) in tables {
            let mut families = Vec::new();
            let ids = handle.slot_ids();
            for (slot, keyspace) in handle.keyspaces.iter().enumerate() {
                let family = &handle.def.families[handle.family_of(slot)];
                let format = handle.formats[slot];
                let mut check = FamilyCheck {
                    family: family.name.clone(),
                    keyspace: crate::store::definition::keyspace_name(ids[slot]),
                    blocks: false,
                    cells: 0,
                    bad_keys: 0,
                    first_bad_key: None,
                    error: None,
                };
                let blocks = handle.blocks[slot].as_ref();
                for guard in snapshot.iter(keyspace) {
                    match guard.into_inner() {
                        Ok((key, value)) => {
                            check.cells += 1;
                            if format.check_pair(&key, &value, blocks.is_some()).is_err() {
                                check.bad_keys += 1;
                                check.first_bad_key.get_or_insert_with(|| show_bytes(&key));
                            }
                        }
                        Err(e) => {
                            check.error = Some(engine_words(&e));
                            break;
                        }
                    }
                }
                families.push(check);
                // Its blocks: each well formed, rows ascending, every row a
                // PACKED pair; rows are counted, and damaged blocks.
                if let (Some(blocks), Some(id)) = (blocks, family.blocks) {
                    let mut check = FamilyCheck {
                        family: family.name.clone(),
                        keyspace: crate::store::definition::keyspace_name(id),
                        blocks: true,
                        cells: 0,
                        bad_keys: 0,
                        first_bad_key: None,
                        error: None,
                    };
                    for guard in snapshot.iter(blocks) {
                        match guard.into_inner() {
                            Ok((key, value)) => {
                                // (Blocks hold PACKED rows whatever the
                                // family's format.)
                                let rows = blocks::check(key.clone(), value, |k, v| {
                                    FamilyFormat::Packed.check_pair(k, v, false)
                                });
                                match rows {
                                    Ok(rows) => check.cells += rows as u64,
                                    Err(e) => {
                                        check.bad_keys += 1;
                                        check.first_bad_key.get_or_insert_with(|| {
                                            format!("{}: {e}", show_bytes(&key))
                                        });
                                    }
                                }
                            }
                            Err(e) => {
                                check.error = Some(engine_words(&e));
                                break;
                            }
                        }
                    }
                    families.push(check);
                }
            }
            report.tables.push((name, families));
        }
        Ok(report)
    }
}

impl FjallStore {
    /// Reads every live segment and version file against its checksum.
    /// A finding is read again once before it is reported: a compaction
    /// running meanwhile may have replaced the files read.
    fn check_files(&self) -> Result<Vec<(FileDamage, Option<String>)>> {
        let path = &self.inner.path;
        let first = segments::survey(path, Depth::Checksums)?;
        if first.is_empty() {
            return Ok(Vec::new());
        }
        let again = segments::survey(path, Depth::Checksums)?;
        let owners = self.keyspace_owners();
        Ok(again
            .into_iter()
            .filter(|d| first.iter().any(|f| f.keyspace == d.keyspace))
            .map(|d| {
                let owner = owners.get(&d.keyspace).cloned();
                (d, owner)
            })
            .collect())
    }

    /// Which table and family each fjall keyspace id holds, as recorded.
    fn keyspace_owners(&self) -> std::collections::HashMap<u64, String> {
        let tables = self
            .inner
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut owners = std::collections::HashMap::new();
        for (name, handle) in tables {
            for family in &handle.def.families {
                for keyspace in family.keyspace_names() {
                    if let Some(id) = self.recorded_keyspace_id(&keyspace) {
                        owners.insert(id, format!("table {name}, family {}", family.name));
                    }
                }
            }
        }
        owners
    }
}
