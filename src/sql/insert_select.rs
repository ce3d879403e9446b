//! An INSERT whose query reads a VALUES list of its own, e.g.
//! `INSERT INTO t (_key, v) SELECT r || '#1', 2.0 FROM (VALUES ('c'), ('d')) AS rs(r)`.
//!
//! DataFusion 55 plans an INSERT's whole query with the target columns
//! as the type of *every* VALUES list in it, nested ones included: the
//! list above was refused ("Inconsistent data length across values
//! list") for having one value where the INSERT names two columns, and a
//! list as wide as the column list would have had its values converted
//! to the target columns' types by position, before the query had chosen
//! which value goes where. Such an INSERT is planned here in two steps:
//! its query on its own (each VALUES list typed by its own values), then
//! the INSERT over a stand-in query of the same width, whose place the
//! real query takes. DataFusion checks everything else about the INSERT
//! (the table, the column list, the width) as it always does.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::common::Column;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{DmlStatement, Expr, ExprSchemable, LogicalPlan, Projection};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Insert, Query, SetExpr, Statement, Visit, Visitor};

/// The stand-in query's column names, unlikely in any user's query.
const STAND_IN: &str = "__cellar_insert_source_";

/// An INSERT whose query holds a VALUES list anywhere but as the query
/// itself, taken apart into the INSERT and its query; any other
/// statement back as it came (`INSERT INTO t VALUES ...` is DataFusion's
/// own case and stays with it).
pub(crate) fn split(statement: DfStatement) -> Split {
    let DfStatement::Statement(inner) = statement else {
        return Split::Other(Box::new(statement));
    };
    match *inner {
        Statement::Insert(mut insert) => match insert.source.take() {
            Some(query)
                if !matches!(query.body.as_ref(), SetExpr::Values(_)) && reads_values(&query) =>
            {
                Split::Nested(Box::new(insert), query)
            }
            source => {
                insert.source = source;
                Split::Other(Box::new(DfStatement::Statement(Box::new(
                    Statement::Insert(insert),
                ))))
            }
        },
        other => Split::Other(Box::new(DfStatement::Statement(Box::new(other)))),
    }
}

/// What [`split`] made of a statement.
pub(crate) enum Split {
    /// An INSERT without its query, and the query.
    Nested(Box<Insert>, Box<Query>),
    /// Any other statement, as it came.
    Other(Box<DfStatement>),
}

/// Whether a VALUES list is part of `query` or of a query inside it.
fn reads_values(query: &Query) -> bool {
    struct FindValues;
    impl Visitor for FindValues {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            if holds_values(&query.body) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    query.visit(&mut FindValues).is_break()
}

/// A query body that is, or combines, a VALUES list.
fn holds_values(body: &SetExpr) -> bool {
    match body {
        SetExpr::Values(_) => true,
        SetExpr::SetOperation { left, right, .. } => holds_values(left) || holds_values(right),
        SetExpr::Query(q) => holds_values(&q.body),
        _ => false,
    }
}

/// Plans an INSERT [`split`] from its query: the query alone, then the
/// INSERT's projection onto the table over that query.
pub(crate) async fn plan(
    state: &SessionState,
    mut insert: Box<Insert>,
    query: Box<Query>,
) -> DfResult<LogicalPlan> {
    let source = state
        .statement_to_plan(DfStatement::Statement(Box::new(Statement::Query(query))))
        .await?;
    let width = source.schema().fields().len();
    let columns: Vec<String> = (0..width)
        .map(|j| format!("NULL AS \"{STAND_IN}{j}\""))
        .collect();
    let dialect = state.config().options().sql_parser.dialect;
    let stand_in = state.sql_to_statement(&format!("SELECT {}", columns.join(", ")), &dialect)?;
    let DfStatement::Statement(stand_in) = stand_in else {
        return Err(internal("the stand-in query is not a SQL statement"));
    };
    let Statement::Query(stand_in) = *stand_in else {
        return Err(internal("the stand-in query is not a query"));
    };
    insert.source = Some(stand_in);
    let planned = state
        .statement_to_plan(DfStatement::Statement(Box::new(Statement::Insert(*insert))))
        .await?;
    let LogicalPlan::Dml(dml) = planned else {
        return Ok(planned);
    };
    let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
        // Not the plan DataFusion 55 makes of an INSERT: plan nothing
        // over a query it was not checked against.
        return Err(internal(&format!(
            "an INSERT over a query planned as {}",
            dml.input.display()
        )));
    };
    let target = dml.target.schema();
    let exprs = projection
        .expr
        .iter()
        .enumerate()
        .map(|(i, expr)| {
            let Some(j) = stand_in_column(expr) else {
                // The column's default (or NULL): no value from the query.
                return Ok(expr.clone());
            };
            let field = target.field(i);
            Ok(
                Expr::Column(Column::from(source.schema().qualified_field(j)))
                    .cast_to(field.data_type(), source.schema())?
                    .alias(field.name()),
            )
        })
        .collect::<DfResult<Vec<_>>>()?;
    let input = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(source))?);
    Ok(LogicalPlan::Dml(DmlStatement::new(
        dml.table_name.clone(),
        Arc::clone(&dml.target),
        dml.op.clone(),
        Arc::new(input),
    )))
}

/// Which of the stand-in query's columns `expr` takes its value from.
fn stand_in_column(expr: &Expr) -> Option<usize> {
    let refs = expr.column_refs();
    let mut names = refs.iter().map(|c| c.name.as_str());
    let name = names.next()?;
    if names.next().is_some() {
        return None;
    }
    name.strip_prefix(STAND_IN)?.parse().ok()
}

/// A plan DataFusion made that this module does not expect.
fn internal(what: &str) -> DataFusionError {
    DataFusionError::Internal(format!(
        "planning an INSERT over a query with VALUES: {what}"
    ))
}
