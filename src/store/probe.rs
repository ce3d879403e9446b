//! What a planner learns about a row range cheaply: its first and last
//! row keys and how many rows it holds, counted up to a limit.
//!
//! A scan reads a row's every pair; a probe only needs to see each row
//! once. In a CELLS family a row may hold thousands of pairs (a time
//! bucket with a cell per event), so the probe walks a row's pairs only
//! for a while and then jumps past the row with a new iterator: a seek
//! costs about as much as stepping over [`STEPS_BEFORE_SEEK`] pairs.

use super::engine::FjallStore;
use crate::codec;
use crate::codec::RowRange;
use crate::error::Result;

/// Pairs of one row stepped over before the probe seeks past the row.
const STEPS_BEFORE_SEEK: usize = 16;

/// A row range as a probe saw it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RowProbe {
    /// The range's first row key, if it holds a row.
    pub first: Option<Vec<u8>>,
    /// The range's last row key, if it holds a row.
    pub last: Option<Vec<u8>>,
    /// Rows seen, at most the probe's limit.
    pub rows: usize,
}

impl FjallStore {
    /// Probes `range` of `table` through the pairs of its family `family`:
    /// its first and last row keys and its rows counted up to `limit`.
    /// Rows are those with any pair in the family, live or not (GC is not
    /// applied): an estimate for planning, never an answer.
    pub fn probe_rows(
        &self,
        table: &str,
        family: &str,
        range: &RowRange,
        limit: usize,
    ) -> Result<RowProbe> {
        let (handle, snapshot) = self.handle_and_snapshot(table)?;
        let scans = handle.family_scans(Some(&[family.to_string()]))?;
        let encoded = range.encode();
        let end = encoded.end.as_deref();
        let mut probe = RowProbe::default();
        // (An empty range, its end before its start, holds no row.)
        if encoded.is_empty() {
            return Ok(probe);
        }
        // A row lives in exactly one of a family's keyspaces in any
        // snapshot, so their counts add up.
        for source in scans.iter().flat_map(|s| &s.sources) {
            let format = source.format;
            let open = |from: &[u8], reverse: bool| source.pairs(&snapshot, from, end, reverse);
            if let Some(key) = open(&encoded.start, true)?.next_key(true)? {
                let row = codec::unescape(format.row_of(&key)?)?.0;
                if probe.last.as_ref().is_none_or(|l| row > *l) {
                    probe.last = Some(row);
                }
            }
            let mut iter = open(&encoded.start, false)?;
            // The escaped row being stepped through (empty before the
            // first), and its pairs seen so far.
            let mut row: Vec<u8> = Vec::new();
            let mut steps = 0;
            while probe.rows < limit {
                let Some(key) = iter.next_key(false)? else {
                    break;
                };
                let escaped = format.row_of(&key)?;
                if escaped == row.as_slice() {
                    steps += 1;
                    if steps >= STEPS_BEFORE_SEEK {
                        let Some(next) = codec::prefix_successor(&row)
                            .filter(|next| end.is_none_or(|end| next.as_slice() < end))
                        else {
                            break;
                        };
                        iter = open(&next, false)?;
                        steps = 0;
                    }
                    continue;
                }
                if row.is_empty() {
                    let plain = codec::unescape(escaped)?.0;
                    if probe.first.as_ref().is_none_or(|f| plain < *f) {
                        probe.first = Some(plain);
                    }
                }
                row.clear();
                row.extend_from_slice(escaped);
                steps = 1;
                probe.rows += 1;
            }
        }
        Ok(probe)
    }
}
