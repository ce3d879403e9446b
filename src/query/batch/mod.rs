//! `ViewBatchBuilder`: store rows to Arrow record batches of a view.
//!
//! The wide view takes rows as the store lends them ([`RowView`]): cells
//! borrowed from the fjall pairs, placed in declared columns by walking
//! the row's sorted qualifiers against each family's sorted declared
//! qualifiers (no hashing, no allocation per cell), and decoded straight
//! into typed appenders chosen once per scan. Only the columns a query
//! needs are built; values of other columns are never decoded. The
//! versions and cells views take lent rows too (one small vector of
//! borrowed cells per row); owned rows go through the same code.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, MapBuilder, StringBuilder, make_builder, new_null_array,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::Result as DfResult;

use super::view::{ColumnSource, FamilyIndex, Layout, View, value_type};
use crate::codec::show_bytes;
use crate::proto::{FieldMask, PValue};
use crate::schema::{Encoding, KeyValue, ValueType};
use crate::store::{NumberRow, NumberRows, RowView};

mod values;
mod versions;

pub(crate) use values::{Appender, Datum, decode_error};
use values::{CellsAt, Target, append_run, put};

type MapColumn = MapBuilder<StringBuilder, Box<dyn ArrayBuilder>>;

/// Builds record batches of a view from store rows.
pub(crate) struct ViewBatchBuilder {
    layout: Arc<Layout>,
    needed: Vec<bool>,
    /// One per column; `None` for maps and for columns not needed.
    builders: Vec<Option<Appender>>,
    maps: Vec<Option<MapColumn>>,
    ts_column: Option<usize>,
    /// Whether any segment column is wanted (else keys are not decoded).
    segments_needed: bool,
    /// A row's key and its segments, decoded by the fit check of a scan
    /// that drops misfits and reads segments: the decode is the check,
    /// done once per row.
    predecoded: Option<Vec<KeyValue>>,
    predecoded_key: Vec<u8>,
    /// Whether any declared column or family map is wanted (else a wide
    /// row's cells are not walked).
    cells_needed: bool,
    /// The layout's families by name, and their declared qualifiers.
    families: Arc<FamilyIndex>,
    /// Decoded protobuf values of needed proto columns, and their masks.
    proto_values: HashMap<usize, Vec<PValue>>,
    proto_masks: HashMap<usize, FieldMask>,
    /// The cells view's family, qualifier and value columns, if needed.
    cell_columns: [Option<usize>; 3],
    /// Column index of each segment, declared column and family map.
    /// (column, key field) of each segment column.
    segment_columns: Vec<(usize, usize)>,
    /// The `_key` column, when it is wanted.
    key_column: Option<usize>,
    declared_columns: Vec<usize>,
    map_columns: Vec<usize>,
    rows: usize,
    pub misfits: usize,
    /// Cell values decoded into columns (EXPLAIN ANALYZE `values_decoded`).
    pub values_decoded: usize,
    /// The families a scan reads, as their declaration index (see `bind`).
    read_families: Vec<usize>,
    read_names: Vec<Arc<str>>,
    /// Per declared column, the row (`generation`) that last set it.
    set_in: Vec<u64>,
    generation: u64,
    /// Per family map (by family): the only keys the query reads, if not all.
    map_keys: Vec<Option<BTreeSet<String>>>,
    /// The versions view's column runs of the current row (reused).
    runs: Vec<(usize, usize, Target)>,
    /// Cells that did not decode, by output row of the current batch: an
    /// error only if the row survives the scan's own predicate.
    pub errors: Vec<(usize, crate::error::Error)>,
    /// Turn away rows whose key does not fit the key schema (the scan
    /// answers segment filters from its ranges, without re-checking).
    pub drop_misfits: bool,
    /// The versions view gives a row's timestamps oldest first rather
    /// than newest first: what a bucketed series read with its buckets
    /// in ascending time needs for its events to come in time order.
    pub oldest_first: bool,
}

impl ViewBatchBuilder {
    /// A builder of the `needed` columns of `layout`, with room for
    /// `capacity` rows before its columns grow.
    pub fn new(
        layout: Arc<Layout>,
        needed: Vec<bool>,
        proto_masks: &HashMap<usize, FieldMask>,
        map_keys: &HashMap<usize, BTreeSet<String>>,
        capacity: usize,
    ) -> Self {
        let mut builders = Vec::with_capacity(layout.sources.len());
        let mut proto_values = HashMap::new();
        let mut masks = HashMap::new();
        let mut maps = Vec::with_capacity(layout.sources.len());
        let (mut segment_columns, mut map_columns) = (Vec::new(), Vec::new());
        // Per declared column: its view column; a serialized series' event
        // column is none of the view's but the one past them, where its
        // messages collect for the measure columns to take their fields.
        let hidden = layout.sources.len();
        let mut declared_columns = vec![usize::MAX; layout.columns.len()];
        let mut needed = needed;
        needed.push(false);
        let mut hidden_mask = FieldMask {
            fields: Some(HashMap::new()),
        };
        for (i, source) in layout.sources.iter().enumerate() {
            match source {
                ColumnSource::Segment(f) => segment_columns.push((i, *f)),
                ColumnSource::Declared(d) => declared_columns[*d] = i,
                ColumnSource::ProtoField(d, _) => {
                    declared_columns[*d] = hidden;
                    if needed[i] {
                        needed[hidden] = true;
                        hidden_mask.add_path(&[layout.arrow.field(i).name().clone()]);
                    }
                }
                ColumnSource::FamilyMap(_) => map_columns.push(i),
                _ => {}
            }
            if let ColumnSource::ProtoField(..) = source {
                maps.push(None);
                builders.push(None);
            } else if let ColumnSource::FamilyMap(f) = source {
                let values = value_type(layout.map_values[*f].value_type);
                maps.push(needed[i].then(|| {
                    MapBuilder::new(None, StringBuilder::new(), make_builder(&values, 0))
                }));
                builders.push(None);
            } else if let ColumnSource::Declared(d) = source
                && layout.protos[*d].is_some()
            {
                maps.push(None);
                builders.push(None);
                if needed[i] {
                    proto_values.insert(i, Vec::new());
                    masks.insert(i, proto_masks.get(&i).cloned().unwrap_or_default());
                }
            } else {
                maps.push(None);
                builders.push(
                    needed[i]
                        .then(|| {
                            Appender::with_capacity(layout.arrow.field(i).data_type(), capacity)
                        })
                        .flatten(),
                );
            }
        }
        if needed[hidden] {
            proto_values.insert(hidden, Vec::new());
            masks.insert(hidden, hidden_mask);
        }
        let ts_column = layout
            .sources
            .iter()
            .position(|s| matches!(s, ColumnSource::Timestamp));
        let layout_columns = layout.columns.len();
        let families = Arc::clone(&layout.families);
        let map_keys = map_columns
            .iter()
            .map(|c| map_keys.get(c).cloned())
            .collect();
        let column_of = |is: fn(&ColumnSource) -> bool| {
            (0..layout.sources.len()).find(|&c| needed[c] && is(&layout.sources[c]))
        };
        let cell_columns = [
            column_of(|s| matches!(s, ColumnSource::Family)),
            column_of(|s| matches!(s, ColumnSource::Qualifier)),
            column_of(|s| matches!(s, ColumnSource::Value)),
        ];
        ViewBatchBuilder {
            map_keys,
            segments_needed: segment_columns.iter().any(|(c, _)| needed[*c]),
            key_column: layout
                .sources
                .iter()
                .position(|s| matches!(s, ColumnSource::Key))
                .filter(|c| needed[*c]),
            cells_needed: declared_columns
                .iter()
                .any(|c| needed.get(*c).copied().unwrap_or(false))
                || maps.iter().any(Option::is_some),
            layout,
            needed,
            builders,
            maps,
            ts_column,
            families,
            proto_values,
            proto_masks: masks,
            cell_columns,
            segment_columns,
            declared_columns,
            map_columns,
            rows: 0,
            misfits: 0,
            values_decoded: 0,
            read_families: Vec::new(),
            read_names: Vec::new(),
            set_in: vec![0; layout_columns],
            generation: 0,
            errors: Vec::new(),
            runs: Vec::new(),
            drop_misfits: false,
            oldest_first: false,
            predecoded: None,
            predecoded_key: Vec::new(),
        }
    }

    /// The families of which the output uses only some values, with the
    /// qualifiers whose values it uses: what the read can leave out
    /// (`ReadFilter::values_only`).
    pub fn values_used(&self) -> Vec<(String, Vec<Vec<u8>>)> {
        let families = &self.layout.def.families;
        if let View::Cells { .. } = self.layout.view {
            if self.cell_columns[2].is_some() {
                return Vec::new();
            }
            return families
                .iter()
                .map(|f| (f.name.clone(), Vec::new()))
                .collect();
        }
        families
            .iter()
            .enumerate()
            .filter(|(f, _)| {
                self.map_columns
                    .get(*f)
                    .is_none_or(|&c| self.maps[c].is_none())
            })
            .map(|(f, family)| {
                let used = self.families.declared[f]
                    .iter()
                    .filter(|(_, d)| self.declared_needed(*d))
                    .map(|(q, _)| q.clone())
                    .collect();
                (family.name.clone(), used)
            })
            .collect()
    }

    /// Names the families of the rows to come, in the order their cells'
    /// `family` counts them.
    pub fn bind(&mut self, families: &[Arc<str>]) {
        self.read_names = families.to_vec();
        self.read_families = families
            .iter()
            .map(|name| {
                self.families
                    .by_name
                    .get(&**name)
                    .copied()
                    .unwrap_or(usize::MAX)
            })
            .collect();
    }

    /// Whether a row is turned away (see `drop_misfits`); counted as a
    /// misfit.
    fn misfit_dropped(&mut self, key: &[u8]) -> bool {
        if !self.drop_misfits {
            return false;
        }
        let Some(schema) = &self.layout.key else {
            return false;
        };
        let fits = if self.segments_needed {
            self.predecoded = schema.decode(key);
            self.predecoded_key.clear();
            self.predecoded_key.extend_from_slice(key);
            self.predecoded.is_some()
        } else {
            schema.fits(key)
        };
        if fits {
            return false;
        }
        self.misfits += 1;
        true
    }

    /// Adds the output rows of one row as the store lends it.
    pub fn push_view(&mut self, row: RowView<'_>) -> crate::error::Result<()> {
        if self.misfit_dropped(row.key()) {
            return Ok(());
        }
        // The family lists move out for the row and back (no reference
        // count touched per row: scans share nothing they write).
        let read = std::mem::take(&mut self.read_families);
        let done = match self.layout.view {
            View::Wide { .. } => self.push_wide(row, &read),
            View::Versions { .. } => self.push_versions_lent(row, &read),
            View::Cells { .. } => {
                let names = std::mem::take(&mut self.read_names);
                let done = self.push_cells_lent(row, &names);
                self.read_names = names;
                done
            }
        };
        self.read_families = read;
        done
    }

    /// The declared columns this builder fills, by declaration index,
    /// when a read of numbers can fill them all (see
    /// [`Self::push_numbers`]): a table's wide view as of now (or a
    /// series' kept a row per event), every
    /// needed declared column an 8-byte BIGINT or DOUBLE, and nothing else
    /// of a row's cells wanted (no family map, `_timestamp`, protobuf or
    /// cells column). `None` otherwise: rows then come as cells.
    pub fn number_columns(&self) -> Option<Vec<usize>> {
        // (A series' events in rows of their own are its wide view, its
        // time a key segment; a serialized one's measures are protobuf.)
        let plain = self.layout.view == (View::Wide { as_of: None })
            && self.ts_column.is_none_or(|c| !self.needed[c])
            && self.maps.iter().all(Option::is_none)
            && self.proto_values.is_empty()
            && self.cell_columns.iter().all(Option::is_none);
        if !plain {
            return None;
        }
        let mut out = Vec::new();
        for (d, def) in self.layout.columns.iter().enumerate() {
            if !self.declared_needed(d) {
                continue;
            }
            let typed = matches!(
                self.builders.get(self.declared_columns[d]),
                Some(Some(Appender::Int(_) | Appender::Float(_)))
            );
            let number = matches!(def.value_type, ValueType::Int64 | ValueType::Float64)
                && def.encoding == Encoding::Binary;
            if !(typed && number) {
                return None;
            }
            out.push(d);
        }
        Some(out)
    }

    /// One row of the wide view read as numbers (its columns as
    /// [`Self::number_columns`] gave them, in that order): what
    /// [`Self::push_view`] makes of the same row, each column its newest
    /// value (the read keeps one cell a column) or NULL.
    pub fn push_numbers(&mut self, row: &NumberRow, declared: &[usize]) {
        let key = row.key.as_slice();
        if self.misfit_dropped(key) {
            return;
        }
        self.start_wide_row(key);
        for (m, &d) in declared.iter().enumerate() {
            let word = row.column(m).1.first().copied();
            // A value that is not 8 bytes long (the row's first such:
            // enough to fail the row if it is output) goes as the cell
            // would, an error naming it.
            match row.misfit().filter(|(c, _)| *c == m && word.is_none()) {
                Some((_, misfit)) => self.declared_value(d, Some(misfit), key),
                None => self.push_word(d, word),
            }
        }
    }

    /// A run of rows of the wide view read as numbers, a column at a time
    /// (see [`Self::push_numbers`], which each row is the same as).
    pub fn push_number_rows(
        &mut self,
        rows: &NumberRows,
        declared: &[usize],
    ) -> crate::error::Result<()> {
        let n = rows.len();
        if self.drop_misfits {
            // Rows may be dropped: row by row.
            for i in 0..n {
                let key = rows.key(i)?;
                if self.misfit_dropped(&key) {
                    continue;
                }
                self.start_wide_row(&key);
                for (m, &d) in declared.iter().enumerate() {
                    let word = rows.column(m).map(|(_, words)| words[i]);
                    self.push_word(d, word);
                }
            }
            return Ok(());
        }
        for i in 0..n {
            self.start_wide_row(&rows.key(i)?);
        }
        for (m, &d) in declared.iter().enumerate() {
            let words = rows.column(m).map(|(_, words)| words);
            match (&mut self.builders[self.declared_columns[d]], words) {
                (Some(Appender::Float(b)), Some(words)) => {
                    words
                        .iter()
                        .for_each(|w| b.append_value(f64::from_bits(*w)));
                }
                (Some(Appender::Int(b)), Some(words)) => {
                    words.iter().for_each(|w| b.append_value(*w as i64));
                }
                (Some(Appender::Float(b)), None) => b.append_nulls(n),
                (Some(Appender::Int(b)), None) => b.append_nulls(n),
                // (Not a column of numbers: `number_columns` gives none.)
                _ => continue,
            }
            if words.is_some() {
                self.values_decoded += n;
            }
        }
        Ok(())
    }

    /// Declared column `d`'s value of the last row started, a number read
    /// as its word, or NULL.
    fn push_word(&mut self, d: usize, word: Option<u64>) {
        match (&mut self.builders[self.declared_columns[d]], word) {
            (Some(Appender::Float(b)), Some(w)) => b.append_value(f64::from_bits(w)),
            (Some(Appender::Int(b)), Some(w)) => b.append_value(w as i64),
            (Some(Appender::Float(b)), None) => return b.append_null(),
            (Some(Appender::Int(b)), None) => return b.append_null(),
            _ => return,
        }
        self.values_decoded += 1;
    }

    /// The `_key` column's text of a row key, when the view shows it
    /// (invalid UTF-8 replaced, as everywhere a key is shown as text).
    /// Checked with `from_utf8` first: valid keys, nearly all of them, are
    /// read at its ASCII speed rather than split into chunks.
    fn key_text<'k>(&self, key: &'k [u8]) -> std::borrow::Cow<'k, str> {
        if self.key_column.is_none() {
            return std::borrow::Cow::Borrowed("");
        }
        match std::str::from_utf8(key) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(key),
        }
    }

    /// The column runs (start, end, target) of a row's `n` cells, given
    /// by index: a run ends where a cell starts its column or another
    /// family's cells begin. The vector is the scan's reused one: put it
    /// back in `self.runs` when done.
    fn column_runs<'q>(
        &mut self,
        n: usize,
        first: impl Fn(usize) -> bool,
        decl: impl Fn(usize) -> usize,
        qualifier: impl Fn(usize) -> &'q [u8],
    ) -> Vec<(usize, usize, Target)> {
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        let mut start = 0;
        for i in 1..=n {
            if i == n || first(i) || decl(i) != decl(start) {
                runs.push((start, i, self.target(decl(start), qualifier(start))));
                start = i;
            }
        }
        runs
    }

    /// Starts the output row of a wide row keyed `key`: its key and
    /// segment columns.
    fn start_wide_row(&mut self, key: &[u8]) {
        let segments = self.segments_of(key);
        let text = self.key_text(key);
        self.start_row(&text, segments.as_deref());
    }

    /// One row of the wide view: its newest cells, placed in columns.
    fn push_wide(&mut self, row: RowView<'_>, read: &[usize]) -> crate::error::Result<()> {
        let key = row.key();
        self.start_wide_row(key);
        if let Some(c) = self.ts_column.filter(|c| self.needed[*c]) {
            let newest = row.cells().map(|c| c.timestamp).max();
            self.put(c, newest.map(Datum::Time));
        }
        if !self.cells_needed {
            // count(*), key-only queries: the row's cells fill nothing.
            return Ok(());
        }
        let cells = row.cells().map(|c| {
            let family = read.get(c.family).copied().unwrap_or(usize::MAX);
            (family, c.qualifier, c.value)
        });
        self.place_cells(key, cells)
    }

    /// Fills the declared columns and family maps of the current output
    /// row from its cells, given as (the family's declaration index,
    /// qualifier, value) by family, then qualifier, newest first: a
    /// column's first cell is its value. Each family's cells are placed
    /// by walking its sorted declared qualifiers alongside (no hashing).
    fn place_cells<'c>(
        &mut self,
        key: &[u8],
        cells: impl Iterator<Item = (usize, &'c [u8], &'c [u8])>,
    ) -> crate::error::Result<()> {
        self.generation += 1;
        let (mut family, mut next) = (usize::MAX, 0);
        let mut last: Option<&[u8]> = None;
        for (f, qualifier, value) in cells {
            if f != family {
                family = f;
                next = 0;
                last = None;
            }
            // Only a column's newest cell counts.
            if last == Some(qualifier) {
                continue;
            }
            last = Some(qualifier);
            let Some(declared) = self.families.declared.get(f) else {
                continue;
            };
            while next < declared.len() && declared[next].0.as_slice() < qualifier {
                next += 1;
            }
            let target = match declared.get(next) {
                Some((q, d)) if q == qualifier => Target::Declared(*d),
                _ => self.map_target(f, qualifier),
            };
            self.put_target(target, qualifier, value, key)?;
        }
        self.end_cells(key)
    }

    /// Where a column of family `f` goes (`f` in declaration order).
    fn target(&self, f: usize, qualifier: &[u8]) -> Target {
        let Some(declared) = self.families.declared.get(f) else {
            return Target::Nowhere;
        };
        match declared.binary_search_by(|(q, _)| q.as_slice().cmp(qualifier)) {
            // A column the query does not read takes no value (its cells
            // still make the versions view's rows).
            Ok(at) if !self.declared_needed(declared[at].1) => Target::Nowhere,
            Ok(at) => Target::Declared(declared[at].1),
            Err(_) => self.map_target(f, qualifier),
        }
    }

    /// The target of an undeclared qualifier: the family's map when the
    /// query reads it and this key of it.
    fn map_target(&self, f: usize, qualifier: &[u8]) -> Target {
        // (A series' view has no family maps.)
        let Some(&column) = self.map_columns.get(f) else {
            return Target::Nowhere;
        };
        if self.maps[column].is_none() {
            return Target::Nowhere;
        }
        // A map the query reads only some keys of holds only those.
        if let Some(wanted) = &self.map_keys[f]
            && !wanted.contains(String::from_utf8_lossy(qualifier).as_ref())
        {
            return Target::Nowhere;
        }
        Target::Map(f)
    }

    /// Puts one column's value of the current output row where it goes.
    fn put_target(
        &mut self,
        target: Target,
        qualifier: &[u8],
        value: &[u8],
        key: &[u8],
    ) -> crate::error::Result<()> {
        match target {
            Target::Nowhere => {}
            Target::Declared(d) => {
                self.set_in[d] = self.generation;
                self.declared_value(d, Some(value), key);
            }
            Target::Map(f) => {
                let Some(map) = &mut self.maps[self.map_columns[f]] else {
                    return Ok(());
                };
                self.values_decoded += 1;
                let value = self.layout.map_values[f].decode(value).map_err(|e| {
                    decode_error(key, format!("{e} (qualifier {})", show_bytes(qualifier)))
                })?;
                map.keys().append_value(String::from_utf8_lossy(qualifier));
                put(map.values().as_mut(), Some(Datum::of(&value)));
            }
        }
        Ok(())
    }

    /// Ends the current output row's cells: NULL in every declared column
    /// no cell set, and the family maps' entries closed.
    fn end_cells(&mut self, key: &[u8]) -> crate::error::Result<()> {
        for d in 0..self.declared_columns.len() {
            if self.set_in[d] != self.generation {
                self.declared_value(d, None, key);
            }
        }
        for map in self.maps.iter_mut().flatten() {
            map.append(true)
                .map_err(|e| crate::error::Error::InvalidArgument(e.to_string()))?;
        }
        Ok(())
    }

    /// Whether the output uses declared column `d` (directly, or through
    /// the fields of its messages).
    fn declared_needed(&self, d: usize) -> bool {
        self.declared_columns
            .get(d)
            .and_then(|c| self.needed.get(*c))
            .copied()
            .unwrap_or(false)
    }

    /// Appends declared column `d`'s value of the current row (`None`:
    /// the row has no cell there); a value that does not decode is noted
    /// in `errors` and reads as NULL.
    fn declared_value(&mut self, d: usize, bytes: Option<&[u8]>, key: &[u8]) {
        self.declared_value_at(d, bytes, key, self.rows - 1);
    }

    /// The values of declared column `d` for output rows `base..base +
    /// len`, cells `start..start + len` of a row: a typed loop per run for
    /// the common numbers, one value at a time otherwise.
    fn declared_run<'c, C: CellsAt<'c> + ?Sized>(
        &mut self,
        d: usize,
        cells: &C,
        (start, len, backwards): (usize, usize, bool),
        key: &[u8],
        base: usize,
    ) {
        let column = self.declared_columns[d];
        if !self.declared_needed(d) {
            return;
        }
        // Output row `base + k` takes cell `at(k)` of the run.
        let at = |k: usize| {
            if backwards {
                start + len - 1 - k
            } else {
                start + k
            }
        };
        let encoding = self.layout.columns[d].encoding;
        let typed = !self.proto_values.contains_key(&column)
            && encoding == Encoding::Binary
            && matches!(
                self.builders[column],
                Some(Appender::Int(_) | Appender::Float(_))
            );
        if !typed {
            for k in 0..len {
                self.declared_value_at(d, Some(cells.value(at(k))), key, base + k);
            }
            return;
        }
        let values = (0..len).map(|k| cells.value(at(k)));
        let bad = match &mut self.builders[column] {
            Some(Appender::Float(b)) => append_run(b, values, f64::from_be_bytes, "float"),
            Some(Appender::Int(b)) => append_run(b, values, i64::from_be_bytes, "integer"),
            _ => Vec::new(),
        };
        self.values_decoded += len;
        for (k, why) in bad {
            let e = self.bad_value(d, &why, cells.value(at(k)), key);
            self.errors.push((base + k, e));
        }
    }

    /// The error for a bad value of declared column `d` in row `key`, and
    /// how to remove it.
    fn bad_value(&self, d: usize, why: &str, bytes: &[u8], key: &[u8]) -> crate::error::Error {
        let def = &self.layout.columns[d];
        let e = def.failure(why, bytes);
        let fix = format!(
            "{e}; UPDATE {} SET {} = NULL WHERE _key = '{}' removes the bad value",
            self.layout.table,
            def.name,
            String::from_utf8_lossy(key).replace('\'', "''")
        );
        decode_error(key, fix)
    }

    /// [`Self::declared_value`] for output row `row` of the batch.
    fn declared_value_at(&mut self, d: usize, bytes: Option<&[u8]>, key: &[u8], row: usize) {
        let column = self.declared_columns[d];
        if !self.declared_needed(d) {
            return;
        }
        if let Some(values) = self.proto_values.get_mut(&column) {
            let value = match (bytes, &self.layout.protos[d]) {
                (Some(bytes), Some(p)) => {
                    self.values_decoded += 1;
                    let all = FieldMask::all();
                    let mask = self.proto_masks.get(&column).unwrap_or(&all);
                    match crate::proto::decode(&p.message, bytes, mask) {
                        Ok(v) => v,
                        Err(_) if p.null_on_error => PValue::Null,
                        Err(e) => {
                            let e = format!("column {}: {e}", self.layout.columns[d].name);
                            self.errors.push((row, decode_error(key, e)));
                            PValue::Null
                        }
                    }
                }
                _ => PValue::Null,
            };
            values.push(value);
            return;
        }
        let Some(appender) = &mut self.builders[column] else {
            return;
        };
        let Some(bytes) = bytes else {
            appender.put_null();
            return;
        };
        self.values_decoded += 1;
        if let Err(why) = appender.put_cell(self.layout.columns[d].encoding, bytes) {
            appender.put_null();
            let e = self.bad_value(d, why, bytes, key);
            self.errors.push((row, e));
        }
    }

    /// The key's segments when a segment column is wanted.
    fn segments_of(&mut self, key: &[u8]) -> Option<Vec<KeyValue>> {
        let schema = self.layout.key.as_ref().filter(|_| self.segments_needed)?;
        if self.predecoded_key == key
            && let Some(segments) = self.predecoded.take()
        {
            return Some(segments);
        }
        let decoded = schema.decode(key);
        if decoded.is_none() {
            self.misfits += 1;
        }
        decoded
    }

    /// Output rows so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    fn put(&mut self, column: usize, value: Option<Datum>) {
        if let Some(b) = &mut self.builders[column] {
            b.put(value);
        }
    }

    /// The key and segment columns of one output row.
    fn start_row(&mut self, key: &str, segments: Option<&[KeyValue]>) {
        self.rows += 1;
        if let Some(c) = self.key_column {
            self.put(c, Some(Datum::Text(key)));
        }
        for s in 0..self.segment_columns.len() {
            let (column, field) = self.segment_columns[s];
            self.put(column, segments.and_then(|v| v.get(field)).map(Datum::key));
        }
    }

    /// The rows so far as a batch of the full view schema; columns not
    /// needed are all-null.
    pub fn finish(&mut self) -> DfResult<RecordBatch> {
        let rows = self.rows;
        let columns = self
            .finish_columns()?
            .into_iter()
            .enumerate()
            .map(|(i, column)| {
                column
                    .unwrap_or_else(|| new_null_array(self.layout.arrow.field(i).data_type(), rows))
            })
            .collect();
        Ok(RecordBatch::try_new(
            Arc::clone(&self.layout.arrow),
            columns,
        )?)
    }

    /// The rows so far as a batch of the view's columns `projection`
    /// (`schema`), with no all-null arrays built for the other columns.
    pub fn finish_projected(
        &mut self,
        projection: &[usize],
        schema: &SchemaRef,
    ) -> DfResult<RecordBatch> {
        let rows = self.rows;
        let built = self.finish_columns()?;
        let columns = projection
            .iter()
            .map(|&i| match built.get(i) {
                Some(Some(column)) => Arc::clone(column),
                _ => new_null_array(self.layout.arrow.field(i).data_type(), rows),
            })
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &options,
        )?)
    }

    /// Per view column, the array of the rows so far, `None` where the
    /// column is not built; the builder starts afresh.
    fn finish_columns(&mut self) -> DfResult<Vec<Option<ArrayRef>>> {
        self.rows = 0;
        let mut columns: Vec<Option<ArrayRef>> = Vec::with_capacity(self.layout.sources.len());
        // A serialized series' messages, whose fields its measures are:
        // each needed field's array is built from the messages alone, with
        // no struct of every field made first.
        let hidden = self.layout.sources.len();
        let mut messages = self.proto_values.get_mut(&hidden).map(std::mem::take);
        for i in 0..self.layout.sources.len() {
            if let ColumnSource::ProtoField(_, f) = self.layout.sources[i] {
                let field = messages
                    .as_mut()
                    .filter(|_| self.needed[i])
                    .map(|messages| {
                        let values: Vec<PValue> = messages
                            .iter_mut()
                            .map(|m| match m {
                                PValue::Message(fields) => {
                                    fields.get_mut(f).map_or(PValue::Null, std::mem::take)
                                }
                                _ => PValue::Null,
                            })
                            .collect();
                        crate::proto::to_array(self.layout.arrow.field(i).data_type(), &values)
                    })
                    .transpose()?;
                columns.push(field);
                continue;
            }
            columns.push(match (&mut self.builders[i], &mut self.maps[i]) {
                (Some(b), _) => Some(b.finish()),
                (None, Some(m)) => Some(Arc::new(m.finish())),
                (None, None) => match self.proto_values.get_mut(&i) {
                    Some(values) => Some(crate::proto::to_array(
                        self.layout.arrow.field(i).data_type(),
                        &std::mem::take(values),
                    )?),
                    None => None,
                },
            });
        }
        Ok(columns)
    }
}
