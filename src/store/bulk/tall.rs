//! A bulk load of tall rows straight into column-wise blocks: when every
//! row of a batch bound for blocks sets one cell in each of the same
//! columns of its family (a tall table's load), the blocks are built from
//! the batch's cells, column by column, with no PACKED value made of
//! each row first and parsed again.

use super::batch::{CellBatch, Columns, Resolved};
use crate::codec;
use crate::error::{Error, Result};
use crate::store::engine::{FjallStore, TableHandle};
use crate::store::format::blocks;
use crate::store::format::blocks::{BLOCK_ROWS, TallCells, TallRows};
use crate::store::format::packed::{MAX_PACKED_LEN, cell_size as packed_cell_size, tall_shape};
use std::ops::Range;

/// Blocks: (key, value) pairs.
type Blocks = Vec<(Vec<u8>, Vec<u8>)>;

/// A batch's rows as tall rows of one shape (see [`TallBatch::of`]).
pub(super) struct TallBatch {
    /// The slot the rows go to, and their shape with its column count.
    pub slot: usize,
    shape: Vec<u8>,
    columns: usize,
    /// Where the rows' cells lie in the batch.
    cells: Cells,
    /// The rows' escaped keys back to back, and where each ends.
    keys: Vec<u8>,
    ends: Vec<usize>,
    /// The rows' blocks built ahead, and where they were cut.
    built: Option<(Vec<usize>, Blocks)>,
}

/// Where a tall batch's cells lie in its batch.
enum Cells {
    /// Per row, in key order: its cells' places among the batch's cells,
    /// in the shape's column order.
    Cells(Vec<usize>),
    /// The batch's rows, in key order, and its columns in the shape's
    /// order, of a batch given a column at a time.
    Columns { rows: Vec<usize>, order: Vec<usize> },
}

impl TallBatch {
    /// The rows `valid` (checked, in key order) as tall rows, if each
    /// sets exactly one cell in each of the columns of the first, given
    /// in its order (as a batch writer gives them), of one
    /// PACKED family with blocks and no other, and no key comes twice
    /// (none can when they came `strict`ly ascending). Not while a
    /// family's format is being changed (a row's slot then depends on
    /// where the change is). Rows given a column at a time are such rows
    /// by their form.
    pub fn of(
        table: &TableHandle,
        batch: &CellBatch,
        families: &[Resolved],
        valid: &[usize],
        strict: bool,
    ) -> Option<TallBatch> {
        if table.moving.iter().any(Option::is_some) {
            return None;
        }
        if let Some(columns) = &batch.columns {
            return Self::of_columns(table, batch, columns, families, valid, strict);
        }
        let first = batch.row_cells(*valid.first()?);
        let family = first.first()?.family;
        let slot = families[family.0 as usize].index;
        if !table.formats[slot].has_blocks() || table.blocks.get(slot)?.is_none() {
            return None;
        }
        // The first row's columns in qualifier order: the shape's.
        let mut order: Vec<usize> = (0..first.len()).collect();
        order.sort_by(|&a, &b| batch.qualifier(&first[a]).cmp(batch.qualifier(&first[b])));
        let qualifiers: Vec<&[u8]> = order.iter().map(|&k| batch.qualifier(&first[k])).collect();
        // Where the batch holds them: rows that share them (as a load's
        // rows do, see `CellBatch::same_qualifier`) need no comparison.
        let held: Vec<&Range<usize>> = order.iter().map(|&k| &first[k].qualifier).collect();
        let shape = tall_shape(&qualifiers)?;
        let columns = qualifiers.len();
        let mut cells = Vec::with_capacity(valid.len() * columns);
        let mut keys = Keys::new(batch, valid, strict);
        for &row in valid {
            keys.push(row)?;
            let start = batch.cells_start(row);
            let row_cells = batch.row_cells(row);
            if row_cells.len() != columns {
                return None;
            }
            let mut size = 0;
            for ((&k, &qualifier), &held) in order.iter().zip(&qualifiers).zip(&held) {
                let cell = &row_cells[k];
                let same = cell.qualifier == *held || batch.qualifier(cell) == qualifier;
                if cell.family != family || cell.add || !same {
                    return None;
                }
                size += packed_cell_size(qualifier, batch.value(cell));
                cells.push(start + k);
            }
            // (A row over the limit takes the general path, which says so.)
            if size > MAX_PACKED_LEN {
                return None;
            }
        }
        Some(keys.tall(slot, shape, columns, Cells::Cells(cells)))
    }

    /// [`TallBatch::of`] rows given a column at a time: each has a cell
    /// in every column, so only the family, the qualifiers (no two
    /// alike), a row's size (all rows' values are alike in size) and the
    /// key order are to be looked at.
    fn of_columns(
        table: &TableHandle,
        batch: &CellBatch,
        columns: &Columns,
        families: &[Resolved],
        valid: &[usize],
        strict: bool,
    ) -> Option<TallBatch> {
        let slot = families[columns.family.0 as usize].index;
        if !table.formats[slot].has_blocks() || table.blocks.get(slot)?.is_none() {
            return None;
        }
        let given = &columns.columns;
        let mut order: Vec<usize> = (0..given.len()).collect();
        order.sort_by(|&a, &b| given[a].qualifier.cmp(&given[b].qualifier));
        let qualifiers: Vec<&[u8]> = order.iter().map(|&k| &given[k].qualifier[..]).collect();
        // (Two columns alike are no shape.)
        let shape = tall_shape(&qualifiers)?;
        let first = *valid.first()?;
        let size: usize = given
            .iter()
            .map(|c| packed_cell_size(&c.qualifier, c.value(first)))
            .sum();
        if size > MAX_PACKED_LEN {
            return None;
        }
        let mut keys = Keys::new(batch, valid, strict);
        for &row in valid {
            keys.push(row)?;
        }
        let cells = Cells::Columns {
            rows: valid.to_vec(),
            order,
        };
        Some(keys.tall(slot, shape, qualifiers.len(), cells))
    }

    /// Builds the rows' blocks ahead of their write, cut at `cuts`.
    pub fn build(&mut self, batch: &CellBatch, cuts: &[usize]) -> Result<()> {
        let blocks = blocks::build_tall(&self.rows(batch)?, cuts, BLOCK_ROWS);
        self.built = Some((cuts.to_vec(), blocks));
        Ok(())
    }

    /// Ingests the rows as blocks (see `FjallStore::ingest_built`), cut
    /// at `runs` and where they surround stored blocks: those built ahead
    /// when they were cut so.
    pub fn ingest(
        mut self,
        store: &FjallStore,
        table: &TableHandle,
        batch: &CellBatch,
        runs: &[usize],
    ) -> Result<bool> {
        let built = self.built.take();
        let rows = self.rows(batch)?;
        store.ingest_built(table, self.slot, &rows.keys, runs, |cuts| {
            Ok(match built {
                Some((made, blocks)) if made == cuts => blocks,
                _ => blocks::build_tall(&rows, cuts, BLOCK_ROWS),
            })
        })
    }

    fn keys(&self) -> Vec<&[u8]> {
        let mut from = 0;
        self.ends
            .iter()
            .map(|&end| {
                let key = &self.keys[from..end];
                from = end;
                key
            })
            .collect()
    }

    /// The rows as the blocks take them, from `batch`, the batch they
    /// were found in (whose form cannot have changed since: any change
    /// to a batch drops what was made of it ahead).
    fn rows<'a>(&'a self, batch: &'a CellBatch) -> Result<TallRows<'a, InBatch<'a>>> {
        let cells = match (&self.cells, &batch.columns) {
            (Cells::Cells(cells), None) => InBatch::Cells {
                batch,
                cells,
                columns: self.columns,
            },
            (Cells::Columns { rows, order }, Some(given)) => {
                InBatch::Columns { given, rows, order }
            }
            _ => {
                return Err(Error::Internal(
                    "a tall batch built from another form of its batch".into(),
                ));
            }
        };
        Ok(TallRows {
            keys: self.keys(),
            shape: &self.shape,
            columns: self.columns,
            cells,
        })
    }
}

/// A tall batch's rows' keys, escaped, as they are taken in key order.
struct Keys<'a> {
    batch: &'a CellBatch,
    strict: bool,
    previous: Option<&'a [u8]>,
    keys: Vec<u8>,
    ends: Vec<usize>,
}

impl<'a> Keys<'a> {
    fn new(batch: &'a CellBatch, valid: &[usize], strict: bool) -> Keys<'a> {
        Keys {
            batch,
            strict,
            previous: None,
            keys: Vec::with_capacity(valid.iter().map(|&r| batch.key(r).len() + 2).sum()),
            ends: Vec::with_capacity(valid.len()),
        }
    }

    /// Takes row `row`'s key; `None` if it is not past the one before.
    fn push(&mut self, row: usize) -> Option<()> {
        let key = self.batch.key(row);
        if !self.strict && self.previous.is_some_and(|p| p >= key) {
            return None;
        }
        self.previous = Some(key);
        codec::escape_into(&mut self.keys, key);
        self.ends.push(self.keys.len());
        Some(())
    }

    fn tall(self, slot: usize, shape: Vec<u8>, columns: usize, cells: Cells) -> TallBatch {
        TallBatch {
            slot,
            shape,
            columns,
            cells,
            keys: self.keys,
            ends: self.ends,
            built: None,
        }
    }
}

/// A tall batch's cells where the batch holds them.
enum InBatch<'a> {
    Cells {
        batch: &'a CellBatch,
        cells: &'a [usize],
        columns: usize,
    },
    Columns {
        given: &'a Columns,
        rows: &'a [usize],
        order: &'a [usize],
    },
}

impl TallCells for InBatch<'_> {
    fn cell(&self, row: usize, column: usize) -> (i64, &[u8]) {
        match self {
            InBatch::Columns { given, rows, order } => {
                let row = rows[row];
                (given.times[row], given.columns[order[column]].value(row))
            }
            InBatch::Cells {
                batch,
                cells,
                columns,
            } => {
                let cell = &batch.cells[cells[row * columns + column]];
                (cell.timestamp, batch.value(cell))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{checked_rows, resolve};
    use super::*;
    use crate::store::{BadRows, FamilyFormat, FamilyKind, FamilySpec, TableSpec};

    /// Which batches are tall: each row one cell in each of the first
    /// row's columns, in its order, no add, no key twice; and which
    /// tables: a PACKED family with blocks.
    #[test]
    fn tall_batches_are_told_from_others() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let packed = FamilySpec::new("m").format(FamilyFormat::Packed);
        let tables = [
            ("p", packed.clone()),
            ("sum", packed.kind(FamilyKind::Sum)),
            ("c", FamilySpec::new("m").format(FamilyFormat::Cells)),
        ];
        for (name, family) in tables {
            store
                .create_table(TableSpec::new(name).family(family))
                .unwrap();
        }
        store.ensure_blocks("p", "m").unwrap();
        store.ensure_blocks("sum", "m").unwrap();
        // Rows `keys`, each setting columns b and a unless `edit`
        // (called first) writes the row itself.
        let tall = |table: &str, keys: &[u32], edit: &dyn Fn(&mut CellBatch, u32) -> bool| {
            let mut batch = CellBatch::new();
            let m = batch.family("m");
            for &k in keys {
                batch.begin_row(format!("k{k:04}").as_bytes());
                if !edit(&mut batch, k) {
                    batch.set(m, b"b", 5, &i64::from(k).to_be_bytes());
                    batch.set(m, b"a", 7, &7i64.to_be_bytes());
                }
            }
            let handle = store.handle(table).unwrap();
            let families = resolve(&handle, &batch).unwrap();
            let checked = checked_rows(&batch, &families, BadRows::Stop).ok().unwrap();
            let of = TallBatch::of(&handle, &batch, &families, &checked.valid, checked.strict);
            of.map(|t| (t.columns, t.ends.len()))
        };
        let none = |_: &mut CellBatch, _: u32| false;
        // Row 50 written as `cells` (qualifier, whether an add).
        let row_50 = |cells: &'static [(&'static [u8], bool)]| {
            move |b: &mut CellBatch, k: u32| {
                let m = b.family("m");
                for &(qualifier, add) in cells.iter().filter(|_| k == 50) {
                    match add {
                        false => b.set(m, qualifier, 3, &1i64.to_be_bytes()),
                        true => b.add(m, qualifier, 3, &1i64.to_be_bytes()),
                    }
                }
                k == 50
            }
        };
        let keys: Vec<u32> = (0..100).collect();
        assert_eq!(tall("p", &keys, &none), Some((2, 100)));
        assert_eq!(tall("sum", &keys, &none), Some((2, 100)));
        assert_eq!(
            tall("p", &keys, &row_50(&[(b"b", false), (b"a", false)])),
            Some((2, 100))
        );
        // Rows given out of order are sorted first.
        let shuffled: Vec<u32> = (0..100).map(|k| k * 37 % 100).collect();
        assert_eq!(tall("p", &shuffled, &none), Some((2, 100)));
        // A key twice, in order or not.
        assert_eq!(tall("p", &[1, 2, 2, 3], &none), None);
        assert_eq!(tall("p", &[3, 2, 1, 2], &none), None);
        // A row lacking a column, with another instead or besides, with a
        // column twice, or with its columns in another order than the
        // first's; a row with an add.
        let others: [&[(&[u8], bool)]; 5] = [
            &[(b"b", false)],
            &[(b"b", false), (b"c", false)],
            &[(b"b", false), (b"a", false), (b"c", false)],
            &[(b"b", false), (b"b", false)],
            &[(b"a", false), (b"b", false)],
        ];
        for cells in others {
            assert_eq!(tall("p", &keys, &row_50(cells)), None, "{cells:?}");
        }
        assert_eq!(
            tall("sum", &keys, &row_50(&[(b"b", false), (b"a", true)])),
            None
        );
        // A CELLS family.
        assert_eq!(tall("c", &keys, &none), None);
    }
}
