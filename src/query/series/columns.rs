//! A series kept a column per event, read back as events.
//!
//! Its table has a row per (series, measure, bucket); each event adds a
//! column to the row of every measure it gives, the value its qualifier
//! (as text), the cell stamped with the event's time and empty. An event
//! is therefore spread over one row per measure, and reading events means
//! gathering them again: the scan reads the table's cells view (series
//! key and time predicates become its key ranges, bucket ranges and cell
//! time range, as in every layout) and groups its cells by (series key,
//! time), each measure the value of the one cell in that measure's row.
//! Should two values share a time in one row (a tool other than cellar
//! wrote one), the greatest is read.

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::{Column, JoinType, Result as DfResult};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit, when};
use datafusion::physical_plan::ExecutionPlan;

use datafusion::common::DFSchema;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::GlobalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;

use super::gather::GatherPlan;
use super::gather_exec::GatherExec;
use super::physical_filters;
use crate::query::plan::ScanSpec;
use crate::query::plan::scan_spec_answering;
use crate::query::scan::KeyScanExec;
use crate::query::split::split_ranges;
use crate::query::view::{Layout, SeriesView, View, value_type};
use crate::store::{RowRange, Store};

/// The cells view's columns a scan of events reads.
const TIMESTAMP: &str = "_timestamp";
const QUALIFIER: &str = "qualifier";

/// The provider of a table in a view already built (the table's own,
/// handed over by it: this file reads through it without knowing it).
pub(crate) type Provider = fn(Store, Layout) -> Arc<dyn TableProvider>;

/// Reads a column-per-event series' events.
pub(crate) struct ColumnEvents<'a> {
    store: &'a Store,
    layout: &'a Arc<Layout>,
    series: &'a SeriesView,
    provider: Provider,
}

fn unqualified(name: &str) -> Expr {
    col(Column::new_unqualified(name))
}

impl<'a> ColumnEvents<'a> {
    pub fn new(
        store: &'a Store,
        layout: &'a Arc<Layout>,
        series: &'a SeriesView,
        provider: Provider,
    ) -> Self {
        ColumnEvents {
            store,
            layout,
            series,
            provider,
        }
    }

    /// Whether the cells of an event decide `filter` alone: it uses only
    /// the series key and time, which every cell of the event carries.
    pub fn per_cell(&self, filter: &Expr) -> bool {
        let def = &self.series.def;
        let refs = filter.column_refs();
        !refs.is_empty()
            && !filter.is_volatile()
            && refs
                .iter()
                .all(|c| c.name == def.time || def.key.contains(&c.name))
    }

    /// The cells of the events `filters` (each deciding per cell) select:
    /// the series table's cells view, its time as `_timestamp`, narrowed
    /// to the buckets the time range falls in.
    fn cells(&self, filters: &[&Expr]) -> DfResult<LogicalPlanBuilder> {
        let def = &self.series.def;
        let cells = self.cells_layout()?;
        let source = provider_as_source((self.provider)(self.store.clone(), cells));
        let mut plan = LogicalPlanBuilder::scan(self.layout.table.as_str(), source, None)?;
        // Time as `_timestamp`, and the buckets it falls in.
        let filters: Vec<Expr> = filters.iter().map(|f| (*f).clone()).collect();
        let mut on_cells = physical_filters(self.series, &filters)?;
        // The measures' rows only (another tool's rows are no events);
        // named, the metric segment lets a series' key and time become a
        // key range per measure, each narrowed to the buckets in time.
        if let Some(metric) = &def.metric {
            let names = def.measures.iter().map(|m| lit(m.as_str())).collect();
            on_cells.push(unqualified(metric).in_list(names, false));
        }
        if let Some(all) = on_cells.into_iter().reduce(Expr::and) {
            plan = plan.filter(all)?;
        }
        Ok(plan)
    }

    /// The events `filters` select, in the series' columns: cells grouped
    /// by (series key, time), each measure read from its row's qualifier.
    fn events(&self, filters: &[Expr]) -> DfResult<LogicalPlanBuilder> {
        let def = &self.series.def;
        let (per_cell, rest): (Vec<&Expr>, Vec<&Expr>) =
            filters.iter().partition(|f| self.per_cell(f));
        let metric = def
            .metric
            .as_deref()
            .ok_or_else(|| crate::error::Error::Internal("no metric segment".into()))?;
        let mut group: Vec<Expr> = def.key.iter().map(|k| unqualified(k)).collect();
        group.push(unqualified(TIMESTAMP));
        let measures = def
            .measures
            .iter()
            .zip(&def.measure_types)
            .map(|(m, t)| {
                // Cast outside the CASE, so only this measure's qualifiers
                // are parsed as its type.
                let text = when(
                    unqualified(metric).eq(lit(m.as_str())),
                    unqualified(QUALIFIER),
                )
                .end()?;
                Ok(max(cast(text, value_type(*t))).alias(m))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let mut columns: Vec<Expr> = def.key.iter().map(|k| unqualified(k)).collect();
        columns.push(unqualified(TIMESTAMP).alias(&def.time));
        columns.extend(def.measures.iter().map(|m| unqualified(m)));
        let mut plan = self
            .cells(&per_cell)?
            .aggregate(group, measures)?
            .project(columns)?;
        if let Some(all) = rest.into_iter().cloned().reduce(Expr::and) {
            plan = plan.filter(all)?;
        }
        Ok(plan)
    }

    /// The scan of the events `filters` select: `projection` of the
    /// series' columns, at most `limit` rows. A [`GatherExec`] reads them;
    /// filters on the series key and time narrow its reads, and those
    /// its ranges do not answer exactly it checks on the events (the
    /// rest DataFusion checks: they are pushed down inexactly).
    pub async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let per_cell: Vec<Expr> = filters
            .iter()
            .filter(|f| self.per_cell(f))
            .cloned()
            .collect();
        let cells = Arc::new(self.cells_layout()?);
        let on_cells = physical_filters(self.series, &per_cell)?;
        // Series are searched for in the ranges of the series key; each
        // measure's read of a series is narrowed to the buckets and cell
        // times of the time range.
        // (Planned as for a LIMIT, so not yet cut into pieces.)
        let (search, answered) =
            scan_spec_answering(self.store, &cells, state, None, &on_cells, Some(1), false)?;
        let one_series = self.pins_series(&search);
        let time = search.time;
        // A filter is answered by the reads when the ranges answer it
        // (every row of a series found in them is of a matching series),
        // or it is a time bound the cell time range holds exactly.
        let mut checks = Vec::new();
        for (f, on_cell) in per_cell.iter().zip(&on_cells) {
            let by_ranges = !answered.rechecked.contains(on_cell);
            let by_time = crate::query::pushdown::time_exact(on_cell, "_timestamp")
                && answered.time.contains(on_cell);
            if !by_ranges && !by_time {
                checks.push(f.clone());
            }
        }
        // One series is one ordered read; many are cut into partitions as
        // a scan of their ranges would be.
        let (partitions, few_rows) = if one_series {
            (vec![search.ranges.clone().unwrap_or_default()], None)
        } else {
            let split = split_ranges(
                self.store,
                &cells.table,
                &search.families,
                search.ranges.as_ref(),
                state.config().target_partitions(),
            );
            let mut whole = search.clone();
            whole.limit = None;
            whole.splits = split.pieces;
            let partitions = KeyScanExec::new(whole).partition_ranges().to_vec();
            (partitions, split.rows)
        };
        let all: Vec<usize> = (0..self.layout.arrow.fields().len()).collect();
        let wanted = projection.cloned().unwrap_or(all);
        let checks = checks.into_iter().reduce(Expr::and);
        let mut columns = wanted.clone();
        if let Some(check) = &checks {
            for c in check.column_refs() {
                if let Ok(i) = self.layout.arrow.index_of(&c.name)
                    && !columns.contains(&i)
                {
                    columns.push(i);
                }
            }
        }
        let schema = Arc::new(self.layout.arrow.project(&columns)?);
        let plan = Arc::new(GatherPlan::new(
            self.store.clone(),
            Arc::clone(self.layout),
            time,
            columns.clone(),
            Arc::clone(&schema),
        )?);
        let batch_size = state.config().batch_size();
        let Some(check) = checks else {
            return Ok(Arc::new(GatherExec::new(
                plan, partitions, one_series, limit, batch_size, few_rows,
            )));
        };
        // Filters the ranges do not answer exactly, checked per event.
        let gather: Arc<dyn ExecutionPlan> = Arc::new(GatherExec::new(
            plan, partitions, one_series, None, batch_size, few_rows,
        ));
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let predicate = state.create_physical_expr(check, &df_schema)?;
        let mut out: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, gather)?);
        if columns.len() != wanted.len() {
            let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = (0..wanted.len())
                .map(|i| {
                    let name = schema.field(i).name().clone();
                    (Arc::new(PhysicalColumn::new(&name, i)) as _, name)
                })
                .collect();
            out = Arc::new(ProjectionExec::try_new(exprs, out)?);
        }
        if let Some(n) = limit {
            out = Arc::new(GlobalLimitExec::new(out, 0, Some(n)));
        }
        Ok(out)
    }

    /// Whether the ranges of a scan hold one series: one range, the
    /// rows starting with a whole series key (and its salt), as the key's
    /// text up to the measure.
    fn pins_series(&self, spec: &ScanSpec) -> bool {
        let (Some([range]), Some(key)) = (spec.ranges.as_deref(), &self.layout.key) else {
            return false;
        };
        let std::ops::Bound::Included(prefix) = &range.start else {
            return false;
        };
        let delimiter = key.delimiter as u8;
        let fields = key.segments.len();
        prefix.last() == Some(&delimiter)
            && prefix.iter().filter(|b| **b == delimiter).count() + 2 == fields
            && *range == RowRange::prefix(prefix.clone())
    }

    /// The series table's cells view of its family, on the table the
    /// series was planned against (even if a change of layout replaces
    /// it before the scan runs).
    fn cells_layout(&self) -> DfResult<Layout> {
        let mut cells = Layout::new(
            self.store,
            self.layout.def.clone(),
            View::Cells {
                family: Some(self.series.def.family.clone()),
            },
        )?;
        cells.pinned = self.layout.pinned.clone();
        Ok(cells)
    }

    /// The cells of the events `filters` select, as (`_key`, `_timestamp`,
    /// `qualifier`, the series key's columns): what DELETE removes.
    pub async fn cells_of_events(
        &self,
        state: &dyn Session,
        filters: &[Expr],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let def = &self.series.def;
        let (per_cell, rest): (Vec<&Expr>, Vec<&Expr>) =
            filters.iter().partition(|f| self.per_cell(f));
        let mut plan = self.cells(&per_cell)?;
        if !rest.is_empty() {
            // A predicate on measures selects whole events: the cells
            // whose (series key, time) is one of theirs.
            let events = self.events(filters)?.build()?;
            let mut left: Vec<Column> = def.key.iter().map(Column::new_unqualified).collect();
            left.push(Column::new_unqualified(TIMESTAMP));
            let mut right: Vec<Column> = def
                .key
                .iter()
                .map(|k| Column::new(Some("events"), k))
                .collect();
            right.push(Column::new(Some("events"), &def.time));
            let events = LogicalPlanBuilder::from(events).alias("events")?.build()?;
            plan = plan.join(events, JoinType::LeftSemi, (left, right), None)?;
        }
        let mut columns = vec![
            unqualified("_key"),
            unqualified(TIMESTAMP),
            unqualified(QUALIFIER),
        ];
        columns.extend(def.key.iter().map(|k| unqualified(k)));
        let plan = plan.project(columns)?.build()?;
        state.create_physical_plan(&plan).await
    }
}
