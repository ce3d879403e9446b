//! Tests of row-key schemas: values and keys, ranges and their order.

use super::*;
use crate::store::RowRange;

#[test]
fn coarse_patterns_are_accepted() {
    assert!(check_pattern("%Y%m").is_ok() && check_pattern("%Y").is_ok());
    // A time of day without a date cannot be read back.
    assert!(check_pattern("%H%M").is_err());
}

fn battery() -> KeySchema {
    KeySchema {
        delimiter: '#',
        segments: vec![
            Segment::Literal("BATTERY".into()),
            Segment::Field {
                name: "salt".into(),
                kind: SegmentKind::Salt {
                    buckets: 4,
                    of: vec!["ts".into()],
                },
            },
            Segment::Field {
                name: "ts".into(),
                kind: SegmentKind::Time {
                    format: TimeFormat::Pattern("%Y%m%d%H%M%S%3f".into()),
                    reversed: false,
                },
            },
        ],
    }
}

fn micros(s: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.3f")
        .unwrap()
        .and_utc()
        .timestamp_micros()
}

#[test]
fn key_order_names_the_groups_and_the_segments_they_sort_by() {
    // Salted: one group per bucket, each in time order.
    let order = battery().order(&[None, None]).unwrap();
    assert_eq!(order.groups.len(), 4);
    assert!(order.groups[0].starts_with(b"BATTERY#0#"));
    assert_eq!(order.fields, vec![(1, false)]);
    // A device pinned, then a reversed time: one group, newest first.
    let events = KeySchema {
        delimiter: '#',
        segments: vec![
            Segment::Field {
                name: "dev".into(),
                kind: SegmentKind::Text,
            },
            Segment::Field {
                name: "ts".into(),
                kind: SegmentKind::Time {
                    format: TimeFormat::Millis,
                    reversed: true,
                },
            },
        ],
    };
    let pinned = Some(Constraint::In(vec![KeyValue::Text("d1".into())]));
    let order = events.order(&[pinned, None]).unwrap();
    assert_eq!(order.groups, vec![b"d1#".to_vec()]);
    assert_eq!(order.fields, vec![(1, true)]);
    assert_eq!(order.constants, vec![0]);
    // A text segment before others does not sort as its value ("a" and
    // "a!" sort as "a#" and "a!"), so nothing follows from the key.
    assert_eq!(events.order(&[None, None]), None);
    // Values that cannot be written leave no group.
    let bad = Some(Constraint::In(vec![KeyValue::Text("x#y".into())]));
    assert_eq!(events.order(&[bad, None]), None);
}

#[test]
fn salted_keys_round_trip() {
    let schema = battery();
    schema.validate().unwrap();
    let ts = micros("2015-03-01 12:45:01.001");
    let key = schema.encode(&[None, Some(KeyValue::Time(ts))]).unwrap();
    let text = String::from_utf8(key.clone()).unwrap();
    assert!(
        text.starts_with("BATTERY#") && text.ends_with("#20150301124501001"),
        "{text}"
    );
    let decoded = schema.decode(&key).unwrap();
    assert_eq!(decoded[1], KeyValue::Time(ts));
    // Equality on the salt's source pins its bucket: one key.
    let ranges = schema.ranges(&[None, Some(Constraint::In(vec![KeyValue::Time(ts)]))]);
    assert_eq!(ranges, vec![RowRange::key(key)]);
    // A time range fans out over every bucket.
    let ranges = schema.ranges(&[
        None,
        Some(Constraint::Range(
            Bound::Included(KeyValue::Time(ts)),
            Bound::Unbounded,
        )),
    ]);
    assert_eq!(ranges.len(), 4);
}

#[test]
fn misfits_decode_to_none() {
    let schema = battery();
    for bad in [
        &b"BATTERY#1"[..],
        b"BATTERY#x#20150301124501001",
        b"PHONE#1#20150301124501001",
        b"\xff",
    ] {
        assert_eq!(schema.decode(bad), None, "{bad:?}");
    }
}

#[test]
fn reversed_timestamps_invert_ranges() {
    let schema = KeySchema {
        delimiter: '#',
        segments: vec![
            Segment::Field {
                name: "user".into(),
                kind: SegmentKind::Text,
            },
            Segment::Field {
                name: "ts".into(),
                kind: SegmentKind::Time {
                    format: TimeFormat::Millis,
                    reversed: true,
                },
            },
        ],
    };
    let a = schema
        .encode(&[
            Some(KeyValue::Text("u".into())),
            Some(KeyValue::Time(1_000_000)),
        ])
        .unwrap();
    let b = schema
        .encode(&[
            Some(KeyValue::Text("u".into())),
            Some(KeyValue::Time(2_000_000)),
        ])
        .unwrap();
    assert!(b < a, "newer sorts first");
    let ranges = schema.ranges(&[
        Some(Constraint::In(vec![KeyValue::Text("u".into())])),
        Some(Constraint::Range(
            Bound::Included(KeyValue::Time(1_500_000)),
            Bound::Unbounded,
        )),
    ]);
    let [range] = ranges.as_slice() else {
        panic!("{ranges:?}")
    };
    let inside = |k: &[u8]| {
        std::ops::RangeBounds::<[u8]>::contains(
            &(
                range.start.as_ref().map(|v| v.as_slice()),
                range.end.as_ref().map(|v| v.as_slice()),
            ),
            k,
        )
    };
    assert!(inside(&b) && !inside(&a));
}

#[test]
fn bad_values_are_named() {
    let schema = KeySchema {
        delimiter: '#',
        segments: vec![Segment::Field {
            name: "n".into(),
            kind: SegmentKind::Int { width: 3 },
        }],
    };
    let err = schema
        .encode(&[Some(KeyValue::Int(1234))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("1234") && err.contains("3 digits"), "{err}");
    let err = schema
        .encode(&[Some(KeyValue::Int(-1))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("-1"), "{err}");
    assert_eq!(schema.encode(&[Some(KeyValue::Int(7))]).unwrap(), b"007");
}

#[test]
fn unsortable_patterns_are_detected() {
    assert!(pattern_sorts("%Y-%m-%d-%H%M"));
    assert!(pattern_sorts("%Y%m%d%H%M%S%3f"));
    assert!(!pattern_sorts("%d-%m-%Y"));
}

#[test]
fn a_last_time_pattern_may_hold_the_delimiter() {
    let schema = KeySchema {
        delimiter: '-',
        segments: vec![
            Segment::Field {
                name: "dev".into(),
                kind: SegmentKind::Text,
            },
            Segment::Field {
                name: "day".into(),
                kind: SegmentKind::Time {
                    format: TimeFormat::Pattern("%Y-%m-%d".into()),
                    reversed: false,
                },
            },
        ],
    };
    let values = schema.decode(b"d1-2024-02-02").unwrap();
    assert_eq!(
        schema
            .encode(&values.into_iter().map(Some).collect::<Vec<_>>())
            .unwrap(),
        b"d1-2024-02-02"
    );
    assert!(schema.decode(b"d1-2024-2-2").is_none());
}

#[test]
fn fits_agrees_with_decode() {
    let padded = KeySchema {
        delimiter: '#',
        segments: vec![
            Segment::Field {
                name: "x".into(),
                kind: SegmentKind::Padded { width: 3, pad: ' ' },
            },
            Segment::Literal("L".into()),
        ],
    };
    let keys: [&[u8]; 12] = [
        b"h1#0007",
        b"h1#7",
        b"h1#00x7",
        b"h1",
        b"#0007",
        b"h1#0007#more",
        b"\xff#0007",
        b"ab #L",
        b"ab#L",
        b"abc#M",
        b"BATTERY#2#20150301000000000",
        b"BATTERY#2#2015",
    ];
    for key in keys {
        for schema in [host_n(false), host_n(true), padded.clone(), battery()] {
            assert_eq!(
                schema.fits(key),
                schema.decode(key).is_some(),
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    }
}

#[test]
fn only_listed_leading_values_that_read_back_are_exact() {
    let text = |t: &str| KeyValue::Text(t.into());
    let schema = host_n(false);
    let pinned = Some(Constraint::In(vec![text("h1"), text("h2")]));
    let n = |v: i64| Some(Constraint::In(vec![KeyValue::Int(v)]));
    assert_eq!(
        schema.ranges_with_exact(&[pinned.clone(), n(7)]).1,
        [true, true]
    );
    // After a field that is not pinned, nothing is.
    assert_eq!(schema.ranges_with_exact(&[None, n(7)]).1, [false, false]);
    let range = Some(Constraint::Range(
        Bound::Unbounded,
        Bound::Excluded(KeyValue::Int(9)),
    ));
    // A range on the fixed-width, sortable field after pinned ones is
    // exact; not after a free field, nor with a bound the field cannot
    // write (the range widens to the parent), nor on reversed times.
    assert_eq!(
        schema.ranges_with_exact(&[pinned.clone(), range.clone()]).1,
        [true, true]
    );
    assert_eq!(schema.ranges_with_exact(&[None, range]).1, [false, false]);
    let too_wide = Some(Constraint::Range(
        Bound::Unbounded,
        Bound::Excluded(KeyValue::Int(100_000)),
    ));
    assert_eq!(
        schema.ranges_with_exact(&[pinned.clone(), too_wide]).1,
        [true, false]
    );
    let since = Some(Constraint::Range(
        Bound::Included(KeyValue::Time(5)),
        Bound::Unbounded,
    ));
    assert_eq!(
        host_n(true).ranges_with_exact(&[pinned, since]).1,
        [true, false]
    );
    // A day-resolution segment cannot pin a time within the day.
    let days = KeySchema {
        delimiter: '#',
        segments: vec![Segment::Field {
            name: "day".into(),
            kind: SegmentKind::Time {
                format: TimeFormat::Pattern("%Y%m%d".into()),
                reversed: false,
            },
        }],
    };
    let noon = micros("2015-03-01 12:00:00.000");
    let midnight = micros("2015-03-01 00:00:00.000");
    let at = |t: i64| Some(Constraint::In(vec![KeyValue::Time(t)]));
    assert_eq!(days.ranges_with_exact(&[at(midnight)]).1, [true]);
    assert_eq!(days.ranges_with_exact(&[at(noon)]).1, [false]);
    // Salted: the salt bucket follows from the pinned time, which the
    // range then pins exactly.
    assert_eq!(
        battery().ranges_with_exact(&[None, at(midnight)]).1,
        [false, true]
    );
}

fn host_n(reversed_ts: bool) -> KeySchema {
    KeySchema {
        delimiter: '#',
        segments: vec![
            Segment::Field {
                name: "host".into(),
                kind: SegmentKind::Text,
            },
            Segment::Field {
                name: "n".into(),
                kind: if reversed_ts {
                    SegmentKind::Time {
                        format: TimeFormat::Micros,
                        reversed: true,
                    }
                } else {
                    SegmentKind::Int { width: 4 }
                },
            },
        ],
    }
}

fn bound(kind: u8, v: i64, reversed_ts: bool) -> Bound<KeyValue> {
    let value = if reversed_ts {
        KeyValue::Time(v)
    } else {
        KeyValue::Int(v)
    };
    match kind % 3 {
        0 => Bound::Included(value),
        1 => Bound::Excluded(value),
        _ => Bound::Unbounded,
    }
}

fn inside(v: i64, b: &Bound<KeyValue>, lower: bool) -> bool {
    let x = match b {
        Bound::Included(KeyValue::Int(x) | KeyValue::Time(x))
        | Bound::Excluded(KeyValue::Int(x) | KeyValue::Time(x)) => *x,
        _ => return true,
    };
    match (b, lower) {
        (Bound::Included(_), true) => v >= x,
        (Bound::Excluded(_), true) => v > x,
        (Bound::Included(_), false) => v <= x,
        _ => v < x,
    }
}

proptest::proptest! {
    /// Every key whose segments satisfy the constraints lies in one of
    /// the ranges, and for integer and exact-time segments no other
    /// key of the schema does.
    #[test]
    fn ranges_cover_exactly(
        reversed_ts in proptest::bool::ANY,
        host in "[a-c]{0,2}",
        lo in 0i64..40, lo_kind in 0u8..3,
        hi in 0i64..40, hi_kind in 0u8..3,
        keys in proptest::collection::vec(("[a-c]{0,2}", 0i64..40), 1..40),
    ) {
        let schema = host_n(reversed_ts);
        let (lo, hi) = (bound(lo_kind, lo, reversed_ts), bound(hi_kind, hi, reversed_ts));
        let ranges = schema.ranges(&[
            Some(Constraint::In(vec![KeyValue::Text(host.clone())])),
            Some(Constraint::Range(lo.clone(), hi.clone())),
        ]);
        for (h, n) in keys {
            let value = if reversed_ts { KeyValue::Time(n) } else { KeyValue::Int(n) };
            let key = schema
                .encode(&[Some(KeyValue::Text(h.clone())), Some(value)])
                .unwrap();
            let wanted = h == host && inside(n, &lo, true) && inside(n, &hi, false);
            let found = ranges.iter().any(|r| {
                std::ops::RangeBounds::<Vec<u8>>::contains(&(r.start.clone(), r.end.clone()), &key)
            });
            proptest::prop_assert_eq!(found, wanted, "key {:?} ranges {:?}", String::from_utf8_lossy(&key), ranges);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

    /// A key decodes only from the text its values write (a mutated
    /// key either writes back as it is or does not decode), so no row
    /// is shown with values whose key range would not hold it.
    #[test]
    fn keys_decode_only_from_the_text_their_values_write(
        which in 0usize..8,
        host in "[a-c]{1,3}",
        n in 0i64..10_000,
        micros in 0i64..4_102_444_800_000_000,
        edit in 0usize..4,
        at in 0usize..24,
        c in "[0-9#x ]",
        minutes_before in 0i64..180,
    ) {
        let padded = KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field { name: "x".into(), kind: SegmentKind::Padded { width: 3, pad: ' ' } },
                Segment::Literal("L".into()),
            ],
        };
        // Padded text last may not hold the delimiter, which the
        // split leaves in it.
        let padded_last = KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Literal("L".into()),
                Segment::Field { name: "x".into(), kind: SegmentKind::Padded { width: 3, pad: ' ' } },
            ],
        };
        let day_n = KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field { name: "n".into(), kind: SegmentKind::Int { width: 0 } },
                Segment::Field {
                    name: "day".into(),
                    kind: SegmentKind::Time { format: TimeFormat::Pattern("%Y%m%d".into()), reversed: false },
                },
            ],
        };
        // A time of day last, the bench's and the guides' usual key: a
        // key after one of the same series reads its time from the digits
        // that changed.
        let stamped = |pattern: &str| KeySchema {
            delimiter: '#',
            segments: vec![
                Segment::Field { name: "host".into(), kind: SegmentKind::Text },
                Segment::Field { name: "n".into(), kind: SegmentKind::Int { width: 4 } },
                Segment::Field {
                    name: "ts".into(),
                    kind: SegmentKind::Time { format: TimeFormat::Pattern(pattern.into()), reversed: false },
                },
            ],
        };
        let schema = vec![
            host_n(false),
            host_n(true),
            battery(),
            padded,
            day_n,
            padded_last,
            stamped("%Y-%m-%d-%H%M"),
            stamped("%Y-%m-%dT%H:%M:%S%.6f"),
        ]
        .swap_remove(which);
        let values: Vec<Option<KeyValue>> = schema
            .fields()
            .map(|(_, _, kind)| match kind {
                SegmentKind::Text | SegmentKind::Padded { .. } => Some(KeyValue::Text(host.clone())),
                SegmentKind::Int { .. } | SegmentKind::Salt { .. } => Some(KeyValue::Int(n)),
                SegmentKind::Time { .. } => Some(KeyValue::Time(micros)),
            })
            .collect();
        let mut key = String::from_utf8(schema.encode(&values).unwrap()).unwrap();
        let at = at % (key.len() + 1);
        match edit {
            1 if at < key.len() => { key.remove(at); }
            2 => key.insert_str(at, &c),
            3 if at < key.len() => key.replace_range(at..=at, &c),
            _ => {}
        }
        let decoded = schema.decode(key.as_bytes());
        proptest::prop_assert_eq!(schema.fits(key.as_bytes()), decoded.is_some(), "{}", key);
        // After a key that fits (the key as written, and one a row or
        // two before it), the answer is the same.
        let written = String::from_utf8(schema.encode(&values).unwrap()).unwrap();
        let before = schema
            .encode(&values.iter().map(|v| match v {
                Some(KeyValue::Int(n)) => Some(KeyValue::Int(n / 2)),
                other => other.clone(),
            }).collect::<Vec<_>>())
            .unwrap();
        let earlier = schema
            .encode(&values.iter().map(|v| match v {
                Some(KeyValue::Time(t)) => Some(KeyValue::Time(t - minutes_before * 60_000_000 - 1)),
                other => other.clone(),
            }).collect::<Vec<_>>())
            .unwrap();
        for prev in [written.as_bytes(), &before[..], &earlier[..]] {
            proptest::prop_assert!(schema.fits(prev));
            // Decoded by a cursor after it: the key's own values (none
            // when it does not fit), the fields before the first one read
            // again the same as its.
            let mut cursor = crate::schema::KeyCursor::default();
            proptest::prop_assert_eq!(schema.decode_next(&mut cursor, prev), Some(0));
            let kept = cursor.values().unwrap().to_vec();
            let first = schema.decode_next(&mut cursor, key.as_bytes());
            proptest::prop_assert_eq!(
                first.is_some(),
                decoded.is_some(),
                "{} after {}", key, String::from_utf8_lossy(prev)
            );
            proptest::prop_assert_eq!(cursor.values(), decoded.as_deref(), "{}", key);
            if let (Some(first), Some(decoded)) = (first, &decoded) {
                proptest::prop_assert_eq!(&kept[..first], &decoded[..first], "{}", key);
            }
            // And the key after that (the written one again) too.
            proptest::prop_assert_eq!(
                schema.decode_next(&mut cursor, written.as_bytes()).map(|_| cursor.values().unwrap().to_vec()),
                schema.decode(written.as_bytes())
            );
        }
        let mut fresh = crate::schema::KeyCursor::default();
        proptest::prop_assert_eq!(
            schema.decode_next(&mut fresh, key.as_bytes()).map(|_| fresh.values().unwrap().to_vec()),
            decoded.clone()
        );
        if edit == 0 {
            proptest::prop_assert!(decoded.is_some(), "{} as written does not decode", key);
        }
        if let Some(decoded) = decoded {
            let written = schema.encode(&decoded.into_iter().map(Some).collect::<Vec<_>>()).unwrap();
            proptest::prop_assert_eq!(String::from_utf8(written).unwrap(), key);
        }
    }
}
