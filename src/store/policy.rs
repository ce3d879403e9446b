//! Garbage-collection policies: which cells of a column may be discarded.
//! A leaf: the engine files that apply a policy import it, not each other.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Deepest nesting of unions and intersections in a GC policy. Bigtable's
/// own policies nest two or three levels; the bound keeps every policy
/// storable and readable (the catalog's JSON reader refuses deep nesting).
pub const MAX_GC_DEPTH: usize = 8;
/// Most rules (max versions, max age) in one GC policy.
pub const MAX_GC_RULES: usize = 64;

/// A garbage-collection policy: which cells of a column may be discarded.
///
/// Evaluated per column over its cells newest first: the cell at index `i`
/// (0 = newest) with timestamp `t` is garbage when the policy says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GcPolicy {
    /// Keep everything.
    #[default]
    KeepAll,
    /// Keep the newest `n` cells of each column (n ≥ 1).
    MaxVersions(u32),
    /// Keep cells younger than this many microseconds.
    MaxAge(i64),
    /// Garbage when any of the policies says so.
    Union(Vec<GcPolicy>),
    /// Garbage when all of the policies say so.
    Intersection(Vec<GcPolicy>),
}

impl GcPolicy {
    /// Whether the cell at `index` (0 = newest of its column) with `timestamp`
    /// is garbage at time `now` (microseconds).
    pub fn is_garbage(&self, index: usize, timestamp: i64, now: i64) -> bool {
        match self {
            GcPolicy::KeepAll => false,
            GcPolicy::MaxVersions(n) => index >= *n as usize,
            GcPolicy::MaxAge(age) => timestamp < now.saturating_sub(*age),
            GcPolicy::Union(all) => all.iter().any(|p| p.is_garbage(index, timestamp, now)),
            GcPolicy::Intersection(all) => {
                !all.is_empty() && all.iter().all(|p| p.is_garbage(index, timestamp, now))
            }
        }
    }

    /// Whether the policy ever discards anything by version count. Only
    /// age-only policies can be applied by the compaction filter, which
    /// sees a subset of the cells.
    pub fn counts_versions(&self) -> bool {
        match self {
            GcPolicy::KeepAll | GcPolicy::MaxAge(_) => false,
            GcPolicy::MaxVersions(_) => true,
            GcPolicy::Union(all) | GcPolicy::Intersection(all) => {
                all.iter().any(GcPolicy::counts_versions)
            }
        }
    }

    /// The age past which a cell is garbage whatever its version index, if
    /// any: what the compaction filter may drop.
    pub fn unconditional_max_age(&self) -> Option<i64> {
        match self {
            GcPolicy::MaxAge(age) => Some(*age),
            GcPolicy::Union(all) => all.iter().filter_map(GcPolicy::unconditional_max_age).min(),
            GcPolicy::Intersection(all) => {
                // Garbage only when every member says so; all must be age rules.
                let ages: Option<Vec<i64>> =
                    all.iter().map(GcPolicy::unconditional_max_age).collect();
                ages.and_then(|a| a.into_iter().max())
            }
            GcPolicy::KeepAll | GcPolicy::MaxVersions(_) => None,
        }
    }

    /// How deeply unions and intersections nest (a single rule is 1).
    pub fn depth(&self) -> usize {
        match self {
            GcPolicy::Union(all) | GcPolicy::Intersection(all) => {
                1 + all.iter().map(GcPolicy::depth).max().unwrap_or(0)
            }
            _ => 1,
        }
    }

    /// How many rules (leaves) the policy has.
    pub fn rules(&self) -> usize {
        match self {
            GcPolicy::Union(all) | GcPolicy::Intersection(all) => {
                all.iter().map(GcPolicy::rules).sum()
            }
            _ => 1,
        }
    }

    /// Checks the policy's numbers and its size: at most [`MAX_GC_DEPTH`]
    /// levels of nesting and [`MAX_GC_RULES`] rules.
    pub fn validate(&self) -> Result<()> {
        let depth = self.depth();
        if depth > MAX_GC_DEPTH {
            return Err(Error::InvalidArgument(format!(
                "GC policy nests {depth} levels deep; the limit is {MAX_GC_DEPTH}: flatten it (a OR (b OR c) is a OR b OR c)"
            )));
        }
        let rules = self.rules();
        if rules > MAX_GC_RULES {
            return Err(Error::InvalidArgument(format!(
                "GC policy has {rules} rules; the limit is {MAX_GC_RULES}"
            )));
        }
        self.validate_numbers()
    }

    fn validate_numbers(&self) -> Result<()> {
        match self {
            GcPolicy::KeepAll => Ok(()),
            GcPolicy::MaxVersions(0) => Err(Error::InvalidArgument(
                "max versions must be at least 1; use a delete to remove every cell".into(),
            )),
            GcPolicy::MaxVersions(_) => Ok(()),
            GcPolicy::MaxAge(age) if *age <= 0 => Err(Error::InvalidArgument(format!(
                "max age must be positive, got {age} microseconds"
            ))),
            GcPolicy::MaxAge(_) => Ok(()),
            GcPolicy::Union(all) | GcPolicy::Intersection(all) => {
                if all.is_empty() {
                    return Err(Error::InvalidArgument(
                        "a union or intersection GC policy needs at least one member".into(),
                    ));
                }
                all.iter().try_for_each(GcPolicy::validate_numbers)
            }
        }
    }
}

impl std::fmt::Display for GcPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |f: &mut std::fmt::Formatter<'_>, all: &[GcPolicy], op: &str| {
            write!(f, "(")?;
            for (i, p) in all.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                write!(f, "{p}")?;
            }
            write!(f, ")")
        };
        match self {
            GcPolicy::KeepAll => write!(f, "keep all"),
            GcPolicy::MaxVersions(n) => write!(f, "max versions {n}"),
            GcPolicy::MaxAge(age) => write!(f, "max age {}", show_duration(*age)),
            GcPolicy::Union(all) => join(f, all, "or"),
            GcPolicy::Intersection(all) => join(f, all, "and"),
        }
    }
}

fn show_duration(micros: i64) -> String {
    const UNITS: [(i64, &str); 5] = [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
        (1_000_000, "s"),
        (1_000, "ms"),
    ];
    UNITS
        .iter()
        .find(|(unit, _)| micros % unit == 0)
        .map_or_else(
            || format!("{micros}us"),
            |(unit, name)| format!("{}{name}", micros / unit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_policies_decide_by_index_and_age() {
        let now = 1_000_000;
        let v2 = GcPolicy::MaxVersions(2);
        assert!(!v2.is_garbage(1, 0, now) && v2.is_garbage(2, now, now));
        let age = GcPolicy::MaxAge(100);
        assert!(age.is_garbage(0, now - 101, now) && !age.is_garbage(5, now - 100, now));
        let union = GcPolicy::Union(vec![v2.clone(), age.clone()]);
        assert!(union.is_garbage(0, 0, now) && union.is_garbage(3, now, now));
        let inter = GcPolicy::Intersection(vec![v2, age]);
        assert!(!inter.is_garbage(0, 0, now) && !inter.is_garbage(3, now, now));
        assert!(inter.is_garbage(3, 0, now));
        assert_eq!(inter.unconditional_max_age(), None);
        assert_eq!(union.unconditional_max_age(), Some(100));
    }

    #[test]
    fn policies_display_readably() {
        let p = GcPolicy::Union(vec![
            GcPolicy::MaxVersions(3),
            GcPolicy::MaxAge(7 * 86_400_000_000),
        ]);
        assert_eq!(p.to_string(), "(max versions 3 or max age 7d)");
    }
}
