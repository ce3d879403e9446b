//! [`KeySketch`]: how many distinct keys a range has seen, estimated from
//! the smallest hashes of its keys (a k-minimum-values sketch), and those
//! keys themselves: a uniform sample of the distinct keys, for where to
//! cut the range.
//!
//! The sketch keeps the keys whose hashes are below a threshold, at most
//! [`K`]; the estimate is their number over the threshold's share of the
//! hash space. Cut at a key, each side keeps its keys, starts taking keys
//! again (so that its sample fills up with keys of its own side, and it
//! can be cut again), and keeps its part of the estimate until its own
//! count passes it; two joined keep the lower threshold.

/// Keys a sketch keeps.
pub const K: usize = 8;
/// A kept key is cut to this many bytes (any byte string is a place to
/// cut a range): no range start is longer.
pub(super) const KEY_BYTES: usize = 64;

/// Distinct keys of a range, estimated, with a sample of them.
#[derive(Debug, Clone)]
pub struct KeySketch {
    /// Keys kept, by hash.
    kept: Vec<(u64, Box<[u8]>)>,
    /// Only hashes below this are kept (`u64::MAX`: all so far).
    below: u64,
    /// What the range it was cut from estimated for its part: the
    /// estimate until [`SETTLED`] keys were offered since.
    prior: u64,
    /// Keys offered since it was cut (counted up to [`SETTLED`]).
    offered: u32,
}

/// Keys offered to a sketch cut from another before its own count
/// replaces what it inherited.
const SETTLED: u32 = 64;

impl Default for KeySketch {
    fn default() -> Self {
        KeySketch {
            kept: Vec::new(),
            below: u64::MAX,
            prior: 0,
            offered: SETTLED,
        }
    }
}

/// The hash a sketch orders keys by.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

impl KeySketch {
    /// Offers a key of hash `hash`; true when the sketch changed (its
    /// estimate may have).
    #[inline]
    pub fn offer(&mut self, hash: u64, key: &[u8]) -> bool {
        let settling = self.offered < SETTLED;
        if settling {
            self.offered += 1;
        }
        if hash >= self.below || self.kept.iter().any(|(h, _)| *h == hash) {
            return settling;
        }
        let at = self.kept.partition_point(|(h, _)| *h < hash);
        self.kept
            .insert(at, (hash, key[..key.len().min(KEY_BYTES)].into()));
        if self.kept.len() > K
            && let Some((h, _)) = self.kept.pop()
        {
            self.below = h;
        }
        true
    }

    /// About how many distinct keys were offered.
    pub fn estimate(&self) -> u64 {
        let own = if self.below == u64::MAX {
            self.kept.len() as u64
        } else {
            let share = self.below as f64 / u64::MAX as f64;
            (self.kept.len() as f64 / share.max(f64::MIN_POSITIVE)).min(u64::MAX as f64) as u64
        };
        if self.offered < SETTLED {
            own.max(self.prior)
        } else {
            own
        }
    }

    /// The middle one of the keys kept, in key order.
    pub fn median(&self) -> Option<&[u8]> {
        let mut keys: Vec<&[u8]> = self.kept.iter().map(|(_, k)| &**k).collect();
        keys.sort_unstable();
        keys.get(keys.len() / 2).copied()
    }

    /// The keys kept, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.kept.iter().map(|(_, k)| &**k)
    }

    /// Splits off the keys from `at` on.
    pub fn split_off(&mut self, at: &[u8]) -> KeySketch {
        let estimate = self.estimate();
        let (left, right): (Vec<_>, Vec<_>) = std::mem::take(&mut self.kept)
            .into_iter()
            .partition(|(_, k)| &**k < at);
        let whole = (left.len() + right.len()).max(1) as u64;
        let left_part = estimate.saturating_mul(left.len() as u64) / whole;
        *self = KeySketch {
            kept: left,
            below: u64::MAX,
            prior: left_part,
            offered: 0,
        };
        KeySketch {
            kept: right,
            below: u64::MAX,
            prior: estimate - left_part,
            offered: 0,
        }
    }

    /// Takes in `other`'s keys (of the range next to this one).
    pub fn join(&mut self, other: KeySketch) {
        self.prior = self.prior.saturating_add(other.prior);
        self.offered = self.offered.min(other.offered);
        self.below = self.below.min(other.below);
        let below = self.below;
        self.kept.extend(other.kept);
        self.kept.retain(|(h, _)| *h < below);
        self.kept.sort_by_key(|(h, _)| *h);
        self.kept.dedup_by_key(|(h, _)| *h);
        while self.kept.len() > K {
            if let Some((h, _)) = self.kept.pop() {
                self.below = h;
            }
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn memory(&self) -> usize {
        self.kept.iter().map(|(_, k)| k.len() + 24).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_hold_through_cuts_and_joins() {
        let mut s = KeySketch::default();
        for i in 0..100_000u32 {
            let key = format!("k{i:06}");
            s.offer(key_hash(key.as_bytes()), key.as_bytes());
            // Offered again: the same key counts once.
            s.offer(key_hash(key.as_bytes()), key.as_bytes());
        }
        let e = s.estimate() as f64;
        assert!((20_000.0..500_000.0).contains(&e), "{e}");
        let mut right = s.split_off(b"k050000");
        assert!(s.keys().all(|k| k < &b"k050000"[..]));
        assert!(right.keys().all(|k| k >= &b"k050000"[..]));
        right.join(s);
        assert!(right.keys().count() <= K);
        let mut small = KeySketch::default();
        for k in [b"a", b"b", b"a"] {
            small.offer(key_hash(k), k);
        }
        assert_eq!(small.estimate(), 2);
        assert_eq!(small.median(), Some(&b"b"[..]));
    }
}
