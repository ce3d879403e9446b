//! The store through its public API: catalog, mutations, reads, limits, GC.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use cellar::{
    AlterOp, Durability, Error, FamilyFormat, FamilyKind, FamilySpec, GcPolicy, Mutation,
    QualifierFilter, ReadFilter, ReadModifyWrite, ReadRequest, RowMutation, RowProbe, RowRange,
    RowSet, Store, StoreOptions, TableSpec, TimeRange, hll_estimate, now_micros,
};
use std::ops::Bound;

use crate::numbers_read;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

fn two_family_table(store: &Store, name: &str) {
    store
        .create_table(
            TableSpec::new(name)
                .family(FamilySpec::new("a"))
                .family(FamilySpec::new("b")),
        )
        .unwrap();
}

fn keys(store: &Store, table: &str, request: ReadRequest) -> Vec<Vec<u8>> {
    store
        .read_rows(table, request)
        .unwrap()
        .map(|r| r.unwrap().key)
        .collect()
}

fn put(
    store: &Store,
    table: &str,
    key: &[u8],
    family: &str,
    qualifier: &str,
    ts: i64,
    value: &str,
) {
    store
        .mutate_row(
            table,
            RowMutation::new(key, vec![Mutation::set_at(family, qualifier, ts, value)]),
        )
        .unwrap();
}

#[test]
fn a_second_open_of_the_same_directory_is_refused_clearly() {
    let (dir, _store) = store();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::StoreInUse { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
}

#[test]
fn catalog_survives_reopen_and_alter_changes_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        store
            .create_table(
                TableSpec::new("t")
                    .family(FamilySpec::new("cf").gc(GcPolicy::MaxVersions(2)))
                    .family(FamilySpec::new("agg").kind(FamilyKind::Sum))
                    .metadata("key_schema", "region#id"),
            )
            .unwrap();
        two_family_table(&store, "other");
        put(&store, "t", b"r1", "cf", "q", 5, "v");
        store
            .alter_table(
                "t",
                vec![
                    AlterOp::AddFamily(FamilySpec::new("new")),
                    AlterOp::SetGc {
                        family: "cf".into(),
                        gc: GcPolicy::MaxAge(3_600_000_000),
                    },
                ],
            )
            .unwrap();
        store.drop_table("other").unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.list_tables(), vec!["t".to_string()]);
    let def = store.table("t").unwrap();
    let names: Vec<_> = def.families.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["cf", "agg", "new"]);
    assert_eq!(def.families[0].gc, GcPolicy::MaxAge(3_600_000_000));
    assert_eq!(def.families[1].kind, FamilyKind::Sum);
    assert_eq!(
        def.metadata.get("key_schema").map(String::as_str),
        Some("region#id")
    );
    // MaxAge of an hour hides the cell written at t=5us.
    assert!(
        store
            .read_row("t", b"r1", ReadFilter::all())
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        store.table("other"),
        Err(Error::TableNotFound { .. })
    ));
}

#[test]
fn dropping_a_family_removes_its_cells_and_a_recreated_one_starts_empty() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    put(&store, "t", b"r", "a", "q", 1, "x");
    put(&store, "t", b"r", "b", "q", 1, "y");
    store
        .alter_table("t", vec![AlterOp::DropFamily("b".into())])
        .unwrap();
    store
        .alter_table("t", vec![AlterOp::AddFamily(FamilySpec::new("b"))])
        .unwrap();
    let row = store
        .read_row("t", b"r", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.cells.len(), 1);
    assert_eq!(&*row.cells[0].family, "a");
}

#[test]
fn ddl_errors_name_the_problem() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let err = store.create_table(TableSpec::new("t")).unwrap_err();
    assert!(matches!(err, Error::TableExists { .. }));
    for bad in ["", "../x", "a\0b", &"x".repeat(10_000)] {
        let err = store.create_table(TableSpec::new(bad)).unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}: {err}");
    }
    let err = store
        .create_table(TableSpec::new("f").family(FamilySpec::new("../x")))
        .unwrap_err();
    assert!(err.to_string().contains("column family"), "{err}");
    let many = (0..101).fold(TableSpec::new("wide"), |t, i| {
        t.family(FamilySpec::new(format!("f{i}")))
    });
    let err = store.create_table(many).unwrap_err();
    assert!(
        err.to_string()
            .contains("101 column families; the limit is 100"),
        "{err}"
    );
    let dup = TableSpec::new("d")
        .family(FamilySpec::new("x"))
        .family(FamilySpec::new("x"));
    assert!(matches!(
        store.create_table(dup),
        Err(Error::FamilyExists { .. })
    ));
    let err = store
        .alter_table("t", vec![AlterOp::DropFamily("zz".into())])
        .unwrap_err();
    assert!(matches!(err, Error::FamilyNotFound { .. }));
    let err = store
        .alter_table(
            "t",
            vec![AlterOp::SetGc {
                family: "a".into(),
                gc: GcPolicy::MaxVersions(0),
            }],
        )
        .unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
    // A failed alter changes nothing.
    let err = store
        .alter_table(
            "t",
            vec![
                AlterOp::AddFamily(FamilySpec::new("c")),
                AlterOp::DropFamily("nope".into()),
            ],
        )
        .unwrap_err();
    assert!(matches!(err, Error::FamilyNotFound { .. }));
    assert_eq!(store.table("t").unwrap().families.len(), 2);
    assert_eq!(store.list_tables(), vec!["t".to_string()]);
}

#[test]
fn limits_are_checked_before_writing_and_the_store_stays_usable() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let cases: Vec<(RowMutation, &str)> = vec![
        (
            RowMutation::new(b"".to_vec(), vec![Mutation::set("a", "q", "v")]),
            "row key is empty",
        ),
        (
            RowMutation::new(vec![b'k'; 4097], vec![Mutation::set("a", "q", "v")]),
            "row key is 4097 bytes; the limit is 4096",
        ),
        (
            RowMutation::new(
                "k",
                vec![Mutation::set("a", vec![b'q'; 16 * 1024 + 1], "v")],
            ),
            "qualifier is 16385 bytes",
        ),
        (
            RowMutation::new(
                "k",
                vec![Mutation::set("a", "q", vec![0u8; 100 * 1024 * 1024 + 1])],
            ),
            "the limit is 104857600",
        ),
        (
            RowMutation::new("k", vec![Mutation::set("zz", "q", "v")]),
            "column family \"zz\" does not exist",
        ),
        (
            RowMutation::new("k", vec![Mutation::set_at("a", "q", -5, "v")]),
            "timestamp -5 is out of range",
        ),
    ];
    for (row, message) in cases {
        let err = store.mutate_row("t", row).unwrap_err().to_string();
        assert!(err.contains(message), "{err} should contain {message}");
    }
    // The largest legal key and qualifier work.
    let key = vec![0u8; 4096];
    let qualifier = vec![0xFFu8; 16 * 1024];
    store
        .mutate_row(
            "t",
            RowMutation::new(
                key.clone(),
                vec![Mutation::set_at("a", qualifier.clone(), 1, "ok")],
            ),
        )
        .unwrap();
    let row = store
        .read_row("t", &key, ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.latest("a", &qualifier), Some(&b"ok"[..]));
    assert_eq!(keys(&store, "t", ReadRequest::all()), vec![key]);
}

#[test]
fn a_row_mutation_is_all_or_nothing() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let row = RowMutation::new(
        "k",
        vec![
            Mutation::set("a", "q", "v"),
            Mutation::set("missing", "q", "v"),
        ],
    );
    assert!(store.mutate_row("t", row).is_err());
    assert!(
        store
            .read_row("t", b"k", ReadFilter::all())
            .unwrap()
            .is_none()
    );
}

#[test]
fn bulk_mutations_report_per_row_and_apply_in_order() {
    let (_dir, store) = store();
    store
        .create_table(
            TableSpec::new("t")
                .family(FamilySpec::new("a"))
                .family(FamilySpec::new("s").kind(FamilyKind::Sum)),
        )
        .unwrap();
    let mut rows: Vec<RowMutation> = (0..3000)
        .map(|i| {
            RowMutation::new(
                format!("row{i:05}"),
                vec![Mutation::set_at("a", "q", 1, "v")],
            )
        })
        .collect();
    rows.push(RowMutation::new(
        "bad",
        vec![Mutation::set("nope", "q", "v")],
    ));
    // The same row twice: the second sees the first.
    rows.push(RowMutation::new(
        "ctr",
        vec![Mutation::add_i64("s", "n", 2)],
    ));
    rows.push(RowMutation::new(
        "ctr",
        vec![Mutation::add_i64("s", "n", 5)],
    ));
    rows.push(RowMutation::new("row00001", vec![Mutation::DeleteRow]));
    let results = store.mutate_rows("t", rows).unwrap();
    assert_eq!(results.len(), 3004);
    assert!(results[..3000].iter().all(Result::is_ok));
    assert!(matches!(results[3000], Err(Error::FamilyNotFound { .. })));
    let row = store
        .read_row("t", b"ctr", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.latest("s", b"n"), Some(&7i64.to_be_bytes()[..]));
    let all = keys(
        &store,
        "t",
        ReadRequest::all().filter(ReadFilter::all().families(["a"])),
    );
    assert_eq!(all.len(), 2999);
    assert!(!all.contains(&b"row00001".to_vec()));
}

#[test]
fn deletes_by_column_time_range_family_and_row() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    for ts in [10, 20, 30] {
        put(&store, "t", b"r", "a", "q", ts, &format!("v{ts}"));
    }
    put(&store, "t", b"r", "a", "other", 1, "o");
    put(&store, "t", b"r", "b", "q", 1, "b");
    let delete = Mutation::DeleteCells {
        family: "a".into(),
        qualifier: b"q".to_vec(),
        time_range: TimeRange::new(15, 30),
    };
    store
        .mutate_row("t", RowMutation::new("r", vec![delete]))
        .unwrap();
    let row = store
        .read_row("t", b"r", ReadFilter::all().families(["a"]))
        .unwrap()
        .unwrap();
    let ts: Vec<i64> = row.column("a", b"q").map(|c| c.timestamp).collect();
    assert_eq!(ts, [30, 10]);
    store
        .mutate_row(
            "t",
            RowMutation::new("r", vec![Mutation::DeleteFamily { family: "a".into() }]),
        )
        .unwrap();
    let row = store
        .read_row("t", b"r", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.cells.len(), 1);
    assert_eq!(&*row.cells[0].family, "b");
    // Delete then set in one mutation: the set survives.
    store
        .mutate_row(
            "t",
            RowMutation::new(
                "r",
                vec![Mutation::DeleteRow, Mutation::set_at("a", "n", 3, "new")],
            ),
        )
        .unwrap();
    let row = store
        .read_row("t", b"r", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.latest("a", b"n"), Some(&b"new"[..]));
}

#[test]
fn row_sets_select_keys_ranges_and_prefixes_forward_and_reverse() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let all: Vec<&[u8]> = vec![
        b"a",
        b"a\x00",
        b"a\x00\x00",
        b"ab",
        b"a\xff",
        b"b",
        b"\xff",
        b"\xff\xff",
    ];
    for k in &all {
        put(&store, "t", k, "a", "q", 1, "v");
    }
    let got = keys(&store, "t", ReadRequest::all());
    assert_eq!(got, all.iter().map(|k| k.to_vec()).collect::<Vec<_>>());
    let rev = keys(&store, "t", ReadRequest::all().reverse());
    assert_eq!(
        rev,
        all.iter().rev().map(|k| k.to_vec()).collect::<Vec<_>>()
    );
    let prefix = keys(
        &store,
        "t",
        ReadRequest::rows(RowSet::prefix(b"a\x00".to_vec())),
    );
    assert_eq!(prefix, vec![b"a\x00".to_vec(), b"a\x00\x00".to_vec()]);
    let ff = keys(
        &store,
        "t",
        ReadRequest::rows(RowSet::prefix(b"\xff".to_vec())),
    );
    assert_eq!(ff, vec![b"\xff".to_vec(), b"\xff\xff".to_vec()]);
    let range = RowRange::between(
        Bound::Excluded(b"a".to_vec()),
        Bound::Included(b"ab".to_vec()),
    );
    let got = keys(&store, "t", ReadRequest::rows(RowSet::range(range)));
    assert_eq!(
        got,
        vec![b"a\x00".to_vec(), b"a\x00\x00".to_vec(), b"ab".to_vec()]
    );
    // Duplicate and overlapping pieces come back once each, in order.
    let set = RowSet::keys([b"b".to_vec(), b"a".to_vec(), b"b".to_vec(), b"zz".to_vec()])
        .with(RowRange::prefix(b"a".to_vec()));
    let got = keys(&store, "t", ReadRequest::rows(set.clone()));
    assert_eq!(got.len(), 6);
    let got = keys(&store, "t", ReadRequest::rows(set).reverse().limit(2));
    assert_eq!(got, vec![b"b".to_vec(), b"a\xff".to_vec()]);
    assert!(keys(&store, "t", ReadRequest::rows(RowSet::default())).is_empty());
}

#[test]
fn filters_select_families_qualifiers_times_and_versions() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    for q in ["0000", "0015", "1200", "2345"] {
        for ts in [100, 200, 300] {
            put(
                &store,
                "t",
                b"meter1#20240301",
                "a",
                q,
                ts,
                &format!("{q}@{ts}"),
            );
        }
    }
    put(&store, "t", b"meter1#20240301", "b", "x", 1, "b");
    let read = |filter: ReadFilter| {
        store
            .read_row("t", b"meter1#20240301", filter)
            .unwrap()
            .unwrap()
            .cells
    };
    assert_eq!(read(ReadFilter::all()).len(), 13);
    assert_eq!(read(ReadFilter::all().families(["b"])).len(), 1);
    let latest = read(ReadFilter::latest().families(["a"]));
    assert_eq!(
        latest.iter().map(|c| c.timestamp).collect::<Vec<_>>(),
        [300; 4]
    );
    let set = QualifierFilter::Set([b"0015".to_vec(), b"2345".to_vec()].into());
    assert_eq!(
        read(ReadFilter::all().qualifiers(set).cells_per_column(2)).len(),
        4
    );
    let range = QualifierFilter::Range(
        Bound::Included(b"0015".to_vec()),
        Bound::Excluded(b"2345".to_vec()),
    );
    assert_eq!(
        read(ReadFilter::all().families(["a"]).qualifiers(range)).len(),
        6
    );
    let regex = QualifierFilter::regex("00.*").unwrap();
    assert_eq!(read(ReadFilter::all().qualifiers(regex)).len(), 6);
    let times = read(
        ReadFilter::all()
            .families(["a"])
            .time_range(TimeRange::new(150, 300)),
    );
    assert!(times.iter().all(|c| c.timestamp == 200) && times.len() == 4);
    let err = QualifierFilter::regex("(").unwrap_err();
    assert!(err.to_string().contains("invalid qualifier regex"), "{err}");
    let err = store
        .read_rows(
            "t",
            ReadRequest::all().filter(ReadFilter::all().families(["nope"])),
        )
        .err()
        .unwrap();
    assert!(matches!(err, Error::FamilyNotFound { .. }));
}

#[test]
fn reading_a_columns_newest_cells_skips_its_long_history() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    // Three rows; in each, three columns of 500 versions and one of two.
    for row in ["r1", "r2", "r3"] {
        let mut cells = Vec::new();
        for q in ["x", "y", "z"] {
            cells.extend((1..=500).map(|ts| Mutation::set_at("a", q, ts, format!("{q}{ts}"))));
        }
        cells.extend((1..=2).map(|ts| Mutation::set_at("b", "w", ts, format!("w{ts}"))));
        store.mutate_row("t", RowMutation::new(row, cells)).unwrap();
    }
    for reverse in [false, true] {
        for (filter, times) in [
            (ReadFilter::latest(), vec![500]),
            (ReadFilter::all().cells_per_column(3), vec![500, 499, 498]),
            (
                ReadFilter::all().cells_per_column(2).time_range(TimeRange {
                    start: 499,
                    end: None,
                }),
                vec![500, 499],
            ),
        ] {
            let mut request = ReadRequest::all().filter(filter.clone());
            request.reverse = reverse;
            let mut stream = store.read_rows("t", request).unwrap();
            let rows: Vec<_> = stream.by_ref().map(Result::unwrap).collect();
            let keys: Vec<_> = rows.iter().map(|r| r.key.clone()).collect();
            let mut expected: Vec<Vec<u8>> = vec![b"r1".into(), b"r2".into(), b"r3".into()];
            if reverse {
                expected.reverse();
            }
            assert_eq!(keys, expected);
            for row in &rows {
                let got: Vec<_> = row
                    .cells
                    .iter()
                    .map(|c| {
                        (
                            &*c.family,
                            c.qualifier.clone(),
                            c.timestamp,
                            c.value.clone(),
                        )
                    })
                    .collect();
                let mut want = Vec::new();
                for q in ["x", "y", "z"] {
                    for &ts in &times {
                        want.push((
                            "a",
                            q.as_bytes().to_vec(),
                            ts,
                            format!("{q}{ts}").into_bytes(),
                        ));
                    }
                }
                for ts in [2, 1]
                    .into_iter()
                    .filter(|ts| *ts >= filter.time_range.start)
                {
                    if want.iter().filter(|c| c.0 == "b").count() < times.len() {
                        want.push(("b", b"w".to_vec(), ts, format!("w{ts}").into_bytes()));
                    }
                }
                assert_eq!(got, want, "{filter:?} reverse {reverse}");
            }
            // Each long column costs its newest cells and a few pairs
            // before a seek, not its 500 versions.
            let scanned = stream.stats().cells_scanned;
            assert!(
                scanned < 3 * 3 * 20,
                "{filter:?} reverse {reverse}: {scanned}"
            );
            // Once a row's first long column was read past, its other
            // long ones cost their newest cells alone: per row, a few
            // pairs past the first one's newest N (read backwards first
            // when reverse), N for each of the three, and column w's two.
            let n = times.len() as u64;
            assert!(
                scanned <= 3 * ((n + 8) + 3 * n + 2),
                "{filter:?} reverse {reverse}: {scanned}"
            );
        }
    }
}

#[test]
fn check_and_mutate_chooses_by_the_predicate() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    put(&store, "t", b"r", "a", "state", 1, "open");
    let predicate = ReadFilter::all()
        .families(["a"])
        .qualifiers(QualifierFilter::Set([b"state".to_vec()].into()));
    let matched = store
        .check_and_mutate(
            "t",
            b"r",
            predicate.clone(),
            vec![Mutation::set_at("a", "hit", 1, "y")],
            vec![Mutation::set_at("a", "miss", 1, "y")],
        )
        .unwrap();
    assert!(matched);
    let matched = store
        .check_and_mutate(
            "t",
            b"absent",
            predicate,
            vec![Mutation::set_at("a", "hit", 1, "y")],
            vec![Mutation::set_at("a", "miss", 1, "y")],
        )
        .unwrap();
    assert!(!matched);
    assert!(
        store
            .read_row("t", b"r", ReadFilter::all())
            .unwrap()
            .unwrap()
            .latest("a", b"hit")
            .is_some()
    );
    assert!(
        store
            .read_row("t", b"absent", ReadFilter::all())
            .unwrap()
            .unwrap()
            .latest("a", b"miss")
            .is_some()
    );
}

#[test]
fn read_modify_write_appends_and_increments() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let inc = |delta| ReadModifyWrite::Increment {
        family: "a".into(),
        qualifier: b"n".to_vec(),
        delta,
    };
    store
        .read_modify_write("t", b"r", vec![inc(5), inc(-2)])
        .unwrap();
    let row = store.read_modify_write("t", b"r", vec![inc(10)]).unwrap();
    assert_eq!(row.latest("a", b"n"), Some(&13i64.to_be_bytes()[..]));
    let append = |s: &str| ReadModifyWrite::Append {
        family: "a".into(),
        qualifier: b"log".to_vec(),
        suffix: s.into(),
    };
    store
        .read_modify_write("t", b"r", vec![append("ab"), append("cd")])
        .unwrap();
    let row = store
        .read_row("t", b"r", ReadFilter::latest())
        .unwrap()
        .unwrap();
    assert_eq!(row.latest("a", b"log"), Some(&b"abcd"[..]));
    put(&store, "t", b"r", "a", "text", 1, "hello");
    let err = store
        .read_modify_write(
            "t",
            b"r",
            vec![ReadModifyWrite::Increment {
                family: "a".into(),
                qualifier: b"text".to_vec(),
                delta: 1,
            }],
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("a:text") && err.to_string().contains("5 bytes"),
        "{err}"
    );
    let max = ReadModifyWrite::Increment {
        family: "a".into(),
        qualifier: b"n".to_vec(),
        delta: i64::MAX,
    };
    // It wraps at int64's ends, as Bigtable's does: 13 + MAX = MIN + 12.
    let row = store.read_modify_write("t", b"r", vec![max]).unwrap();
    assert_eq!(
        row.latest("a", b"n"),
        Some(&(i64::MIN + 12).to_be_bytes()[..])
    );
    // A future-dated latest cell is still superseded.
    put(
        &store,
        "t",
        b"r",
        "a",
        "n",
        i64::MAX / 2,
        &String::from_utf8_lossy(&1i64.to_be_bytes()),
    );
    let row = store.read_modify_write("t", b"r", vec![inc(1)]).unwrap();
    assert_eq!(row.latest("a", b"n"), Some(&2i64.to_be_bytes()[..]));
}

#[test]
fn aggregate_families_merge_on_write() {
    let (_dir, store) = store();
    store
        .create_table(
            TableSpec::new("agg")
                .family(FamilySpec::new("sum").kind(FamilyKind::Sum))
                .family(FamilySpec::new("min").kind(FamilyKind::Min))
                .family(FamilySpec::new("max").kind(FamilyKind::Max))
                .family(FamilySpec::new("hll").kind(FamilyKind::HyperLogLog)),
        )
        .unwrap();
    for v in [5, -3, 12] {
        let muts = vec![
            Mutation::add_i64("sum", "x", v),
            Mutation::add_i64("min", "x", v),
            Mutation::add_i64("max", "x", v),
        ];
        store
            .mutate_row("agg", RowMutation::new("emp1#2024-03", muts))
            .unwrap();
    }
    for user in ["u1", "u2", "u1", "u3"] {
        let add = Mutation::AddToCell {
            family: "hll".into(),
            qualifier: b"visitors".to_vec(),
            timestamp: Some(0),
            input: user.into(),
        };
        store
            .mutate_row("agg", RowMutation::new("emp1#2024-03", vec![add]))
            .unwrap();
    }
    let row = store
        .read_row("agg", b"emp1#2024-03", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.latest("sum", b"x"), Some(&14i64.to_be_bytes()[..]));
    assert_eq!(row.latest("min", b"x"), Some(&(-3i64).to_be_bytes()[..]));
    assert_eq!(row.latest("max", b"x"), Some(&12i64.to_be_bytes()[..]));
    assert_eq!(
        hll_estimate(row.latest("hll", b"visitors").unwrap()).unwrap(),
        3
    );
    let err = store
        .mutate_row(
            "agg",
            RowMutation::new("r", vec![Mutation::set("sum", "x", "abc")]),
        )
        .unwrap_err();
    assert!(err.to_string().contains("sum:x"), "{err}");
    let bad_add = Mutation::AddToCell {
        family: "sum".into(),
        qualifier: b"x".to_vec(),
        timestamp: Some(0),
        input: b"1".to_vec(),
    };
    assert!(matches!(
        store.mutate_row("agg", RowMutation::new("r", vec![bad_add])),
        Err(Error::NotAnInt64 { .. })
    ));
}

#[test]
fn gc_hides_cells_at_read_time_and_collection_frees_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("a")))
        .unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut noise = move || {
        // xorshift: values that do not compress, so sizes mean something
        (0..512)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect::<Vec<u8>>()
    };
    for chunk in 0..20 {
        let rows = (0..100)
            .map(|r| {
                let muts = (0..10)
                    .map(|ts| Mutation::set_at("a", "q", chunk * 10 + ts + 1, noise()))
                    .collect();
                RowMutation::new(format!("row{r:04}"), muts)
            })
            .collect();
        store.mutate_rows("t", rows).unwrap();
    }
    store.flush().unwrap();
    store.compact("t").unwrap(); // everything on disk in one run: a fair baseline
    let before = store.table_disk_space("t").unwrap();
    assert!(before > 1_000_000, "{before}");
    store
        .alter_table(
            "t",
            vec![AlterOp::SetGc {
                family: "a".into(),
                gc: GcPolicy::MaxVersions(1),
            }],
        )
        .unwrap();
    let row = store
        .read_row("t", b"row0000", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.cells[0].timestamp, 200);
    let stats = store.collect_garbage("t").unwrap();
    assert_eq!(stats.cells_removed, 100 * 199);
    let after = store.table_disk_space("t").unwrap();
    assert!(after * 5 < before, "disk use {before} -> {after}");
    // Loosening the policy does not bring reclaimed cells back.
    store
        .alter_table(
            "t",
            vec![AlterOp::SetGc {
                family: "a".into(),
                gc: GcPolicy::KeepAll,
            }],
        )
        .unwrap();
    assert_eq!(
        store
            .read_row("t", b"row0000", ReadFilter::all())
            .unwrap()
            .unwrap()
            .cells
            .len(),
        1
    );
}

#[test]
fn max_age_is_enforced_on_read_and_by_the_compaction_filter() {
    let (_dir, store) = store();
    let hour = 3_600_000_000i64;
    let gc = GcPolicy::MaxAge(hour);
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("a").gc(gc)))
        .unwrap();
    let now = now_micros();
    put(&store, "t", b"old", "a", "q", now - 2 * hour, "old");
    put(&store, "t", b"new", "a", "q", now, "new");
    assert_eq!(keys(&store, "t", ReadRequest::all()), vec![b"new".to_vec()]);
    // A compaction (not a sweep) drops the old cell: after loosening the
    // policy it stays gone, which only the filter could have done.
    let def = store.table("t").unwrap();
    assert_eq!(def.families[0].gc.unconditional_max_age(), Some(hour));
    store.flush().unwrap();
    store.compact("t").unwrap();
    store
        .alter_table(
            "t",
            vec![AlterOp::SetGc {
                family: "a".into(),
                gc: GcPolicy::KeepAll,
            }],
        )
        .unwrap();
    assert_eq!(keys(&store, "t", ReadRequest::all()), vec![b"new".to_vec()]);
}

#[test]
fn synced_writers_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path(),
        StoreOptions {
            durability: Durability::Synced,
            ..Default::default()
        },
    )
    .unwrap();
    two_family_table(&store, "t");
    let threads = 8;
    let per_thread = 40;
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = &store;
            s.spawn(move || {
                for i in 0..per_thread {
                    let row =
                        RowMutation::new(format!("t{t}-{i}"), vec![Mutation::set("a", "q", "v")]);
                    store.mutate_row("t", row).unwrap();
                }
            });
        }
    });
    let commits = threads * per_thread;
    let fsyncs = store.local().expect("embedded store").fsync_count();
    assert!(
        fsyncs >= 1 && fsyncs < commits as u64,
        "{fsyncs} fsyncs for {commits} commits"
    );
    assert_eq!(keys(&store, "t", ReadRequest::all()).len(), commits);
}

#[test]
fn concurrent_increments_and_conditional_claims_are_linearizable() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let threads = 8;
    let per_thread = 200;
    let claims = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (store, claims) = (&store, &claims);
            s.spawn(move || {
                for i in 0..per_thread {
                    let inc = ReadModifyWrite::Increment {
                        family: "a".into(),
                        qualifier: b"n".to_vec(),
                        delta: 1,
                    };
                    store.read_modify_write("t", b"counter", vec![inc]).unwrap();
                    // Each slot may be claimed once: set "owner" only if absent.
                    let slot = format!("slot{}", i % 50);
                    let has_owner = ReadFilter::all()
                        .qualifiers(QualifierFilter::Set([b"owner".to_vec()].into()));
                    let claim = vec![Mutation::set_at("a", "owner", 1, format!("t{t}"))];
                    if !store
                        .check_and_mutate("t", slot.as_bytes(), has_owner, vec![], claim)
                        .unwrap()
                    {
                        claims.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    store
                        .mutate_row(
                            "t",
                            RowMutation::new(
                                "sum",
                                vec![Mutation::set_at("a", format!("{t}-{i}"), 1, "x")],
                            ),
                        )
                        .unwrap();
                }
            });
        }
    });
    let counter = store
        .read_row("t", b"counter", ReadFilter::latest())
        .unwrap()
        .unwrap();
    assert_eq!(
        counter.latest("a", b"n"),
        Some(&((threads * per_thread) as i64).to_be_bytes()[..])
    );
    assert_eq!(claims.load(std::sync::atomic::Ordering::SeqCst), 50);
    assert_eq!(
        store
            .read_row("t", b"sum", ReadFilter::all())
            .unwrap()
            .unwrap()
            .cells
            .len(),
        threads * per_thread
    );
}

#[test]
fn a_large_scan_streams() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let rows = (0..20_000)
        .map(|i| RowMutation::new(format!("{i:08}"), vec![Mutation::set_at("a", "q", 1, "v")]))
        .collect();
    assert!(
        store
            .mutate_rows("t", rows)
            .unwrap()
            .iter()
            .all(Result::is_ok)
    );
    let mut stream = store.read_rows("t", ReadRequest::all()).unwrap();
    let first = stream.next().unwrap().unwrap();
    assert_eq!(first.key, b"00000000");
    // Only what was pulled has been read from the engine.
    assert!(stream.stats().cells_scanned < 100, "{:?}", stream.stats());
    assert_eq!(stream.count(), 19_999);
}

#[test]
fn a_checkpoint_keeps_everything_across_reopen() {
    let (dir, store) = store();
    two_family_table(&store, "t");
    for i in 0..2000u32 {
        put(&store, "t", format!("k{i:05}").as_bytes(), "a", "q", 1, "v");
    }
    put(&store, "t", b"k99999", "b", "q", 2, "last");
    // Before: everything is in memtables and the journal.
    assert_eq!(store.table_disk_space("t").unwrap(), 0);
    store.checkpoint().unwrap();
    // After: written out to on-disk tables (what makes the next open fast).
    assert!(store.table_disk_space("t").unwrap() > 0);
    // Written after the checkpoint: only in the journal.
    put(&store, "t", b"k99999", "b", "q", 3, "after");
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(keys(&store, "t", ReadRequest::all()).len(), 2001);
    let row = store
        .read_row("t", b"k99999", cellar::ReadFilter::latest())
        .unwrap()
        .unwrap();
    assert_eq!(row.latest("b", b"q"), Some(&b"after"[..]));
    // A checkpoint of an idle store is harmless.
    store.checkpoint().unwrap();
    store.checkpoint().unwrap();
}

/// A bulk load goes into fjall's level 1, which is not compressed;
/// `compact` merges it into the last level, lz4. Rows repeating one long
/// text shrink several times there, and read back the same.
#[test]
fn compact_compresses_a_bulk_load() {
    use cellar::{BadRows, CellBatch, INGEST_MIN_ROWS};
    let (_dir, store) = store();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("m").format(FamilyFormat::Packed)))
        .unwrap();
    let text = "the same reading, again and again, ".repeat(4);
    let mut batch = CellBatch::new();
    let m = batch.family("m");
    for i in 0..2 * INGEST_MIN_ROWS {
        batch.begin_row(format!("k{i:08}").as_bytes());
        batch.set(m, b"note", 7, text.as_bytes());
    }
    let ingested = store.local().unwrap().rows_ingested();
    assert!(
        store
            .write_batch("t", &batch, BadRows::Stop)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.local().unwrap().rows_ingested() - ingested,
        2 * INGEST_MIN_ROWS as u64
    );
    let raw = store.table_disk_space("t").unwrap();
    assert!(raw > (2 * INGEST_MIN_ROWS * text.len()) as u64, "{raw}");
    store.compact("t").unwrap();
    let compacted = store.table_disk_space("t").unwrap();
    assert!(compacted * 4 < raw, "disk use {raw} -> {compacted}");
    let rows: Vec<_> = store
        .read_rows("t", ReadRequest::all())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2 * INGEST_MIN_ROWS);
    assert!(
        rows.iter()
            .all(|r| r.latest("m", b"note") == Some(text.as_bytes()))
    );
}

/// A large load of tall rows (each sets one cell in each of the same
/// columns) goes straight into column-wise blocks, with each cell's own
/// timestamp and value; a load over rows stored already merges with them
/// instead, and one whose rows differ in their columns goes as rows.
/// Everything reads back as written, through the blocks and after a
/// compaction. In PACKED and in AUTO (whose other writes are cells).
#[test]
fn tall_loads_go_into_blocks_and_read_back_as_written() {
    for format in [FamilyFormat::Packed, FamilyFormat::Auto] {
        tall_loads_into(format);
    }
}

fn tall_loads_into(format: FamilyFormat) {
    use cellar::{BadRows, CellBatch, INGEST_MIN_ROWS};
    use std::collections::BTreeMap;
    let (_dir, store) = store();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("m").format(format)))
        .unwrap();
    // What the table holds: (key, qualifier) -> (timestamp, value).
    type Cells = BTreeMap<(Vec<u8>, Vec<u8>), (i64, Vec<u8>)>;
    let mut want = Cells::new();
    let n = 2 * INGEST_MIN_ROWS as u64;
    // Rows `keys`, each setting `columns` (the first lacking in row
    // `lacking`), encoded `ahead` of the write (as INSERT does) or not.
    let load = |keys: &[(u64, u64)],
                columns: &[&[u8]],
                lacking: Option<u64>,
                ahead: bool,
                want: &mut Cells| {
        let mut batch = CellBatch::new();
        let m = batch.family("m");
        for i in keys.iter().flat_map(|&(from, to)| from..to) {
            let key = format!("k{i:08}").into_bytes();
            batch.begin_row(&key);
            for (j, q) in columns.iter().enumerate() {
                if lacking == Some(i) && j == 0 {
                    continue;
                }
                // Each cell its own time; values 8 bytes or text.
                let ts = 1_000 + (i as i64 % 7) * 60 + j as i64;
                let value = match j % 2 {
                    0 => (i as f64 / 4.0 + j as f64).to_be_bytes().to_vec(),
                    _ => format!("v{}", i * 31 % 1000).into_bytes(),
                };
                batch.set(m, q, ts, &value);
                want.insert((key.clone(), q.to_vec()), (ts, value));
            }
        }
        if ahead {
            store.prepare_batch("t", &mut batch).unwrap();
        }
        store.write_batch("t", &batch, BadRows::Stop).unwrap()
    };
    let ingested = || store.local().unwrap().rows_ingested();
    let before = ingested();
    // Columns given out of qualifier order.
    let columns: &[&[u8]] = &[b"t", b"a", b"pressure"];
    assert!(load(&[(0, n)], columns, None, false, &mut want).is_empty());
    assert_eq!(ingested() - before, n, "a tall load is ingested");
    // As blocks of 64 rows, whatever the format.
    let pairs = store.local().unwrap().scan_pairs("t").unwrap().0;
    assert!(pairs <= n / 32, "{format}: {pairs} pairs");
    // Encoded ahead; then around rows stored (the general path, its
    // blocks cut where the stored rows lie).
    assert!(load(&[(5 * n, 6 * n)], columns, None, true, &mut want).is_empty());
    let around = [(4 * n, 5 * n), (6 * n, 7 * n)];
    assert!(load(&around, columns, None, true, &mut want).is_empty());
    assert_eq!(ingested() - before, 4 * n, "tall loads are ingested");
    // Half over the rows stored: those merge, another column added.
    let more: &[&[u8]] = &[b"t", b"a", b"pressure", b"z"];
    assert!(load(&[(n / 2, 3 * n / 2)], more, None, true, &mut want).is_empty());
    // Rows of which one lacks a column: rows, not tall.
    let lacking = Some(3 * n + 5);
    assert!(load(&[(3 * n, 4 * n)], &[b"t", b"a"], lacking, true, &mut want).is_empty());
    let read = |want: &Cells| {
        let mut got = Cells::new();
        let mut last: Option<Vec<u8>> = None;
        for row in store.read_rows("t", ReadRequest::all()).unwrap() {
            let row = row.unwrap();
            assert!(
                last.as_ref().is_none_or(|l| *l < row.key),
                "rows in key order"
            );
            last = Some(row.key.clone());
            for cell in row.cells {
                let old = got.insert(
                    (row.key.clone(), cell.qualifier),
                    (cell.timestamp, cell.value),
                );
                assert!(old.is_none(), "one cell a column");
            }
        }
        assert_eq!(got.len(), want.len());
        assert!(got == *want, "the table holds what was written");
        // Each row alone, too.
        for ((key, qualifier), (ts, value)) in want.iter().step_by(97) {
            let row = store.read_row("t", key, ReadFilter::default()).unwrap();
            let row = row.unwrap_or_else(|| panic!("row {key:?} is read"));
            let cell = row
                .cells
                .iter()
                .find(|c| &c.qualifier == qualifier)
                .unwrap();
            assert_eq!((&cell.timestamp, &cell.value), (ts, value));
        }
    };
    read(&want);
    store.compact("t").unwrap();
    read(&want);
}

/// One call's pending writes to a family are never read as another
/// family's cells: the second family's increment starts from its own
/// (absent) value, not from the first family's new one.
#[test]
fn read_modify_write_keeps_families_apart_within_one_call() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let inc = |family: &str, delta| ReadModifyWrite::Increment {
        family: family.into(),
        qualifier: b"n".to_vec(),
        delta,
    };
    store
        .read_modify_write("t", b"r", vec![inc("b", 100), inc("a", 1)])
        .unwrap();
    let row = store
        .read_row("t", b"r", ReadFilter::latest())
        .unwrap()
        .unwrap();
    assert_eq!(row.latest("a", b"n"), Some(&1i64.to_be_bytes()[..]));
    assert_eq!(row.latest("b", b"n"), Some(&100i64.to_be_bytes()[..]));
}

/// A PACKED row-family past its size limit fails the row mutation that
/// would take it there, alone: the same row's other mutations in the same
/// bulk call, before and after, are written; a mutation that deletes as
/// much as it adds stays under the limit and is written too.
#[test]
fn a_packed_row_over_its_limit_fails_alone_in_a_bulk_call() {
    let (_dir, store) = store();
    store
        .create_table(
            TableSpec::new("t").family(FamilySpec::new("f").format(cellar::FamilyFormat::Packed)),
        )
        .unwrap();
    let big = || vec![7u8; 70 * 1024 * 1024];
    let set = |q: &str, value: Vec<u8>| Mutation::set_at("f", q, 1, value);
    let results = store
        .mutate_rows(
            "t",
            vec![
                RowMutation::new("a", vec![set("q1", big())]),
                RowMutation::new("a", vec![set("q2", big())]),
                RowMutation::new("a", vec![set("q3", b"small".to_vec())]),
                RowMutation::new(
                    "a",
                    vec![Mutation::delete_column("f", "q1"), set("q4", big())],
                ),
                RowMutation::new("b", vec![set("q", b"other row".to_vec())]),
            ],
        )
        .unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    let err = results[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("PACKED") && err.contains("128 MiB"), "{err}");
    assert!(results[2].is_ok() && results[3].is_ok() && results[4].is_ok());
    let row = store
        .read_row("t", b"a", ReadFilter::latest())
        .unwrap()
        .unwrap();
    let mut qualifiers: Vec<&[u8]> = row.cells.iter().map(|c| c.qualifier.as_slice()).collect();
    qualifiers.dedup();
    assert_eq!(qualifiers, vec![&b"q3"[..], b"q4"]);
    assert!(
        store
            .read_row("t", b"b", ReadFilter::latest())
            .unwrap()
            .is_some()
    );
}

/// Changing a family's format while writers increment its counters and
/// readers scan it: no write is lost, no row is missed or seen twice.
#[test]
fn a_format_change_loses_no_concurrent_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    let rows: Vec<RowMutation> = (0..500)
        .map(|i| {
            RowMutation::new(
                format!("r{i:03}"),
                vec![Mutation::set("f", "n", 0i64.to_be_bytes())],
            )
        })
        .collect();
    for r in store.mutate_rows("t", rows).unwrap() {
        r.unwrap();
    }
    std::thread::scope(|s| {
        for w in 0..4 {
            let store = &store;
            s.spawn(move || {
                for j in 0..300 {
                    let row = format!("r{:03}", (j * 7 + w * 131) % 500);
                    store
                        .read_modify_write(
                            "t",
                            row.as_bytes(),
                            vec![ReadModifyWrite::Increment {
                                family: "f".into(),
                                qualifier: b"n".to_vec(),
                                delta: 1,
                            }],
                        )
                        .unwrap();
                }
            });
        }
        s.spawn(|| {
            for k in 0..4 {
                let format = if k % 2 == 0 {
                    FamilyFormat::Packed
                } else {
                    FamilyFormat::Cells
                };
                let done = store
                    .local()
                    .unwrap()
                    .set_family_format_in_steps("t", "f", format, 16, &mut |_| true)
                    .unwrap();
                assert!(done.finished && done.rows >= 500, "{done:?}");
            }
        });
        s.spawn(|| {
            for _ in 0..40 {
                let rows = store.read_rows("t", ReadRequest::all()).unwrap().count();
                assert_eq!(rows, 500);
            }
        });
    });
    let total: i64 = store
        .read_rows("t", ReadRequest::all().filter(ReadFilter::latest()))
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            i64::from_be_bytes(row.latest("f", b"n").unwrap().try_into().unwrap())
        })
        .sum();
    assert_eq!(total, 4 * 300);
    assert_eq!(
        store.table("t").unwrap().families[0].format,
        FamilyFormat::Cells
    );
    assert!(
        store
            .local()
            .expect("embedded store")
            .check()
            .unwrap()
            .healthy()
    );
}

/// A format change lists itself with its progress while it runs, can be
/// stopped by its callback, leaves the family correct, and resumes.
#[test]
fn a_format_change_reports_progress_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    let rows: Vec<RowMutation> = (0..100)
        .map(|i| RowMutation::new(format!("r{i:03}"), vec![Mutation::set("f", "q", "v")]))
        .collect();
    for r in store.mutate_rows("t", rows).unwrap() {
        r.unwrap();
    }
    let mut seen = Vec::new();
    let done = store
        .local()
        .unwrap()
        .set_family_format_in_steps("t", "f", FamilyFormat::Packed, 10, &mut |done| {
            seen.push(store.format_changes());
            done.rows < 30
        })
        .unwrap();
    assert!(!done.finished);
    assert_eq!(done.rows, 30);
    assert_eq!(seen.len(), 3);
    let (table, family, format, progress) = seen[2][0].clone();
    assert_eq!(
        (table.as_str(), family.as_str(), format),
        ("t", "f", FamilyFormat::Packed)
    );
    assert_eq!(progress.rows, 30);
    assert!(store.format_changes().is_empty());
    // Half way, across a reopen: every row reads; the other format waits.
    let count = |store: &Store| store.read_rows("t", ReadRequest::all()).unwrap().count();
    assert_eq!(count(&store), 100);
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(count(&store), 100);
    let def = store.table("t").unwrap();
    assert!(def.families[0].converting.is_some());
    let err = store
        .set_family_format("t", "f", FamilyFormat::Cells, &mut |_| true)
        .unwrap_err();
    assert!(err.to_string().contains("finish it first"), "{err}");
    let done = store
        .set_family_format("t", "f", FamilyFormat::Packed, &mut |_| true)
        .unwrap();
    assert!(done.finished);
    assert_eq!(done.rows, 70);
    let def = store.table("t").unwrap();
    assert_eq!(def.families[0].format, FamilyFormat::Packed);
    assert!(def.families[0].converting.is_none());
    assert_eq!(count(&store), 100);
    assert!(
        store
            .local()
            .expect("embedded store")
            .check()
            .unwrap()
            .healthy()
    );
}

#[test]
fn a_pass_over_the_pairs_counts_cells_or_rows_by_format() {
    let (_dir, store) = store();
    store
        .create_table(
            TableSpec::new("t")
                .family(FamilySpec::new("c"))
                .family(FamilySpec::new("p").format(FamilyFormat::Packed)),
        )
        .unwrap();
    let rows = (0..10)
        .map(|i| {
            let mut cells = Vec::new();
            for q in ["x", "y", "z"] {
                cells.push(Mutation::set_at("c", q, 1, b"1".to_vec()));
                cells.push(Mutation::set_at("p", q, 1, b"1".to_vec()));
            }
            RowMutation::new(format!("r{i}"), cells)
        })
        .collect();
    for result in store.mutate_rows("t", rows).unwrap() {
        result.unwrap();
    }
    // 30 cells one pair each, and 10 packed rows.
    assert_eq!(
        store
            .local()
            .expect("embedded store")
            .scan_pairs("t")
            .unwrap()
            .0,
        40
    );
    assert!(
        store
            .local()
            .expect("embedded store")
            .scan_pairs("nope")
            .is_err()
    );
}

#[test]
fn a_read_may_leave_out_the_values_it_does_not_use() {
    let (_dir, store) = store();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("p").format(FamilyFormat::Packed)))
        .unwrap();
    let cells = (1..=3)
        .flat_map(|ts| {
            [
                Mutation::set_at("p", "x", ts, (ts as f64 / 10.0).to_be_bytes().to_vec()),
                Mutation::set_at("p", "y", ts, format!("y{ts}").into_bytes()),
            ]
        })
        .collect();
    store.mutate_row("t", RowMutation::new("r", cells)).unwrap();
    let read = |filter: ReadFilter| -> Vec<(Vec<u8>, i64, Vec<u8>)> {
        store
            .read_rows("t", ReadRequest::all().filter(filter))
            .unwrap()
            .flat_map(|row| row.unwrap().cells)
            .map(|c| (c.qualifier, c.timestamp, c.value))
            .collect()
    };
    let all = read(ReadFilter::all());
    assert_eq!(all.len(), 6);
    // Every cell still comes; only y's values are left out.
    let some = read(ReadFilter::all().values_only("p", ["x"]));
    assert_eq!(some.len(), 6);
    for (full, lean) in all.iter().zip(&some) {
        assert_eq!((&full.0, full.1), (&lean.0, lean.1));
        if full.0 == b"x" {
            assert_eq!(full.2, lean.2);
        } else {
            assert!(lean.2.is_empty(), "{lean:?}");
        }
    }
    // A family not listed keeps its values.
    assert_eq!(read(ReadFilter::all().values_only("other", ["x"])), all);
}

/// `write_batch`: a bad row stops the whole batch, or is skipped alone;
/// rows new to a PACKED family and rows it holds already end up the same.
#[test]
fn a_cell_batch_stops_at_a_bad_row_or_skips_it() {
    use cellar::{BadRows, CellBatch};
    let (_dir, store) = store();
    store
        .create_table(
            TableSpec::new("t")
                .family(FamilySpec::new("p").format(FamilyFormat::Packed))
                .family(FamilySpec::new("c").format(FamilyFormat::Cells)),
        )
        .unwrap();
    put(&store, "t", b"old", "p", "x", 1, "before");
    let huge = vec![0u8; cellar::MAX_QUALIFIER_LEN + 1];
    let build = |bad_qualifier: &[u8]| {
        let mut batch = CellBatch::new();
        let (p, c) = (batch.family("p"), batch.family("c"));
        for key in [&b"a"[..], b"old", b"b"] {
            batch.begin_row(key);
            batch.set(p, b"x", 5, b"new");
            batch.set(p, b"x", 5, b"newer");
            batch.set(c, b"y", 5, b"cell");
        }
        batch.begin_row(b"c");
        batch.set(p, bad_qualifier, 5, b"v");
        batch
    };
    let batch = build(&huge);
    let failed = store.write_batch("t", &batch, BadRows::Stop).unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, 3);
    assert!(matches!(failed[0].1, Error::QualifierTooLarge { .. }));
    assert_eq!(keys(&store, "t", ReadRequest::all()), vec![b"old".to_vec()]);

    let failed = store.write_batch("t", &batch, BadRows::Skip).unwrap();
    assert_eq!(failed.iter().map(|f| f.0).collect::<Vec<_>>(), vec![3]);
    let rows: Vec<_> = store
        .read_rows("t", ReadRequest::all())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let p: Vec<_> = row.column("p", b"x").map(|c| c.value.clone()).collect();
        let c: Vec<_> = row.column("c", b"y").map(|c| c.value.clone()).collect();
        // The later of two cells at one coordinate wins.
        assert_eq!(p[0], b"newer", "{:?}", row.key);
        assert_eq!(c, vec![b"cell".to_vec()]);
    }
    let old = rows.iter().find(|r| r.key == b"old").unwrap();
    assert_eq!(
        old.column("p", b"x").count(),
        2,
        "merged with what was stored"
    );

    // A family the table does not have fails the batch.
    let mut batch = CellBatch::new();
    let f = batch.family("nope");
    batch.begin_row(b"z");
    batch.set(f, b"q", 1, b"v");
    assert!(matches!(
        store.write_batch("t", &batch, BadRows::Skip),
        Err(Error::FamilyNotFound { .. })
    ));
}

/// A large batch of rows new to a one-family table is ingested (written
/// as sorted tables, no journal); a batch whose rows are stored already,
/// or that spans two families, goes through the journal and merges; what
/// reads back is the same either way.
#[test]
fn large_batches_of_new_rows_are_ingested_and_read_as_written() {
    use cellar::{BadRows, CellBatch, INGEST_MIN_ROWS};
    let (_dir, store) = store();
    for (name, format) in [("p", FamilyFormat::Packed), ("c", FamilyFormat::Cells)] {
        store
            .create_table(TableSpec::new(name).family(FamilySpec::new("m").format(format)))
            .unwrap();
    }
    two_family_table(&store, "two");
    let rows = INGEST_MIN_ROWS as u64;
    let ingested = || store.local().unwrap().rows_ingested();
    // Keys in reverse: the batch sorts them.
    let batch = |from: u64, qualifier: &[u8], families: &[&str]| {
        let mut batch = CellBatch::new();
        let families: Vec<_> = families.iter().map(|f| batch.family(f)).collect();
        for i in (from..from + rows).rev() {
            batch.begin_row(format!("k{i:08}").as_bytes());
            for &f in &families {
                batch.set(f, qualifier, 7, &i.to_be_bytes());
            }
        }
        batch
    };
    let value = |row: &cellar::Row, family: &str, q: &[u8]| {
        row.latest(family, q)
            .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
    };
    for table in ["p", "c"] {
        let before = ingested();
        let failed = store
            .write_batch(table, &batch(0, b"x", &["m"]), BadRows::Stop)
            .unwrap();
        assert!(failed.is_empty());
        assert_eq!(ingested() - before, rows, "{table}: new rows are ingested");
        // The same rows again, another column: a PACKED row's pair holds
        // the row, so stored rows merge through the journal; CELLS pairs
        // are cells, and new cells are ingested beside the stored ones.
        store
            .write_batch(table, &batch(0, b"y", &["m"]), BadRows::Stop)
            .unwrap();
        let again = if table == "p" { 0 } else { rows };
        assert_eq!(ingested() - before, rows + again, "{table}: stored rows");
        // Rows after them are new.
        store
            .write_batch(table, &batch(rows, b"x", &["m"]), BadRows::Stop)
            .unwrap();
        assert_eq!(ingested() - before, 2 * rows + again, "{table}");
        let mut n = 0;
        for row in store.read_rows(table, ReadRequest::all()).unwrap() {
            let row = row.unwrap();
            let i: u64 = std::str::from_utf8(&row.key[1..]).unwrap().parse().unwrap();
            assert_eq!(i, n, "{table}: rows in key order");
            assert_eq!(value(&row, "m", b"x"), Some(i), "{table}");
            assert_eq!(
                value(&row, "m", b"y"),
                (i < rows).then_some(i),
                "{table}: merged"
            );
            n += 1;
        }
        assert_eq!(n, 2 * rows, "{table}");
    }
    // Rows across two families are written through the journal, whole.
    let before = ingested();
    store
        .write_batch("two", &batch(0, b"x", &["a", "b"]), BadRows::Stop)
        .unwrap();
    assert_eq!(ingested(), before);
    let read: Vec<_> = store
        .read_rows("two", ReadRequest::all())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(read.len() as u64, rows);
    assert!(
        read.iter()
            .all(|r| value(r, "a", b"x").is_some() && value(r, "b", b"x").is_some())
    );
}

#[test]
fn sample_row_keys_split_a_table_into_pieces_in_key_order() {
    let (_dir, store) = store();
    two_family_table(&store, "t");
    let rows: Vec<RowMutation> = (0..500)
        .map(|i| {
            RowMutation::new(
                format!("row{i:04}"),
                vec![Mutation::set("a", "q", vec![7u8; 100])],
            )
        })
        .collect();
    assert!(
        store
            .mutate_rows("t", rows)
            .unwrap()
            .iter()
            .all(Result::is_ok)
    );
    let local = store.local().expect("embedded store");
    let samples = local.sample_row_keys_every("t", 10_000).unwrap();
    // About 115 bytes a row: a sample every 87 rows or so, then the end.
    assert!(samples.len() >= 5, "{samples:?}");
    let (end, total) = samples.last().unwrap();
    assert!(end.is_empty());
    assert!(*total >= 500 * 100);
    let keys: Vec<&Vec<u8>> = samples[..samples.len() - 1]
        .iter()
        .map(|(k, _)| k)
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with(b"row")));
    assert!(samples.windows(2).all(|w| w[0].1 <= w[1].1));
    // Through the trait: one piece for a small table; a missing table errs.
    assert_eq!(store.sample_row_keys("t").unwrap().len(), 1);
    assert!(store.sample_row_keys("nope").is_err());
}

/// A planner's probe of a row range sees each row once, however many
/// pairs it holds (a CELLS row with a cell per event is skipped past
/// after a few pairs), in either format: first and last keys, and rows
/// counted up to the limit.
#[test]
fn a_probe_counts_rows_not_pairs_in_either_format() {
    for format in [FamilyFormat::Cells, FamilyFormat::Packed] {
        let (_dir, store) = store();
        store
            .create_table(TableSpec::new("t").family(FamilySpec::new("m").format(format)))
            .unwrap();
        // Rows r00..r29; even rows are wide (3 columns of 40 cells), odd
        // rows hold one cell.
        let mut rows = Vec::new();
        for r in 0..30 {
            let key = format!("r{r:02}");
            let mut cells = Vec::new();
            let (columns, versions) = if r % 2 == 0 { (3, 40) } else { (1, 1) };
            for c in 0..columns {
                for v in 0..versions {
                    cells.push(Mutation::set_at("m", format!("q{c}"), 1_000 + v, "x"));
                }
            }
            rows.push(RowMutation::new(key.as_bytes(), cells));
        }
        for result in store.mutate_rows("t", rows).unwrap() {
            result.unwrap();
        }
        let local = store.local().unwrap();
        let probe = local.probe_rows("t", "m", &RowRange::all(), 1_000).unwrap();
        assert_eq!(probe.rows, 30, "{format}");
        assert_eq!(probe.first.as_deref(), Some(&b"r00"[..]));
        assert_eq!(probe.last.as_deref(), Some(&b"r29"[..]));
        let probe = local.probe_rows("t", "m", &RowRange::all(), 7).unwrap();
        assert_eq!(probe.rows, 7, "{format}");
        let between = RowRange::between(
            Bound::Included(b"r04".to_vec()),
            Bound::Excluded(b"r10".to_vec()),
        );
        let probe = local.probe_rows("t", "m", &between, 1_000).unwrap();
        assert_eq!(
            (probe.rows, probe.first.as_deref(), probe.last.as_deref()),
            (6, Some(&b"r04"[..]), Some(&b"r09"[..])),
            "{format}"
        );
        // A range ending inside a wide row's pairs: the seek past the row
        // stays inside the range.
        let prefix = local
            .probe_rows("t", "m", &RowRange::prefix(b"r0".to_vec()), 1_000)
            .unwrap();
        assert_eq!(prefix.rows, 10, "{format}");
        let empty = local
            .probe_rows("t", "m", &RowRange::prefix(b"s".to_vec()), 1_000)
            .unwrap();
        assert_eq!(empty, RowProbe::default());
        let backwards = RowRange::between(
            Bound::Included(b"r09".to_vec()),
            Bound::Excluded(b"r04".to_vec()),
        );
        let none = local.probe_rows("t", "m", &backwards, 1_000).unwrap();
        assert_eq!(none, RowProbe::default());
        assert!(local.probe_rows("t", "nope", &RowRange::all(), 1).is_err());
    }
}

/// A batch encoded ahead of its write (`prepare_batch`, outside any
/// lock, as if nothing were stored for its rows) is written as if it had
/// not been: rows stored in its span meanwhile are merged with, not
/// written over, in both formats; a batch changed after it was prepared
/// writes what it holds then; a family whose format changed meanwhile is
/// written in its new format.
#[test]
fn batches_encoded_ahead_merge_with_rows_stored_meanwhile() {
    use cellar::{BadRows, CellBatch, INGEST_MIN_ROWS};
    let rows = INGEST_MIN_ROWS;
    let key = |i: usize| format!("k{i:08}").into_bytes();
    let batch = |qualifier: &[u8], from: usize| {
        let mut batch = CellBatch::new();
        let m = batch.family("m");
        for i in from..from + rows {
            batch.begin_row(&key(i));
            batch.set(m, qualifier, 2, &(i as u64).to_be_bytes());
        }
        batch
    };
    for format in [
        FamilyFormat::Packed,
        FamilyFormat::Cells,
        FamilyFormat::Auto,
    ] {
        let (_dir, store) = store();
        store
            .create_table(TableSpec::new("t").family(FamilySpec::new("m").format(format)))
            .unwrap();
        let ingested = || store.local().unwrap().rows_ingested();
        let before = ingested();
        // Nothing stored: the encoding ahead is what is ingested.
        let mut first = batch(b"a", 0);
        store.prepare_batch("t", &mut first).unwrap();
        assert!(
            store
                .write_batch("t", &first, BadRows::Stop)
                .unwrap()
                .is_empty()
        );
        assert_eq!(ingested() - before, rows as u64, "{format}");
        // Rows after those, prepared; then a row of the new span and one
        // of the old are written by another writer before the batch is.
        let mut second = CellBatch::new();
        let m = second.family("m");
        for i in rows..2 * rows {
            second.begin_row(&key(i));
            second.set(m, b"b", 2, &(i as u64).to_be_bytes());
        }
        store.prepare_batch("t", &mut second).unwrap();
        put(&store, "t", &key(rows + 7), "m", "meanwhile", 1, "x");
        assert!(
            store
                .write_batch("t", &second, BadRows::Stop)
                .unwrap()
                .is_empty()
        );
        let read = |i: usize| {
            store
                .read_rows("t", ReadRequest::rows(RowSet::keys([key(i)])))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
        };
        let row = read(rows + 7);
        assert_eq!(row.latest("m", b"meanwhile"), Some(&b"x"[..]), "{format}");
        assert_eq!(
            row.latest("m", b"b"),
            Some(&((rows + 7) as u64).to_be_bytes()[..]),
            "{format}"
        );
        // Changed after it was prepared: its last row is written too.
        let mut third = batch(b"c", 0);
        store.prepare_batch("t", &mut third).unwrap();
        let m = third.family("m");
        third.begin_row(b"z");
        third.set(m, b"c", 2, b"late");
        assert!(
            store
                .write_batch("t", &third, BadRows::Stop)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            keys(&store, "t", ReadRequest::all()).len(),
            2 * rows + 1,
            "{format}"
        );
        let row = read(3);
        assert_eq!(row.latest("m", b"a"), Some(&3u64.to_be_bytes()[..]));
        assert_eq!(row.latest("m", b"c"), Some(&3u64.to_be_bytes()[..]));
        // The family's format changed between the encoding and the write.
        let other = match format {
            FamilyFormat::Packed => FamilyFormat::Cells,
            FamilyFormat::Cells | FamilyFormat::Auto => FamilyFormat::Packed,
        };
        // (New rows, so that nothing stored in their span sends the
        // write down the general path anyway.)
        let mut fourth = batch(b"d", 2 * rows);
        store.prepare_batch("t", &mut fourth).unwrap();
        store
            .local()
            .unwrap()
            .set_family_format("t", "m", other, &mut |_| true)
            .unwrap();
        assert!(
            store
                .write_batch("t", &fourth, BadRows::Stop)
                .unwrap()
                .is_empty()
        );
        let row = read(2 * rows + 5);
        let value = ((2 * rows + 5) as u64).to_be_bytes();
        assert_eq!(row.latest("m", b"d"), Some(&value[..]), "{format}");
        assert_eq!(keys(&store, "t", ReadRequest::all()).len(), 3 * rows + 1);
        assert!(
            store.local().unwrap().check().unwrap().healthy(),
            "{format}"
        );
    }
}

/// A bulk load into a PACKED family writes its rows as blocks where no
/// stored block holds rows among them (cut where the load's rows surround
/// a stored block), and as rows where they fall among a block's rows;
/// reads see them all in order either way, and a merge folds the rows in.
#[test]
fn bulk_loads_write_blocks_where_their_rows_fit_between_blocks() {
    use cellar::{BadRows, CellBatch, INGEST_MIN_ROWS};
    let n = INGEST_MIN_ROWS;
    let (_dir, store) = store();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("m").format(FamilyFormat::Packed)))
        .unwrap();
    let load = |keys: &mut dyn Iterator<Item = Vec<u8>>| {
        let mut batch = CellBatch::new();
        let m = batch.family("m");
        for key in keys {
            batch.begin_row(&key);
            batch.set(m, b"v", 2, &key);
        }
        store.prepare_batch("t", &mut batch).unwrap();
        assert!(
            store
                .write_batch("t", &batch, BadRows::Stop)
                .unwrap()
                .is_empty()
        );
    };
    let pairs = || store.local().unwrap().scan_pairs("t").unwrap().0 as usize;
    let key = |i: usize| format!("k{i:08}").into_bytes();
    // Contiguous rows into an empty family: blocks, about n / 64 pairs.
    load(&mut (100_000..100_000 + n).map(key));
    assert!(
        store
            .table("t")
            .unwrap()
            .family("m")
            .unwrap()
            .blocks
            .is_some()
    );
    assert!(pairs() <= n / 32, "{} pairs for {n} rows", pairs());
    // Rows below and above them in one load: blocks again, in two runs.
    load(&mut (0..n / 2).chain(500_000..500_000 + n / 2).map(key));
    assert!(
        pairs() <= 2 * n / 32,
        "{} pairs for {} rows",
        pairs(),
        2 * n
    );
    // Rows among the first load's: they cannot go in blocks.
    let between = |i: usize| {
        let mut k = key(i);
        k.push(b'x');
        k
    };
    load(&mut (100_000..100_000 + n).map(between));
    assert!(pairs() >= n, "{} pairs", pairs());
    // New rows in no order: as rows too (blocks of them would be sparse).
    let before = pairs();
    load(&mut (0..n).map(|i| key(900_000 + (i * 7919) % n)));
    assert!(pairs() >= before + n, "{} pairs", pairs());
    let mut expected: Vec<Vec<u8>> = (0..n / 2)
        .chain(100_000..100_000 + n)
        .chain(500_000..500_000 + n / 2)
        .chain(900_000..900_000 + n)
        .map(key)
        .chain((100_000..100_000 + n).map(between))
        .collect();
    expected.sort();
    let check_all = || {
        let rows: Vec<_> = store
            .read_rows("t", ReadRequest::all())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), expected.len());
        for (row, key) in rows.iter().zip(&expected) {
            assert_eq!(&row.key, key);
            assert_eq!(row.latest("m", b"v"), Some(&key[..]));
        }
        let backwards = keys(&store, "t", ReadRequest::all().reverse());
        assert!(backwards.iter().rev().eq(expected.iter()));
        let some = [key(3), between(100_005), key(500_001), key(400_000)];
        let found = keys(&store, "t", ReadRequest::rows(RowSet::keys(some.clone())));
        assert_eq!(found, some[..3].to_vec());
        assert!(store.local().unwrap().check().unwrap().healthy());
    };
    check_all();
    let own = || store.table("t").unwrap().family("m").unwrap().id;
    let before = own();
    store.collect_and_compact("t").unwrap();
    assert!(pairs() <= 4 * n / 32, "{} pairs after the merge", pairs());
    // Every row merged: the family's own keyspace is a new, empty one
    // (fjall would replay the emptied one's journaled writes at each open).
    assert_ne!(own(), before);
    check_all();
}

/// A numbers read taking a column-wise block's rows all at once
/// (`next_number_rows`) gives exactly the rows, keys, timestamps, values
/// and misfits that reading them one by one (`next_numbers`) gives: over
/// blocks with rows of the row keyspace among them (rows rewritten,
/// deleted, added between block rows), ranges cutting blocks, limits,
/// any `max`, a time range and a qualifier filter (read a row at a time),
/// a value that is not 8 bytes long, and a column no row has.
#[test]
fn rows_read_as_numbers_at_once_are_those_read_one_by_one() {
    use cellar::{BadRows, CellBatch, INGEST_MIN_ROWS};
    let (_dir, store) = store();
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("m").format(FamilyFormat::Packed)))
        .unwrap();
    let n = 2 * INGEST_MIN_ROWS as u64;
    let key = |i: u64| format!("k{:08}", i * 2).into_bytes();
    let mut batch = CellBatch::new();
    let m = batch.family("m");
    for i in 0..n {
        batch.begin_row(&key(i));
        let ts = 1_000_000 + i as i64 * 60;
        batch.set(m, b"a", ts, &(i as f64 / 4.0).to_be_bytes());
        // Row 777's `b` is 3 bytes long.
        let b = match i {
            777 => b"odd".to_vec(),
            _ => (i as i64 * 3).to_be_bytes().to_vec(),
        };
        batch.set(m, b"b", ts - 5, &b);
        batch.set(m, b"c", ts, b"text");
    }
    assert!(
        store
            .write_batch("t", &batch, BadRows::Stop)
            .unwrap()
            .is_empty()
    );
    store.compact("t").unwrap();
    // The row keyspace among the blocks: rows rewritten and deleted, rows
    // added between block rows.
    for i in (3..n).step_by(211) {
        let set = Mutation::set_at("m", "a", 5, 7.5f64.to_be_bytes().to_vec());
        store
            .mutate_row("t", RowMutation::new(key(i), vec![set]))
            .unwrap();
        let delete = RowMutation::new(key(i + 1), vec![Mutation::DeleteRow]);
        store.mutate_row("t", delete).unwrap();
        let mut between = key(i + 5);
        between.push(b'x');
        let set = Mutation::set_at("m", "b", 9, 11i64.to_be_bytes().to_vec());
        store
            .mutate_row("t", RowMutation::new(between, vec![set]))
            .unwrap();
    }
    let wanted = vec![
        (0, b"a".to_vec()),
        (0, b"b".to_vec()),
        (0, b"none".to_vec()),
    ];
    let one_by_one = |request: ReadRequest| {
        let mut stream = store.read_rows("t", request).unwrap();
        let rows = numbers_read::one_by_one(&mut stream, &wanted);
        (rows, stream.stats().rows_returned)
    };
    let at_once = |request: ReadRequest, max: usize| {
        let mut stream = store.read_rows("t", request).unwrap();
        let (rows, runs) = numbers_read::at_once(&mut stream, &wanted, max);
        (rows, stream.stats().rows_returned, runs)
    };
    let range = |from: u64, to: u64| {
        ReadRequest::rows(RowSet::range(RowRange::between(
            Bound::Included(key(from)),
            Bound::Excluded(key(to)),
        )))
    };
    let requests = [
        ("all", ReadRequest::all(), true),
        ("a range cutting blocks", range(70, 1900), true),
        ("a limit", ReadRequest::all().limit(1000), true),
        ("a range and a limit", range(33, 3000).limit(95), true),
        (
            "a time range",
            ReadRequest::all().filter(ReadFilter::all().time_range(TimeRange::new(0, 1_030_000))),
            false,
        ),
        (
            "qualifiers unwanted only",
            ReadRequest::all()
                .filter(ReadFilter::all().qualifiers(QualifierFilter::Set([b"c".to_vec()].into()))),
            true,
        ),
    ];
    for (what, request, runs_expected) in requests {
        let (want, rows_returned) = one_by_one(request.clone());
        assert!(!want.is_empty(), "{what}: rows read");
        for max in [1, 7, 64, 1000] {
            let (got, returned, runs) = at_once(request.clone(), max);
            assert_eq!(got.len(), want.len(), "{what}, max {max}: as many rows");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "{what}, max {max}: the same row");
            }
            assert_eq!(returned, rows_returned, "{what}, max {max}: rows counted");
            assert_eq!(
                runs > 0,
                runs_expected,
                "{what}, max {max}: block rows at once"
            );
        }
    }
}

/// Rows given a column at a time (`CellBatch::set_columns`, as a tall
/// load's INSERT gives them) are written exactly as the same rows given
/// as cells: the same cells with their times, the same rows refused with
/// the same errors, and the same rows ingested, whether they go into
/// blocks from their columns or, where they cannot (rows stored in their
/// span, a small batch, a key twice, a CELLS or aggregate family, a bad
/// row), on as cells.
#[test]
fn rows_given_column_wise_are_written_as_their_cells_are() {
    use cellar::{BadRows, BatchColumn, CellBatch, FamilyKind, INGEST_MIN_ROWS};
    let (_a, cells) = store();
    let (_b, columns) = store();
    let families = [
        ("p", FamilySpec::new("m").format(FamilyFormat::Packed)),
        ("c", FamilySpec::new("m").format(FamilyFormat::Cells)),
        (
            "s",
            FamilySpec::new("m")
                .format(FamilyFormat::Packed)
                .kind(FamilyKind::Sum),
        ),
    ];
    for store in [&cells, &columns] {
        for (name, family) in &families {
            store
                .create_table(TableSpec::new(*name).family(family.clone()))
                .unwrap();
        }
    }
    // Columns given out of qualifier order: an 8-byte one, a 3-byte one
    // (8 bytes in the aggregate family, whose sums take only those) and
    // another 8-byte one.
    let given = |table: &str| -> [(&'static [u8], usize); 3] {
        let w = if table == "s" { 8 } else { 3 };
        [(b"t", 8), (b"a", w), (b"pressure", 8)]
    };
    let value = |i: u64, j: usize, w: usize| -> Vec<u8> {
        match w {
            8 => (i as f64 / 4.0 + j as f64).to_bits().to_be_bytes().to_vec(),
            w => (0..w).map(|k| (i as usize * 7 + k) as u8).collect(),
        }
    };
    // The rows of keys `keys` at times `time(i)` both ways, written into
    // `table` of each store (encoded `ahead` or not); what each write
    // refused, as text.
    let write =
        |table: &str, keys: &[Vec<u8>], time: &dyn Fn(u64) -> i64, bad: BadRows, ahead: bool| {
            let given = given(table);
            let mut by_cells = CellBatch::new();
            let mut by_columns = CellBatch::new();
            let (m, m2) = (by_cells.family("m"), by_columns.family("m"));
            let mut times = Vec::new();
            let mut values: Vec<Vec<u8>> = vec![Vec::new(); given.len()];
            for (i, key) in keys.iter().enumerate() {
                let i = i as u64;
                by_cells.begin_row(key);
                by_columns.begin_row(key);
                times.push(time(i));
                for (j, (q, w)) in given.iter().enumerate() {
                    by_cells.set(m, q, time(i), &value(i, j, *w));
                    values[j].extend(value(i, j, *w));
                }
            }
            let batch_columns = given
                .iter()
                .zip(values)
                .map(|((q, w), values)| BatchColumn {
                    qualifier: q.to_vec(),
                    width: *w,
                    values,
                })
                .collect();
            by_columns.set_columns(m2, batch_columns, times).unwrap();
            assert_eq!(by_columns.total_cells(), by_cells.total_cells());
            let mut refused = Vec::new();
            for (store, mut batch) in [(&cells, by_cells), (&columns, by_columns)] {
                if ahead {
                    store.prepare_batch(table, &mut batch).unwrap();
                }
                let failed = store.write_batch(table, &batch, bad).unwrap();
                refused.push(format!("{failed:?}"));
            }
            assert_eq!(refused[0], refused[1], "{table}: the same rows refused");
            refused.pop().unwrap_or_default()
        };
    let keys = |from: u64, to: u64| -> Vec<Vec<u8>> {
        (from..to)
            .map(|i| format!("k{i:08}").into_bytes())
            .collect()
    };
    let ingested = |s: &Store| s.local().unwrap().rows_ingested();
    let same = |what: &str| {
        for (name, _) in &families {
            let read = |store: &Store| -> Vec<(Vec<u8>, Vec<cellar::Cell>)> {
                let rows = store.read_rows(name, ReadRequest::all()).unwrap();
                rows.map(|r| r.unwrap()).map(|r| (r.key, r.cells)).collect()
            };
            let (a, b) = (read(&cells), read(&columns));
            assert_eq!(a.len(), b.len(), "{what}: rows of {name}");
            assert!(a == b, "{what}: {name} holds the same cells");
        }
        assert_eq!(ingested(&cells), ingested(&columns), "{what}: ingested");
    };
    let n = 2 * INGEST_MIN_ROWS as u64;
    let at = |i: u64| 1_000 + (i as i64 % 7) * 60;
    for (name, _) in &families {
        // A tall load, and one encoded ahead.
        let before = ingested(&columns);
        assert_eq!(write(name, &keys(0, n), &at, BadRows::Stop, false), "[]");
        if *name != "c" {
            // (A PACKED family takes them as blocks, whatever their form.)
            assert_eq!(
                ingested(&columns) - before,
                n,
                "{name}: the columns ingested"
            );
        }
        assert_eq!(
            write(name, &keys(5 * n, 6 * n), &at, BadRows::Stop, true),
            "[]"
        );
        // Half over rows stored: the general path.
        let later = |i: u64| 9_000 + i as i64;
        assert_eq!(
            write(name, &keys(n / 2, 3 * n / 2), &later, BadRows::Stop, true),
            "[]"
        );
        // A small batch.
        assert_eq!(
            write(name, &keys(3 * n, 3 * n + 100), &at, BadRows::Stop, true),
            "[]"
        );
        // Out of order; then with a key twice.
        let mut shuffled = keys(7 * n, 8 * n);
        shuffled.reverse();
        assert_eq!(write(name, &shuffled, &at, BadRows::Stop, true), "[]");
        let mut twice = keys(8 * n, 9 * n);
        twice[100] = twice[99].clone();
        assert_eq!(write(name, &twice, &at, BadRows::Stop, true), "[]");
    }
    same("loads");
    // Bad rows: an empty key, a key too long, a negative time; skipped,
    // or stopping the batch with nothing of it written.
    let mut bad = keys(10 * n, 11 * n);
    bad[7] = Vec::new();
    bad[9] = vec![b'x'; cellar::MAX_KEY_LEN + 1];
    let negative = |i: u64| if i == 11 { -5 } else { at(i) };
    let skipped = write("p", &bad, &negative, BadRows::Skip, true);
    assert!(skipped.contains("(7, ") && skipped.contains("(9, ") && skipped.contains("(11, "));
    let stopped = write("p", &keys(12 * n, 13 * n), &negative, BadRows::Stop, false);
    assert!(stopped.starts_with("[(11, "), "{stopped}");
    same("bad rows");
    for store in [&cells, &columns] {
        store.compact("p").unwrap();
    }
    same("compacted");
}

/// The latest value of `key`'s cell a:q.
fn value_of(store: &Store, table: &str, key: &[u8]) -> Option<Vec<u8>> {
    let row = store
        .read_rows(
            table,
            ReadRequest::rows(RowSet::keys([key.to_vec()])).filter(ReadFilter::latest()),
        )
        .unwrap()
        .next()?
        .unwrap();
    row.cells.first().map(|c| c.value.clone())
}

/// A clean close leaves nothing for the next open to replay; a write after
/// it (the marker stale) is replayed and kept; writes after an open that
/// replayed nothing get sequence numbers above everything stored (an
/// overwrite wins after the next open).
#[test]
fn a_clean_close_leaves_no_journal_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let key = |i: u32| format!("k{i:05}").into_bytes();
    {
        let store = Store::open(&path).unwrap();
        two_family_table(&store, "t");
        for i in 0..2000 {
            put(&store, "t", &key(i), "a", "q", 1, "first");
        }
        // Before any clean close, the journal holds the writes.
        assert!(store.local().unwrap().checkpoint().unwrap());
    }
    {
        let store = Store::open(&path).unwrap();
        let local = store.local().unwrap();
        assert_eq!(local.journal_bytes_replayed(), 0);
        assert_eq!(keys(&store, "t", ReadRequest::all()).len(), 2000);
        assert_eq!(value_of(&store, "t", &key(7)).unwrap(), b"first");
        // Overwrites after an open that replayed nothing.
        for i in 0..100 {
            put(&store, "t", &key(i), "a", "q", 1, "second");
        }
        assert!(local.checkpoint().unwrap());
    }
    {
        let store = Store::open(&path).unwrap();
        let local = store.local().unwrap();
        assert_eq!(local.journal_bytes_replayed(), 0);
        assert_eq!(value_of(&store, "t", &key(7)).unwrap(), b"second");
        assert_eq!(value_of(&store, "t", &key(100)).unwrap(), b"first");
        // Writes after the clean close: its record is stale.
        assert!(local.checkpoint().unwrap());
        for i in 2000..2100 {
            put(&store, "t", &key(i), "a", "q", 1, "late");
        }
        put(&store, "t", &key(8), "a", "q", 1, "third");
    }
    let store = Store::open(&path).unwrap();
    assert!(store.local().unwrap().journal_bytes_replayed() > 0);
    assert_eq!(keys(&store, "t", ReadRequest::all()).len(), 2100);
    assert_eq!(value_of(&store, "t", &key(8)).unwrap(), b"third");
    assert_eq!(value_of(&store, "t", &key(2050)).unwrap(), b"late");
}

/// A second open of a store another handle has open is refused before it
/// reads or changes anything: the journals a clean close recorded are not
/// retired under the first handle, and its own next open still finds them
/// clean.
#[test]
fn a_second_open_changes_nothing_in_a_store_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let journals = |path: &std::path::Path| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut found: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        found.sort();
        found
    };
    let store = Store::open(&path).unwrap();
    two_family_table(&store, "t");
    for i in 0..200 {
        put(&store, "t", format!("k{i}").as_bytes(), "a", "q", 1, "v");
    }
    assert!(store.local().unwrap().checkpoint().unwrap());
    let before = journals(&path);
    assert!(before.iter().any(|(_, b)| b.iter().any(|&x| x != 0)));
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, Error::StoreInUse { .. }), "{err}");
    assert_eq!(journals(&path), before);
    assert!(path.join("clean-close").is_file());
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.local().unwrap().journal_bytes_replayed(), 0);
    assert_eq!(keys(&store, "t", ReadRequest::all()).len(), 200);
}
