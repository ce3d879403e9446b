//! What the store knows of a table's size without reading it: disk
//! space, approximate cell counts, sample row keys.

use super::engine::{FjallStore, SPLIT_BYTES};
use super::format::{self, FamilyFormat};
use crate::codec;
use crate::error::Result;

impl FjallStore {
    /// About how many cells (key-value pairs, before GC) a table holds:
    /// cheap, from the LSM's own counts; for planning, never for answers.
    pub fn approximate_cells(&self, table: &str) -> Result<u64> {
        Ok(self
            .handle(table)?
            .all_keyspaces()
            .iter()
            .map(|(_, k)| k.approximate_len() as u64)
            .sum())
    }

    /// Row keys splitting a table into pieces of about [`SPLIT_BYTES`]
    /// each, with the bytes before each (see
    /// [`Backend::sample_row_keys`]): from one walk of the table's largest
    /// keyspace (a cost of a full scan of it; the embedded store has no
    /// cheaper index of its key distribution). The last entry is the
    /// empty key (the table's end).
    pub fn sample_row_keys(&self, table: &str) -> Result<Vec<(Vec<u8>, u64)>> {
        self.sample_row_keys_every(table, SPLIT_BYTES)
    }

    /// [`FjallStore::sample_row_keys`] with a sample about every `step`
    /// bytes (tests use small steps).
    #[doc(hidden)]
    pub fn sample_row_keys_every(&self, table: &str, step: u64) -> Result<Vec<(Vec<u8>, u64)>> {
        let step = step.max(1);
        let handle = self.handle(table)?;
        let mut samples = Vec::new();
        // Largest on disk, then (all still in memory) by pairs held.
        // (A slot's blocks count with it, and are walked with it.)
        let largest = (0..handle.keyspaces.len()).max_by_key(|&s| {
            let k = std::iter::once(&handle.keyspaces[s]).chain(&handle.blocks[s]);
            k.map(|k| (k.disk_space(), k.approximate_len() as u64))
                .fold((0, 0), |(d, n), (kd, kn)| (d + kd, n + kn))
        });
        let mut bytes = 0u64;
        if let Some(slot) = largest {
            let format = handle.formats[slot];
            let mut next_split = step;
            let mut last_row: Vec<u8> = Vec::new();
            let snapshot = self.inner.db.snapshot();
            let keyspace = &handle.keyspaces[slot];
            let blocks = handle.blocks[slot].as_ref();
            let mut pairs = format::blocks::Pairs::open(
                &snapshot,
                keyspace,
                blocks,
                format.own_cells(),
                &[],
                None,
                false,
            )?;
            while let Some((key, value)) = pairs.next(false)? {
                let row = format.row_of(&key)?;
                bytes += (key.len() + value.len()) as u64;
                if bytes >= next_split && row != last_row.as_slice() {
                    let (plain, _) = codec::unescape(row)?;
                    samples.push((plain, bytes));
                    next_split = bytes + step;
                }
                last_row.clear();
                last_row.extend_from_slice(row);
            }
        }
        samples.push((Vec::new(), bytes));
        Ok(samples)
    }

    /// Iterates every pair of a table's families in key order, decoding
    /// nothing: how many pairs and bytes (keys and values) it holds. What
    /// any scan of the table costs at least, whatever it does with the
    /// pairs (the comparison bench reports it as the layout's floor).
    pub fn scan_pairs(&self, table: &str) -> Result<(u64, u64)> {
        let (mut pairs, mut bytes) = (0u64, 0u64);
        for (_, keyspace) in self.handle(table)?.all_keyspaces() {
            for guard in keyspace.iter() {
                let (key, value) = guard.into_inner()?;
                pairs += 1;
                bytes += (key.len() + value.len()) as u64;
            }
        }
        Ok((pairs, bytes))
    }

    /// Whether every AUTO family of `table` is folded: its own keyspace
    /// holds no pair (every cell is in its blocks), as the background
    /// compaction leaves it once writes stop.
    pub fn folded(&self, table: &str) -> Result<bool> {
        let handle = self.handle(table)?;
        for (index, family) in handle.def.families.iter().enumerate() {
            if family.format == FamilyFormat::Auto
                && handle.keyspaces[index].iter().next().is_some()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
