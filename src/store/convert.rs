//! Changing a family's format in place (`ALTER TABLE t ALTER FAMILY f SET
//! FORMAT ...`), with the table readable and writable throughout.
//!
//! The family gets a second keyspace in the new format and a *cursor*: rows
//! with keys below it live in the new keyspace, the others in the old one.
//! Rows move in key order, a step of rows at a time: each step holds every
//! row lock, reads the next rows from the old keyspace, writes them in the
//! new format and deletes them from the old one in one batch together with
//! the new cursor, then moves the cursor. So in any snapshot each row is in
//! exactly one of the two keyspaces: readers read both (they never need the
//! cursor), and a writer, which reads the cursor while it holds its row's
//! lock, writes where the row is. The last step switches the catalog to the
//! new keyspace; the old one is deleted after. The conversion's state is in
//! the catalog: after a crash the family reads and writes correctly in its
//! two keyspaces, and the same ALTER resumes the move.

use super::commit::lock;
use super::definition::Conversion;
use super::engine::{FjallStore, FormatChange, TableHandle, cursor_key};
use super::format::blocks::Merged;
use super::format::{FamilyFormat, RowBuf, reencode};
use crate::codec;
use crate::error::{Error, Result};
use fjall::{PersistMode, Readable};
use std::sync::Arc;

/// Keeps a change in [`FjallStore::format_changes`] while it runs.
struct Listed<'a> {
    store: &'a FjallStore,
    key: (String, String),
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        lock(&self.store.inner.changes).remove(&self.key);
    }
}

/// Rows and bytes moved in one step; each step holds every row lock.
const STEP_ROWS: u64 = 256;
const STEP_BYTES: u64 = 4 << 20;

impl FjallStore {
    /// Changes the format of `family` of `table` to `format`, moving its
    /// rows in key order while the table stays readable and writable, and
    /// calls `progress` after every step; when it returns false the change
    /// stops there, the family stays correct in its two keyspaces, and the
    /// same call resumes it (as after a crash). A no-op when the family
    /// already has that format.
    pub fn set_family_format(
        &self,
        table: &str,
        family: &str,
        format: FamilyFormat,
        progress: &mut dyn FnMut(FormatChange) -> bool,
    ) -> Result<FormatChange> {
        self.set_family_format_in_steps(table, family, format, STEP_ROWS, progress)
    }

    /// [`FjallStore::set_family_format`] moving at most `step_rows` rows a step
    /// (tests use small steps to stop a change half way).
    #[doc(hidden)]
    pub fn set_family_format_in_steps(
        &self,
        table: &str,
        family: &str,
        format: FamilyFormat,
        step_rows: u64,
        progress: &mut dyn FnMut(FormatChange) -> bool,
    ) -> Result<FormatChange> {
        let _ddl = lock(&self.inner.ddl);
        let handle = self.handle(table)?;
        let index = handle
            .def
            .families
            .iter()
            .position(|f| f.name == family)
            .ok_or_else(|| Error::FamilyNotFound {
                table: table.to_string(),
                family: family.to_string(),
            })?;
        let current = &handle.def.families[index];
        match &current.converting {
            Some(c) if c.format != format => {
                return Err(Error::InvalidArgument(format!(
                    "family {family} of {table} is being changed to FORMAT {} (the change was interrupted); run ALTER TABLE {table} ALTER FAMILY {family} SET FORMAT {} to finish it first",
                    c.format, c.format
                )));
            }
            Some(_) => {}
            None if current.format == format => {
                return Ok(FormatChange {
                    finished: true,
                    ..FormatChange::default()
                });
            }
            None => {
                let mut def = handle.def.clone();
                let id = self.next_id()?;
                def.families[index].converting = Some(Conversion { id, format });
                let fresh = self.open_handle(def.clone())?;
                self.write_catalog(Some(&def), None, id + 1)?;
                self.install(fresh);
            }
        }
        let key = (table.to_string(), family.to_string());
        let _listed = Listed {
            store: self,
            key: key.clone(),
        };
        let mut done = FormatChange::default();
        loop {
            let handle = self.handle(table)?;
            let (step, finished) = self.move_step(&handle, index, step_rows.max(1))?;
            done.rows += step.rows;
            done.bytes += step.bytes;
            done.finished = finished;
            lock(&self.inner.changes).insert(key.clone(), (format, done));
            let go_on = progress(done);
            if finished {
                // No reader or writer reaches the old keyspace (or its
                // blocks) any more except through snapshots taken before,
                // which keep it.
                self.inner
                    .keyspace_guard
                    .delete(&self.inner.db, handle.keyspaces[index].clone())?;
                if let Some(blocks) = &handle.blocks[index] {
                    self.inner
                        .keyspace_guard
                        .delete(&self.inner.db, blocks.clone())?;
                }
                return Ok(done);
            }
            if !go_on {
                return Ok(done);
            }
        }
    }

    /// The format changes under way: table, family, target format and how
    /// far each has come.
    pub fn format_changes(&self) -> Vec<(String, String, FamilyFormat, FormatChange)> {
        lock(&self.inner.changes)
            .iter()
            .map(|((t, f), (format, done))| (t.clone(), f.clone(), *format, *done))
            .collect()
    }

    pub(super) fn install(&self, handle: TableHandle) {
        self.change_tables(|tables| tables.insert(handle.def.name.clone(), Arc::new(handle)));
    }

    /// Moves the next rows of a family being converted; true when none are
    /// left, and then the catalog has switched to the new keyspace.
    fn move_step(
        &self,
        handle: &TableHandle,
        index: usize,
        step_rows: u64,
    ) -> Result<(FormatChange, bool)> {
        let Some(moving) = &handle.moving[index] else {
            return Err(Error::Internal(format!(
                "family {} is not being converted",
                handle.def.families[index].name
            )));
        };
        let Some(conversion) = handle.def.families[index].converting.clone() else {
            return Err(Error::Internal(
                "a conversion without its definition".into(),
            ));
        };
        let _all: Vec<_> = self.inner.row_locks.iter().map(lock).collect();
        let snapshot = self.inner.db.snapshot();
        let (from, to) = (handle.formats[index], handle.formats[moving.slot]);
        let (old, new) = (&handle.keyspaces[index], &handle.keyspaces[moving.slot]);
        let name = &handle.def.families[index].name;
        let start = codec::escape(&lock(&moving.cursor));
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::Buffer));
        let mut step = FormatChange::default();
        let mut buf = RowBuf::default();
        let mut pairs = Vec::new();
        let mut current: Vec<u8> = Vec::new();
        let mut next: Option<Vec<u8>> = None;
        let mut move_row = |pairs: &mut Vec<(fjall::Slice, fjall::Slice)>,
                            step: &mut FormatChange|
         -> Result<()> {
            for (key, value) in reencode(from, to, name, pairs, &mut buf)? {
                batch.insert(new, key, value);
            }
            for (key, value) in pairs.drain(..) {
                step.bytes += value.len() as u64;
                batch.remove(old, key);
            }
            step.rows += 1;
            Ok(())
        };
        if let Some(blocks) = &handle.blocks[index] {
            // Rows with blocks (PACKED: one pair a row; AUTO: a block row
            // and the row's own cells), merged as reads see them; the step
            // ends where a block does, and deletes the row keyspace's
            // pairs and the blocks it read.
            let mut merged = Merged::keeping(&snapshot, old, blocks, from.own_cells(), &start)?;
            let mut row_pairs = Vec::new();
            while let Some(pair) = merged.next()? {
                let row = from.row_of(&pair.0)?.to_vec();
                step.bytes += pair.1.len() as u64;
                row_pairs.push(pair);
                if merged.peek_key().is_some_and(|next| next.starts_with(&row)) {
                    continue;
                }
                step.rows += 1;
                for (key, value) in reencode(from, to, name, &row_pairs, &mut buf)? {
                    batch.insert(new, key, value);
                }
                row_pairs.clear();
                let full = step.rows >= step_rows || step.bytes >= STEP_BYTES;
                if full && merged.at_block_boundary() {
                    let mut cursor = codec::unescape(&row)?.0;
                    cursor.push(0);
                    next = Some(cursor);
                    break;
                }
            }
            for key in merged.rows_read() {
                batch.remove(old, key);
            }
            for key in merged.read_blocks() {
                batch.remove(blocks, key);
            }
        } else {
            for guard in snapshot.range(old, start.as_slice()..) {
                let (key, value) = guard.into_inner()?;
                let row = from.row_of(&key)?;
                if row != current.as_slice() {
                    if !pairs.is_empty() {
                        move_row(&mut pairs, &mut step)?;
                        if step.rows >= step_rows || step.bytes >= STEP_BYTES {
                            next = Some(codec::unescape(row)?.0);
                            break;
                        }
                    }
                    current = row.to_vec();
                }
                pairs.push((key, value));
            }
            if next.is_none() && !pairs.is_empty() {
                move_row(&mut pairs, &mut step)?;
            }
        }
        match next {
            Some(cursor) => {
                batch.insert(
                    &self.inner.catalog,
                    cursor_key(conversion.id),
                    cursor.clone(),
                );
                batch.commit()?;
                *lock(&moving.cursor) = cursor;
                Ok((step, false))
            }
            None => {
                // Every row is in the new keyspace: it becomes the family's.
                let mut def = handle.def.clone();
                let family = &mut def.families[index];
                family.id = conversion.id;
                family.format = conversion.format;
                family.converting = None;
                family.blocks = None;
                let fresh = self.open_handle(def.clone())?;
                batch.remove(&self.inner.catalog, cursor_key(conversion.id));
                self.put_def(&mut batch, &def)?;
                batch = batch.durability(Some(PersistMode::SyncAll));
                batch.commit()?;
                self.install(fresh);
                Ok((step, true))
            }
        }
    }
}
