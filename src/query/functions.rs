//! Table functions for the other views of a table: `versions`, `cells`
//! and `as_of`. Each returns a [`CellarTable`] in that view, so the same
//! key-range pushdown applies.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::Expr;

use super::table::CellarTable;
use super::view::View;
use crate::error::Error;
use crate::store::Store;

/// Which view a function returns.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Versions,
    Cells,
    AsOf,
}

/// A table function over the store.
#[derive(Debug)]
pub struct ViewFunction {
    store: Store,
    kind: Kind,
}

impl ViewFunction {
    /// `versions('table' [, latest_n])`: one row per (row, cell timestamp).
    pub fn versions(store: Store) -> Arc<Self> {
        Arc::new(ViewFunction {
            store,
            kind: Kind::Versions,
        })
    }

    /// `cells('table' [, 'family'])`: one row per cell.
    pub fn cells(store: Store) -> Arc<Self> {
        Arc::new(ViewFunction {
            store,
            kind: Kind::Cells,
        })
    }

    /// `as_of('table', timestamp)`: the table as it was at a time.
    pub fn as_of(store: Store) -> Arc<Self> {
        Arc::new(ViewFunction {
            store,
            kind: Kind::AsOf,
        })
    }

    fn usage(&self) -> &'static str {
        match self.kind {
            Kind::Versions => "versions('table' [, latest_n])",
            Kind::Cells => "cells('table' [, 'family'])",
            Kind::AsOf => "as_of('table', TIMESTAMP '2024-01-01 00:00:00')",
        }
    }

    fn bad(&self, what: String) -> datafusion::error::DataFusionError {
        Error::InvalidArgument(format!("{what}; usage: {}", self.usage())).into()
    }
}

/// The constant value of an argument.
fn constant(expr: &Expr) -> Option<ScalarValue> {
    match expr {
        Expr::Literal(v, _) => Some(v.clone()),
        Expr::Cast(c) => constant(&c.expr)?.cast_to(c.field.data_type()).ok(),
        Expr::TryCast(c) => constant(&c.expr)?.cast_to(c.field.data_type()).ok(),
        _ => None,
    }
}

impl TableFunctionImpl for ViewFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let text = |i: usize| -> DfResult<Option<String>> {
            match exprs.get(i).map(|e| (e, constant(e))) {
                None => Ok(None),
                Some((_, Some(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s))))) => {
                    Ok(Some(s))
                }
                Some((e, _)) => {
                    Err(self.bad(format!("argument {} must be a string, not {e}", i + 1)))
                }
            }
        };
        if exprs.is_empty() || exprs.len() > 2 {
            return Err(self.bad(format!("takes 1 or 2 arguments, got {}", exprs.len())));
        }
        let table = text(0)?.unwrap_or_default();
        let view = match self.kind {
            Kind::Versions => View::Versions {
                latest: match exprs.get(1).map(|e| {
                    (
                        e,
                        constant(e).and_then(|v| v.cast_to(&DataType::Int64).ok()),
                    )
                }) {
                    None => None,
                    Some((_, Some(ScalarValue::Int64(Some(n))))) if n >= 1 => {
                        Some(usize::try_from(n).unwrap_or(usize::MAX))
                    }
                    Some((e, _)) => {
                        return Err(
                            self.bad(format!("latest_n must be a positive integer, not {e}"))
                        );
                    }
                },
            },
            Kind::Cells => View::Cells { family: text(1)? },
            Kind::AsOf => {
                let Some(arg) = exprs.get(1) else {
                    return Err(self.bad("as_of needs a time".into()));
                };
                let micros = constant(arg)
                    .and_then(|v| {
                        v.cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None))
                            .ok()
                    })
                    .and_then(|v| match v {
                        ScalarValue::TimestampMicrosecond(Some(t), _) => Some(t),
                        _ => None,
                    })
                    .ok_or_else(|| self.bad(format!("{arg} is not a time")))?;
                View::Wide {
                    as_of: Some(micros),
                }
            }
        };
        let table = CellarTable::with_view(self.store.clone(), &table, view)?;
        Ok(Arc::new(table))
    }
}
