//! Model-based test: random sequences of mutations, reads, GC changes,
//! garbage collection and reopens, applied to the store and to a BTreeMap
//! of cells, must give identical results.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use cellar::{
    AlterOp, BadRows, CellBatch, FamilyFormat, FamilyKind, FamilySpec, GcPolicy, Mutation,
    QualifierFilter, ReadFilter, ReadModifyWrite, ReadRequest, Row, RowMutation, RowRange, RowSet,
    Store, TableSpec, TimeRange,
};
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};

use crate::numbers_read;

const FAMILIES: [&str; 3] = ["a", "b", "s"];

pub(crate) fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(1u8), Just(b'a'), Just(0xFFu8)],
        0..=max,
    )
}

/// A qualifier: short bytes, or a number (which PACKED rows of several
/// such columns store numbered).
fn qualifier() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => bytes(1),
        1 => (0..40u8).prop_map(|n| n.to_string().into_bytes()),
    ]
}

pub(crate) fn row_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xFFu8)],
        1..=3,
    )
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        bytes(3),
        any::<i8>().prop_map(|v| i64::from(v).to_be_bytes().to_vec())
    ]
}

fn normal_family() -> impl Strategy<Value = String> {
    prop_oneof![Just("a".to_string()), Just("b".to_string())]
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        row_key().prop_map(Bound::Included),
        row_key().prop_map(Bound::Excluded),
    ]
}

pub(crate) fn row_range() -> impl Strategy<Value = RowRange> {
    prop_oneof![
        row_key().prop_map(RowRange::key),
        bytes(2).prop_map(RowRange::prefix),
        (bound(), bound()).prop_map(|(s, e)| RowRange::between(s, e)),
    ]
}

fn gc_policy() -> impl Strategy<Value = GcPolicy> {
    // Age rules that either never or always apply to the test's tiny
    // timestamps, combined so that no age rule alone discards cells (the
    // compaction filter could then reclaim them at any moment).
    prop_oneof![
        Just(GcPolicy::KeepAll),
        (1..4u32).prop_map(GcPolicy::MaxVersions),
        (1..4u32).prop_map(|n| GcPolicy::Union(vec![
            GcPolicy::MaxVersions(n),
            GcPolicy::MaxAge(i64::MAX / 2)
        ])),
        (1..4u32).prop_map(|n| GcPolicy::Intersection(vec![
            GcPolicy::MaxVersions(n),
            GcPolicy::MaxAge(1)
        ])),
    ]
}

#[derive(Debug, Clone)]
struct Filter {
    families: Option<Vec<String>>,
    qualifiers: Option<BTreeSet<Vec<u8>>>,
    time: Option<(i64, i64)>,
    per_column: Option<usize>,
    /// Only these qualifiers' values of this family are wanted.
    values_of: Option<(String, BTreeSet<Vec<u8>>)>,
}

impl Filter {
    fn to_read_filter(&self) -> ReadFilter {
        ReadFilter {
            families: self.families.clone(),
            qualifiers: self
                .qualifiers
                .clone()
                .map_or(QualifierFilter::All, QualifierFilter::Set),
            // (An end of i64::MAX stands for none: from `s` on.)
            time_range: self.time.map_or(TimeRange::ALL, |(s, e)| TimeRange {
                start: s,
                end: (e < i64::MAX).then_some(e),
            }),
            cells_per_column: self.per_column,
            values_of: self
                .values_of
                .iter()
                .map(|(f, q)| (f.clone(), q.iter().cloned().collect()))
                .collect(),
        }
    }

    /// `rows` with the values a read may leave out emptied.
    fn without_unwanted_values(&self, mut rows: Vec<Row>) -> Vec<Row> {
        if let Some((family, wanted)) = &self.values_of {
            for cell in rows.iter_mut().flat_map(|r| r.cells.iter_mut()) {
                if *cell.family == **family && !wanted.contains(&cell.qualifier) {
                    cell.value.clear();
                }
            }
        }
        rows
    }
}

fn filter() -> impl Strategy<Value = Filter> {
    (
        prop::option::of(prop::sample::subsequence(
            FAMILIES.map(String::from).to_vec(),
            1..=3,
        )),
        prop::option::of(prop::collection::btree_set(qualifier(), 1..3)),
        prop::option::of(prop_oneof![
            (0..12i64, 0..12i64),
            (0..12i64).prop_map(|s| (s, i64::MAX)),
        ]),
        prop::option::of(1..4usize),
        // Mostly with a values_only: PACKED skips the others' numbers.
        prop_oneof![
            1 => Just(None),
            3 => (
                prop::sample::select(FAMILIES.map(String::from).to_vec()),
                prop::collection::btree_set(qualifier(), 0..3),
            )
                .prop_map(Some),
        ],
    )
        .prop_map(
            |(families, qualifiers, time, per_column, values_of)| Filter {
                families,
                qualifiers,
                time,
                per_column,
                values_of,
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Set(Vec<u8>, String, Vec<u8>, i64, Vec<u8>),
    /// Versions of one column at timestamps `from..from + n`, in one row
    /// mutation: a history long enough that reads keeping a column's
    /// newest cells seek past the rest.
    History(Vec<u8>, String, Vec<u8>, i64, u8),
    /// Columns `first..first + n` named by their number (`07`), a cell
    /// each at one time, in one row mutation: a time bucket's row, whose
    /// qualifiers a PACKED family stores numbered.
    Bucket(Vec<u8>, String, u8, u8, i64),
    DeleteCells(Vec<u8>, String, Vec<u8>, i64, i64),
    DeleteFamily(Vec<u8>, String),
    DeleteRow(Vec<u8>),
    Add(Vec<u8>, Vec<u8>, i64, i8),
    Increment(Vec<u8>, Vec<u8>, i8),
    Append(Vec<u8>, Vec<u8>, Vec<u8>),
    CheckAndMutate(Vec<u8>, Filter, Vec<u8>),
    Bulk(Vec<SetArgs>),
    /// `Store::write_batch`: rows of cell writes (a set, or an add to the
    /// sum family), keys sorted first when asked (the path without hashing).
    WriteBatch(Vec<(Vec<u8>, Vec<BatchCell>)>, bool),
    Read(Vec<RowRange>, Filter, bool, Option<usize>),
    SetGc(String, GcPolicy),
    CollectGarbage,
    /// `COMPACT TABLE`: GC everywhere, PACKED rows merged into blocks.
    Compact,
    /// One family's rows merged into blocks of at most .1 rows, in steps
    /// of at least .2.
    Merge(String, usize, usize),
    Reopen,
    /// Change a family's format, a row a step, stopping after that many
    /// steps when given (the family then lives in two keyspaces).
    SetFormat(String, FamilyFormat, Option<u8>),
}

type SetArgs = (Vec<u8>, String, Vec<u8>, i64, Vec<u8>);

/// A cell of a batch row: a set (family, qualifier, timestamp, value) or
/// an add to family `s` (qualifier, timestamp, input).
#[derive(Debug, Clone)]
enum BatchCell {
    Set(String, Vec<u8>, i64, Vec<u8>),
    Add(Vec<u8>, i64, i8),
}

fn batch_cell() -> impl Strategy<Value = BatchCell> {
    prop_oneof![
        5 => (normal_family(), qualifier(), 1..10i64, value()).prop_map(|(f, q, t, v)| BatchCell::Set(f, q, t, v)),
        1 => (qualifier(), 0..3i64, any::<i8>()).prop_map(|(q, t, v)| BatchCell::Add(q, t, v)),
    ]
}

fn set_args() -> impl Strategy<Value = SetArgs> {
    (row_key(), normal_family(), qualifier(), 1..10i64, value())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => set_args().prop_map(|(r, f, q, t, v)| Op::Set(r, f, q, t, v)),
        1 => (row_key(), normal_family(), qualifier(), 0..12i64, 8..30u8).prop_map(|(r, f, q, t, n)| Op::History(r, f, q, t, n)),
        1 => (row_key(), normal_family(), 0..30u8, 6..20u8, 0..12i64).prop_map(|(r, f, first, n, t)| Op::Bucket(r, f, first, n, t)),
        2 => (row_key(), normal_family(), qualifier(), 0..12i64, 0..12i64).prop_map(|(r, f, q, s, e)| Op::DeleteCells(r, f, q, s.min(e), s.max(e))),
        1 => (row_key(), normal_family()).prop_map(|(r, f)| Op::DeleteFamily(r, f)),
        1 => row_key().prop_map(Op::DeleteRow),
        2 => (row_key(), qualifier(), 0..3i64, any::<i8>()).prop_map(|(r, q, t, v)| Op::Add(r, q, t, v)),
        1 => (row_key(), qualifier(), any::<i8>()).prop_map(|(r, q, d)| Op::Increment(r, q, d)),
        1 => (row_key(), qualifier(), bytes(2)).prop_map(|(r, q, s)| Op::Append(r, q, s)),
        1 => (row_key(), filter(), qualifier()).prop_map(|(r, f, q)| Op::CheckAndMutate(r, f, q)),
        1 => prop::collection::vec(set_args(), 1..6).prop_map(Op::Bulk),
        2 => (prop::collection::vec((row_key(), prop::collection::vec(batch_cell(), 1..5)), 1..7), any::<bool>())
            .prop_map(|(rows, sorted)| Op::WriteBatch(rows, sorted)),
        5 => (prop::collection::vec(row_range(), 0..3), filter(), any::<bool>(), prop::option::of(1..4usize))
            .prop_map(|(r, f, rev, l)| Op::Read(r, f, rev, l)),
        1 => (normal_family(), gc_policy()).prop_map(|(f, p)| Op::SetGc(f, p)),
        1 => Just(Op::CollectGarbage),
        1 => Just(Op::Compact),
        2 => (normal_family(), 1..4usize, 1..6usize).prop_map(|(f, b, s)| Op::Merge(f, b, s)),
        1 => Just(Op::Reopen),
        2 => (prop_oneof![Just("a"), Just("b"), Just("s")], prop_oneof![Just(FamilyFormat::Cells), Just(FamilyFormat::Packed), Just(FamilyFormat::Auto)], prop::option::of(0..4u8))
            .prop_map(|(f, format, stop)| Op::SetFormat(f.to_string(), format, stop)),
    ]
}

/// (row, family index, qualifier, newest first) -> value.
type Cells = BTreeMap<(Vec<u8>, usize, Vec<u8>, Reverse<i64>), Vec<u8>>;

#[derive(Default)]
struct Model {
    cells: Cells,
    gc: [GcPolicy; 3],
}

impl Model {
    fn family(name: &str) -> usize {
        FAMILIES.iter().position(|f| *f == name).unwrap()
    }

    /// Merges `v` into the sum cell `s:q` at `ts`.
    fn add(&mut self, r: &[u8], q: &[u8], ts: i64, v: i8) {
        let key = (r.to_vec(), 2, q.to_vec(), Reverse(ts));
        let old = self
            .cells
            .get(&key)
            .map_or(0, |b| i64::from_be_bytes(b.as_slice().try_into().unwrap()));
        self.cells
            .insert(key, (old + i64::from(v)).to_be_bytes().to_vec());
    }

    /// The visible cells of a row, in read order, after GC (no filter).
    fn visible(&self, row: &[u8]) -> Vec<(usize, Vec<u8>, i64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut last: Option<(usize, Vec<u8>)> = None;
        let mut index = 0;
        let start = (row.to_vec(), 0, vec![], Reverse(i64::MAX));
        for ((_, f, q, Reverse(ts)), v) in self.cells.range(start..).take_while(|(k, _)| k.0 == row)
        {
            let column = (*f, q.clone());
            if last.as_ref() != Some(&column) {
                last = Some(column);
                index = 0;
            }
            if !self.gc[*f].is_garbage(index, *ts, cellar::now_micros()) {
                out.push((*f, q.clone(), *ts, v.clone()));
            }
            index += 1;
        }
        out
    }

    fn rows(&self) -> BTreeSet<Vec<u8>> {
        self.cells.keys().map(|k| k.0.clone()).collect()
    }

    fn read_row(&self, row: &[u8], filter: &Filter) -> Option<Row> {
        let mut taken: BTreeMap<(usize, Vec<u8>), usize> = BTreeMap::new();
        let mut cells = Vec::new();
        for (f, q, ts, v) in self.visible(row) {
            if filter
                .families
                .as_ref()
                .is_some_and(|fs| !fs.iter().any(|n| n == FAMILIES[f]))
            {
                continue;
            }
            if filter
                .qualifiers
                .as_ref()
                .is_some_and(|qs| !qs.contains(&q))
            {
                continue;
            }
            if filter.time.is_some_and(|(s, e)| !(s..e).contains(&ts)) {
                continue;
            }
            let n = taken.entry((f, q.clone())).or_default();
            if filter.per_column.is_some_and(|max| *n >= max) {
                continue;
            }
            *n += 1;
            cells.push(cellar::Cell {
                family: FAMILIES[f].into(),
                qualifier: q,
                timestamp: ts,
                value: v,
            });
        }
        (!cells.is_empty()).then(|| Row {
            key: row.to_vec(),
            cells,
        })
    }

    fn read(
        &self,
        ranges: &[RowRange],
        filter: &Filter,
        reverse: bool,
        limit: Option<usize>,
    ) -> Vec<Row> {
        let mut rows: Vec<Vec<u8>> = self
            .rows()
            .into_iter()
            .filter(|r| {
                ranges
                    .iter()
                    .any(|range| (range.start.clone(), range.end.clone()).contains(r))
            })
            .collect();
        if reverse {
            rows.reverse();
        }
        rows.iter()
            .filter_map(|r| self.read_row(r, filter))
            .take(limit.unwrap_or(usize::MAX))
            .collect()
    }

    fn set(&mut self, row: &[u8], family: usize, q: &[u8], ts: i64, v: Vec<u8>) {
        self.cells
            .insert((row.to_vec(), family, q.to_vec(), Reverse(ts)), v);
    }

    fn delete_where(&mut self, keep: impl Fn(&(Vec<u8>, usize, Vec<u8>, Reverse<i64>)) -> bool) {
        self.cells.retain(|k, _| keep(k));
    }

    fn latest(&self, row: &[u8], family: usize, q: &[u8]) -> Option<(i64, Vec<u8>)> {
        self.visible(row)
            .into_iter()
            .find(|(f, qq, _, _)| *f == family && qq == q)
            .map(|(_, _, ts, v)| (ts, v))
    }

    fn collect_garbage(&mut self) {
        let mut keep = Cells::new();
        for row in self.rows() {
            for (f, q, ts, v) in self.visible(&row) {
                keep.insert((row.clone(), f, q, Reverse(ts)), v);
            }
        }
        self.cells = keep;
    }

    /// [`Model::collect_garbage`] of one family.
    fn collect_family_garbage(&mut self, family: usize) {
        let mut keep: Cells = self
            .cells
            .iter()
            .filter(|((_, f, _, _), _)| *f != family)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for row in self.rows() {
            for (f, q, ts, v) in self.visible(&row) {
                if f == family {
                    keep.insert((row.clone(), f, q, Reverse(ts)), v);
                }
            }
        }
        self.cells = keep;
    }
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir).unwrap()
}

fn run(ops: Vec<Op>, formats: [FamilyFormat; 3]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    store
        .create_table(
            TableSpec::new("t")
                .family(FamilySpec::new("a").format(formats[0]))
                .family(FamilySpec::new("b").format(formats[1]))
                .family(
                    FamilySpec::new("s")
                        .kind(FamilyKind::Sum)
                        .format(formats[2]),
                ),
        )
        .unwrap();
    let mut model = Model::default();
    let mut pending: [Option<FamilyFormat>; 3] = [None; 3];
    for op in ops {
        match op {
            Op::Set(r, f, q, ts, v) => {
                store
                    .mutate_row(
                        "t",
                        RowMutation::new(
                            r.clone(),
                            vec![Mutation::set_at(&f, q.clone(), ts, v.clone())],
                        ),
                    )
                    .unwrap();
                model.set(&r, Model::family(&f), &q, ts, v);
            }
            Op::History(r, f, q, from, n) => {
                let times = from..from + i64::from(n);
                let value = |ts: i64| ts.to_be_bytes().to_vec();
                let mutations = times
                    .clone()
                    .map(|ts| Mutation::set_at(&f, q.clone(), ts, value(ts)))
                    .collect();
                store
                    .mutate_row("t", RowMutation::new(r.clone(), mutations))
                    .unwrap();
                for ts in times {
                    model.set(&r, Model::family(&f), &q, ts, value(ts));
                }
            }
            Op::Bucket(r, f, first, n, ts) => {
                let columns = (first..first + n).map(|c| (format!("{c:02}").into_bytes(), c));
                let value = |c: u8| (f64::from(c) / 4.0).to_be_bytes().to_vec();
                let mutations = columns
                    .clone()
                    .map(|(q, c)| Mutation::set_at(&f, q, ts, value(c)))
                    .collect();
                store
                    .mutate_row("t", RowMutation::new(r.clone(), mutations))
                    .unwrap();
                for (q, c) in columns {
                    model.set(&r, Model::family(&f), &q, ts, value(c));
                }
            }
            Op::DeleteCells(r, f, q, s, e) => {
                let m = Mutation::DeleteCells {
                    family: f.clone(),
                    qualifier: q.clone(),
                    time_range: TimeRange::new(s, e),
                };
                store
                    .mutate_row("t", RowMutation::new(r.clone(), vec![m]))
                    .unwrap();
                let fi = Model::family(&f);
                model.delete_where(|(rr, ff, qq, Reverse(ts))| {
                    !(rr == &r && *ff == fi && qq == &q && (s..e).contains(ts))
                });
            }
            Op::DeleteFamily(r, f) => {
                store
                    .mutate_row(
                        "t",
                        RowMutation::new(
                            r.clone(),
                            vec![Mutation::DeleteFamily { family: f.clone() }],
                        ),
                    )
                    .unwrap();
                let fi = Model::family(&f);
                model.delete_where(|(rr, ff, _, _)| !(rr == &r && *ff == fi));
            }
            Op::DeleteRow(r) => {
                store
                    .mutate_row("t", RowMutation::new(r.clone(), vec![Mutation::DeleteRow]))
                    .unwrap();
                model.delete_where(|(rr, _, _, _)| rr != &r);
            }
            Op::Add(r, q, ts, v) => {
                let m = Mutation::AddToCell {
                    family: "s".into(),
                    qualifier: q.clone(),
                    timestamp: Some(ts),
                    input: i64::from(v).to_be_bytes().to_vec(),
                };
                store
                    .mutate_row("t", RowMutation::new(r.clone(), vec![m]))
                    .unwrap();
                model.add(&r, &q, ts, v);
            }
            Op::Increment(r, q, d) => {
                let rule = ReadModifyWrite::Increment {
                    family: "a".into(),
                    qualifier: q.clone(),
                    delta: i64::from(d),
                };
                let got = store.read_modify_write("t", &r, vec![rule]);
                let latest = model.latest(&r, 0, &q);
                match latest
                    .as_ref()
                    .map(|(_, v)| <[u8; 8]>::try_from(v.as_slice()))
                {
                    Some(Err(_)) => {
                        prop_assert!(got.is_err(), "increment of a non-int64 must fail")
                    }
                    other => {
                        let old = other.map_or(0, |b| i64::from_be_bytes(b.unwrap()));
                        let row = got.unwrap();
                        let cell = &row.cells[0];
                        prop_assert_eq!(
                            &cell.value,
                            &old.wrapping_add(i64::from(d)).to_be_bytes().to_vec()
                        );
                        prop_assert!(latest.is_none_or(|(ts, _)| cell.timestamp >= ts));
                        model.set(&r, 0, &q, cell.timestamp, cell.value.clone());
                    }
                }
            }
            Op::Append(r, q, s) => {
                let rule = ReadModifyWrite::Append {
                    family: "b".into(),
                    qualifier: q.clone(),
                    suffix: s.clone(),
                };
                let row = store.read_modify_write("t", &r, vec![rule]).unwrap();
                let mut expected = model.latest(&r, 1, &q).map(|(_, v)| v).unwrap_or_default();
                expected.extend_from_slice(&s);
                prop_assert_eq!(&row.cells[0].value, &expected);
                model.set(&r, 1, &q, row.cells[0].timestamp, expected);
            }
            Op::CheckAndMutate(r, f, q) => {
                let then = vec![Mutation::set_at("a", q.clone(), 11, b"then".to_vec())];
                let otherwise = vec![Mutation::DeleteRow];
                let got = store
                    .check_and_mutate("t", &r, f.to_read_filter(), then, otherwise)
                    .unwrap();
                let expected = model.read_row(&r, &f).is_some();
                prop_assert_eq!(got, expected);
                if expected {
                    model.set(&r, 0, &q, 11, b"then".to_vec());
                } else {
                    model.delete_where(|(rr, _, _, _)| rr != &r);
                }
            }
            Op::Bulk(rows) => {
                let muts = rows
                    .iter()
                    .map(|(r, f, q, ts, v)| {
                        RowMutation::new(
                            r.clone(),
                            vec![Mutation::set_at(f, q.clone(), *ts, v.clone())],
                        )
                    })
                    .collect();
                let results = store.mutate_rows("t", muts).unwrap();
                prop_assert!(results.iter().all(Result::is_ok));
                for (r, f, q, ts, v) in rows {
                    model.set(&r, Model::family(&f), &q, ts, v);
                }
            }
            Op::WriteBatch(mut rows, sorted) => {
                if sorted {
                    rows.sort_by(|a, b| a.0.cmp(&b.0));
                }
                let mut batch = CellBatch::new();
                for (r, cells) in &rows {
                    batch.begin_row(r);
                    for cell in cells {
                        match cell {
                            BatchCell::Set(f, q, ts, v) => {
                                let f = batch.family(f);
                                batch.set(f, q, *ts, v);
                            }
                            BatchCell::Add(q, ts, v) => {
                                let f = batch.family("s");
                                batch.add(f, q, *ts, &i64::from(*v).to_be_bytes());
                            }
                        }
                    }
                }
                let failed = store.write_batch("t", &batch, BadRows::Stop).unwrap();
                prop_assert!(failed.is_empty(), "{:?}", failed);
                for (r, cells) in rows {
                    for cell in cells {
                        match cell {
                            BatchCell::Set(f, q, ts, v) => {
                                model.set(&r, Model::family(&f), &q, ts, v)
                            }
                            BatchCell::Add(q, ts, v) => model.add(&r, &q, ts, v),
                        }
                    }
                }
            }
            Op::Read(ranges, f, reverse, limit) => {
                let request = ReadRequest {
                    rows: RowSet {
                        ranges: ranges.clone(),
                    },
                    filter: f.to_read_filter(),
                    reverse,
                    limit,
                    unmetered: false,
                };
                let got: Vec<Row> = store
                    .read_rows("t", request)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                prop_assert_eq!(
                    f.without_unwanted_values(got),
                    f.without_unwanted_values(model.read(&ranges, &f, reverse, limit))
                );
                let request = ReadRequest {
                    rows: RowSet { ranges },
                    filter: f.to_read_filter(),
                    reverse,
                    limit,
                    unmetered: false,
                };
                // Also of one family alone, where a PACKED one's blocks
                // may give rows at once.
                for family in ["a", "b"] {
                    let mut one = request.clone();
                    one.filter = one.filter.families([family]);
                    numbers_read_alike(&store, one)?;
                }
                numbers_read_alike(&store, request)?;
            }
            Op::SetGc(f, policy) => {
                store
                    .alter_table(
                        "t",
                        vec![AlterOp::SetGc {
                            family: f.clone(),
                            gc: policy.clone(),
                        }],
                    )
                    .unwrap();
                model.gc[Model::family(&f)] = policy;
            }
            Op::CollectGarbage => {
                store.collect_garbage("t").unwrap();
                model.collect_garbage();
            }
            Op::Compact => {
                store.collect_and_compact("t").unwrap();
                model.collect_garbage();
            }
            Op::Merge(f, block_rows, step_rows) => {
                let local = store.local().expect("the model runs on the embedded store");
                let def = local.table("t").unwrap();
                let family = def.family(&f).unwrap();
                let merges = matches!(family.format, FamilyFormat::Packed | FamilyFormat::Auto)
                    && family.converting.is_none();
                local
                    .merge_blocks_sized("t", &f, block_rows, step_rows)
                    .unwrap();
                if merges {
                    model.collect_family_garbage(Model::family(&f));
                }
            }
            Op::Reopen => {
                drop(store);
                store = open(dir.path());
            }
            Op::SetFormat(f, format, stop) => {
                let family = Model::family(&f);
                // A change left half way must be finished before another.
                let target = match pending[family] {
                    Some(p) if p != format => {
                        prop_assert!(
                            store
                                .set_family_format("t", &f, format, &mut |_| true)
                                .is_err()
                        );
                        p
                    }
                    _ => format,
                };
                let mut steps = 0u8;
                let done = store
                    .local()
                    .expect("the model runs on the embedded store")
                    .set_family_format_in_steps("t", &f, target, 1, &mut |_| {
                        steps += 1;
                        stop.is_none_or(|s| steps <= s)
                    })
                    .unwrap();
                pending[family] = (!done.finished).then_some(target);
            }
        }
    }
    let everything = Filter {
        families: None,
        qualifiers: None,
        time: None,
        per_column: None,
        values_of: None,
    };
    let got: Vec<Row> = store
        .read_rows("t", ReadRequest::all())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    prop_assert_eq!(
        got,
        model.read(&[RowRange::all()], &everything, false, None)
    );
    let report = store.local().expect("embedded").check().unwrap();
    prop_assert!(report.healthy(), "{report:?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model(
        ops in prop::collection::vec(op(), 1..40),
        formats in prop::array::uniform3(prop_oneof![
            Just(FamilyFormat::Cells),
            Just(FamilyFormat::Packed),
            Just(FamilyFormat::Auto),
        ]),
    ) {
        run(ops, formats)?;
    }
}

/// A numbers read gives the same rows whether it takes a column-wise
/// block's rows at once (`next_number_rows`, at most 3 at a time) or one
/// by one (`next_numbers`).
fn numbers_read_alike(store: &Store, request: ReadRequest) -> Result<(), TestCaseError> {
    let families = store
        .read_rows("t", request.clone())
        .unwrap()
        .family_names();
    let wanted: Vec<(usize, Vec<u8>)> = (0..families.len())
        .flat_map(|f| [b"a".to_vec(), vec![0], b"7".to_vec()].map(|q| (f, q)))
        .collect();
    let mut stream = store.read_rows("t", request.clone()).unwrap();
    let one_by_one = numbers_read::one_by_one(&mut stream, &wanted);
    let mut stream = store.read_rows("t", request).unwrap();
    let (at_once, _) = numbers_read::at_once(&mut stream, &wanted, 3);
    prop_assert_eq!(at_once, one_by_one);
    Ok(())
}
