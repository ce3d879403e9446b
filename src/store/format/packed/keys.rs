//! Keys in ascending order stored by what each adds to the one before:
//! how a column-wise block holds its rows' keys. A tall table's
//! consecutive keys share all but their last few bytes (a balloon's
//! minutes), so each takes the bits of two small numbers and the bytes
//! that changed, where storing it whole took its length again and an
//! offset that lz4 cannot shrink.
//!
//! ```text
//! keys = varint L: the bytes that follow (so a reader that wants no
//!          key steps over them)
//!        run of R numbers: how many leading bytes each key shares with
//!          the one before (the first: none)
//!        run of R numbers: how many bytes each key adds
//!        the added bytes, key after key
//! ```

use super::runs::{Plan, Run, put_varint, varint};
use crate::codec::common_prefix;

/// Appends `keys` (ascending) as a key section.
pub(crate) fn write<K: AsRef<[u8]>>(keys: &[K], out: &mut Vec<u8>) {
    let mut shared = Vec::with_capacity(keys.len());
    let mut added = Vec::with_capacity(keys.len());
    let mut before: &[u8] = &[];
    for key in keys {
        let key = key.as_ref();
        let n = common_prefix(before, key);
        shared.push(n as i64);
        added.push((key.len() - n) as i64);
        before = key;
    }
    let mut rests = Vec::with_capacity(keys.len());
    for (key, n) in keys.iter().zip(&shared) {
        rests.extend_from_slice(&key.as_ref()[*n as usize..]);
    }
    write_parts(&shared, &added, &rests, out);
}

/// Appends a key section of its parts: each key's shared and added byte
/// counts and the added bytes (what [`write`] makes of keys; a test
/// forges malformed sections with it).
pub(crate) fn write_parts(shared: &[i64], added: &[i64], rests: &[u8], out: &mut Vec<u8>) {
    let mut section = Vec::with_capacity(8 + rests.len());
    Plan::write_run(shared, &mut section);
    Plan::write_run(added, &mut section);
    section.extend_from_slice(rests);
    put_varint(out, section.len() as u64);
    out.extend_from_slice(&section);
}

/// A key section as read: its runs' headers checked to lie in it; the
/// keys are made, and checked, on demand ([`Keys::decode`]), so that a
/// read that takes no key (a count) pays nothing per row for them.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// Where the two runs and the added bytes start in the value, and
    /// where the section ends.
    runs: usize,
    added: usize,
    end: usize,
    rows: usize,
}

impl Keys {
    /// Reads the section of `rows` keys at `*at` of `value`, advancing
    /// past it; `None` when its runs do not fit in it or it cannot hold
    /// that many keys.
    pub fn read(value: &[u8], at: &mut usize, rows: usize) -> Option<Keys> {
        let len = usize::try_from(varint(value, at)?).ok()?;
        let start = *at;
        let end = start.checked_add(len)?;
        let section = value.get(..end)?;
        // Each key adds a byte at least (keys ascend: one adding none
        // would be a prefix of the key before, so before it).
        if rows > len {
            return None;
        }
        let mut p = start;
        Run::read(section, &mut p, rows)?;
        Run::read(section, &mut p, rows)?;
        *at = end;
        Some(Keys {
            runs: start,
            added: p,
            end,
            rows,
        })
    }

    /// The section in `value` and its two runs: the bytes each key
    /// shares with the one before and those it adds.
    fn parts<'v>(&self, value: &'v [u8]) -> Option<(&'v [u8], Run<'v>, Run<'v>)> {
        let section = value.get(..self.end)?;
        let mut p = self.runs;
        let shared = Run::read(section, &mut p, self.rows)?;
        let added = Run::read(section, &mut p, self.rows)?;
        Some((section, shared, added))
    }

    /// The first key, alone (it shares nothing with a key before it):
    /// what a read that takes no other key may want without making them
    /// all. `None` when the section is malformed there.
    pub fn first<'v>(&self, value: &'v [u8]) -> Option<&'v [u8]> {
        let (section, shared, added) = self.parts(value)?;
        if shared.get(0) != 0 {
            return None;
        }
        let a = usize::try_from(added.get(0)).ok()?;
        section.get(self.added..self.added.checked_add(a)?)
    }

    /// The keys, back to back, and where each starts (and, last, where
    /// the last ends).
    /// `None` when the section is malformed: a key sharing more than the
    /// key before holds (or the first sharing any), or added bytes that
    /// are not exactly those the section holds.
    pub fn decode(&self, value: &[u8]) -> Option<(Vec<u8>, Vec<u32>)> {
        let (section, shared, added) = self.parts(value)?;
        let mut bytes = Vec::with_capacity(self.rows * 32);
        let mut starts = Vec::with_capacity(self.rows + 1);
        let (mut from, mut before) = (self.added, 0..0);
        for i in 0..self.rows {
            let s = usize::try_from(shared.get(i)).ok()?;
            let a = usize::try_from(added.get(i)).ok()?;
            let start = bytes.len();
            if s > before.len() || (i == 0 && s != 0) {
                return None;
            }
            bytes.extend_from_within(before.start..before.start + s);
            bytes.extend_from_slice(section.get(from..from.checked_add(a)?)?);
            from += a;
            before = start..bytes.len();
            starts.push(u32::try_from(start).ok()?);
        }
        starts.push(u32::try_from(bytes.len()).ok()?);
        (from == self.end).then_some((bytes, starts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(keys: &[&[u8]]) {
        let mut out = vec![7];
        write(keys, &mut out);
        out.push(9);
        let mut at = 1;
        let section = Keys::read(&out, &mut at, keys.len()).unwrap();
        assert_eq!(out[at], 9);
        let (bytes, starts) = section.decode(&out).unwrap();
        let back: Vec<&[u8]> = starts
            .windows(2)
            .map(|w| &bytes[w[0] as usize..w[1] as usize])
            .collect();
        assert_eq!(back, keys);
        assert_eq!(section.first(&out), Some(keys[0]));
    }

    #[test]
    fn keys_come_back() {
        round_trip(&[b"a"]);
        round_trip(&[b"", b"a", b"ab", b"b"]);
        round_trip(&[
            b"europe-west1#1042#2026-01-01-0059",
            b"europe-west1#1042#2026-01-01-0100",
            b"europe-west1#1043#2026-01-01-0000",
            b"us-west2#1000#2026-01-01-0000",
        ]);
    }

    proptest::proptest! {
        #[test]
        fn sorted_keys_come_back(mut keys in proptest::collection::btree_set(
            proptest::collection::vec(0u8..4, 0..12), 1..80)) {
            let keys: Vec<Vec<u8>> = std::mem::take(&mut keys).into_iter().collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            round_trip(&refs);
        }

        /// A damaged section is refused or read as some keys, never a
        /// panic.
        #[test]
        fn damaged_sections_do_not_panic(
            keys in proptest::collection::btree_set(proptest::collection::vec(0u8..4, 0..12), 1..40),
            at in 0usize..400, byte: u8, cut in 0usize..400,
        ) {
            let keys: Vec<Vec<u8>> = keys.into_iter().collect();
            let mut out = Vec::new();
            write(&keys, &mut out);
            if at < out.len() {
                out[at] = byte;
            }
            out.truncate(cut.max(1));
            let mut p = 0;
            if let Some(section) = Keys::read(&out, &mut p, keys.len()) {
                let _ = section.decode(&out);
                let _ = section.first(&out);
            }
        }
    }
}
