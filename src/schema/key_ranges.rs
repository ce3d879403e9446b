//! The key ranges of a row-key schema: every key whose segments satisfy
//! per-segment constraints lies in them (over-covering, never missing;
//! property-tested in `key.rs`), and the segment order a scan of them
//! keeps ([`KeyOrder`]).

use super::key::*;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use super::key::{Constraint, KeySchema, SegmentKind, TimeFormat};
use crate::store::RowRange;

impl KeySchema {
    /// Key ranges covering every key whose fields satisfy `constraints`
    /// (by field index). The ranges may cover more keys than match (the
    /// scan re-checks); they never miss one.
    pub fn ranges(&self, constraints: &[Option<Constraint>]) -> Vec<RowRange> {
        self.ranges_with_exact(constraints).0
    }

    /// [`KeySchema::ranges`], and per field whether the ranges hold only
    /// keys whose field meets its constraint, among keys that fit the
    /// schema (a scan that skips the re-check must still drop keys that do
    /// not): true for a field the ranges pin to listed values (`=`, `IN`)
    /// that write and read back unchanged, when every field before it is
    /// a salt or such a field.
    pub fn ranges_with_exact(
        &self,
        constraints: &[Option<Constraint>],
    ) -> (Vec<RowRange>, Vec<bool>) {
        let mut exact = vec![false; self.fields().count()];
        // Whether the fields so far are all pinned exactly.
        let mut pinned = true;
        let mut prefixes: Vec<String> = vec![String::new()];
        let mut field = 0;
        for (n, segment) in self.segments.iter().enumerate() {
            let delimiter = if n + 1 < self.segments.len() {
                Some(self.delimiter)
            } else {
                None
            };
            let extend = |prefixes: &[String], values: &[String]| -> Vec<String> {
                let mut out = Vec::with_capacity(prefixes.len() * values.len());
                for p in prefixes {
                    for v in values {
                        let mut s = p.clone();
                        s.push_str(v);
                        s.extend(delimiter);
                        out.push(s);
                    }
                }
                out
            };
            match segment {
                Segment::Literal(text) => prefixes = extend(&prefixes, std::slice::from_ref(text)),
                Segment::Field { name, kind } => {
                    let constraint = constraints.get(field).and_then(Option::as_ref);
                    field += 1;
                    if let SegmentKind::Salt { buckets, of } = kind {
                        let buckets_used = self.salt_candidates(*buckets, of, constraints);
                        let texts: Vec<String> = buckets_used
                            .iter()
                            .map(|b| format_salt(*b, *buckets))
                            .collect();
                        if prefixes.len() * texts.len() > MAX_PREFIXES {
                            return (prefix_ranges(&prefixes), exact);
                        }
                        prefixes = extend(&prefixes, &texts);
                        continue;
                    }
                    match constraint {
                        Some(Constraint::In(values)) => {
                            let mut texts: Vec<String> = values
                                .iter()
                                .filter_map(|v| self.format_value(name, kind, v).ok())
                                .collect();
                            texts.sort();
                            texts.dedup();
                            if prefixes.len() * texts.len().max(1) > MAX_PREFIXES {
                                return (prefix_ranges(&prefixes), exact);
                            }
                            // An IN list of values that cannot be written here matches nothing.
                            prefixes = extend(&prefixes, &texts);
                            if prefixes.is_empty() {
                                return (Vec::new(), exact);
                            }
                            // Pinned exactly when each value reads back as itself
                            // (a time within a `%Y%m%d` day does not).
                            pinned &= values.iter().all(|v| {
                                self.format_value(name, kind, v)
                                    .map_or(true, |t| parse_value(kind, &t).as_ref() == Some(v))
                            });
                            exact[field - 1] = pinned;
                        }
                        Some(Constraint::Range(lo, hi)) => {
                            let (ranges, answered) =
                                self.range_within(&prefixes, name, kind, lo, hi);
                            exact[field - 1] = pinned && answered;
                            return (ranges, exact);
                        }
                        Some(Constraint::Prefix(start)) => {
                            if start.contains(self.delimiter)
                                && self.free_tail() != self.field_index(name)
                            {
                                // No value of this segment holds the delimiter.
                                return (Vec::new(), exact);
                            }
                            let texts: Vec<String> =
                                prefixes.iter().map(|p| format!("{p}{start}")).collect();
                            return (prefix_ranges(&texts), exact);
                        }
                        None => return (prefix_ranges(&prefixes), exact),
                    }
                }
            }
        }
        // Every segment pinned: whole keys (the trailing delimiter was not added).
        let keys = prefixes
            .into_iter()
            .map(|p| RowRange::key(p.into_bytes()))
            .collect();
        (keys, exact)
    }

    /// What key order says about segment order for a scan under
    /// `constraints`: the leading segments pinned to listed values (and
    /// salt buckets) split the keys into groups, one key prefix each; within
    /// a group, keys sort by the next segments, as far as their text sorts
    /// as their values do. `None` when no segment follows the groups in an
    /// order-preserving form, or the groups are too many to merge.
    pub fn order(&self, constraints: &[Option<Constraint>]) -> Option<KeyOrder> {
        let mut prefixes: Vec<String> = vec![String::new()];
        let mut constants = Vec::new();
        let mut field = 0;
        let last = self.segments.len().saturating_sub(1);
        let mut segments = self.segments.iter().enumerate();
        // The groups: literals, salts and pinned fields up to the first
        // field that is free or ranged.
        let first = loop {
            let (n, segment) = segments.next()?;
            let texts: Vec<String> = match segment {
                Segment::Literal(text) => vec![text.clone()],
                Segment::Field { name, kind } => {
                    let i = field;
                    field += 1;
                    if let SegmentKind::Salt { buckets, of } = kind {
                        self.salt_candidates(*buckets, of, constraints)
                            .iter()
                            .map(|b| format_salt(*b, *buckets))
                            .collect()
                    } else if let Some(Some(Constraint::In(values))) = constraints.get(i) {
                        let mut texts: Vec<String> = values
                            .iter()
                            .filter_map(|v| self.format_value(name, kind, v).ok())
                            .collect();
                        texts.sort();
                        texts.dedup();
                        if texts.len() == 1 {
                            constants.push(i);
                        }
                        texts
                    } else {
                        break (n, i, kind);
                    }
                }
            };
            if texts.is_empty() || prefixes.len() * texts.len() > MAX_GROUPS {
                return None;
            }
            prefixes = prefixes
                .iter()
                .flat_map(|p| {
                    texts
                        .iter()
                        .map(move |t| format!("{p}{t}{}", self.delimiter))
                })
                .collect();
        };
        // Then the fields whose text sorts as their values, each after a
        // field of one width (so a longer value cannot sort among them).
        let mut fields = Vec::new();
        let (mut n, mut i, mut kind) = first;
        while let Some((descending, fixed)) = sorts_as_value(kind, n == last) {
            fields.push((i, descending));
            if !fixed {
                break;
            }
            let next = segments.by_ref().find_map(|(m, s)| match s {
                Segment::Literal(_) => None,
                Segment::Field { kind, .. } => Some((m, kind)),
            });
            let Some((m, k)) = next else {
                break;
            };
            (n, i, kind) = (m, i + 1, k);
        }
        if fields.is_empty() {
            return None;
        }
        Some(KeyOrder {
            groups: prefixes.into_iter().map(String::into_bytes).collect(),
            fields,
            constants,
        })
    }

    /// Salt buckets that keys satisfying `constraints` can fall in.
    fn salt_candidates(
        &self,
        buckets: u32,
        of: &[String],
        constraints: &[Option<Constraint>],
    ) -> Vec<u32> {
        let all = || (0..buckets).collect();
        let mut combos: Vec<Vec<Option<String>>> =
            vec![vec![None; constraints.len().max(self.fields().count())]];
        for source in of {
            let Some(i) = self.field_index(source) else {
                return all();
            };
            let Some(Some(Constraint::In(values))) = constraints.get(i) else {
                return all();
            };
            let Some((_, name, kind)) = self.fields().nth(i) else {
                return all();
            };
            let texts: Vec<String> = values
                .iter()
                .filter_map(|v| self.format_value(name, kind, v).ok())
                .collect();
            if combos.len() * texts.len() > MAX_PREFIXES {
                return all();
            }
            combos = combos
                .iter()
                .flat_map(|c| {
                    texts.iter().map(move |t| {
                        let mut c = c.clone();
                        c[i] = Some(t.clone());
                        c
                    })
                })
                .collect();
        }
        let mut out: Vec<u32> = combos
            .iter()
            .filter_map(|c| {
                let text = |i: usize| c.get(i).and_then(Option::as_deref).unwrap_or_default();
                self.salt_of(buckets, of, &text).ok()
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn range_within(
        &self,
        prefixes: &[String],
        name: &str,
        kind: &SegmentKind,
        lo: &Bound<KeyValue>,
        hi: &Bound<KeyValue>,
    ) -> (Vec<RowRange>, bool) {
        let encode = |v: &KeyValue| self.format_value(name, kind, v).ok();
        // Where every value's text has one width, the keys holding a
        // bound's own text hold one value: what that text reads back as
        // (the bound cut to the format's precision, never above it). They
        // belong in the range exactly when that value meets the bound.
        let fixed = match kind {
            SegmentKind::Int { width } => *width > 0,
            SegmentKind::Time {
                format: TimeFormat::Pattern(p),
                ..
            } => pattern_fixed(p),
            SegmentKind::Time { .. } => true,
            SegmentKind::Text | SegmentKind::Padded { .. } | SegmentKind::Salt { .. } => false,
        };
        let holds = |bound: &Bound<KeyValue>, lower: bool| -> bool {
            let (Bound::Included(v) | Bound::Excluded(v)) = bound else {
                return true;
            };
            let read = encode(v).and_then(|t| parse_value(kind, &t));
            match (fixed, read) {
                (true, Some(read)) => match (bound, lower) {
                    (Bound::Included(_), true) => read >= *v,
                    (Bound::Excluded(_), true) => read > *v,
                    (Bound::Included(_), false) => read <= *v,
                    _ => read < *v,
                },
                _ => true,
            }
        };
        let (keep_lo, keep_hi) = (holds(lo, true), holds(hi, false));
        let (lo, hi, keep_lo, keep_hi) = match kind {
            SegmentKind::Time { reversed: true, .. } => (hi, lo, keep_hi, keep_lo),
            _ => (lo, hi, keep_lo, keep_hi),
        };
        let value_of = |b: &Bound<KeyValue>| match b {
            Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
            Bound::Unbounded => None,
        };
        let sortable = match kind {
            SegmentKind::Int { width } => *width > 0,
            SegmentKind::Time {
                format: TimeFormat::Pattern(p),
                ..
            } => pattern_sorts(p),
            SegmentKind::Time { .. } => true,
            SegmentKind::Text => true,
            // Padding sorts by the pad character, not as the value does.
            SegmentKind::Padded { .. } | SegmentKind::Salt { .. } => false,
        };
        if !sortable {
            return (prefix_ranges(prefixes), false);
        }
        let lo_text = value_of(lo).and_then(|v| encode(&v));
        let hi_text = value_of(hi).and_then(|v| encode(&v));
        // The ranges hold exactly the keys that fit and meet the bounds
        // when the text has one width and sorts as the value ascends (a
        // key's text between the bounds' texts is a value between them,
        // and a bound's own text reads back as `holds` judged), and each
        // bound has a text and reads back from it (out-of-domain bounds
        // widen the range to the parent prefix).
        let reads_back = |b: &Bound<KeyValue>| {
            value_of(b).is_none_or(|v| encode(&v).and_then(|t| parse_value(kind, &t)).is_some())
        };
        let exact = fixed
            && !matches!(kind, SegmentKind::Time { reversed: true, .. })
            && reads_back(lo)
            && reads_back(hi);
        // Out-of-domain bounds (a negative integer, a date the format cannot
        // write) fall back to the parent prefix: wider, never wrong.
        let delimiter = self.delimiter as u8;
        let ranges = prefixes
            .iter()
            .map(|p| {
                let parent = RowRange::prefix(p.as_bytes().to_vec());
                let start = match &lo_text {
                    // Fixed width: every key holding the bound's text starts
                    // with it, and every larger value sorts after them all.
                    Some(t) if !keep_lo => {
                        crate::codec::prefix_successor(format!("{p}{t}").as_bytes())
                            .map_or(parent.start.clone(), Bound::Included)
                    }
                    Some(t) => Bound::Included(format!("{p}{t}").into_bytes()),
                    None => parent.start.clone(),
                };
                let end = match &hi_text {
                    Some(t) if !keep_hi => Bound::Excluded(format!("{p}{t}").into_bytes()),
                    Some(t) if !matches!(kind, SegmentKind::Text) => {
                        let mut end = format!("{p}{t}").into_bytes();
                        end.push(delimiter);
                        crate::codec::prefix_successor(&end)
                            .map_or(Bound::Unbounded, Bound::Excluded)
                    }
                    // Text: a shorter value sorts by its delimiter byte, so
                    // the bound holds only when every byte of the bound sorts
                    // after the delimiter.
                    Some(t) if t.bytes().all(|b| b > delimiter) => {
                        let mut end = format!("{p}{t}").into_bytes();
                        end.push(delimiter);
                        crate::codec::prefix_successor(&end)
                            .map_or(Bound::Unbounded, Bound::Excluded)
                    }
                    _ => parent.end.clone(),
                };
                RowRange::between(start, end)
            })
            .collect();
        (ranges, exact)
    }
}

/// At most this many key groups are merged in segment order.
const MAX_GROUPS: usize = 256;

/// Segment order within a scan's key order (see `KeySchema::order`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyOrder {
    /// One key prefix per group, sorted.
    pub groups: Vec<Vec<u8>>,
    /// Fields (by index) whose values, in this order, sort as the keys of
    /// a group do; `true` where the value descends as keys ascend.
    pub fields: Vec<(usize, bool)>,
    /// Fields pinned to one value in every group.
    pub constants: Vec<usize>,
}

/// Whether a segment's text sorts as its value: `Some((descending,
/// fixed width))`. Text does only as the key's last segment (elsewhere a
/// shorter value sorts by the delimiter that follows it).
pub(super) fn sorts_as_value(kind: &SegmentKind, last: bool) -> Option<(bool, bool)> {
    match kind {
        SegmentKind::Int { width } => (*width > 0).then_some((false, true)),
        SegmentKind::Time {
            format: TimeFormat::Pattern(p),
            ..
        } => pattern_sorts(p).then(|| (false, pattern_fixed(p))),
        SegmentKind::Time { reversed, .. } => Some((*reversed, true)),
        SegmentKind::Text => last.then_some((false, false)),
        SegmentKind::Padded { .. } | SegmentKind::Salt { .. } => None,
    }
}

pub(super) fn prefix_ranges(prefixes: &[String]) -> Vec<RowRange> {
    prefixes
        .iter()
        .map(|p| RowRange::prefix(p.as_bytes().to_vec()))
        .collect()
}
