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
use datafusion::datasource::provider_as_source;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit, when};
use datafusion::physical_plan::ExecutionPlan;

use super::{SeriesView, physical_filters};
use crate::query::to_df;
use crate::query::wide::{CellarTable, Layout, View, value_type};
use crate::store::Store;

/// The cells view's columns a scan of events reads.
const TIMESTAMP: &str = "_timestamp";
const QUALIFIER: &str = "qualifier";

/// Reads a column-per-event series' events.
pub(crate) struct ColumnEvents<'a> {
    store: &'a Store,
    layout: &'a Layout,
    series: &'a SeriesView,
}

fn unqualified(name: &str) -> Expr {
    col(Column::new_unqualified(name))
}

impl<'a> ColumnEvents<'a> {
    pub fn new(store: &'a Store, layout: &'a Layout, series: &'a SeriesView) -> Self {
        ColumnEvents {
            store,
            layout,
            series,
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
        let mut cells = Layout::new(
            self.store,
            self.layout.def.clone(),
            View::Cells {
                family: Some(def.family.clone()),
            },
        )
        .map_err(to_df)?;
        // The table the series was planned against, even if a change of
        // layout replaces it before the scan runs.
        cells.pinned = self.layout.pinned.clone();
        let source = provider_as_source(Arc::new(CellarTable::from_layout(
            self.store.clone(),
            cells,
        )));
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
            .ok_or_else(|| to_df(crate::Error::Internal("no metric segment".into())))?;
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
    /// series' columns, at most `limit` rows.
    pub async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut plan = self.events(filters)?;
        if let Some(projection) = projection {
            let names = projection
                .iter()
                .map(|&i| unqualified(self.layout.arrow.field(i).name()));
            plan = plan.project(names)?;
        }
        if let Some(n) = limit {
            plan = plan.limit(0, Some(n))?;
        }
        state.create_physical_plan(&plan.build()?).await
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
