//! Predicates on the cell-time column to a cell time range.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, Expr, Operator};

use super::terms::{comparison, is_column, literal};
use crate::store::TimeRange;

/// A timestamp literal in microseconds, rounded down, and whether the
/// rounding was exact.
fn micros(v: &ScalarValue) -> Option<(i64, bool)> {
    match v {
        ScalarValue::TimestampMicrosecond(Some(n), _) => Some((*n, true)),
        ScalarValue::TimestampMillisecond(Some(n), _) => n.checked_mul(1_000).map(|n| (n, true)),
        ScalarValue::TimestampSecond(Some(n), _) => n.checked_mul(1_000_000).map(|n| (n, true)),
        ScalarValue::TimestampNanosecond(Some(n), _) => {
            Some((n.div_euclid(1_000), n.rem_euclid(1_000) == 0))
        }
        _ => None,
    }
}

/// The cell time range that predicates on the cell-time column (`_timestamp`,
/// or a series' time in bucket rows) in a conjunction allow (over-covering
/// where a literal is finer than a microsecond), drawn from the filters
/// one at a time, and the predicates used.
pub(crate) struct Times<'a> {
    column: &'a str,
    range: TimeRange,
    used: Vec<Expr>,
}

impl<'a> Times<'a> {
    /// Nothing found yet on `column`.
    pub(crate) fn new(column: &'a str) -> Self {
        Times {
            column,
            range: TimeRange::ALL,
            used: Vec::new(),
        }
    }

    /// Narrows the range by `filter` if it bounds the time column.
    pub(crate) fn add(&mut self, filter: &Expr) {
        if let Some(r) = time_bounds(filter, self.column) {
            self.range.start = self.range.start.max(r.start);
            self.range.end = match (self.range.end, r.end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.used.push(filter.clone());
        }
    }

    /// The range so far.
    pub(crate) fn range(&self) -> TimeRange {
        self.range
    }

    /// The range and the predicates it was drawn from.
    pub(crate) fn finish(self) -> (TimeRange, Vec<Expr>) {
        (self.range, self.used)
    }
}

/// [`Times`] of a whole conjunction.
pub fn time_range(filters: &[Expr], column: &str) -> (TimeRange, Vec<Expr>) {
    let mut found = Times::new(column);
    filters.iter().for_each(|f| found.add(f));
    found.finish()
}

/// Whether the cell time range [`time_range`] draws from `filter` answers
/// it exactly: the time column itself compared with (or BETWEEN) literals
/// of whole microseconds.
pub fn time_exact(filter: &Expr, column: &str) -> bool {
    let plain = |e: &Expr| matches!(e, Expr::Column(c) if c.name.eq_ignore_ascii_case(column));
    let exact = |v: &ScalarValue| micros(v).is_some_and(|(_, exact)| exact);
    match filter {
        Expr::BinaryExpr(b) => comparison(b).is_some_and(|(col, op, v)| {
            plain(col)
                && matches!(
                    op,
                    Operator::Eq | Operator::Gt | Operator::GtEq | Operator::Lt | Operator::LtEq
                )
                && exact(v)
        }),
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => plain(expr) && literal(low).is_some_and(exact) && literal(high).is_some_and(exact),
        _ => false,
    }
}

fn time_bounds(expr: &Expr, column: &str) -> Option<TimeRange> {
    let after = |t: i64| TimeRange {
        start: t.max(0),
        end: None,
    };
    let before = |t: i64| TimeRange {
        start: 0,
        end: Some(t.max(0)),
    };
    match expr {
        Expr::BinaryExpr(b) => {
            let (col, op, v) = comparison(b)?;
            if !is_column(col, column) {
                return None;
            }
            let (t, exact) = micros(v)?;
            Some(match op {
                Operator::Eq => TimeRange {
                    start: t.max(0),
                    end: Some(t.saturating_add(1).max(0)),
                },
                Operator::Gt if exact => after(t.saturating_add(1)),
                Operator::Gt | Operator::GtEq => after(t),
                Operator::Lt if exact => before(t),
                Operator::Lt | Operator::LtEq => before(t.saturating_add(1)),
                _ => return None,
            })
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_column(expr, column) => {
            let (lo, _) = micros(literal(low)?)?;
            let (hi, _) = micros(literal(high)?)?;
            Some(TimeRange {
                start: lo.max(0),
                end: Some(hi.saturating_add(1).max(0)),
            })
        }
        _ => None,
    }
}
