//! Plans kept for the shape of a statement, whatever its literals.
//!
//! Ad hoc statements differ from the last one in their literals: a point
//! lookup of another key, a count over other dates. Parsing, planning and
//! optimizing such a statement costs several times what reading its rows
//! costs, and the plans kept for exact texts ([`super::plans`]) never serve
//! it. So a session also keeps plans by *shape*: the statement with each
//! literal that is an operand of a comparison (`=`, `<`, ..., `BETWEEN`,
//! `IN (...)`) replaced by a placeholder. The second statement of a shape
//! makes its template: the optimized logical plan with placeholders (and
//! the type DataFusion gives each placeholder, the type of what it is
//! compared with). Every statement of that shape from then on puts its
//! literals into the template and is planned on the physical side only,
//! where the scan turns its filters, literals now in place, into key
//! ranges.
//!
//! A template is used only where it gives the answer planning the text
//! would give:
//! - the statement is a query that [`super::plans::keepable`] would keep
//!   (it only reads cellar tables, with immutable functions), and the
//!   session and the store's catalog are as they were when the template
//!   was made ([`Seen`]);
//! - every placeholder has a type, and each literal takes it exactly as the
//!   planner's coercion would: the same type; an integer into another
//!   numeric type that holds it exactly (it reads back as the same
//!   integer); a string into another string type, or into a date or
//!   timestamp (coercion casts the string the same way). Anything else
//!   (a fraction into an integer column, a number compared with a string)
//!   plans the text as it is.
//!
//! Literals elsewhere (function arguments, `LIMIT`, the select list) are
//! part of the shape.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DataType as SqlDataType, Expr, Query, SetExpr, Statement, TableFactor,
    TimezoneInfo, TypedString, Value, ValueWithSpan, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::tokenizer::Location;

use super::lexed::{TokenShape, timestamp_of};
use super::plans::Seen;
use super::rebind::KeptPhysical;

/// Shapes a session keeps at most.
const CAPACITY: usize = 256;

/// A statement with its comparison literals taken out.
#[derive(Debug)]
pub(crate) struct Shape {
    /// The statement's text with placeholders `$1`, `$2`, ... for them.
    pub text: String,
    /// The literals, in placeholder order.
    pub literals: Vec<ScalarValue>,
    /// Where each literal starts in the text (its token's), in the same
    /// order: what [`super::lexed`] finds them by in the next statement.
    pub places: Vec<Location>,
}

/// Replaces the comparison literals in the WHERE clauses of a query with
/// placeholders and says what they were; `None` for any other statement,
/// one with placeholders of its own, or one without such literals.
/// Only WHERE clauses: an expression elsewhere names its output column
/// (`_key = 'a'` in a select list), and a placeholder would change that
/// name.
pub(crate) fn shape(statement: &mut Statement) -> Option<Shape> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let mut own = OwnPlaceholders(false);
    let _ = query.visit(&mut own);
    if own.0 {
        return None;
    }
    let mut taker = Taker {
        literals: Vec::new(),
        places: Vec::new(),
    };
    taker.query(query);
    if taker.literals.is_empty() {
        return None;
    }
    Some(Shape {
        text: statement.to_string(),
        literals: taker.literals,
        places: taker.places,
    })
}

/// Finds placeholders already in a statement (a prepared statement's).
struct OwnPlaceholders(bool);

impl VisitorMut for OwnPlaceholders {
    type Break = ();

    fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
        if matches!(value.value, Value::Placeholder(_)) {
            self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// Takes the literals that are operands of comparisons.
struct Taker {
    literals: Vec<ScalarValue>,
    places: Vec<Location>,
}

impl Taker {
    /// Takes the literals of the WHERE clauses of `query`'s SELECTs (those
    /// of its CTEs and set operations too).
    fn query(&mut self, query: &mut Query) {
        if let Some(with) = &mut query.with {
            for cte in &mut with.cte_tables {
                self.query(&mut cte.query);
            }
        }
        self.body(&mut query.body);
    }

    fn body(&mut self, body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => {
                // Subqueries in FROM first (`SELECT ... FROM (SELECT ...
                // WHERE ...)`, the tables they join), then the WHERE.
                for from in &mut select.from {
                    self.table(&mut from.relation);
                    for join in &mut from.joins {
                        self.table(&mut join.relation);
                    }
                }
                if let Some(selection) = &mut select.selection {
                    let _ = selection.visit(self);
                }
            }
            SetExpr::Query(query) => self.query(query),
            SetExpr::SetOperation { left, right, .. } => {
                self.body(left);
                self.body(right);
            }
            _ => {}
        }
    }

    /// The WHERE clauses of a table in FROM that is a query.
    fn table(&mut self, table: &mut TableFactor) {
        match table {
            TableFactor::Derived { subquery, .. } => self.query(subquery),
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => {
                self.table(&mut table_with_joins.relation);
                for join in &mut table_with_joins.joins {
                    self.table(&mut join.relation);
                }
            }
            _ => {}
        }
    }

    /// Replaces `expr` by the next placeholder if it is a literal the
    /// planner reads as a plain integer or string, or a `TIMESTAMP '...'`
    /// literal.
    fn take(&mut self, expr: &mut Expr) {
        if let Some((time, place)) = timestamp_literal(expr) {
            self.literals.push(time);
            self.places.push(place);
            *expr = Expr::Value(Value::Placeholder(format!("${}", self.literals.len())).into());
            return;
        }
        let Expr::Value(ValueWithSpan { value, span }) = expr else {
            return;
        };
        let literal = match value {
            // As the planner reads a number: an i64 if it is one (the
            // rest, fractions and huge integers, stay in the shape).
            Value::Number(text, false) if !text.contains('_') => match text.parse::<i64>() {
                Ok(n) => ScalarValue::Int64(Some(n)),
                Err(_) => return,
            },
            Value::SingleQuotedString(s) => ScalarValue::Utf8(Some(s.clone())),
            _ => return,
        };
        self.literals.push(literal);
        self.places.push(span.start);
        *value = Value::Placeholder(format!("${}", self.literals.len()));
    }
}

fn literal(expr: &Expr) -> bool {
    matches!(expr, Expr::Value(_) | Expr::TypedString(_))
}

/// A `TIMESTAMP '...'` literal (no time zone) as the planner reads it: the
/// text cast to nanoseconds, and where the text starts. `None` for any
/// other expression, and for text that does not cast (the statement is
/// then planned as text, which reports it).
fn timestamp_literal(expr: &Expr) -> Option<(ScalarValue, Location)> {
    let Expr::TypedString(TypedString {
        data_type: SqlDataType::Timestamp(None, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone),
        value,
        ..
    }) = expr
    else {
        return None;
    };
    let time = timestamp_of(value.clone().into_string()?)?;
    Some((time, value.span.start))
}

impl VisitorMut for Taker {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::BinaryOp { left, op, right } if comparison(op) => {
                if !literal(left) {
                    self.take(right);
                } else if !literal(right) {
                    self.take(left);
                }
            }
            Expr::Between {
                expr, low, high, ..
            } if !literal(expr) => {
                self.take(low);
                self.take(high);
            }
            Expr::InList { expr, list, .. } if !literal(expr) => {
                for item in list {
                    self.take(item);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

/// The literals as the template's placeholders take them, or `None` where
/// one would not compare as it does in the statement's own plan (see the
/// module's notes).
pub(crate) fn bind(literals: &[ScalarValue], types: &[DataType]) -> Option<ParamValues> {
    if literals.len() != types.len() {
        return None;
    }
    let values = literals
        .iter()
        .zip(types)
        .map(|(value, to)| bind_one(value, to))
        .collect::<Option<Vec<_>>>()?;
    Some(ParamValues::List(
        values.into_iter().map(Into::into).collect(),
    ))
}

fn bind_one(value: &ScalarValue, to: &DataType) -> Option<ScalarValue> {
    let from = value.data_type();
    if &from == to {
        return Some(value.clone());
    }
    let fits = match (&from, to) {
        (DataType::Int64, to) if to.is_numeric() => true,
        (DataType::Timestamp(_, None), DataType::Timestamp(_, None)) => true,
        (
            DataType::Utf8,
            DataType::Utf8View
            | DataType::LargeUtf8
            | DataType::Timestamp(..)
            | DataType::Date32
            | DataType::Date64,
        ) => true,
        _ => false,
    };
    if !fits {
        return None;
    }
    let bound = value.cast_to(to).ok()?;
    if bound.is_null() {
        return None;
    }
    // An integer must read back as itself: 3 into a float column is 3.0,
    // 300 into a one-byte column is no value at all; and a time: one in
    // nanoseconds goes into a column of microseconds only when it is a
    // whole number of them (compared in nanoseconds, as the statement's
    // own plan does, a time between two microseconds equals none).
    if matches!(from, DataType::Int64 | DataType::Timestamp(..))
        && bound.cast_to(&from).ok()? != *value
    {
        return None;
    }
    Some(bound)
}

/// Whether `sql` starts as a query does (`SELECT`, `WITH`, a parenthesis),
/// after blanks and comments: anything else is planned as text without
/// being parsed a second time.
pub(crate) fn starts_a_query(sql: &str) -> bool {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix('(') {
            rest = after.trim_start();
        } else {
            break;
        }
    }
    let end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let word = &rest[..end];
    word.eq_ignore_ascii_case("select") || word.eq_ignore_ascii_case("with")
}

/// What a session knows of a shape.
enum Known {
    /// Seen once: the next statement of the shape makes its template.
    Once(Seen),
    /// Its template: the optimized plan with placeholders, and their types.
    Template(Seen, Arc<Template>),
    /// It has no template (not a keepable read, or a placeholder without a
    /// type): planned as text.
    Plain(Seen),
}

impl Known {
    fn seen(&self) -> Seen {
        match self {
            Known::Once(s) | Known::Template(s, _) | Known::Plain(s) => *s,
        }
    }
}

/// A shape's optimized logical plan with placeholders `$1`, ...
pub(crate) struct Template {
    pub plan: LogicalPlan,
    /// The type of each placeholder, in order.
    pub types: Vec<DataType>,
    /// The physical plan kept to run the shape's statements from (see
    /// [`super::rebind`]).
    pub physical: Mutex<KeptPlan>,
}

/// What a template keeps of its statements' physical plans.
#[derive(Clone, Default)]
pub(crate) enum KeptPlan {
    /// No statement was planned physically from the template yet.
    #[default]
    Untried,
    /// The first one's plan may not run again with other values (its
    /// operators are not all plain): none is kept, for good.
    Never,
    /// The plan of the last statement planned physically from the
    /// template. A statement whose scan declares other partitions than
    /// this plan's (the store's size information changed: a memtable
    /// flushed, a table compacted, or a range of another size) is
    /// planned physically and kept in its stead, so that the next ones
    /// run from a plan of the store and ranges as they are.
    Plan(Arc<KeptPhysical>),
}

impl Template {
    /// The kept physical plan, as [`Template::physical`] holds it.
    pub fn kept(&self) -> KeptPlan {
        self.physical
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps `kept`, a statement's physical plan made from the template
    /// (`None` when it may not run again): the first statement's whatever
    /// it is, a later one's in place of the plan it could not run from.
    pub fn keep(&self, kept: Option<KeptPhysical>) {
        let mut slot = self.physical.lock().unwrap_or_else(PoisonError::into_inner);
        match (&*slot, kept) {
            (KeptPlan::Untried, None) => *slot = KeptPlan::Never,
            (KeptPlan::Untried | KeptPlan::Plan(_), Some(kept)) => {
                *slot = KeptPlan::Plan(Arc::new(kept));
            }
            (KeptPlan::Plan(_) | KeptPlan::Never, None) | (KeptPlan::Never, Some(_)) => {}
        }
    }
}

/// What to do with a statement of a shape.
pub(crate) enum Next {
    /// Plan it as text (and note the shape as seen once, if it was not).
    Text,
    /// Make the shape's template, then use it.
    Make,
    /// Use this template.
    Use(Arc<Template>),
}

/// The DataFusion state plans are made in, and the task context they run
/// in, kept while the session is as it was (cloning a session state copies
/// its registries of functions: tens of microseconds per statement).
type Planning = (Seen, Arc<SessionState>, Arc<TaskContext>);

/// The shapes a session (and its clones) knows.
#[derive(Clone, Default)]
pub(crate) struct Shapes {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    by_text: HashMap<String, Known>,
    /// Token sequences seen, and their shapes (see [`super::lexed`]).
    by_tokens: HashMap<String, Arc<TokenShape>>,
    planning: Option<Planning>,
    /// Statements planned from a template (`SHOW STATS`), and those of
    /// them run from its kept physical plan.
    used: u64,
    rebound: u64,
    /// Statements whose shape was found from their tokens.
    by_tokens_used: u64,
}

impl Shapes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What to do with a statement of shape `text`, planned now having
    /// seen `now`.
    pub fn next(&self, text: &str, now: Seen) -> Next {
        let mut inner = self.lock();
        let known = inner.by_text.get(text).filter(|k| k.seen() == now);
        match known {
            Some(Known::Template(_, t)) => Next::Use(Arc::clone(t)),
            Some(Known::Once(_)) => Next::Make,
            Some(Known::Plain(_)) => Next::Text,
            None => {
                if inner.by_text.len() >= CAPACITY {
                    // Not worth an order of use: a session that has seen
                    // this many shapes starts over.
                    inner.by_text.clear();
                }
                inner.by_text.insert(text.to_string(), Known::Once(now));
                Next::Text
            }
        }
    }

    /// The template of shape `text`, if the session has made it having
    /// seen `now` (noting nothing: see [`Shapes::next`]).
    pub fn template(&self, text: &str, now: Seen) -> Option<Arc<Template>> {
        match self.lock().by_text.get(text) {
            Some(Known::Template(seen, t)) if *seen == now => Some(Arc::clone(t)),
            _ => None,
        }
    }

    /// The shape of the token sequence `key`, if one was kept.
    pub fn token_shape(&self, key: &str) -> Option<Arc<TokenShape>> {
        self.lock().by_tokens.get(key).cloned()
    }

    /// Keeps the shape of the token sequence `key`.
    pub fn keep_token_shape(&self, key: String, shape: TokenShape) {
        let mut inner = self.lock();
        if inner.by_tokens.len() >= CAPACITY {
            inner.by_tokens.clear();
        }
        inner.by_tokens.insert(key, Arc::new(shape));
    }

    /// Records the template of shape `text` (`None`: it has none).
    pub fn made(&self, text: &str, seen: Seen, template: Option<Arc<Template>>) {
        let known = match template {
            Some(t) => Known::Template(seen, t),
            None => Known::Plain(seen),
        };
        self.lock().by_text.insert(text.to_string(), known);
    }

    /// The kept planning state if it was made having seen `now`.
    pub fn planning(&self, now: Seen) -> Option<(Arc<SessionState>, Arc<TaskContext>)> {
        let inner = self.lock();
        let (seen, state, task) = inner.planning.as_ref()?;
        (*seen == now).then(|| (Arc::clone(state), Arc::clone(task)))
    }

    /// Keeps a planning state made having seen `seen`.
    pub fn keep_planning(&self, seen: Seen, state: Arc<SessionState>, task: Arc<TaskContext>) {
        self.lock().planning = Some((seen, state, task));
    }

    /// Counts a statement planned from a template; `rebound`: run from
    /// its kept physical plan.
    pub fn count_use(&self, rebound: bool) {
        let mut inner = self.lock();
        inner.used += 1;
        inner.rebound += u64::from(rebound);
    }

    /// Counts a statement whose shape was found from its tokens.
    pub fn count_by_tokens(&self) {
        self.lock().by_tokens_used += 1;
    }

    /// Statements planned from a template so far, those of them run from
    /// its kept physical plan, and those whose shape was found from their
    /// tokens.
    pub fn used(&self) -> (u64, u64, u64) {
        let inner = self.lock();
        (inner.used, inner.rebound, inner.by_tokens_used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::TimeUnit;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn shaped(sql: &str) -> Option<Shape> {
        let mut statements =
            Parser::parse_sql(&GenericDialect {}, sql).unwrap_or_else(|e| panic!("{e}"));
        shape(&mut statements[0])
    }

    #[test]
    fn comparison_literals_become_placeholders_and_the_rest_stays() {
        let s = shaped(
            "WITH c AS (SELECT * FROM u WHERE a = 4) \
             SELECT substr(_key, 1, 5), 'x', k = 'y' FROM t WHERE _key >= 'a#1' AND _key < 'a#2' \
             AND n BETWEEN 3 AND 7 AND m IN (1, 'two') AND 'lit' = k AND f(2) > 1.5 \
             GROUP BY 1 HAVING count(*) > 2 \
             UNION ALL SELECT 'a', 'b', true FROM v WHERE w <> 'z' LIMIT 10",
        )
        .unwrap_or_else(|| panic!("a shape"));
        assert_eq!(
            s.text,
            "WITH c AS (SELECT * FROM u WHERE a = $1) \
             SELECT SUBSTR(_key, 1, 5), 'x', k = 'y' FROM t WHERE _key >= $2 AND _key < $3 \
             AND n BETWEEN $4 AND $5 AND m IN ($6, $7) AND $8 = k AND f(2) > 1.5 \
             GROUP BY 1 HAVING count(*) > 2 \
             UNION ALL SELECT 'a', 'b', true FROM v WHERE w <> $9 LIMIT 10"
        );
        let texts: Vec<String> = s.literals.iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["4", "a#1", "a#2", "3", "7", "1", "two", "lit", "z"]);
        // In a subquery in FROM, joined or not, before the outer WHERE.
        let s = shaped(
            "SELECT concat(r, 'x') FROM (SELECT r, avg(p) FROM t WHERE r = 'e' AND b >= 3 GROUP BY r) \
             JOIN (SELECT * FROM u WHERE k < 'q') ON true WHERE r <> 'w'",
        )
        .unwrap_or_else(|| panic!("a shape"));
        assert_eq!(
            s.text,
            "SELECT concat(r, 'x') FROM (SELECT r, avg(p) FROM t WHERE r = $1 AND b >= $2 GROUP BY r) \
             JOIN (SELECT * FROM u WHERE k < $3) ON true WHERE r <> $4"
        );
    }

    #[test]
    fn timestamp_literals_become_placeholders_as_the_planner_reads_them() {
        let s = shaped(
            "SELECT * FROM t WHERE ts >= TIMESTAMP '2021-03-01 00:03:00.5' \
             AND ts < TIMESTAMP 'no time' AND d = DATE '2021-03-01'",
        )
        .unwrap_or_else(|| panic!("a shape"));
        // Text that is no time stays, for the planner to refuse; other
        // typed literals stay.
        assert_eq!(
            s.text,
            "SELECT * FROM t WHERE ts >= $1 AND ts < TIMESTAMP 'no time' AND d = DATE '2021-03-01'"
        );
        assert_eq!(
            s.literals,
            [ScalarValue::TimestampNanosecond(
                Some(1_614_556_980_500_000_000),
                None
            )]
        );
    }

    #[test]
    fn statements_without_such_literals_or_with_placeholders_have_no_shape() {
        assert!(shaped("SELECT * FROM t").is_none());
        assert!(shaped("SELECT * FROM t WHERE 1 = 1").is_none());
        assert!(shaped("SELECT * FROM t WHERE a = $1 AND b = 2").is_none());
        assert!(shaped("SELECT * FROM t WHERE a = -2").is_none());
        assert!(shaped("SELECT * FROM t WHERE a = 9223372036854775808").is_none());
        assert!(shaped("INSERT INTO t VALUES (1)").is_none());
        assert!(shaped("DELETE FROM t WHERE a = 1").is_none());
    }

    #[test]
    fn literals_bind_only_where_they_compare_as_planned() {
        let int = |n| ScalarValue::Int64(Some(n));
        let text = |s: &str| ScalarValue::Utf8(Some(s.into()));
        let one = |v: ScalarValue, t: DataType| bind_one(&v, &t);
        assert_eq!(
            one(int(5), DataType::Int32),
            Some(ScalarValue::Int32(Some(5)))
        );
        assert_eq!(
            one(int(3), DataType::Float64),
            Some(ScalarValue::Float64(Some(3.0)))
        );
        assert_eq!(one(int(300), DataType::Int8), None);
        assert_eq!(one(int(-1), DataType::UInt32), None);
        assert_eq!(one(int((1 << 60) + 1), DataType::Float32), None);
        assert_eq!(one(int(5), DataType::Utf8), None);
        assert_eq!(one(text("5"), DataType::Int32), None);
        assert_eq!(one(text("k"), DataType::Utf8), Some(text("k")));
        assert_eq!(
            one(text("2021-03-03"), DataType::Date32),
            Some(ScalarValue::Date32(Some(18_689)))
        );
        assert_eq!(one(text("not a date"), DataType::Date32), None);
        // A time in nanoseconds into microseconds: only a whole number of
        // them.
        let nanos = |n| ScalarValue::TimestampNanosecond(Some(n), None);
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(
            one(nanos(5_000), micros.clone()),
            Some(ScalarValue::TimestampMicrosecond(Some(5), None))
        );
        assert_eq!(one(nanos(5_001), micros), None);
        assert_eq!(one(nanos(5_000), DataType::Utf8), None);
        assert!(bind(&[int(1)], &[]).is_none());
    }

    #[test]
    fn queries_are_told_by_their_first_word() {
        assert!(starts_a_query("SELECT 1"));
        assert!(starts_a_query("  -- note\n /* more */ ( select 1)"));
        assert!(starts_a_query("with x as (select 1) select * from x"));
        assert!(!starts_a_query("INSERT INTO t SELECT 1"));
        assert!(!starts_a_query("EXPLAIN SELECT 1"));
        assert!(!starts_a_query("SELECTED"));
        assert!(!starts_a_query("-- only a comment"));
    }
}
