//! From SQL predicates to key ranges.
//!
//! Predicates on `_key` become row ranges directly (AND intersects, OR
//! unites); predicates on key segments become per-segment constraints that
//! the row-key schema turns into ranges. Every range set covers all
//! matching rows; the scan re-checks each predicate on the rows it reads,
//! so over-covering is only a cost, never a wrong answer.

use std::ops::Bound;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Like, Operator};

use crate::schema::{Constraint, KeyOrder, KeySchema, KeyValue, SegmentKind};
use crate::store::{QualifierFilter, RowRange, TimeRange};

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
}

/// Plans the key ranges for a conjunction of filters.
pub fn plan(filters: &[Expr], key: Option<&KeySchema>) -> KeyPlan {
    let mut ranges: Option<Vec<RowRange>> = None;
    let mut used = Vec::new();
    let mut order = None;
    let mut segment_filters: Vec<(usize, &Expr, bool)> = Vec::new();
    let mut exact = Vec::new();
    let mut constraints: Vec<Option<Constraint>> =
        key.map_or(Vec::new(), |k| vec![None; k.fields().count()]);
    for filter in filters {
        if let Some(r) = key_ranges(filter) {
            ranges = Some(match ranges {
                None => r,
                Some(existing) => intersect(&existing, &r),
            });
            used.push(filter.to_string());
            continue;
        }
        if let Some(key) = key
            && let Some((field, c)) = segment_constraint(filter, key)
        {
            // `=`, `IN` and comparisons may be answered exactly (prefix
            // filters are not).
            let listed = matches!(c, Constraint::In(_) | Constraint::Range(..));
            constraints[field] = Some(match constraints[field].take() {
                None => c,
                Some(existing) => combine(existing, c),
            });
            segment_filters.push((field, filter, listed));
        }
    }
    if let Some(key) = key
        && constraints.iter().any(Option::is_some)
    {
        let (segment_ranges, exact_fields) = key.ranges_with_exact(&constraints);
        let whole = segment_ranges.len() == 1 && is_everything(&segment_ranges[0]);
        if !whole {
            order = key.order(&constraints);
            for (field, filter, listed) in &segment_filters {
                used.push(filter.to_string());
                if *listed && exact_fields.get(*field).copied().unwrap_or(false) {
                    exact.push((*filter).clone());
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
    }
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

/// Whether `expr` is a column reference named `name` (case-insensitive).
fn is_column(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Column(c) => c.name.eq_ignore_ascii_case(name),
        Expr::Cast(c) => is_column(&c.expr, name),
        _ => false,
    }
}

fn column_name(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Column(c) => Some(c.name.as_str()),
        _ => None,
    }
}

fn literal(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(v, _) => Some(v),
        Expr::Cast(c) => literal(&c.expr),
        _ => None,
    }
}

fn text(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        _ => None,
    }
}

fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

/// `col op literal` in either order, with the operator as seen from `col`.
fn comparison(b: &BinaryExpr) -> Option<(&Expr, Operator, &ScalarValue)> {
    if let Some(v) = literal(&b.right) {
        return Some((&b.left, b.op, v));
    }
    literal(&b.left).map(|v| (b.right.as_ref(), flip(b.op), v))
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
pub(crate) fn is_exact_key_filter(expr: &Expr) -> bool {
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

/// The literal prefix of `LIKE 'p%'` (the pattern may only end in `%`).
fn like_prefix(like: &Like) -> Option<String> {
    if like.negated || like.case_insensitive {
        return None;
    }
    let pattern = literal(&like.pattern).and_then(text)?;
    let escape = like.escape_char.unwrap_or('\\');
    let mut prefix = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c == escape => prefix.push(chars.next()?),
            '%' => return chars.all(|c| c == '%').then_some(prefix),
            '_' => return None,
            c => prefix.push(c),
        }
    }
    None // no wildcard: an equality DataFusion would have rewritten
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
pub fn intersect(a: &[RowRange], b: &[RowRange]) -> Vec<RowRange> {
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
/// where a literal is finer than a microsecond), and the predicates used.
pub fn time_range(filters: &[Expr], column: &str) -> (TimeRange, Vec<Expr>) {
    let mut range = TimeRange::ALL;
    let mut used = Vec::new();
    for filter in filters {
        if let Some(r) = time_bounds(filter, column) {
            range.start = range.start.max(r.start);
            range.end = match (range.end, r.end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            used.push(filter.clone());
        }
    }
    (range, used)
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

/// The families a conjunction of `family` predicates allows (the cells
/// view), if any predicate names them.
pub fn families(filters: &[Expr]) -> Option<Vec<String>> {
    let mut out: Option<Vec<String>> = None;
    for filter in filters {
        if let Some(names) = family_names(filter) {
            out = Some(match out {
                None => names,
                Some(prev) => prev.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
    }
    out
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
/// qualifiers compared by their bytes): sets and ranges intersect; a LIKE
/// prefix is used when nothing else is. Returns the predicates used.
pub fn qualifiers(filters: &[Expr]) -> Option<(QualifierFilter, String)> {
    let mut set: Option<std::collections::BTreeSet<Vec<u8>>> = None;
    let (mut lo, mut hi): (Bound<Vec<u8>>, Bound<Vec<u8>>) = (Bound::Unbounded, Bound::Unbounded);
    let mut other = None;
    let mut used = Vec::new();
    for f in filters {
        match qualifier_filter(f) {
            Some(QualifierFilter::Set(s)) => {
                set = Some(match set {
                    None => s,
                    Some(prev) => prev.intersection(&s).cloned().collect(),
                });
            }
            Some(QualifierFilter::Range(l, h)) => {
                lo = narrower(lo, l, true);
                hi = narrower(hi, h, false);
            }
            Some(q) => {
                if other.is_none() {
                    other = Some(q);
                } else {
                    continue;
                }
            }
            None => continue,
        }
        used.push(f.to_string());
    }
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
