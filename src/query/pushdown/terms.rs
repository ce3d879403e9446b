//! The pieces of a predicate every recognizer reads: a column named so,
//! a literal, text, `col op literal` in either order, a LIKE prefix.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Like, Operator};

/// Whether `expr` is a column reference named `name` (case-insensitive).
pub(super) fn is_column(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Column(c) => c.name.eq_ignore_ascii_case(name),
        Expr::Cast(c) => is_column(&c.expr, name),
        _ => false,
    }
}

pub(super) fn column_name(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Column(c) => Some(c.name.as_str()),
        _ => None,
    }
}

pub(super) fn literal(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(v, _) => Some(v),
        Expr::Cast(c) => literal(&c.expr),
        _ => None,
    }
}

pub(super) fn text(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        _ => None,
    }
}

pub(super) fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

/// `col op literal` in either order, with the operator as seen from `col`.
pub(super) fn comparison(b: &BinaryExpr) -> Option<(&Expr, Operator, &ScalarValue)> {
    if let Some(v) = literal(&b.right) {
        return Some((&b.left, b.op, v));
    }
    literal(&b.left).map(|v| (b.right.as_ref(), flip(b.op), v))
}

/// The literal prefix of `LIKE 'p%'` (the pattern may only end in `%`).
pub(super) fn like_prefix(like: &Like) -> Option<String> {
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
