//! Reads: a [`ReadRequest`] as `ReadRows` (row set, filter chain, limit,
//! direction), the response's cell chunks merged back into rows, and each
//! row passed through the family's GC policy and the whole filter again,
//! as the embedded store's reads do, so the answers are the same.
//!
//! What goes to Bigtable is only what cannot change the answer:
//! - the families read, named unless the read takes every family cellar
//!   knows and has no row limit (cells of a family cellar does not know
//!   are then dropped as they arrive, and a row left empty with them; a
//!   family regex costs the emulator as much as the rest of a scan);
//! - a set of qualifiers, as an anchored byte regex (other qualifier
//!   filters stay client-side: a Rust regex is not RE2);
//! - the time range's start, and its end unless a family counts versions
//!   (a version count needs the newer cells the end would cut off);
//! - cells per column, when the whole time range went;
//! - the row limit, when nothing is filtered client-side.

use std::ops::Bound;
use std::sync::Arc;

use super::{BigtableStore, data, remote};
use crate::error::{Error, Result};
use crate::store::{
    GcPolicy, QualifierFilter, ReadFilter, ReadRequest, Row, RowBuf, RowSource, RowStream, RowView,
    ScanStats, TableDef, TimeRange, align_down, align_up, now_micros, select,
};
use data::read_rows_response::{CellChunk, cell_chunk::RowStatus};
use data::row_filter::{Chain, Filter};
use data::{RowFilter, row_range};

/// Longest qualifier regex sent; a longer set is filtered client-side.
const MAX_QUALIFIER_REGEX: usize = 16 * 1024;
/// Rows that go to the reader as soon as they are gathered; fewer go
/// when no more have arrived, more when one message holds more (a
/// hand-over per row cost a thread wake-up per row).
const ROWS_PER_HANDOVER: usize = 64;
/// Hand-overs in flight between the gRPC stream and the reader.
const HANDOVERS_IN_FLIGHT: usize = 4;

/// A regex matching exactly `bytes`, every byte escaped (RE2, bytes).
fn literal(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\x{b:02x}")).collect()
}

/// Bigtable's row set for cellar's; `None` when it holds no rows (an empty
/// row set means every row to Bigtable).
pub(crate) fn row_set(rows: &crate::store::RowSet) -> Option<data::RowSet> {
    let mut set = data::RowSet::default();
    for range in &rows.ranges {
        if range.encode().is_empty() {
            continue;
        }
        if let (Bound::Included(a), Bound::Included(b)) = (&range.start, &range.end)
            && a == b
        {
            set.row_keys.push(a.clone());
            continue;
        }
        set.row_ranges.push(data::RowRange {
            start_key: match &range.start {
                Bound::Included(k) => Some(row_range::StartKey::StartKeyClosed(k.clone())),
                Bound::Excluded(k) => Some(row_range::StartKey::StartKeyOpen(k.clone())),
                Bound::Unbounded => None,
            },
            end_key: match &range.end {
                Bound::Included(k) => Some(row_range::EndKey::EndKeyClosed(k.clone())),
                Bound::Excluded(k) => Some(row_range::EndKey::EndKeyOpen(k.clone())),
                Bound::Unbounded => None,
            },
        });
    }
    (!set.row_keys.is_empty() || !set.row_ranges.is_empty()).then_some(set)
}

/// The families a read covers: names and GC policies, in read order.
pub(crate) fn families_read(
    def: &TableDef,
    filter: &ReadFilter,
) -> Result<Vec<(Arc<str>, GcPolicy)>> {
    if let Some(names) = &filter.families {
        for name in names {
            def.family(name)?;
        }
    }
    Ok(def
        .families
        .iter()
        .filter(|f| filter.families.as_ref().is_none_or(|n| n.contains(&f.name)))
        .map(|f| (Arc::from(f.name.as_str()), f.gc.clone()))
        .collect())
}

/// What of a read Bigtable does: the filter, and whether it did all of it
/// (then its row limit may go too).
pub(crate) struct Pushed {
    pub filter: Option<RowFilter>,
    /// Bigtable applies the whole filter (GC aside).
    pub whole: bool,
    /// No family read has a GC policy (Bigtable's GC is lazy: garbage may
    /// still be there to read).
    pub no_gc: bool,
}

impl Pushed {
    /// Bigtable's answer is cellar's.
    pub fn exact(&self) -> bool {
        self.whole && self.no_gc
    }
}

/// Whether a read names its families to Bigtable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Families {
    /// Named: only their cells come (a predicate, a row limit, a read of
    /// some of a table's families).
    Named,
    /// Every family cellar knows, not named: cells of any other family
    /// come too and the reader drops them, so Bigtable's answer is not
    /// exact (a row limit cannot go with it).
    Unnamed,
}

/// Bigtable's filter for a set of qualifiers (a regex of their literal
/// bytes), if the set is one and the regex not too long.
pub(crate) fn qualifier_set(qualifiers: &QualifierFilter) -> Option<Filter> {
    let QualifierFilter::Set(set) = qualifiers else {
        return None;
    };
    let alternatives: Vec<String> = set.iter().map(|q| literal(q)).collect();
    let regex = format!("^(?:{})$", alternatives.join("|"));
    (regex.len() <= MAX_QUALIFIER_REGEX && !set.is_empty())
        .then(|| Filter::ColumnQualifierRegexFilter(regex.into_bytes()))
}

/// The filter chain for a read of `families` through `filter`.
pub(crate) fn pushed_filter(
    families: &[(Arc<str>, GcPolicy)],
    filter: &ReadFilter,
    naming: Families,
) -> Pushed {
    let mut chain = Vec::new();
    let no_gc = families.iter().all(|(_, gc)| *gc == GcPolicy::KeepAll);
    let mut exact = naming == Families::Named;
    if naming == Families::Named {
        let names: Vec<String> = families.iter().map(|(n, _)| regex::escape(n)).collect();
        chain.push(Filter::FamilyNameRegexFilter(format!(
            "^(?:{})$",
            names.join("|")
        )));
    }
    match (&filter.qualifiers, qualifier_set(&filter.qualifiers)) {
        (QualifierFilter::All, _) => {}
        (_, Some(regex)) => chain.push(regex),
        _ => exact = false,
    }
    let counts_versions = families.iter().any(|(_, gc)| gc.counts_versions());
    let TimeRange { start, end } = filter.time_range;
    // Bigtable keeps milliseconds: widen to whole ones (the range is
    // checked again as rows arrive).
    let start_ms = align_down(start.max(0), 1000);
    let end_pushed = end
        .filter(|&e| !counts_versions && e > 0)
        .map(|e| align_up(e, 1000));
    let whole_range = end.is_none() || end_pushed.is_some();
    if end.is_some_and(|e| e <= 0) && !counts_versions {
        // Nothing at or after the epoch: block everything.
        chain.push(Filter::BlockAllFilter(true));
    } else if start_ms > 0 || end_pushed.is_some() {
        chain.push(Filter::TimestampRangeFilter(data::TimestampRange {
            start_timestamp_micros: start_ms,
            end_timestamp_micros: end_pushed.unwrap_or(0),
        }));
    }
    if start % 1000 != 0 || end.is_some_and(|e| e % 1000 != 0) || !whole_range {
        exact = false;
    }
    if let Some(n) = filter.cells_per_column {
        if whole_range && n > 0 {
            chain.push(Filter::CellsPerColumnLimitFilter(
                i32::try_from(n).unwrap_or(i32::MAX),
            ));
        } else {
            exact = false;
        }
    }
    let filter = match chain.len() {
        0 => None,
        1 => chain.pop().map(|f| RowFilter { filter: Some(f) }),
        _ => Some(RowFilter {
            filter: Some(Filter::Chain(Chain {
                filters: chain
                    .into_iter()
                    .map(|f| RowFilter { filter: Some(f) })
                    .collect(),
            })),
        }),
    };
    Pushed {
        filter,
        whole: exact,
        no_gc,
    }
}

/// A cell as it arrives: family by its place among those read.
struct RawCell {
    family: u32,
    qualifier: Vec<u8>,
    timestamp: i64,
    value: Vec<u8>,
}

/// A row as it arrives, before GC and the filter.
pub(crate) struct RawRow {
    key: Vec<u8>,
    cells: Vec<RawCell>,
}

/// The qualifier the next chunk's cell has when the chunk names none.
enum Qualifier {
    /// None yet in this row.
    None,
    /// As the last chunk that named one gave it.
    Here(Vec<u8>),
    /// Moved into the row's last cell (the first cell of a qualifier takes
    /// it without a copy; a later one copies it from there).
    InLastCell,
}

/// Merges `ReadRows` cell chunks into rows (the protocol's rules: a chunk
/// names the row, family and qualifier only when they change; a value
/// may span chunks; a row ends at `commit_row` and is dropped whole at
/// `reset_row`).
pub(crate) struct ChunkMerger {
    families: Vec<Arc<str>>,
    row: Option<Vec<u8>>,
    family: Option<u32>,
    qualifier: Qualifier,
    timestamp: i64,
    value: Vec<u8>,
    in_value: bool,
    cells: Vec<RawCell>,
}

impl ChunkMerger {
    pub(crate) fn new(families: Vec<Arc<str>>) -> Self {
        ChunkMerger {
            families,
            row: None,
            family: None,
            qualifier: Qualifier::None,
            timestamp: 0,
            value: Vec::new(),
            in_value: false,
            cells: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.row = None;
        self.family = None;
        self.qualifier = Qualifier::None;
        self.value.clear();
        self.in_value = false;
        self.cells.clear();
    }

    /// Takes one chunk; a row when it completes one.
    pub(crate) fn push(&mut self, chunk: CellChunk) -> Result<Option<RawRow>> {
        let bad = |what: &str| Error::Remote {
            call: "ReadRows".into(),
            code: "DataLoss".into(),
            message: format!("the response broke the chunk protocol: {what}"),
        };
        let CellChunk {
            row_key,
            family_name,
            qualifier,
            timestamp_micros,
            value,
            value_size,
            row_status,
            ..
        } = chunk;
        if let Some(RowStatus::ResetRow(true)) = row_status {
            self.reset();
            return Ok(None);
        }
        if !row_key.is_empty() {
            if self.in_value {
                return Err(bad("a new row began inside a split value"));
            }
            if self.row.as_ref().is_some_and(|r| *r != row_key) {
                return Err(bad("a new row began before the last was committed"));
            }
            if self.row.is_none() {
                self.row = Some(row_key);
            }
        } else if self.row.is_none() {
            return Err(bad("a chunk without a row key began a row"));
        }
        if let Some(name) = family_name {
            if qualifier.is_none() {
                return Err(bad("a family without a qualifier"));
            }
            self.family = self
                .families
                .iter()
                .position(|f| **f == *name)
                .and_then(|i| u32::try_from(i).ok());
        }
        if let Some(qualifier) = qualifier {
            self.qualifier = Qualifier::Here(qualifier);
        }
        if !self.in_value {
            self.timestamp = timestamp_micros;
        }
        // A value in one chunk (the usual case) is taken as it came.
        let split = value_size > 0;
        let value = if self.in_value || split {
            self.value.extend_from_slice(&value);
            (!split).then(|| std::mem::take(&mut self.value))
        } else {
            Some(value)
        };
        self.in_value = split;
        // A cell of a family not read (never asked for) is left out.
        if let (Some(value), Some(family)) = (value, self.family) {
            let qualifier = match std::mem::replace(&mut self.qualifier, Qualifier::InLastCell) {
                Qualifier::Here(q) => Some(q),
                Qualifier::InLastCell => self.cells.last().map(|c| c.qualifier.clone()),
                Qualifier::None => None,
            };
            match qualifier {
                Some(qualifier) => self.cells.push(RawCell {
                    family,
                    qualifier,
                    timestamp: self.timestamp,
                    value,
                }),
                None => self.qualifier = Qualifier::None,
            }
        }
        if let Some(RowStatus::CommitRow(true)) = row_status {
            if self.in_value {
                return Err(bad("a row was committed inside a split value"));
            }
            let key = self.row.take().unwrap_or_default();
            let cells = std::mem::take(&mut self.cells);
            self.reset();
            return Ok(Some(RawRow { key, cells }));
        }
        Ok(None)
    }
}

/// Rows of one `ReadRows` call, GC and the filter applied as they come.
struct BigtableRows {
    rows: tokio::sync::mpsc::Receiver<Result<Vec<RawRow>>>,
    /// The rows of the last hand-over not read yet.
    arrived: std::vec::IntoIter<RawRow>,
    task: tokio::task::JoinHandle<()>,
    families: Vec<(Arc<str>, GcPolicy)>,
    filter: ReadFilter,
    reverse: bool,
    remaining: Option<usize>,
    now: i64,
    /// The last row read (its key too: the next is checked against it;
    /// Bigtable row keys are never empty).
    buf: RowBuf,
    stats: ScanStats,
    failed: bool,
}

impl Drop for BigtableRows {
    fn drop(&mut self) {
        // A reader that stops early (a LIMIT) ends the call.
        self.task.abort();
    }
}

impl BigtableRows {
    /// Puts `raw` through GC and the filter into `buf`; whether any cell
    /// is left.
    fn fill(&mut self, mut raw: RawRow) -> Result<bool> {
        self.stats.cells_scanned += raw.cells.len() as u64;
        raw.cells.sort_by(|a, b| {
            (a.family, &a.qualifier)
                .cmp(&(b.family, &b.qualifier))
                .then(b.timestamp.cmp(&a.timestamp))
        });
        self.buf.clear();
        let mut from = 0;
        for (i, cell) in raw.cells.iter().enumerate() {
            let new_family = i == 0 || raw.cells[i - 1].family != cell.family;
            if new_family && i > 0 {
                let family = raw.cells[i - 1].family as usize;
                select(
                    &self.families[family].1,
                    &self.filter,
                    self.now,
                    &mut self.buf,
                    from,
                );
                from = self.buf.cells.len();
            }
            let first = new_family || raw.cells[i - 1].qualifier != cell.qualifier;
            self.buf.push_copied(
                cell.family,
                &cell.qualifier,
                cell.timestamp,
                &cell.value,
                first,
            )?;
        }
        if let Some(last) = raw.cells.last() {
            let family = last.family as usize;
            select(
                &self.families[family].1,
                &self.filter,
                self.now,
                &mut self.buf,
                from,
            );
        }
        self.buf.key = raw.key;
        Ok(!self.buf.cells.is_empty())
    }

    fn advance(&mut self) -> Result<bool> {
        loop {
            if self.remaining == Some(0) {
                return Ok(false);
            }
            // Unconstrained, as in `wait`: a tokio worker's spent budget
            // would otherwise park this thread for good.
            let raw = match self.arrived.next() {
                Some(raw) => raw,
                None => {
                    let recv = tokio::task::coop::unconstrained(self.rows.recv());
                    let Some(rows) = futures::executor::block_on(recv) else {
                        return Ok(false);
                    };
                    self.arrived = rows?.into_iter();
                    continue;
                }
            };
            if !self.buf.key.is_empty() {
                let last = &self.buf.key;
                let in_order = if self.reverse {
                    raw.key < *last
                } else {
                    raw.key > *last
                };
                if !in_order {
                    return Err(Error::Remote {
                        call: "ReadRows".into(),
                        code: "Unimplemented".into(),
                        message: format!(
                            "rows came out of {} order; {}",
                            if self.reverse {
                                "descending"
                            } else {
                                "ascending"
                            },
                            if self.reverse {
                                "this Bigtable endpoint (the emulator) does not do reverse scans"
                            } else {
                                "the response is inconsistent"
                            }
                        ),
                    });
                }
            }
            if !self.fill(raw)? {
                continue;
            }
            if let Some(n) = self.remaining.as_mut() {
                *n -= 1;
            }
            self.stats.rows_returned += 1;
            self.stats.cells_returned += self.buf.cells.len() as u64;
            return Ok(true);
        }
    }
}

impl RowSource for BigtableRows {
    fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        if self.failed {
            return Ok(None);
        }
        match self.advance() {
            Ok(true) => Ok(Some(self.buf.view())),
            Ok(false) => Ok(None),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    fn stats(&self) -> ScanStats {
        self.stats
    }

    fn family_names(&self) -> Vec<Arc<str>> {
        self.families.iter().map(|(n, _)| n.clone()).collect()
    }
}

/// Says the client reads reverse scans (the `bigtable-features` header,
/// as Google's clients send it; without it a reversed read is refused).
fn advertise_reverse_scans<T>(mut call: tonic::Request<T>) -> tonic::Request<T> {
    use base64::Engine as _;
    use prost::Message as _;
    let flags = data::FeatureFlags {
        reverse_scans: true,
        ..Default::default()
    };
    let value = base64::engine::general_purpose::URL_SAFE.encode(flags.encode_to_vec());
    if let Ok(value) = value.parse() {
        call.metadata_mut().insert("bigtable-features", value);
    }
    call
}

/// Starts a read of `table` (defined by `def`) and streams its rows.
pub(crate) fn stream(
    store: &BigtableStore,
    def: &TableDef,
    request: ReadRequest,
) -> Result<RowStream> {
    let families = families_read(def, &request.filter)?;
    let (tx, rx) = tokio::sync::mpsc::channel(HANDOVERS_IN_FLIGHT);
    let rows = row_set(&request.rows);
    let runtime = store
        .runtime
        .as_ref()
        .ok_or_else(|| Error::Internal("the Bigtable store is closing".into()))?;
    let task = if families.is_empty() || rows.is_none() || request.limit == Some(0) {
        // Nothing to read: Bigtable would read every row for an empty set.
        drop(tx);
        runtime.spawn(async {})
    } else {
        // A scan of every family (no row limit to push) leaves the
        // families unnamed: the emulator's family regex doubles its work.
        let naming = if request.limit.is_none() && families.len() == def.families.len() {
            Families::Unnamed
        } else {
            Families::Named
        };
        let pushed = pushed_filter(&families, &request.filter, naming);
        let rows_limit = match (pushed.exact(), request.limit) {
            (true, Some(n)) => i64::try_from(n).unwrap_or(i64::MAX),
            _ => 0,
        };
        let call = tonic::Request::new(data::ReadRowsRequest {
            table_name: store.table_path(&def.name),
            rows,
            filter: pushed.filter,
            rows_limit,
            reversed: request.reverse,
            ..Default::default()
        });
        let call = if request.reverse {
            advertise_reverse_scans(call)
        } else {
            call
        };
        let mut client = store.data.clone();
        let names: Vec<Arc<str>> = families.iter().map(|(n, _)| n.clone()).collect();
        let table = def.name.clone();
        runtime.spawn(async move {
            let what = || format!("ReadRows on table {table}");
            let mut stream = match client.read_rows(call).await {
                Ok(response) => response.into_inner(),
                Err(status) => {
                    let _ = tx.send(Err(remote(what(), &status))).await;
                    return;
                }
            };
            let mut merger = ChunkMerger::new(names);
            // Rows go to the reader in hand-overs of those that arrived
            // together: a message that is already here is taken at once,
            // and the rows gathered go before waiting for the next.
            let mut rows = Vec::new();
            loop {
                let next = match futures::FutureExt::now_or_never(stream.message()) {
                    Some(next) => next,
                    None => {
                        if !rows.is_empty() && tx.send(Ok(std::mem::take(&mut rows))).await.is_err()
                        {
                            return;
                        }
                        stream.message().await
                    }
                };
                // `Some`: the call ends here, with an error or without.
                let end: Option<Option<Error>> = match next {
                    Ok(Some(response)) => {
                        response
                            .chunks
                            .into_iter()
                            .find_map(|chunk| match merger.push(chunk) {
                                Ok(row) => {
                                    rows.extend(row);
                                    None
                                }
                                Err(e) => Some(Some(e)),
                            })
                    }
                    Ok(None) => Some(None),
                    Err(status) => Some(Some(remote(what(), &status))),
                };
                if (rows.len() >= ROWS_PER_HANDOVER || end.is_some())
                    && !rows.is_empty()
                    && tx.send(Ok(std::mem::take(&mut rows))).await.is_err()
                {
                    return;
                }
                if let Some(error) = end {
                    if let Some(error) = error {
                        let _ = tx.send(Err(error)).await;
                    }
                    return;
                }
            }
        })
    };
    Ok(RowStream::new(Box::new(BigtableRows {
        rows: rx,
        arrived: Vec::new().into_iter(),
        task,
        families,
        filter: request.filter,
        reverse: request.reverse,
        remaining: request.limit,
        now: now_micros(),
        buf: RowBuf::default(),
        stats: ScanStats::default(),
        failed: false,
    })))
}

/// The cells of rows `keys` of `table` as Bigtable holds them, through
/// `filter` only: no GC policy applied (a write merges into the cell that
/// is there, collected or not, as Bigtable's and the embedded store's
/// aggregates do). Cells of families other than `families` are left out.
pub(crate) fn raw_rows(
    store: &BigtableStore,
    table: &str,
    families: Vec<Arc<str>>,
    keys: Vec<Vec<u8>>,
    filter: RowFilter,
) -> Result<Vec<Row>> {
    let mut client = store.data.clone();
    let request = data::ReadRowsRequest {
        table_name: store.table_path(table),
        rows: Some(data::RowSet {
            row_keys: keys,
            row_ranges: Vec::new(),
        }),
        filter: Some(filter),
        ..Default::default()
    };
    let call = format!("ReadRows on table {table}");
    store.run(async move {
        let mut stream = client
            .read_rows(request)
            .await
            .map_err(|s| remote(call.clone(), &s))?
            .into_inner();
        let mut merger = ChunkMerger::new(families.clone());
        let mut rows = Vec::new();
        while let Some(response) = stream
            .message()
            .await
            .map_err(|s| remote(call.clone(), &s))?
        {
            for chunk in response.chunks {
                if let Some(raw) = merger.push(chunk)? {
                    rows.push(Row {
                        key: raw.key,
                        cells: raw
                            .cells
                            .into_iter()
                            .map(|c| crate::store::Cell {
                                family: families[c.family as usize].clone(),
                                qualifier: c.qualifier,
                                timestamp: c.timestamp,
                                value: c.value,
                            })
                            .collect(),
                    });
                }
            }
        }
        Ok(rows)
    })
}

/// Every row of a read, owned.
pub(crate) fn collect(
    store: &BigtableStore,
    def: &TableDef,
    request: ReadRequest,
) -> Result<Vec<Row>> {
    stream(store, def, request)?.collect()
}

/// `SampleRowKeys` of a table: (end key of a piece, bytes before it).
pub(crate) fn sample_row_keys(store: &BigtableStore, table: &str) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut client = store.data.clone();
    let request = data::SampleRowKeysRequest {
        table_name: store.table_path(table),
        ..Default::default()
    };
    let call = format!("SampleRowKeys on table {table}");
    store.run(async move {
        let mut stream = client
            .sample_row_keys(request)
            .await
            .map_err(|s| remote(call.clone(), &s))?
            .into_inner();
        let mut samples = Vec::new();
        while let Some(sample) = stream
            .message()
            .await
            .map_err(|s| remote(call.clone(), &s))?
        {
            samples.push((
                sample.row_key,
                u64::try_from(sample.offset_bytes).unwrap_or(0),
            ));
        }
        if samples.last().is_none_or(|(key, _)| !key.is_empty()) {
            let bytes = samples.last().map_or(0, |(_, b)| *b);
            samples.push((Vec::new(), bytes));
        }
        Ok(samples)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(
        key: &str,
        family: Option<&str>,
        qualifier: Option<&str>,
        ts: i64,
        value: &str,
    ) -> CellChunk {
        CellChunk {
            row_key: key.as_bytes().to_vec(),
            family_name: family.map(str::to_string),
            qualifier: qualifier.map(|q| q.as_bytes().to_vec()),
            timestamp_micros: ts,
            value: value.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn chunks_merge_into_rows_with_split_values_and_resets() {
        let mut m = ChunkMerger::new(vec![Arc::from("a"), Arc::from("b")]);
        assert!(
            m.push(chunk("r1", Some("a"), Some("x"), 5, "v1"))
                .unwrap()
                .is_none()
        );
        // A reset drops what came of the row so far.
        let mut reset = chunk("", None, None, 0, "");
        reset.row_status = Some(RowStatus::ResetRow(true));
        assert!(m.push(reset).unwrap().is_none());
        assert!(
            m.push(chunk("r1", Some("a"), Some("x"), 5, "v1"))
                .unwrap()
                .is_none()
        );
        // A value split over two chunks.
        let mut split = chunk("", None, Some("y"), 7, "he");
        split.value_size = 5;
        assert!(m.push(split).unwrap().is_none());
        let mut rest = chunk("", None, None, 0, "llo");
        rest.row_status = Some(RowStatus::CommitRow(true));
        let row = m.push(rest).unwrap().unwrap();
        assert_eq!(row.key, b"r1");
        let cells: Vec<(u32, &[u8], i64, &[u8])> = row
            .cells
            .iter()
            .map(|c| {
                (
                    c.family,
                    c.qualifier.as_slice(),
                    c.timestamp,
                    c.value.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            cells,
            vec![
                (0, &b"x"[..], 5, &b"v1"[..]),
                (0, &b"y"[..], 7, &b"hello"[..])
            ]
        );
        // A chunk that starts a row without a key is refused.
        assert!(m.push(chunk("", Some("b"), Some("x"), 1, "v")).is_err());
    }

    /// A row's cells as (family, qualifier, timestamp, value).
    fn cells_of(row: &RawRow) -> Vec<(u32, String, i64, String)> {
        row.cells
            .iter()
            .map(|c| {
                (
                    c.family,
                    String::from_utf8_lossy(&c.qualifier).into_owned(),
                    c.timestamp,
                    String::from_utf8_lossy(&c.value).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn versions_keep_their_qualifier_and_other_families_drop_out() {
        let mut m = ChunkMerger::new(vec![Arc::from("a")]);
        // Two versions of x (the second names no qualifier), a family not
        // read with two versions of its own, then y, and x's qualifier is
        // not carried into the next row.
        for c in [
            chunk("r1", Some("a"), Some("x"), 9, "x9"),
            chunk("r1", None, None, 8, "x8"),
            chunk("r1", Some("other"), Some("z"), 7, "z7"),
            chunk("", None, None, 6, "z6"),
            chunk("", Some("a"), Some("y"), 5, "y5"),
            chunk("", None, None, 4, "y4"),
        ] {
            assert!(m.push(c).unwrap().is_none());
        }
        let mut last = chunk("", None, Some("w"), 3, "w3");
        last.row_status = Some(RowStatus::CommitRow(true));
        let row = m.push(last).unwrap().unwrap();
        let cell = |q: &str, t: i64, v: &str| (0, q.to_string(), t, v.to_string());
        assert_eq!(
            cells_of(&row),
            vec![
                cell("x", 9, "x9"),
                cell("x", 8, "x8"),
                cell("y", 5, "y5"),
                cell("y", 4, "y4"),
                cell("w", 3, "w3"),
            ]
        );
        // A row made only of a family not read comes out empty.
        let mut only = chunk("r2", Some("other"), Some("z"), 1, "z1");
        only.row_status = Some(RowStatus::CommitRow(true));
        assert!(m.push(only).unwrap().unwrap().cells.is_empty());
        // The next row names its family and qualifier anew.
        let mut next = chunk("r3", None, None, 1, "v");
        next.row_status = Some(RowStatus::CommitRow(true));
        assert!(m.push(next).unwrap().unwrap().cells.is_empty());
    }

    #[test]
    fn empty_row_sets_are_never_sent_and_keys_go_as_keys() {
        assert!(row_set(&crate::store::RowSet::default()).is_none());
        let set = row_set(&crate::store::RowSet::keys([b"k".to_vec()])).unwrap();
        assert_eq!(set.row_keys, vec![b"k".to_vec()]);
        assert!(set.row_ranges.is_empty());
    }

    #[test]
    fn families_go_unnamed_only_when_asked_and_then_nothing_is_exact() {
        let families: Vec<(Arc<str>, GcPolicy)> = vec![(Arc::from("m"), GcPolicy::KeepAll)];
        let named = pushed_filter(&families, &ReadFilter::all(), Families::Named);
        assert!(named.exact());
        assert!(format!("{:?}", named.filter).contains("FamilyNameRegexFilter(\"^(?:m)$\")"));
        let unnamed = pushed_filter(&families, &ReadFilter::all(), Families::Unnamed);
        assert!(unnamed.filter.is_none(), "{:?}", unnamed.filter);
        assert!(!unnamed.exact());
        let latest = ReadFilter::all().cells_per_column(1);
        let text = format!(
            "{:?}",
            pushed_filter(&families, &latest, Families::Unnamed).filter
        );
        assert!(text.contains("CellsPerColumnLimitFilter(1)"), "{text}");
        assert!(!text.contains("FamilyNameRegexFilter"), "{text}");
    }

    #[test]
    fn version_counting_families_keep_the_time_range_end_client_side() {
        let keep: Vec<(Arc<str>, GcPolicy)> = vec![(Arc::from("f"), GcPolicy::KeepAll)];
        let versions: Vec<(Arc<str>, GcPolicy)> = vec![(Arc::from("f"), GcPolicy::MaxVersions(2))];
        let filter = ReadFilter::all()
            .time_range(TimeRange::new(1000, 5000))
            .cells_per_column(1);
        let whole = pushed_filter(&keep, &filter, Families::Named);
        assert!(whole.exact());
        let part = pushed_filter(&versions, &filter, Families::Named);
        assert!(!part.whole && !part.exact());
        let text = format!("{:?}", part.filter);
        assert!(text.contains("end_timestamp_micros: 0"), "{text}");
        assert!(!text.contains("CellsPerColumnLimitFilter"), "{text}");
    }
}
