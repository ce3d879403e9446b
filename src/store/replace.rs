//! Replacing a table by another under its name, for a rewrite into a new
//! layout: the write gate that holds writers back while the rows are
//! copied, the pinned handles that let queries planned before the switch
//! finish on the table they planned against, and the switch itself.

use super::commit::lock;
use super::definition::TableDef;
use super::engine::{FjallStore, NEXT_ID_KEY, TABLE_PREFIX, TableHandle};
use super::gate::{Pinned, WriteGate};
use super::read::FjallRows;
use super::request::ReadRequest;
use crate::error::{Error, Result};
use std::sync::Arc;

impl FjallStore {
    /// The write gate of a table (by name).
    pub fn write_gate(&self, table: &str) -> Arc<WriteGate> {
        let mut gates = lock(&self.inner.gates);
        Arc::clone(gates.entry(table.to_string()).or_default())
    }

    /// Pins a table as it is now.
    pub fn pin(&self, table: &str) -> Result<Pinned> {
        let handle = self.handle(table)?;
        Ok(Pinned::new(handle.def.clone(), handle))
    }

    /// Reads rows of a pinned table: the table under its name while it is
    /// the one pinned, else the pinned one (replaced or dropped since; its
    /// keyspaces live on while pinned), as of `now`.
    pub(crate) fn read_pinned(
        &self,
        pinned: &Pinned,
        request: ReadRequest,
        now: i64,
    ) -> Result<FjallRows> {
        let held = pinned.held::<TableHandle>().ok_or_else(|| {
            Error::Internal(format!(
                "table {} was pinned by another backend",
                pinned.def().name
            ))
        })?;
        let (handle, snapshot) = match self.handle_and_snapshot(&pinned.def().name) {
            Ok((handle, snapshot)) if handle.def.id == pinned.def().id => (handle, snapshot),
            _ => (held, self.inner.db.snapshot()),
        };
        let families = handle.family_scans(request.filter.families.as_deref())?;
        Ok(FjallRows::new(snapshot, families, request, now))
    }

    /// Puts table `source` in the place of `target`: one catalog write
    /// removes `source` and gives its definition `target`'s name; then
    /// `target`'s old keyspaces are deleted (pinned readers keep them
    /// until they finish). The new definition of `target`.
    pub fn replace_table(&self, target: &str, source: &str) -> Result<TableDef> {
        let _ddl = lock(&self.inner.ddl);
        let old = self.handle(target)?;
        let new = self.handle(source)?;
        if new.moving.iter().any(Option::is_some) {
            return Err(Error::InvalidArgument(format!(
                "table {source} has a family format change under way; it cannot replace {target}"
            )));
        }
        let mut def = new.def.clone();
        def.name = target.to_string();
        let handle = self.open_handle(def.clone())?;
        let id = self.next_id()?;
        let mut batch = self
            .inner
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncAll));
        batch.remove(&self.inner.catalog, format!("{}{source}", TABLE_PREFIX));
        self.put_def(&mut batch, &def)?;
        batch.insert(&self.inner.catalog, NEXT_ID_KEY, id.to_be_bytes());
        batch.commit()?;
        self.change_tables(|tables| {
            tables.remove(source);
            tables.insert(target.to_string(), Arc::new(handle));
        });
        for (_, ks) in old.all_keyspaces() {
            self.inner
                .keyspace_guard
                .delete(&self.inner.db, ks.clone())?;
        }
        Ok(def)
    }
}
