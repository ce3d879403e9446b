//! The catalog: table definitions and settings stored in the catalog
//! keyspace, and creating, altering and dropping tables.

use super::commit::lock;
use super::definition;
use super::definition::{AlterOp, FamilyDef, TableDef, TableSpec, validate_table_name};
use super::engine::{FjallStore, NEXT_ID_KEY, SETTING_PREFIX, TABLE_PREFIX};
use crate::error::{Error, Result};
use fjall::PersistMode;
use std::sync::{Arc, PoisonError};

impl FjallStore {
    // ---- catalog -------------------------------------------------------

    /// Sets (or with `None` removes) a store-wide setting of the layers
    /// above the store, such as a registered `.proto` source. Durable when
    /// this returns.
    pub fn put_setting(&self, key: &str, value: Option<&str>) -> Result<()> {
        if key.is_empty() || key.len() > 4096 {
            return Err(Error::InvalidArgument(format!(
                "setting name must be 1 to 4096 bytes, got {}",
                key.len()
            )));
        }
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::SyncAll));
        let name = format!("{SETTING_PREFIX}{key}");
        match value {
            Some(v) => batch.insert(&self.inner.catalog, name, v.as_bytes()),
            None => batch.remove(&self.inner.catalog, name),
        }
        batch.commit()?;
        Ok(())
    }

    /// The settings whose names start with `prefix`, sorted by name.
    pub fn settings(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for guard in self
            .inner
            .catalog
            .prefix(format!("{SETTING_PREFIX}{prefix}"))
        {
            let (k, v) = guard.into_inner()?;
            let name = String::from_utf8_lossy(&k[SETTING_PREFIX.len()..]).into_owned();
            let value = String::from_utf8(v.to_vec()).map_err(|_| Error::Corrupt {
                reason: format!("setting {name:?} is not UTF-8"),
            })?;
            out.push((name, value));
        }
        Ok(out)
    }

    /// The names of all tables, sorted.
    pub fn list_tables(&self) -> Vec<String> {
        self.inner
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// A table's definition.
    pub fn table(&self, name: &str) -> Result<TableDef> {
        Ok(self.handle(name)?.def.clone())
    }

    /// The next unused internal id.
    pub(super) fn next_id(&self) -> Result<u64> {
        let current = match self.inner.catalog.get(NEXT_ID_KEY)? {
            None => 1,
            Some(v) => <[u8; 8]>::try_from(&*v)
                .map(u64::from_be_bytes)
                .map_err(|_| Error::Corrupt {
                    reason: "catalog id counter is not 8 bytes".into(),
                })?,
        };
        Ok(current.max(1))
    }

    pub(super) fn write_catalog(
        &self,
        def: Option<&TableDef>,
        remove: Option<&str>,
        next_id: u64,
    ) -> Result<()> {
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::SyncAll));
        if let Some(name) = remove {
            batch.remove(&self.inner.catalog, format!("{TABLE_PREFIX}{name}"));
        }
        if let Some(def) = def {
            self.put_def(&mut batch, def)?;
        }
        batch.insert(&self.inner.catalog, NEXT_ID_KEY, next_id.to_be_bytes());
        batch.commit()?;
        Ok(())
    }

    /// Puts a table's definition into a catalog batch.
    pub(super) fn put_def(&self, batch: &mut fjall::OwnedWriteBatch, def: &TableDef) -> Result<()> {
        let json = serde_json::to_vec(def).map_err(|e| Error::Corrupt {
            reason: format!("cannot encode the definition of table {:?}: {e}", def.name),
        })?;
        batch.insert(
            &self.inner.catalog,
            format!("{TABLE_PREFIX}{}", def.name),
            json,
        );
        Ok(())
    }

    /// Creates a table.
    pub fn create_table(&self, spec: TableSpec) -> Result<TableDef> {
        validate_table_name(&spec.name)?;
        definition::check_families(&spec.name, &spec.families)?;
        let _ddl = lock(&self.inner.ddl);
        match self.handle(&spec.name) {
            Ok(_) => return Err(Error::TableExists { table: spec.name }),
            Err(e @ Error::TableDamaged { .. }) => return Err(e),
            Err(_) => {}
        }
        let mut id = self.next_id()?;
        let def = TableDef::from_spec(spec, &mut id);
        let handle = self.open_handle(def.clone())?;
        self.write_catalog(Some(&def), None, id)?;
        self.change_tables(|open| open.insert(def.name.clone(), Arc::new(handle)));
        Ok(def)
    }

    /// Changes a table's definition: all operations or none.
    pub fn alter_table(&self, name: &str, ops: Vec<AlterOp>) -> Result<TableDef> {
        let _ddl = lock(&self.inner.ddl);
        let old = self.handle(name)?;
        let mut def = old.def.clone();
        let mut id = self.next_id()?;
        let specs = def.apply(ops, &mut id)?;
        definition::check_families(name, &specs)?;
        let handle = self.open_handle(def.clone())?;
        self.write_catalog(Some(&def), None, id)?;
        self.change_tables(|open| open.insert(name.to_string(), Arc::new(handle)));
        let live: Vec<u64> = def.families.iter().flat_map(FamilyDef::ids).collect();
        for (id, ks) in old.all_keyspaces() {
            if !live.contains(&id) {
                self.inner
                    .keyspace_guard
                    .delete(&self.inner.db, ks.clone())?;
            }
        }
        Ok(def)
    }

    /// Drops a table and all its cells.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        let _ddl = lock(&self.inner.ddl);
        if self.damaged_reason(name).is_some() {
            // Only the definition can go: which keyspaces were the table's
            // is unknown. The next open with an undamaged catalog removes
            // them.
            let id = self.next_id()?;
            self.write_catalog(None, Some(name), id)?;
            self.inner
                .damaged
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(name);
            return Ok(());
        }
        let old = self.handle(name)?;
        let id = self.next_id()?;
        self.write_catalog(None, Some(name), id)?;
        self.change_tables(|open| open.remove(name));
        for (_, ks) in old.all_keyspaces() {
            self.inner
                .keyspace_guard
                .delete(&self.inner.db, ks.clone())?;
        }
        Ok(())
    }
}
