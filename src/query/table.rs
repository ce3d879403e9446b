//! `CellarTable`: a table as SQL sees it, in one of its views: wide (one
//! row per row key), versions (one row per row and timestamp) or cells.
//! The provider decides (which scan, which writer, which filters it
//! answers) and hands the parts of query/ what they need.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use super::plan::scan_spec;
use super::scan::KeyScanExec;
use super::series::columns::ColumnEvents;
use super::series::physical_filters;
use super::view::{Layout, SeriesView, View};
use super::write::update::{RowUpdate, plan_assignments};
use super::write::{Action, EventCells, TableSink, WriteOptions};
use crate::store::Store;

/// The DataFusion table provider of one cellar table in one view.
#[derive(Debug)]
pub struct CellarTable {
    store: Store,
    layout: Arc<Layout>,
}

impl CellarTable {
    /// The wide view of `table` as it is defined now.
    pub fn new(store: Store, table: &str) -> crate::error::Result<CellarTable> {
        Self::with_view(store, table, View::Wide { as_of: None })
    }

    /// Writes batches from outside (a file, a Flight ingest), their
    /// columns matched to the table's by name, through the table's sink;
    /// the rows written.
    pub(crate) async fn load(
        &self,
        data: datafusion::physical_plan::SendableRecordBatchStream,
        options: &WriteOptions,
    ) -> DfResult<u64> {
        let sink = TableSink::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            Action::Insert(options.clone()),
            data.schema(),
        );
        sink.insert(data, options).await
    }

    /// The table's shape in its view.
    #[cfg(feature = "ballista")]
    pub(crate) fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// The store it reads.
    #[cfg(feature = "ballista")]
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// A table in a view built already.
    pub(crate) fn from_layout(store: Store, layout: Layout) -> CellarTable {
        CellarTable {
            store,
            layout: Arc::new(layout),
        }
    }

    /// The series kept a column per event this view shows, if it is one.
    fn column_events(&self) -> Option<ColumnEvents<'_>> {
        let series = self.layout.series.as_ref()?;
        series.column_per_event().then(|| {
            ColumnEvents::new(&self.store, &self.layout, series, |store, layout| {
                Arc::new(CellarTable::from_layout(store, layout))
            })
        })
    }

    /// `table` in `view`.
    pub fn with_view(store: Store, table: &str, view: View) -> crate::error::Result<CellarTable> {
        let pinned = store.pin(table)?;
        let mut layout = Layout::new(&store, pinned.def().clone(), view)?;
        if layout.series.is_some() {
            layout.pinned = Some(pinned);
        }
        Ok(CellarTable {
            store,
            layout: Arc::new(layout),
        })
    }
}

impl CellarTable {
    /// The scan `scan()` would give for `filters` (the filters of a plan
    /// over `leaf` with other values), in `leaf`'s place in that plan,
    /// when it declares what `leaf` does (see [`KeyScanExec::rebound`]).
    pub(crate) fn rebind(
        &self,
        state: &dyn Session,
        leaf: &KeyScanExec,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Option<KeyScanExec> {
        if self.column_events().is_some() {
            return None;
        }
        let spec = self.scan_spec(state, projection, filters, limit).ok()?;
        leaf.rebound(spec)
    }

    /// What a scan of this table (not a column-per-event series') reads
    /// for `filters`: see [`scan_spec`].
    fn scan_spec(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<super::plan::ScanSpec> {
        scan_spec(
            &self.store,
            &self.layout,
            state,
            projection.cloned(),
            filters,
            limit,
            false,
        )
    }

    /// A scan of the `_key` of the rows matching every filter, each
    /// re-checked in the scan: what DELETE and UPDATE act on.
    fn key_scan(&self, state: &dyn Session, filters: &[Expr]) -> DfResult<Arc<KeyScanExec>> {
        let key = self.layout.arrow.index_of("_key")?;
        let spec = scan_spec(
            &self.store,
            &self.layout,
            state,
            Some(vec![key]),
            filters,
            None,
            true,
        )?;
        Ok(Arc::new(KeyScanExec::new(spec)))
    }

    /// DELETE of a series' events: the events matching every filter,
    /// found in the table's versions view, lose their cells.
    async fn delete_events(
        &self,
        series: &SeriesView,
        state: &dyn Session,
        filters: &[Expr],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(events) = self.column_events() {
            let cells = events.cells_of_events(state, filters).await?;
            let sink = TableSink::new(
                self.store.clone(),
                Arc::clone(&self.layout),
                Action::DeleteEvents(EventCells::Qualified(series.def.family.clone())),
                cells.schema(),
            );
            return Ok(Arc::new(DataSinkExec::new(cells, Arc::new(sink), None)));
        }
        let physical = Arc::new(Layout::new(
            &self.store,
            self.layout.def.clone(),
            View::Versions { latest: None },
        )?);
        let filters = physical_filters(series, filters)?;
        let projection = vec![
            physical.arrow.index_of("_key")?,
            physical.arrow.index_of("_timestamp")?,
        ];
        let spec = scan_spec(
            &self.store,
            &physical,
            state,
            Some(projection),
            &filters,
            None,
            true,
        )?;
        let scan: Arc<dyn ExecutionPlan> = Arc::new(KeyScanExec::new(spec));
        let columns = self
            .layout
            .columns
            .iter()
            .map(|c| (c.family.clone(), c.qualifier.clone().into_bytes()))
            .collect();
        let sink = TableSink::new(
            self.store.clone(),
            physical,
            Action::DeleteEvents(EventCells::Columns(columns)),
            scan.schema(),
        );
        Ok(Arc::new(DataSinkExec::new(scan, Arc::new(sink), None)))
    }

    /// The plan writing `input` through this table's sink.
    fn sink(
        &self,
        action: Action,
        input: Arc<dyn ExecutionPlan>,
        order: Option<datafusion::physical_expr::LexRequirement>,
    ) -> Arc<dyn ExecutionPlan> {
        let sink = TableSink::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            action,
            input.schema(),
        );
        Arc::new(DataSinkExec::new(input, Arc::new(sink), order))
    }

    fn writable(&self, what: &str) -> DfResult<()> {
        if self.layout.series.is_some() {
            return Ok(());
        }
        match self.layout.view {
            View::Wide { as_of: None } => Ok(()),
            _ => Err(crate::error::Error::InvalidArgument(format!(
                "{what} needs the table {} itself; versions, cells and as-of views are read-only",
                self.layout.table
            ))
            .into()),
        }
    }
}

#[async_trait]
impl TableProvider for CellarTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.layout.arrow)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Filters over key columns (and timestamps, families, qualifiers)
        // narrow the read and are re-checked row by row inside the scan:
        // Exact. Others DataFusion applies. Events kept a column per event
        // are gathered from several rows: filters on the series key and
        // time narrow the gather, which checks them on the events; those
        // on measures DataFusion checks.
        if let Some(events) = self.column_events() {
            return Ok(filters
                .iter()
                .map(|f| {
                    if events.per_cell(f) {
                        TableProviderFilterPushDown::Exact
                    } else {
                        TableProviderFilterPushDown::Inexact
                    }
                })
                .collect());
        }
        Ok(filters
            .iter()
            .map(|f| {
                if self.layout.answers(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(events) = self.column_events() {
            return events.scan(state, projection, filters, limit).await;
        }
        let spec = self.scan_spec(state, projection, filters, limit)?;
        Ok(Arc::new(KeyScanExec::new(spec)))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("DELETE FROM")?;
        if let Some(series) = &self.layout.series {
            return self.delete_events(series, state, &filters).await;
        }
        let scan = self.key_scan(state, &filters)?;
        Ok(self.sink(Action::Delete, scan, None))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("UPDATE")?;
        if let Some(series) = &self.layout.series {
            return Err(crate::error::Error::InvalidArgument(format!(
                "UPDATE of series {}: INSERT the events again instead; an event written at a stored \
                 ({}, {}) replaces the measures it gives",
                self.layout.table,
                series.def.key.join(", "),
                series.def.time
            )).into());
        }
        let layout = &self.layout;
        // The columns read afresh under each row's lock: those the
        // assignments and the WHERE clause use, and the key.
        let key = layout.arrow.index_of("_key")?;
        let mut needed = vec![false; layout.sources.len()];
        needed[key] = true;
        for e in assignments.iter().map(|(_, e)| e).chain(&filters) {
            for c in e.column_refs() {
                if let Ok(i) = layout.arrow.index_of(&c.name) {
                    needed[i] = true;
                }
            }
        }
        // An assignment to an aggregate family replaces the accumulator it
        // reads: the newest cell of the column, whose timestamp it keeps.
        for (name, _) in &assignments {
            if let Ok(i) = layout.arrow.index_of(name)
                && layout.is_aggregate(&layout.sources[i])
            {
                needed[i] = true;
            }
        }
        let filter = match filters.iter().cloned().reduce(Expr::and) {
            None => None,
            Some(e) => {
                let df_schema = DFSchema::try_from(layout.arrow.as_ref().clone())?;
                Some(state.create_physical_expr(e, &df_schema)?)
            }
        };
        let assignments = plan_assignments(layout, state, assignments)?;
        // The scan selects candidate keys; each is checked again when locked.
        let scan = self.key_scan(state, &filters)?;
        let update = RowUpdate::new(
            self.store.clone(),
            Arc::clone(layout),
            assignments,
            filter,
            needed,
        );
        Ok(self.sink(Action::Update(Arc::new(update)), scan, None))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("INSERT INTO")?;
        if insert_op != InsertOp::Append {
            return Err(crate::error::Error::InvalidArgument(format!(
                "{insert_op} is not supported; cellar tables take INSERT INTO (writes new cells)"
            ))
            .into());
        }
        // The order of the SELECT (its ORDER BY) is kept to the writer: a
        // key repeated in the input takes its last row's values.
        let order = input.output_ordering().cloned().map(Into::into);
        Ok(self.sink(Action::Insert(WriteOptions::default()), input, order))
    }
}
