//! Bigtable's `RowFilter`, in full: compiled once per request (checked and
//! bounded: depth, size, copies per cell, regex size), then applied to
//! each row read. What a filter's leading cell predicates say is also
//! handed to the store's read as a [`ReadFilter`], so that a family or
//! time filter does not read every cell of a row.

use std::ops::Bound;

use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as data;

use data::row_filter::Filter as F;
use data::{column_range, value_range};

use crate::error::{Error, Result};
use crate::store::{Cell, QualifierFilter, ReadFilter, Row, TimeRange};

/// Deepest nesting of chains, interleaves and conditions.
pub const MAX_FILTER_DEPTH: usize = 32;
/// Most filters in one request (every node of the tree counted).
pub const MAX_FILTER_NODES: usize = 1024;
/// Most copies of one cell the filter may make (interleaves multiply).
pub const MAX_COPIES: u64 = 1024;
/// Longest regular expression, in bytes.
pub const MAX_REGEX_LEN: usize = 16 * 1024;
/// Largest compiled regular expression (the regex crate's size limit).
const REGEX_SIZE: usize = 1 << 20;

/// The openings of groups with flags (`(?:`, `(?i:`) in a regex.
static GROUP_OPENINGS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    #[allow(clippy::unwrap_used, reason = "a constant pattern that compiles")]
    regex::Regex::new(r"\(\?[a-zA-Z-]*:").unwrap()
});

/// A checked filter.
#[derive(Debug)]
pub struct RowFilter {
    node: Node,
}

#[derive(Debug)]
enum Node {
    Chain(Vec<Node>),
    Interleave(Vec<Node>),
    Condition {
        predicate: Box<Node>,
        on_true: Option<Box<Node>>,
        on_false: Option<Box<Node>>,
    },
    Sink,
    PassAll,
    BlockAll,
    RowKey(regex::bytes::Regex),
    Sample(f64),
    Family(regex::bytes::Regex),
    Qualifier(regex::bytes::Regex),
    Columns {
        family: String,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    Time(TimeRange),
    Value(regex::bytes::Regex),
    Values(Bound<Vec<u8>>, Bound<Vec<u8>>),
    RowOffset(usize),
    RowLimit(usize),
    ColumnLimit(usize),
    Strip,
    Label(String),
}

/// One cell on its way through a filter: the row's cell (by its place in
/// the row, which is also the order of output), with what transformers
/// did to it.
#[derive(Debug, Clone)]
pub struct Out<'a> {
    /// The cell's place in the row read.
    pub at: usize,
    /// The cell.
    pub cell: &'a Cell,
    /// Its value was stripped.
    pub stripped: bool,
    /// The label applied to it, if any.
    pub label: Option<&'a str>,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument(reason.into())
}

/// A Bigtable (RE2) regular expression over bytes, matching whole
/// strings. `\C` (any byte) is RE2's and not the regex crate's: it is
/// rewritten; the rest of RE2's syntax is the regex crate's too.
pub fn regex(what: &str, pattern: &[u8]) -> Result<regex::bytes::Regex> {
    if pattern.len() > MAX_REGEX_LEN {
        return Err(invalid(format!(
            "{what} regex of {} bytes is longer than {MAX_REGEX_LEN}",
            pattern.len()
        )));
    }
    // A pattern is bytes: RE2 quotes a byte that is not UTF-8 by copying
    // it (Google's clients' literal-value filter does), so such a byte,
    // bare or after a backslash, stands for itself.
    enum Unit {
        Char(char),
        Byte(u8),
    }
    let mut units = Vec::with_capacity(pattern.len());
    for chunk in pattern.utf8_chunks() {
        units.extend(chunk.valid().chars().map(Unit::Char));
        units.extend(chunk.invalid().iter().map(|b| Unit::Byte(*b)));
    }
    let mut rewritten = String::with_capacity(pattern.len() + 8);
    let mut units = units.into_iter();
    while let Some(unit) = units.next() {
        match unit {
            Unit::Byte(b) => rewritten.push_str(&format!("\\x{b:02x}")),
            Unit::Char('\\') => match units.next() {
                Some(Unit::Char('C')) => rewritten.push_str("(?s-u:.)"),
                Some(Unit::Char(next)) => {
                    rewritten.push('\\');
                    rewritten.push(next);
                }
                Some(Unit::Byte(b)) => rewritten.push_str(&format!("\\x{b:02x}")),
                None => rewritten.push('\\'),
            },
            Unit::Char(c) => rewritten.push(c),
        }
    }
    regex::bytes::RegexBuilder::new(&format!(r"\A(?:{rewritten})\z"))
        .unicode(false)
        .size_limit(REGEX_SIZE)
        .dfa_size_limit(REGEX_SIZE)
        .nest_limit(64)
        .build()
        .map_err(|e| {
            invalid(format!(
                "invalid {what} regex {}: {e}",
                crate::codec::show_bytes(pattern)
            ))
        })
}

/// A chain or interleave of fewer than two filters is refused, as
/// Bigtable (and its emulator) refuse it.
fn at_least_two(what: &str, n: usize) -> Result<()> {
    if n < 2 {
        return Err(invalid(format!(
            "a {what} must hold at least two filters, not {n}"
        )));
    }
    Ok(())
}

/// A limit, which Bigtable requires to be at least 1.
fn positive(what: &str, n: i32) -> Result<usize> {
    if n < 1 {
        return Err(invalid(format!("{what} must be at least 1, not {n}")));
    }
    count(what, n)
}

fn count(what: &str, n: i32) -> Result<usize> {
    usize::try_from(n).map_err(|_| invalid(format!("{what} must not be negative, not {n}")))
}

fn time_range(range: &data::TimestampRange) -> Result<TimeRange> {
    let (start, end) = (range.start_timestamp_micros, range.end_timestamp_micros);
    if start < 0 || end < 0 {
        return Err(invalid(format!(
            "timestamp range [{start}, {end}) has a negative bound"
        )));
    }
    Ok(TimeRange {
        start,
        end: (end != 0).then_some(end),
    })
}

fn label(text: &str) -> Result<String> {
    let ok = !text.is_empty()
        && text.len() <= 15
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok {
        return Err(invalid(format!(
            "label {text:?} must be 1 to 15 characters of a-z, 0-9 and -"
        )));
    }
    Ok(text.to_string())
}

struct Compiler {
    nodes: usize,
}

/// Where a node lies: under a Condition, a Sink is refused.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Free,
    InCondition,
}

impl Compiler {
    fn node(&mut self, filter: &data::RowFilter, depth: usize, place: Place) -> Result<Node> {
        self.nodes += 1;
        if self.nodes > MAX_FILTER_NODES {
            return Err(invalid(format!(
                "the row filter has more than {MAX_FILTER_NODES} filters"
            )));
        }
        if depth > MAX_FILTER_DEPTH {
            return Err(invalid(format!(
                "the row filter nests deeper than {MAX_FILTER_DEPTH} levels"
            )));
        }
        let Some(filter) = &filter.filter else {
            return Ok(Node::PassAll);
        };
        Ok(match filter {
            F::Chain(chain) => {
                at_least_two("chain", chain.filters.len())?;
                let nodes = self.list(&chain.filters, depth, place)?;
                let labelled = nodes.iter().filter(|n| n.labels()).count();
                if labelled > 1 {
                    return Err(invalid(
                        "a chain may hold at most one filter that applies a label \
                         (a cell carries one label)",
                    ));
                }
                Node::Chain(nodes)
            }
            F::Interleave(interleave) => {
                at_least_two("interleave", interleave.filters.len())?;
                Node::Interleave(self.list(&interleave.filters, depth, place)?)
            }
            F::Condition(condition) => {
                let predicate = match &condition.predicate_filter {
                    Some(p) => self.node(p, depth + 1, Place::InCondition)?,
                    None => Node::PassAll,
                };
                let mut branch = |f: &Option<Box<data::RowFilter>>| -> Result<Option<Box<Node>>> {
                    f.as_ref()
                        .map(|f| self.node(f, depth + 1, Place::InCondition).map(Box::new))
                        .transpose()
                };
                let on_true = branch(&condition.true_filter)?;
                let on_false = branch(&condition.false_filter)?;
                Node::Condition {
                    predicate: Box::new(predicate),
                    on_true,
                    on_false,
                }
            }
            F::Sink(true) if place == Place::InCondition => {
                return Err(invalid("a sink cannot be used inside a condition"));
            }
            F::Sink(true) => Node::Sink,
            F::PassAllFilter(true) => Node::PassAll,
            F::BlockAllFilter(true) => Node::BlockAll,
            F::Sink(false) | F::PassAllFilter(false) | F::BlockAllFilter(false) => {
                return Err(invalid(
                    "sink, pass_all_filter and block_all_filter must be true when set",
                ));
            }
            F::RowKeyRegexFilter(p) if p.is_empty() => {
                return Err(invalid("row_key_regex_filter must not be empty"));
            }
            F::RowKeyRegexFilter(p) => Node::RowKey(regex("row key", p)?),
            F::RowSampleFilter(p) => {
                if !(*p > 0.0 && *p < 1.0) {
                    return Err(invalid(format!(
                        "row sample probability must lie between 0 and 1, not {p}"
                    )));
                }
                Node::Sample(*p)
            }
            F::FamilyNameRegexFilter(p) => {
                // A group's `(?:` or `(?i:` is syntax, not a ':' to match.
                if GROUP_OPENINGS.replace_all(p, "").contains(':') {
                    return Err(invalid(format!(
                        "family name regex {p:?} must not contain ':'"
                    )));
                }
                Node::Family(regex("family name", p.as_bytes())?)
            }
            F::ColumnQualifierRegexFilter(p) => Node::Qualifier(regex("column qualifier", p)?),
            F::ColumnRangeFilter(range) => {
                use column_range::{EndQualifier as E, StartQualifier as S};
                let start = match &range.start_qualifier {
                    Some(S::StartQualifierClosed(q)) => Bound::Included(q.clone()),
                    Some(S::StartQualifierOpen(q)) => Bound::Excluded(q.clone()),
                    None => Bound::Unbounded,
                };
                let end = match &range.end_qualifier {
                    Some(E::EndQualifierClosed(q)) => Bound::Included(q.clone()),
                    Some(E::EndQualifierOpen(q)) => Bound::Excluded(q.clone()),
                    None => Bound::Unbounded,
                };
                Node::Columns {
                    family: range.family_name.clone(),
                    start,
                    end,
                }
            }
            F::TimestampRangeFilter(range) => Node::Time(time_range(range)?),
            F::ValueRegexFilter(p) => Node::Value(regex("value", p)?),
            F::ValueRangeFilter(range) => {
                use value_range::{EndValue as E, StartValue as S};
                let start = match &range.start_value {
                    Some(S::StartValueClosed(v)) => Bound::Included(v.clone()),
                    Some(S::StartValueOpen(v)) => Bound::Excluded(v.clone()),
                    None => Bound::Unbounded,
                };
                let end = match &range.end_value {
                    Some(E::EndValueClosed(v)) => Bound::Included(v.clone()),
                    Some(E::EndValueOpen(v)) => Bound::Excluded(v.clone()),
                    None => Bound::Unbounded,
                };
                Node::Values(start, end)
            }
            F::CellsPerRowOffsetFilter(n) => Node::RowOffset(count("cells_per_row_offset", *n)?),
            F::CellsPerRowLimitFilter(n) => Node::RowLimit(positive("cells_per_row_limit", *n)?),
            F::CellsPerColumnLimitFilter(n) => {
                Node::ColumnLimit(positive("cells_per_column_limit", *n)?)
            }
            F::StripValueTransformer(true) => Node::Strip,
            F::StripValueTransformer(false) => {
                return Err(invalid("strip_value_transformer must be true when set"));
            }
            F::ApplyLabelTransformer(text) => Node::Label(label(text)?),
        })
    }

    fn list(
        &mut self,
        filters: &[data::RowFilter],
        depth: usize,
        place: Place,
    ) -> Result<Vec<Node>> {
        filters
            .iter()
            .map(|f| self.node(f, depth + 1, place))
            .collect()
    }
}

impl Node {
    /// Whether a label is applied somewhere beneath.
    fn labels(&self) -> bool {
        match self {
            Node::Label(_) => true,
            Node::Chain(nodes) | Node::Interleave(nodes) => nodes.iter().any(Node::labels),
            Node::Condition {
                predicate: _,
                on_true,
                on_false,
            } => {
                on_true.as_ref().is_some_and(|n| n.labels())
                    || on_false.as_ref().is_some_and(|n| n.labels())
            }
            _ => false,
        }
    }

    /// At most how many copies of one input cell come out.
    fn copies(&self) -> u64 {
        match self {
            Node::Chain(nodes) => nodes
                .iter()
                .fold(1u64, |acc, n| acc.saturating_mul(n.copies())),
            Node::Interleave(nodes) => nodes
                .iter()
                .fold(0u64, |acc, n| acc.saturating_add(n.copies())),
            Node::Condition {
                predicate: _,
                on_true,
                on_false,
            } => on_true
                .as_ref()
                .map_or(0, |n| n.copies())
                .max(on_false.as_ref().map_or(0, |n| n.copies())),
            _ => 1,
        }
    }

    /// Whether a cell passes, for the filters that look at one cell alone
    /// (given the value as the filters before left it: a stripped value is
    /// empty to the filters after the strip).
    fn cell_predicate(&self) -> Option<impl Fn(&Cell, &[u8]) -> bool + '_> {
        let ok = matches!(
            self,
            Node::PassAll
                | Node::BlockAll
                | Node::Family(_)
                | Node::Qualifier(_)
                | Node::Columns { .. }
                | Node::Time(_)
                | Node::Value(_)
                | Node::Values(..)
        );
        ok.then_some(move |cell: &Cell, value: &[u8]| match self {
            Node::PassAll => true,
            Node::Family(re) => re.is_match(cell.family.as_bytes()),
            Node::Qualifier(re) => re.is_match(&cell.qualifier),
            Node::Columns { family, start, end } => {
                *family == *cell.family && in_bounds(&cell.qualifier, start, end)
            }
            Node::Time(range) => range.contains(cell.timestamp),
            Node::Value(re) => re.is_match(value),
            Node::Values(start, end) => in_bounds(value, start, end),
            _ => false,
        })
    }
}

fn in_bounds(value: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let after_start = match start {
        Bound::Included(s) => value >= s.as_slice(),
        Bound::Excluded(s) => value > s.as_slice(),
        Bound::Unbounded => true,
    };
    let before_end = match end {
        Bound::Included(e) => value <= e.as_slice(),
        Bound::Excluded(e) => value < e.as_slice(),
        Bound::Unbounded => true,
    };
    after_start && before_end
}

/// A family name a regex matches and nothing else, if it is a plain name.
fn literal_family(re: &regex::bytes::Regex) -> Option<String> {
    let inner = re.as_str().strip_prefix(r"\A(?:")?.strip_suffix(r")\z")?;
    let plain = !inner.is_empty()
        && inner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    plain.then(|| inner.to_string())
}

/// A small random source for row sampling, seeded per request.
pub struct Sampler(u64);

impl Sampler {
    /// Seeded from the operating system (a fixed seed if it fails).
    pub fn new() -> Self {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Sampler(u64::from_le_bytes(seed) | 1)
    }

    /// A number in [0, 1).
    fn next(&mut self) -> f64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl RowFilter {
    /// Checks and compiles a request's filter (`None`: every cell).
    pub fn new(filter: Option<&data::RowFilter>) -> Result<RowFilter> {
        let node = match filter {
            None => Node::PassAll,
            Some(f) => Compiler { nodes: 0 }.node(f, 0, Place::Free)?,
        };
        let copies = node.copies();
        if copies > MAX_COPIES {
            return Err(invalid(format!(
                "the row filter's interleaves copy each cell up to {copies} times, more than {MAX_COPIES}"
            )));
        }
        Ok(RowFilter { node })
    }

    /// Whether the filter passes every cell unchanged.
    pub fn passes_all(&self) -> bool {
        matches!(self.node, Node::PassAll)
    }

    /// What the store can be asked for: the cells the filter's leading
    /// single-cell predicates keep (a superset of what it outputs).
    pub fn pushdown(&self) -> ReadFilter {
        let leading: &[Node] = match &self.node {
            Node::Chain(nodes) => nodes,
            other => std::slice::from_ref(other),
        };
        let mut read = ReadFilter::all();
        let (mut family, mut qualifiers, mut time) = (false, false, false);
        for node in leading {
            if node.cell_predicate().is_none() {
                break;
            }
            match node {
                Node::Family(re) if !family => {
                    if let Some(name) = literal_family(re) {
                        read = read.families([name]);
                        family = true;
                    }
                }
                Node::Columns { family: name, .. } if !family => {
                    read = read.families([name.clone()]);
                    family = true;
                }
                Node::Qualifier(re) if !qualifiers => {
                    read = read.qualifiers(QualifierFilter::Regex(re.clone()));
                    qualifiers = true;
                }
                Node::Time(range) if !time => {
                    read = read.time_range(*range);
                    time = true;
                }
                _ => {}
            }
        }
        read
    }

    /// The cells of `row` the filter outputs, in output order.
    pub fn apply<'a>(&'a self, row: &'a Row, sampler: &mut Sampler) -> Vec<Out<'a>> {
        let input: Vec<Out<'a>> = row
            .cells
            .iter()
            .enumerate()
            .map(|(at, cell)| Out {
                at,
                cell,
                stripped: false,
                label: None,
            })
            .collect();
        if self.passes_all() {
            return input;
        }
        let mut sunk = Vec::new();
        let mut out = apply(&self.node, &row.key, input, &mut sunk, sampler);
        if !sunk.is_empty() {
            out.append(&mut sunk);
            out.sort_by_key(|o| o.at);
        }
        out
    }
}

fn apply<'a>(
    node: &'a Node,
    key: &[u8],
    mut cells: Vec<Out<'a>>,
    sunk: &mut Vec<Out<'a>>,
    sampler: &mut Sampler,
) -> Vec<Out<'a>> {
    if cells.is_empty() {
        return cells;
    }
    if let Some(passes) = node.cell_predicate() {
        cells.retain(|o| passes(o.cell, if o.stripped { &[] } else { &o.cell.value }));
        return cells;
    }
    match node {
        Node::Chain(nodes) => {
            for n in nodes {
                cells = apply(n, key, cells, sunk, sampler);
                if cells.is_empty() {
                    break;
                }
            }
            cells
        }
        Node::Interleave(nodes) => {
            let mut out = Vec::new();
            for n in nodes {
                out.extend(apply(n, key, cells.clone(), sunk, sampler));
            }
            // Stable: copies of one cell keep the order of the filters.
            out.sort_by_key(|o| o.at);
            out
        }
        Node::Condition {
            predicate,
            on_true,
            on_false,
        } => {
            // A condition holds no sink (refused when compiled).
            let mut ignored = Vec::new();
            let matched = !apply(predicate, key, cells.clone(), &mut ignored, sampler).is_empty();
            let branch = if matched { on_true } else { on_false };
            match branch {
                Some(n) => apply(n, key, cells, sunk, sampler),
                None => Vec::new(),
            }
        }
        Node::Sink => {
            sunk.extend(cells);
            Vec::new()
        }
        Node::RowKey(re) => {
            if re.is_match(key) {
                cells
            } else {
                Vec::new()
            }
        }
        Node::Sample(p) => {
            if sampler.next() < *p {
                cells
            } else {
                Vec::new()
            }
        }
        Node::RowOffset(n) => cells.split_off((*n).min(cells.len())),
        Node::RowLimit(n) => {
            cells.truncate(*n);
            cells
        }
        Node::ColumnLimit(n) => {
            let mut kept = 0usize;
            let mut last: Option<(&str, &[u8])> = None;
            cells.retain(|o| {
                let column = (&*o.cell.family, o.cell.qualifier.as_slice());
                if last != Some(column) {
                    last = Some(column);
                    kept = 0;
                }
                kept += 1;
                kept <= *n
            });
            cells
        }
        Node::Strip => {
            for o in &mut cells {
                o.stripped = true;
            }
            cells
        }
        Node::Label(text) => {
            for o in &mut cells {
                o.label = Some(text.as_str());
            }
            cells
        }
        // The single-cell predicates returned above.
        _ => cells,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use data::row_filter::{Chain, Condition, Interleave};
    use std::sync::Arc;

    fn cell(family: &str, qualifier: &str, timestamp: i64, value: &str) -> Cell {
        Cell {
            family: Arc::from(family),
            qualifier: qualifier.as_bytes().to_vec(),
            timestamp,
            value: value.as_bytes().to_vec(),
        }
    }

    fn row() -> Row {
        Row {
            key: b"r1".to_vec(),
            cells: vec![
                cell("A", "A", 1, "w"),
                cell("A", "B", 2, "x"),
                cell("A", "B", 1, "y"),
                cell("B", "B", 4, "z"),
            ],
        }
    }

    fn f(filter: F) -> data::RowFilter {
        data::RowFilter {
            filter: Some(filter),
        }
    }

    fn chain(filters: Vec<data::RowFilter>) -> data::RowFilter {
        f(F::Chain(Chain { filters }))
    }

    fn interleave(filters: Vec<data::RowFilter>) -> data::RowFilter {
        f(F::Interleave(Interleave { filters }))
    }

    /// `family:qualifier@ts=value[label]` of each cell output.
    fn run(filter: &data::RowFilter) -> Vec<String> {
        let compiled = RowFilter::new(Some(filter)).unwrap();
        let row = row();
        compiled
            .apply(&row, &mut Sampler::new())
            .iter()
            .map(|o| {
                let value = if o.stripped {
                    String::new()
                } else {
                    String::from_utf8_lossy(&o.cell.value).into_owned()
                };
                let label = o.label.map(|l| format!("[{l}]")).unwrap_or_default();
                format!(
                    "{}:{}@{}={value}{label}",
                    o.cell.family,
                    String::from_utf8_lossy(&o.cell.qualifier),
                    o.cell.timestamp
                )
            })
            .collect()
    }

    #[test]
    fn the_sink_example_of_the_proto() {
        let filter = chain(vec![
            f(F::FamilyNameRegexFilter("A".into())),
            interleave(vec![
                f(F::PassAllFilter(true)),
                chain(vec![
                    f(F::ApplyLabelTransformer("foo".into())),
                    f(F::Sink(true)),
                ]),
            ]),
            f(F::ColumnQualifierRegexFilter(b"B".to_vec())),
        ]);
        assert_eq!(
            run(&filter),
            [
                "A:A@1=w[foo]",
                "A:B@2=x",
                "A:B@2=x[foo]",
                "A:B@1=y",
                "A:B@1=y[foo]"
            ]
        );
    }

    #[test]
    fn interleave_keeps_duplicates_in_row_order() {
        let filter = interleave(vec![
            f(F::CellsPerColumnLimitFilter(1)),
            f(F::ValueRegexFilter(b"[xz]".to_vec())),
        ]);
        assert_eq!(
            run(&filter),
            ["A:A@1=w", "A:B@2=x", "A:B@2=x", "B:B@4=z", "B:B@4=z"]
        );
    }

    #[test]
    fn conditions_choose_a_branch_on_the_predicate() {
        let condition = |predicate: data::RowFilter| {
            f(F::Condition(Box::new(Condition {
                predicate_filter: Some(Box::new(predicate)),
                true_filter: Some(Box::new(f(F::StripValueTransformer(true)))),
                false_filter: Some(Box::new(f(F::CellsPerRowLimitFilter(1)))),
            })))
        };
        assert_eq!(
            run(&condition(f(F::ValueRegexFilter(b"z".to_vec())))),
            ["A:A@1=", "A:B@2=", "A:B@1=", "B:B@4="]
        );
        assert_eq!(
            run(&condition(f(F::ValueRegexFilter(b"q".to_vec())))),
            ["A:A@1=w"]
        );
        let no_false = f(F::Condition(Box::new(Condition {
            predicate_filter: Some(Box::new(f(F::BlockAllFilter(true)))),
            true_filter: None,
            false_filter: None,
        })));
        assert!(run(&no_false).is_empty());
    }

    #[test]
    fn a_stripped_value_is_empty_to_the_filters_after_the_strip() {
        let strip = || f(F::StripValueTransformer(true));
        let empty = chain(vec![strip(), f(F::ValueRegexFilter(Vec::new()))]);
        assert_eq!(run(&empty), ["A:A@1=", "A:B@2=", "A:B@1=", "B:B@4="]);
        let w = chain(vec![strip(), f(F::ValueRegexFilter(b"w".to_vec()))]);
        assert!(run(&w).is_empty());
        let up_to_empty = chain(vec![
            strip(),
            f(F::ValueRangeFilter(data::ValueRange {
                start_value: None,
                end_value: Some(value_range::EndValue::EndValueClosed(Vec::new())),
            })),
        ]);
        assert_eq!(run(&up_to_empty).len(), 4);
    }

    #[test]
    fn limits_offsets_ranges_and_regexes() {
        assert_eq!(
            run(&f(F::CellsPerRowOffsetFilter(2))),
            ["A:B@1=y", "B:B@4=z"]
        );
        assert_eq!(
            run(&f(F::CellsPerColumnLimitFilter(1))),
            ["A:A@1=w", "A:B@2=x", "B:B@4=z"]
        );
        let columns = f(F::ColumnRangeFilter(data::ColumnRange {
            family_name: "A".into(),
            start_qualifier: Some(column_range::StartQualifier::StartQualifierOpen(
                b"A".to_vec(),
            )),
            end_qualifier: None,
        }));
        assert_eq!(run(&columns), ["A:B@2=x", "A:B@1=y"]);
        let time = f(F::TimestampRangeFilter(data::TimestampRange {
            start_timestamp_micros: 2,
            end_timestamp_micros: 0,
        }));
        assert_eq!(run(&time), ["A:B@2=x", "B:B@4=z"]);
        let values = f(F::ValueRangeFilter(data::ValueRange {
            start_value: Some(value_range::StartValue::StartValueClosed(b"x".to_vec())),
            end_value: Some(value_range::EndValue::EndValueOpen(b"z".to_vec())),
        }));
        assert_eq!(run(&values), ["A:B@2=x", "A:B@1=y"]);
        // Whole-string matches; \C is any byte.
        assert_eq!(
            run(&f(F::RowKeyRegexFilter(b"r".to_vec()))),
            Vec::<String>::new()
        );
        assert_eq!(run(&f(F::RowKeyRegexFilter(br"r\C".to_vec()))).len(), 4);
        assert_eq!(run(&f(F::FamilyNameRegexFilter("B".into()))), ["B:B@4=z"]);
        // A sample keeps a row whole or drops it whole.
        for p in [0.000_001, 0.5, 0.999_999] {
            let kept = run(&f(F::RowSampleFilter(p))).len();
            assert!(kept == 0 || kept == 4, "{p}: {kept}");
        }
    }

    #[test]
    fn a_byte_that_is_not_utf8_stands_for_itself_bare_or_quoted() {
        // Google's clients quote a literal value byte-wise as RE2 does:
        // a backslash before ASCII punctuation, bytes >= 0x80 copied.
        let minus_one = (-1i64).to_be_bytes();
        let quoted: Vec<u8> = minus_one.iter().flat_map(|b| [b'\\', *b]).collect();
        let bare = regex("value", &minus_one).unwrap();
        let escaped = regex("value", &quoted).unwrap();
        for re in [&bare, &escaped] {
            assert!(re.is_match(&minus_one));
            assert!(!re.is_match(&(-2i64).to_be_bytes()));
            assert!(!re.is_match(&minus_one[1..]));
        }
        // A byte that is part of UTF-8 keeps its meaning; a quoted `\\`
        // before a high byte does not swallow the backslash's own meaning.
        assert!(
            regex("value", "☃".as_bytes())
                .unwrap()
                .is_match("☃".as_bytes())
        );
        assert!(regex("value", b"\\\\\xff").unwrap().is_match(b"\\\xff"));
        assert!(regex("value", b"a\xff.").unwrap().is_match(b"a\xffb"));
    }

    #[test]
    fn bad_and_hostile_filters_are_refused_with_the_reason() {
        let refused =
            |filter: data::RowFilter| RowFilter::new(Some(&filter)).unwrap_err().to_string();
        assert!(refused(f(F::FamilyNameRegexFilter("a:b".into()))).contains("':'"));
        assert!(RowFilter::new(Some(&f(F::FamilyNameRegexFilter("(?:a|b)".into())))).is_ok());
        assert!(refused(f(F::ValueRegexFilter(b"(".to_vec()))).contains("value regex"));
        assert!(refused(f(F::CellsPerRowLimitFilter(-1))).contains("-1"));
        // Bigtable's own rules: limits of at least one, chains and
        // interleaves of two filters or more, a row key regex not empty.
        assert!(refused(f(F::CellsPerRowLimitFilter(0))).contains("at least 1"));
        assert!(refused(f(F::CellsPerColumnLimitFilter(0))).contains("at least 1"));
        assert!(refused(chain(vec![f(F::PassAllFilter(true))])).contains("two"));
        assert!(refused(interleave(vec![f(F::PassAllFilter(true))])).contains("two"));
        assert!(refused(f(F::RowKeyRegexFilter(vec![]))).contains("empty"));
        assert!(refused(f(F::RowSampleFilter(1.5))).contains("1.5"));
        assert!(refused(f(F::ApplyLabelTransformer("Bad Label".into()))).contains("Bad Label"));
        let in_condition = f(F::Condition(Box::new(Condition {
            predicate_filter: Some(Box::new(f(F::Sink(true)))),
            true_filter: None,
            false_filter: None,
        })));
        assert!(refused(in_condition).contains("sink"));
        let two_labels = chain(vec![
            f(F::ApplyLabelTransformer("a".into())),
            f(F::ApplyLabelTransformer("b".into())),
        ]);
        assert!(refused(two_labels).contains("label"));
        let mut deep = f(F::PassAllFilter(true));
        for _ in 0..100 {
            deep = chain(vec![deep, f(F::PassAllFilter(true))]);
        }
        assert!(refused(deep).contains("deeper"));
        // A chain of 11 interleaves of two would copy a cell 2^11 times.
        let two = interleave(vec![f(F::PassAllFilter(true)), f(F::PassAllFilter(true))]);
        assert!(refused(chain(vec![two.clone(); 11])).contains("2048 times"));
        assert!(RowFilter::new(Some(&chain(vec![two; 10]))).is_ok());
        // A tree of more filters than allowed, each level shallow.
        let mut wide = f(F::PassAllFilter(true));
        for _ in 0..12 {
            wide = chain(vec![wide.clone(), wide]);
        }
        assert!(refused(wide).contains("more than 1024 filters"));
        let huge = "a".repeat(MAX_REGEX_LEN + 1);
        assert!(refused(f(F::ValueRegexFilter(huge.into_bytes()))).contains("longer"));
        // A regex whose automaton would be huge.
        assert!(refused(f(F::ValueRegexFilter(b"(a{1000}){1000}".to_vec()))).contains("regex"));
    }

    #[test]
    fn leading_cell_predicates_reach_the_store() {
        let filter = chain(vec![
            f(F::FamilyNameRegexFilter("cf1".into())),
            f(F::TimestampRangeFilter(data::TimestampRange {
                start_timestamp_micros: 10,
                end_timestamp_micros: 20,
            })),
            f(F::CellsPerColumnLimitFilter(1)),
            f(F::ColumnQualifierRegexFilter(b"q".to_vec())),
        ]);
        let read = RowFilter::new(Some(&filter)).unwrap().pushdown();
        assert_eq!(read.families, Some(vec!["cf1".to_string()]));
        assert_eq!(read.time_range, TimeRange::new(10, 20));
        // After the column limit, the qualifier regex is not the store's.
        assert!(matches!(read.qualifiers, QualifierFilter::All));
        let regex_family = f(F::FamilyNameRegexFilter("cf.*".into()));
        let read = RowFilter::new(Some(&regex_family)).unwrap().pushdown();
        assert_eq!(read.families, None);
    }
}
