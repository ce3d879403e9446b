//! From SQL predicates to the bounds of a read: row ranges (`key.rs`), a
//! cell time range (`time.rs`), the families and qualifiers of the cells
//! view (`cells.rs`).
//!
//! Predicates on `_key` become row ranges directly (AND intersects, OR
//! unites); predicates on key segments become per-segment constraints that
//! the row-key schema turns into ranges. Every range set covers all
//! matching rows; the scan re-checks each predicate on the rows it reads
//! unless the bounds say all of it, so over-covering is only a cost,
//! never a wrong answer.

mod cells;
mod key;
mod terms;
mod time;

use datafusion::logical_expr::Expr;

pub use key::{KeyPlan, plan};
pub use time::{time_exact, time_range};

use crate::schema::KeySchema;
use crate::store::{QualifierFilter, TimeRange};

/// Everything a scan's filters bound, found in one pass over them: each
/// filter is offered once to every recognizer, which keeps it (as an
/// expression) where it narrows the read.
pub(crate) struct Bounds<'a> {
    keys: key::Keys<'a>,
    times: time::Times<'a>,
    families: cells::Families,
    qualifiers: cells::Qualifiers,
}

/// What [`Bounds`] found.
pub(crate) struct Found {
    /// The key ranges, with the filters they answer.
    pub keys: KeyPlan,
    /// The cell time range on the time column.
    pub time: TimeRange,
    /// The filters the time range was drawn from.
    pub time_used: Vec<Expr>,
    /// The families the cells view's `family` filters allow, if any.
    pub families: Option<Vec<String>>,
    /// The qualifiers its `qualifier` filters select, and their text.
    pub qualifiers: Option<(QualifierFilter, String)>,
}

impl<'a> Bounds<'a> {
    /// The bounds of a conjunction of `filters` over a table with this
    /// row-key schema, whose cell time is the column `time_column`.
    pub(crate) fn of(filters: &[Expr], key: Option<&'a KeySchema>, time_column: &'a str) -> Self {
        let mut bounds = Bounds {
            keys: key::Keys::new(key),
            times: time::Times::new(time_column),
            families: cells::Families::default(),
            qualifiers: cells::Qualifiers::default(),
        };
        for filter in filters {
            bounds.keys.add(filter);
            bounds.times.add(filter);
            bounds.families.add(filter);
            bounds.qualifiers.add(filter);
        }
        bounds
    }

    /// The cell time range found so far.
    pub(crate) fn time_range(&self) -> TimeRange {
        self.times.range()
    }

    /// Narrows the key ranges by a filter the planner derived (a series'
    /// buckets from its time range); it bounds nothing else.
    pub(crate) fn add_key_filter(&mut self, filter: &Expr) {
        self.keys.add(filter);
    }

    /// The bounds found.
    pub(crate) fn finish(self) -> Found {
        let (time, time_used) = self.times.finish();
        Found {
            keys: self.keys.finish(),
            time,
            time_used,
            families: self.families.finish(),
            qualifiers: self.qualifiers.finish(),
        }
    }
}
