//! The versions and cells views: a row's cells, each a row of output
//! (or a run of a column's versions), from owned rows or lent ones.

use super::values::*;
use crate::codec::show_bytes;
use crate::query::view::View;
use crate::schema::KeyValue;
use crate::store::{Row, RowView};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::ViewBatchBuilder;
use super::values::{CellsAt, Placed};

impl ViewBatchBuilder {
    /// One lent row of the versions view: its column runs found from
    /// families and first-of-column flags, no cell's bytes touched but
    /// those placed.
    pub(super) fn push_versions_lent(
        &mut self,
        row: RowView<'_>,
        read: &[usize],
    ) -> crate::error::Result<()> {
        let row_key = row.key();
        let key = self.key_text(row_key);
        let segments = self.segments_of(row_key);
        let decl = |i: usize| read.get(row.family(i)).copied().unwrap_or(usize::MAX);
        let runs = self.column_runs(row.len(), |i| row.first(i), decl, |i| row.qualifier(i));
        let done = self.push_versions(row_key, &key, segments.as_deref(), &row, &runs);
        self.runs = runs;
        done
    }

    /// Adds the output rows of one store row (its cells: by family,
    /// qualifier, newest first).
    pub fn push(&mut self, row: &Row) -> crate::error::Result<()> {
        if self.misfit_dropped(&row.key) {
            return Ok(());
        }
        let index = &self.families.by_name;
        let cells = row
            .cells
            .iter()
            .enumerate()
            .map(|(i, c)| Placed {
                decl: index.get(&*c.family).copied().unwrap_or(usize::MAX),
                family: &c.family,
                qualifier: &c.qualifier,
                timestamp: c.timestamp,
                value: &c.value,
                first: i == 0
                    || row.cells[i - 1].family != c.family
                    || row.cells[i - 1].qualifier != c.qualifier,
            })
            .collect();
        self.push_cells(&row.key, cells)
    }

    /// The output rows of one row's cells (by family, qualifier, newest
    /// first), borrowed wherever they come from.
    pub(super) fn push_cells(
        &mut self,
        row_key: &[u8],
        cells: Vec<Placed<'_>>,
    ) -> crate::error::Result<()> {
        let key = self.key_text(row_key);
        let segments = self.segments_of(row_key);
        let ts_column = self.ts_column.filter(|c| self.needed[*c]);
        match self.layout.view {
            View::Wide { .. } => {
                self.start_row(&key, segments.as_deref());
                if let Some(c) = ts_column {
                    let newest = cells.iter().map(|c| c.timestamp).max();
                    self.put(c, newest.map(Datum::Time));
                }
                self.place_cells(row_key, cells.iter().map(Placed::coordinates))?;
            }
            View::Versions { .. } => {
                // One output row per timestamp, newest first (or oldest
                // first), holding that timestamp's cells in column order.
                // Each column's cells are newest first already: its run is
                // placed once, and the runs merge.
                let runs = self.column_runs(
                    cells.len(),
                    |i| cells[i].first,
                    |i| cells[i].decl,
                    |i| cells[i].qualifier,
                );
                let done =
                    self.push_versions(row_key, &key, segments.as_deref(), &cells[..], &runs);
                self.runs = runs;
                done?;
            }
            View::Cells { .. } => {
                for cell in &cells {
                    let (family, qualifier) = (cell.family, cell.qualifier);
                    let (timestamp, value) = (cell.timestamp, cell.value);
                    let at = (&key[..], segments.as_deref());
                    self.push_cell(row_key, at, family, qualifier, timestamp, value)?;
                }
            }
        }
        Ok(())
    }

    /// One lent row of the cells view: an output row per cell, read where
    /// the row lies.
    pub(super) fn push_cells_lent(
        &mut self,
        row: RowView<'_>,
        names: &[Arc<str>],
    ) -> crate::error::Result<()> {
        let row_key = row.key();
        let key = self.key_text(row_key);
        let segments = self.segments_of(row_key);
        for i in 0..row.len() {
            let family = names.get(row.family(i)).map_or("", |n| n);
            let at = (&key[..], segments.as_deref());
            self.push_cell(
                row_key,
                at,
                family,
                row.qualifier(i),
                row.timestamp(i),
                row.value(i),
            )?;
        }
        Ok(())
    }

    /// The cells view's output row of one cell of the row keyed `row_key`
    /// (`at`: its key's text and segments).
    pub(super) fn push_cell(
        &mut self,
        row_key: &[u8],
        (key, segments): (&str, Option<&[KeyValue]>),
        family: &str,
        qualifier: &[u8],
        timestamp: i64,
        value: &[u8],
    ) -> crate::error::Result<()> {
        let [family_column, qualifier_column, value_column] = self.cell_columns;
        self.start_row(key, segments);
        if let Some(c) = family_column {
            self.put(c, Some(Datum::Text(family)));
        }
        if let Some(c) = self.ts_column.filter(|c| self.needed[*c]) {
            self.put(c, Some(Datum::Time(timestamp)));
        }
        let encoding = self.layout.cell_types.qualifier.encoding;
        if let Some(Some(appender)) = qualifier_column.map(|c| &mut self.builders[c])
            && let Err(why) = appender.put_cell(encoding, qualifier)
        {
            let what = format!("a qualifier of family {family}");
            return Err(cell_error(row_key, what, why, qualifier));
        }
        let encoding = self.layout.cell_types.value.encoding;
        if let Some(Some(appender)) = value_column.map(|c| &mut self.builders[c]) {
            self.values_decoded += 1;
            if let Err(why) = appender.put_cell(encoding, value) {
                let what = format!("the value of {family}:{}", show_bytes(qualifier));
                return Err(cell_error(row_key, what, why, value));
            }
        }
        Ok(())
    }

    /// The versions view's output rows of one row whose cells come in
    /// `runs` (a column each: start, end, target; newest first), newest
    /// first or, with `oldest_first`, oldest first.
    pub(super) fn push_versions<'c, C: CellsAt<'c> + ?Sized>(
        &mut self,
        row_key: &[u8],
        key: &str,
        segments: Option<&[KeyValue]>,
        cells: &C,
        runs: &[(usize, usize, Target)],
    ) -> crate::error::Result<()> {
        let ts_column = self.ts_column.filter(|c| self.needed[*c]);
        let backwards = self.oldest_first;
        let emit =
            |this: &mut Self, timestamp: i64, group: &mut dyn Iterator<Item = (usize, Target)>| {
                this.start_row(key, segments);
                if let Some(c) = ts_column {
                    this.put(c, Some(Datum::Time(timestamp)));
                }
                this.generation += 1;
                for (at, target) in group {
                    this.put_target(target, cells.qualifier(at), cells.value(at), row_key)?;
                }
                this.end_cells(row_key)
            };
        // Columns written together (the same timestamps in every column,
        // as a row of events usually is) need no merge.
        let Some(&(first, first_end, _)) = runs.first() else {
            return Ok(());
        };
        let len = first_end - first;
        // The `k`th version of the output within a run of `len` cells.
        let nth = |k: usize| if backwards { len - 1 - k } else { k };
        let aligned = runs.iter().all(|&(s, e, _)| {
            e - s == len && (0..len).all(|k| cells.timestamp(s + k) == cells.timestamp(first + k))
        });
        if aligned && self.maps.iter().all(Option::is_none) {
            // Column by column: each run's values go into its builder in
            // one loop, the key and times are repeated, absent declared
            // columns get NULLs (no family map to fill row by row).
            let base = self.rows;
            for _ in 0..len {
                self.start_row(key, segments);
            }
            if let Some(c) = ts_column {
                for k in 0..len {
                    self.put(c, Some(Datum::Time(cells.timestamp(first + nth(k)))));
                }
            }
            for d in 0..self.declared_columns.len() {
                if !self.declared_needed(d) {
                    continue;
                }
                match runs
                    .iter()
                    .find(|r| matches!(r.2, Target::Declared(x) if x == d))
                {
                    Some(&(s, _, _)) => {
                        self.declared_run(d, cells, (s, len, backwards), row_key, base)
                    }
                    None => {
                        for k in 0..len {
                            self.declared_value_at(d, None, row_key, base + k);
                        }
                    }
                }
            }
            return Ok(());
        }
        if aligned {
            for k in 0..len {
                let mut group = runs.iter().map(|&(s, _, t)| (s + nth(k), t));
                emit(self, cells.timestamp(first + nth(k)), &mut group)?;
            }
            return Ok(());
        }
        // A merge of the runs, each read from its newest cell on (or from
        // its oldest back): the heap orders by time, flipped (`!t`
        // reverses the order of i64s) when the oldest come first.
        let order = |t: i64| if backwards { !t } else { t };
        let start = |&(s, e, _): &(usize, usize, Target)| if backwards { e - 1 } else { s };
        let mut heads: BinaryHeap<(i64, Reverse<usize>)> = runs
            .iter()
            .enumerate()
            .map(|(r, run)| (order(cells.timestamp(start(run))), Reverse(r)))
            .collect();
        let mut next: Vec<usize> = runs.iter().map(start).collect();
        let mut group = Vec::new();
        while let Some(&(key_time, _)) = heads.peek() {
            group.clear();
            // The heap gives equal timestamps in column order.
            while let Some(&(t, Reverse(r))) = heads.peek()
                && t == key_time
            {
                heads.pop();
                group.push((next[r], runs[r].2));
                let (s, e, _) = runs[r];
                let more = if backwards {
                    let more = next[r] > s;
                    next[r] = next[r].wrapping_sub(1);
                    more
                } else {
                    next[r] += 1;
                    next[r] < e
                };
                if more {
                    heads.push((order(cells.timestamp(next[r])), Reverse(r)));
                }
            }
            emit(self, order(key_time), &mut group.iter().copied())?;
        }
        Ok(())
    }
}
