//! Predicates on the cells view's `family` and `qualifier` columns to the
//! families and qualifiers a read selects.

use std::ops::Bound;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, Expr, Operator};

use super::terms::{comparison, is_column, like_prefix, literal, text};
use crate::store::QualifierFilter;

/// The families a conjunction of `family` predicates allows (the cells
/// view), drawn from the filters one at a time.
#[derive(Default)]
pub(crate) struct Families {
    allowed: Option<Vec<String>>,
}

impl Families {
    /// Narrows the families by `filter` if it names them.
    pub(crate) fn add(&mut self, filter: &Expr) {
        if let Some(names) = family_names(filter) {
            self.allowed = Some(match self.allowed.take() {
                None => names,
                Some(prev) => prev.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
    }

    /// The families allowed, if any predicate named them.
    pub(crate) fn finish(self) -> Option<Vec<String>> {
        self.allowed
    }
}

fn family_names(expr: &Expr) -> Option<Vec<String>> {
    match expr {
        Expr::BinaryExpr(b) if b.op == Operator::Or => {
            let mut names = family_names(&b.left)?;
            names.extend(family_names(&b.right)?);
            Some(names)
        }
        Expr::BinaryExpr(b) => {
            let (col, op, v) = comparison(b)?;
            (op == Operator::Eq && is_column(col, "family")).then(|| text(v).map(|t| vec![t]))?
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, "family") => list
            .list
            .iter()
            .map(|e| literal(e).and_then(text))
            .collect(),
        _ => None,
    }
}

/// A qualifier selection for the read from the `qualifier` predicates of
/// a conjunction that one can express (the cells view, text or byte
/// qualifiers compared by their bytes), drawn from the filters one at a
/// time: sets and ranges intersect; a LIKE prefix is used when nothing
/// else is.
pub(crate) struct Qualifiers {
    set: Option<std::collections::BTreeSet<Vec<u8>>>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    other: Option<QualifierFilter>,
    used: Vec<String>,
}

impl Default for Qualifiers {
    fn default() -> Self {
        Qualifiers {
            set: None,
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
            other: None,
            used: Vec::new(),
        }
    }
}

impl Qualifiers {
    /// Narrows the selection by `filter` if it is one on `qualifier`.
    pub(crate) fn add(&mut self, filter: &Expr) {
        match qualifier_filter(filter) {
            Some(QualifierFilter::Set(s)) => {
                self.set = Some(match self.set.take() {
                    None => s,
                    Some(prev) => prev.intersection(&s).cloned().collect(),
                });
            }
            Some(QualifierFilter::Range(l, h)) => {
                self.lo = narrower(std::mem::replace(&mut self.lo, Bound::Unbounded), l, true);
                self.hi = narrower(std::mem::replace(&mut self.hi, Bound::Unbounded), h, false);
            }
            Some(q) if self.other.is_none() => self.other = Some(q),
            Some(_) | None => return,
        }
        self.used.push(filter.to_string());
    }

    /// The selection and the predicates it was drawn from, if any.
    pub(crate) fn finish(self) -> Option<(QualifierFilter, String)> {
        let Qualifiers {
            set,
            lo,
            hi,
            other,
            used,
        } = self;
        let ranged = !matches!((&lo, &hi), (Bound::Unbounded, Bound::Unbounded));
        let filter = match (set, ranged, other) {
            (Some(set), _, _) => {
                let range = (as_ref_bound(&lo), as_ref_bound(&hi));
                QualifierFilter::Set(
                    set.into_iter()
                        .filter(|q| std::ops::RangeBounds::<&[u8]>::contains(&range, &q.as_slice()))
                        .collect(),
                )
            }
            (None, true, _) => QualifierFilter::Range(lo, hi),
            (None, false, Some(q)) => q,
            (None, false, None) => return None,
        };
        Some((filter, used.join(" AND ")))
    }
}

fn as_ref_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The narrower of two lower (or upper) bounds.
fn narrower(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>, lower: bool) -> Bound<Vec<u8>> {
    let value = |x: &Bound<Vec<u8>>| match x {
        Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    match (value(&a), value(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) if x == y => {
            if matches!(a, Bound::Excluded(_)) {
                a
            } else {
                b
            }
        }
        (Some(x), Some(y)) => {
            if (x > y) == lower {
                a
            } else {
                b
            }
        }
    }
}

fn qualifier_filter(expr: &Expr) -> Option<QualifierFilter> {
    let bytes = |v: &ScalarValue| -> Option<Vec<u8>> {
        match v {
            ScalarValue::Binary(Some(b)) | ScalarValue::BinaryView(Some(b)) => Some(b.clone()),
            other => text(other).map(String::into_bytes),
        }
    };
    match expr {
        Expr::BinaryExpr(b) => {
            let (col, op, v) = comparison(b)?;
            if !is_column(col, "qualifier") {
                return None;
            }
            let q = bytes(v)?;
            Some(match op {
                Operator::Eq => QualifierFilter::Set([q].into()),
                Operator::Lt => QualifierFilter::Range(Bound::Unbounded, Bound::Excluded(q)),
                Operator::LtEq => QualifierFilter::Range(Bound::Unbounded, Bound::Included(q)),
                Operator::Gt => QualifierFilter::Range(Bound::Excluded(q), Bound::Unbounded),
                Operator::GtEq => QualifierFilter::Range(Bound::Included(q), Bound::Unbounded),
                _ => return None,
            })
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, "qualifier") => list
            .list
            .iter()
            .map(|e| literal(e).and_then(bytes))
            .collect::<Option<_>>()
            .map(QualifierFilter::Set),
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_column(expr, "qualifier") => Some(QualifierFilter::Range(
            Bound::Included(literal(low).and_then(bytes)?),
            Bound::Included(literal(high).and_then(bytes)?),
        )),
        Expr::Like(like) if is_column(&like.expr, "qualifier") => {
            let prefix = like_prefix(like)?;
            QualifierFilter::regex(&format!("{}(?s:.*)", regex::escape(&prefix))).ok()
        }
        _ => None,
    }
}
