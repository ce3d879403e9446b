//! The compaction filter that drops cells past an age that makes them
//! garbage whatever else their family's policy says (see `gc.rs`): it
//! runs inside fjall's own compactions.

use super::format::FamilyFormat;
use super::time::now_micros;
use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// Per keyspace name, the age in microseconds past which a cell is
/// garbage, and the family's format (which says where a pair's timestamp is).
/// The flag: whether the family has blocks, whose copies of a row a pair
/// of its own keyspace may shadow (what the filter would drop becomes a
/// tombstone).
pub(crate) type AgeRules = Arc<RwLock<HashMap<String, (i64, FamilyFormat, bool)>>>;

pub(crate) struct AgeFilterFactory {
    pub keyspace: String,
    pub rules: AgeRules,
}

impl Factory for AgeFilterFactory {
    fn name(&self) -> &str {
        "cellar-max-age"
    }

    fn make_filter(&self, _ctx: &Context) -> Box<dyn CompactionFilter> {
        let rules = self.rules.read().unwrap_or_else(PoisonError::into_inner);
        let (cutoff, format, shadows) = match rules.get(&self.keyspace) {
            Some((age, format, shadows)) => {
                (Some(now_micros().saturating_sub(*age)), *format, *shadows)
            }
            None => (None, FamilyFormat::default(), false),
        };
        Box::new(AgeFilter {
            cutoff,
            format,
            shadows,
        })
    }
}

struct AgeFilter {
    cutoff: Option<i64>,
    format: FamilyFormat,
    /// Whether a pair may shadow a block's copy of its row: it is then
    /// emptied into a tombstone rather than dropped (dropping it would
    /// bring the older copy back).
    shadows: bool,
}

impl CompactionFilter for AgeFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _ctx: &Context) -> CompactionFilterResult {
        let Some(cutoff) = self.cutoff else {
            return Ok(Verdict::Keep);
        };
        let ts = if self.format.gc_reads_value() {
            self.format.gc_timestamp(item.key(), &item.value()?)
        } else {
            self.format.gc_timestamp(item.key(), &[])
        };
        Ok(match ts {
            Some(ts) if ts < cutoff && self.shadows => Verdict::ReplaceValue(Default::default()),
            Some(ts) if ts < cutoff => Verdict::Remove,
            _ => Verdict::Keep,
        })
    }
}
