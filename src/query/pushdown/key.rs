//! Predicates on `_key` and on key segments to row ranges: AND
//! intersects, OR unites; segment constraints become ranges through the
//! row-key schema.

use std::ops::Bound;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, Expr, Operator};

use super::terms::{column_name, comparison, is_column, like_prefix, literal, text};
use crate::schema::{Constraint, KeyOrder, KeySchema, KeyValue, SegmentKind};
use crate::store::RowRange;

/// The outcome of planning a scan's key ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPlan {
    /// Ranges to read, or `None` for the whole table.
    pub ranges: Option<Vec<RowRange>>,
    /// Filters that narrowed the ranges.
    pub used: Vec<String>,
    /// How key order orders segments within the ranges (only when segment
    /// predicates narrowed them: those turn away rows whose key does not
    /// fit the schema, which would sort among the others with no values).
    pub order: Option<KeyOrder>,
    /// Segment filters the ranges answer exactly for keys that fit the
    /// schema: the scan need not re-check them, only drop misfit keys.
    pub exact: Vec<Expr>,
    /// `_key` filters the ranges say all of: the scan never re-checks them.
    pub exact_keys: Vec<Expr>,
}

/// Key ranges drawn from a conjunction of filters, one at a time.
pub(crate) struct Keys<'a> {
    key: Option<&'a KeySchema>,
    ranges: Option<Vec<RowRange>>,
    used: Vec<String>,
    exact_keys: Vec<Expr>,
    /// Segment filters: the field, the filter, and whether its constraint
    /// lists values or bounds (prefix constraints are never exact).
    segment_filters: Vec<(usize, Expr, bool)>,
    constraints: Vec<Option<Constraint>>,
}

impl<'a> Keys<'a> {
    /// Nothing found yet, over the table's row-key schema if it has one.
    pub(crate) fn new(key: Option<&'a KeySchema>) -> Self {
        Keys {
            key,
            ranges: None,
            used: Vec::new(),
            exact_keys: Vec::new(),
            segment_filters: Vec::new(),
            constraints: key.map_or(Vec::new(), |k| vec![None; k.fields().count()]),
        }
    }

    /// Narrows the ranges by `filter` if it is one on `_key` or a segment.
    pub(crate) fn add(&mut self, filter: &Expr) {
        if let Some(r) = key_ranges(filter) {
            self.ranges = Some(match self.ranges.take() {
                None => r,
                Some(existing) => intersect(&existing, &r),
            });
            self.used.push(filter.to_string());
            if is_exact_key_filter(filter) {
                self.exact_keys.push(filter.clone());
            }
            return;
        }
        if let Some(key) = self.key
            && let Some((field, c)) = segment_constraint(filter, key)
        {
            // `=`, `IN` and comparisons may be answered exactly (prefix
            // filters are not).
            let listed = matches!(c, Constraint::In(_) | Constraint::Range(..));
            self.constraints[field] = Some(match self.constraints[field].take() {
                None => c,
                Some(existing) => combine(existing, c),
            });
            self.segment_filters.push((field, filter.clone(), listed));
        }
    }

    /// The ranges, with what answered them.
    pub(crate) fn finish(self) -> KeyPlan {
        let Keys {
            key,
            mut ranges,
            mut used,
            exact_keys,
            segment_filters,
            constraints,
        } = self;
        let mut order = None;
        let mut exact = Vec::new();
        if let Some(key) = key
            && constraints.iter().any(Option::is_some)
        {
            let (segment_ranges, exact_fields) = key.ranges_with_exact(&constraints);
            let whole = segment_ranges.len() == 1 && is_everything(&segment_ranges[0]);
            if !whole {
                order = key.order(&constraints);
                for (field, filter, listed) in segment_filters {
                    used.push(filter.to_string());
                    if listed && exact_fields.get(field).copied().unwrap_or(false) {
                        exact.push(filter);
                    }
                }
                ranges = Some(match ranges {
                    None => segment_ranges,
                    Some(existing) => intersect(&existing, &segment_ranges),
                });
            }
        }
        KeyPlan {
            ranges,
            used,
            order,
            exact,
            exact_keys,
        }
    }
}

/// Plans the key ranges for a conjunction of filters.
pub fn plan(filters: &[Expr], key: Option<&KeySchema>) -> KeyPlan {
    let mut keys = Keys::new(key);
    filters.iter().for_each(|f| keys.add(f));
    keys.finish()
}

/// Whether a range holds every key.
fn is_everything(r: &RowRange) -> bool {
    let open_start = match &r.start {
        Bound::Unbounded => true,
        Bound::Included(k) => k.is_empty(),
        Bound::Excluded(_) => false,
    };
    open_start && r.end == Bound::Unbounded
}

/// Row ranges answering a predicate on `_key`, if it is one.
fn key_ranges(expr: &Expr) -> Option<Vec<RowRange>> {
    match expr {
        Expr::BinaryExpr(b) if b.op == Operator::And => {
            let (l, r) = (key_ranges(&b.left), key_ranges(&b.right));
            match (l, r) {
                (Some(l), Some(r)) => Some(intersect(&l, &r)),
                (Some(x), None) | (None, Some(x)) => Some(x),
                (None, None) => None,
            }
        }
        Expr::BinaryExpr(b) if b.op == Operator::Or => {
            let mut l = key_ranges(&b.left)?;
            l.extend(key_ranges(&b.right)?);
            Some(l)
        }
        Expr::BinaryExpr(b) => {
            let (col, op, v) = comparison(b)?;
            if !is_column(col, "_key") {
                return None;
            }
            let k = text(v)?.into_bytes();
            let range = match op {
                Operator::Eq => RowRange::key(k),
                Operator::Lt => RowRange::between(Bound::Unbounded, Bound::Excluded(k)),
                Operator::LtEq => RowRange::between(Bound::Unbounded, Bound::Included(k)),
                Operator::Gt => RowRange::between(Bound::Excluded(k), Bound::Unbounded),
                Operator::GtEq => RowRange::between(Bound::Included(k), Bound::Unbounded),
                _ => return None,
            };
            Some(vec![range])
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, "_key") => list
            .list
            .iter()
            .map(|e| {
                literal(e)
                    .and_then(text)
                    .map(|k| RowRange::key(k.into_bytes()))
            })
            .collect(),
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_column(expr, "_key") => {
            let (lo, hi) = (literal(low).and_then(text)?, literal(high).and_then(text)?);
            Some(vec![RowRange::between(
                Bound::Included(lo.into_bytes()),
                Bound::Included(hi.into_bytes()),
            )])
        }
        Expr::Like(like) if is_column(&like.expr, "_key") => {
            like_prefix(like).map(|p| vec![RowRange::prefix(p.into_bytes())])
        }
        Expr::ScalarFunction(f)
            if f.name() == "starts_with" && f.args.len() == 2 && is_column(&f.args[0], "_key") =>
        {
            literal(&f.args[1])
                .and_then(text)
                .map(|p| vec![RowRange::prefix(p.into_bytes())])
        }
        _ => None,
    }
}

/// Whether the key ranges of `expr` say all it says, so a scan that reads
/// only those ranges needs no per-row re-check: comparisons, IN lists,
/// BETWEEN, `LIKE 'p%'` and `starts_with` of the bare `_key` column with
/// text literals, and AND / OR of such. (`_key` compares as the stored
/// key's bytes, the same order as its text for every UTF-8 key.)
fn is_exact_key_filter(expr: &Expr) -> bool {
    fn bare_key(e: &Expr) -> bool {
        matches!(e, Expr::Column(c) if c.name.eq_ignore_ascii_case("_key"))
    }
    fn bare_text(e: &Expr) -> bool {
        matches!(e, Expr::Literal(v, _) if text(v).is_some())
    }
    match expr {
        Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => {
            is_exact_key_filter(&b.left) && is_exact_key_filter(&b.right)
        }
        Expr::BinaryExpr(b) => {
            matches!(
                b.op,
                Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) && ((bare_key(&b.left) && bare_text(&b.right))
                || (bare_text(&b.left) && bare_key(&b.right)))
        }
        Expr::InList(list) => {
            !list.negated && bare_key(&list.expr) && list.list.iter().all(bare_text)
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => bare_key(expr) && bare_text(low) && bare_text(high),
        Expr::Like(like) => {
            bare_key(&like.expr) && bare_text(&like.pattern) && like_prefix(like).is_some()
        }
        Expr::ScalarFunction(f) => {
            f.name() == "starts_with"
                && matches!(f.args.as_slice(), [k, p] if bare_key(k) && bare_text(p))
        }
        _ => false,
    }
}

/// Converts a literal to a segment value of `kind`.
fn key_value(v: &ScalarValue, kind: &SegmentKind) -> Option<KeyValue> {
    match kind {
        SegmentKind::Text | SegmentKind::Padded { .. } => text(v).map(KeyValue::Text),
        SegmentKind::Int { .. } | SegmentKind::Salt { .. } => match v {
            ScalarValue::Int8(Some(n)) => Some(KeyValue::Int(i64::from(*n))),
            ScalarValue::Int16(Some(n)) => Some(KeyValue::Int(i64::from(*n))),
            ScalarValue::Int32(Some(n)) => Some(KeyValue::Int(i64::from(*n))),
            ScalarValue::Int64(Some(n)) => Some(KeyValue::Int(*n)),
            ScalarValue::UInt8(Some(n)) => Some(KeyValue::Int(i64::from(*n))),
            ScalarValue::UInt16(Some(n)) => Some(KeyValue::Int(i64::from(*n))),
            ScalarValue::UInt32(Some(n)) => Some(KeyValue::Int(i64::from(*n))),
            ScalarValue::UInt64(Some(n)) => i64::try_from(*n).ok().map(KeyValue::Int),
            _ => None,
        },
        SegmentKind::Time { .. } => match v {
            ScalarValue::TimestampMicrosecond(Some(n), _) => Some(KeyValue::Time(*n)),
            ScalarValue::TimestampMillisecond(Some(n), _) => {
                n.checked_mul(1_000).map(KeyValue::Time)
            }
            ScalarValue::TimestampSecond(Some(n), _) => {
                n.checked_mul(1_000_000).map(KeyValue::Time)
            }
            ScalarValue::TimestampNanosecond(Some(n), _) => {
                Some(KeyValue::Time(n.div_euclid(1_000)))
            }
            _ => None,
        },
    }
}

fn segment_constraint(expr: &Expr, key: &KeySchema) -> Option<(usize, Constraint)> {
    let field_of = |e: &Expr| {
        let name = column_name(e)?;
        let (i, _, kind) = key
            .fields()
            .find(|(_, n, _)| n.eq_ignore_ascii_case(name))?;
        Some((i, kind.clone()))
    };
    match expr {
        // `a = 1 OR a = 2` (how DataFusion writes short IN lists).
        Expr::BinaryExpr(b) if b.op == Operator::Or => {
            let (i, left) = segment_constraint(&b.left, key)?;
            let (j, right) = segment_constraint(&b.right, key)?;
            match (left, right) {
                (Constraint::In(mut x), Constraint::In(y)) if i == j => {
                    x.extend(y);
                    Some((i, Constraint::In(x)))
                }
                _ => None,
            }
        }
        Expr::BinaryExpr(b) => {
            let (col, op, v) = comparison(b)?;
            let (i, kind) = field_of(col)?;
            let v = key_value(v, &kind)?;
            let c = match op {
                Operator::Eq => Constraint::In(vec![v]),
                Operator::Lt => Constraint::Range(Bound::Unbounded, Bound::Excluded(v)),
                Operator::LtEq => Constraint::Range(Bound::Unbounded, Bound::Included(v)),
                Operator::Gt => Constraint::Range(Bound::Excluded(v), Bound::Unbounded),
                Operator::GtEq => Constraint::Range(Bound::Included(v), Bound::Unbounded),
                _ => return None,
            };
            Some((i, c))
        }
        Expr::InList(list) if !list.negated => {
            let (i, kind) = field_of(&list.expr)?;
            let values: Option<Vec<KeyValue>> = list
                .list
                .iter()
                .map(|e| literal(e).and_then(|v| key_value(v, &kind)))
                .collect();
            Some((i, Constraint::In(values?)))
        }
        Expr::Like(like) => {
            let (i, kind) = field_of(&like.expr)?;
            let start = like_prefix(like)?;
            matches!(kind, SegmentKind::Text | SegmentKind::Padded { .. })
                .then_some((i, Constraint::Prefix(start)))
        }
        Expr::ScalarFunction(f) if f.name() == "starts_with" => {
            let [col, start] = f.args.as_slice() else {
                return None;
            };
            let (i, kind) = field_of(col)?;
            let start = literal(start).and_then(text)?;
            matches!(kind, SegmentKind::Text | SegmentKind::Padded { .. })
                .then_some((i, Constraint::Prefix(start)))
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let (i, kind) = field_of(expr)?;
            let lo = key_value(literal(low)?, &kind)?;
            let hi = key_value(literal(high)?, &kind)?;
            Some((
                i,
                Constraint::Range(Bound::Included(lo), Bound::Included(hi)),
            ))
        }
        _ => None,
    }
}

/// Both constraints at once (over-covering is allowed).
fn combine(a: Constraint, b: Constraint) -> Constraint {
    match (a, b) {
        (Constraint::In(x), Constraint::In(y)) => {
            Constraint::In(x.into_iter().filter(|v| y.contains(v)).collect())
        }
        (Constraint::In(x), Constraint::Range(lo, hi))
        | (Constraint::Range(lo, hi), Constraint::In(x)) => {
            Constraint::In(x.into_iter().filter(|v| within(v, &lo, &hi)).collect())
        }
        (Constraint::Range(lo1, hi1), Constraint::Range(lo2, hi2)) => {
            Constraint::Range(tighter(lo1, lo2, true), tighter(hi1, hi2, false))
        }
        (Constraint::In(x), Constraint::Prefix(p)) | (Constraint::Prefix(p), Constraint::In(x)) => {
            Constraint::In(
                x.into_iter()
                    .filter(|v| !matches!(v, KeyValue::Text(t) if !t.starts_with(&p)))
                    .collect(),
            )
        }
        (Constraint::Prefix(a), Constraint::Prefix(b)) => {
            if a.starts_with(&b) {
                Constraint::Prefix(a)
            } else if b.starts_with(&a) {
                Constraint::Prefix(b)
            } else {
                Constraint::In(Vec::new())
            }
        }
        // A prefix and a range: the prefix alone covers every match.
        (Constraint::Prefix(p), Constraint::Range(..))
        | (Constraint::Range(..), Constraint::Prefix(p)) => Constraint::Prefix(p),
    }
}

fn within(v: &KeyValue, lo: &Bound<KeyValue>, hi: &Bound<KeyValue>) -> bool {
    std::ops::RangeBounds::<KeyValue>::contains(&(lo.clone(), hi.clone()), v)
}

fn tighter(a: Bound<KeyValue>, b: Bound<KeyValue>, lower: bool) -> Bound<KeyValue> {
    let value = |x: &Bound<KeyValue>| match x {
        Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    match (value(&a), value(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) => {
            let a_wins = if x == y {
                matches!(a, Bound::Excluded(_))
            } else {
                (x > y) == lower
            };
            if a_wins { a } else { b }
        }
    }
}

fn bound_cmp_start(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Equal,
        (Bound::Unbounded, _) => Less,
        (_, Bound::Unbounded) => Greater,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Less),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Greater),
    }
}

fn bound_cmp_end(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Equal,
        (Bound::Unbounded, _) => Greater,
        (_, Bound::Unbounded) => Less,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Greater),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Less),
    }
}

/// Pairwise intersection of two range sets.
fn intersect(a: &[RowRange], b: &[RowRange]) -> Vec<RowRange> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let start = if bound_cmp_start(&x.start, &y.start).is_ge() {
                x.start.clone()
            } else {
                y.start.clone()
            };
            let end = if bound_cmp_end(&x.end, &y.end).is_le() {
                x.end.clone()
            } else {
                y.end.clone()
            };
            let range = RowRange::between(start, end);
            if !range.encode().is_empty() {
                out.push(range);
            }
        }
    }
    out
}
