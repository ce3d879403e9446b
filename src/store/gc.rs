//! Reclaiming garbage on disk.
//!
//! Reads always hide cells past their family's policy. Two mechanisms free
//! the space:
//! - a compaction filter drops cells older than an age that makes them
//!   garbage whatever else the policy says; it runs inside fjall's own
//!   compactions, so it needs no version counts, which a compaction that
//!   sees only some tables could get wrong;
//! - [`Store::collect_garbage`](super::Store::collect_garbage) walks a table,
//!   deletes every cell its policy discards (version counts included), row by
//!   row under the row lock, then compacts the family so the space returns.
//!
//! Reclaimed cells are gone: loosening a policy later does not bring back
//! cells already reclaimed, while cells not yet reclaimed reappear.

use super::now_micros;
use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// Per keyspace name, the age in microseconds past which a cell is garbage.
pub(crate) type AgeRules = Arc<RwLock<HashMap<String, i64>>>;

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
        let cutoff = rules
            .get(&self.keyspace)
            .map(|age| now_micros().saturating_sub(*age));
        Box::new(AgeFilter { cutoff })
    }
}

struct AgeFilter {
    cutoff: Option<i64>,
}

impl CompactionFilter for AgeFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _ctx: &Context) -> CompactionFilterResult {
        let Some(cutoff) = self.cutoff else {
            return Ok(Verdict::Keep);
        };
        let key = item.key();
        let Some(ts) = key.len().checked_sub(8).and_then(|at| key.get(at..)) else {
            return Ok(Verdict::Keep);
        };
        let Ok(ts) = <[u8; 8]>::try_from(ts).map(crate::codec::decode_timestamp) else {
            return Ok(Verdict::Keep);
        };
        Ok(match ts {
            Ok(ts) if ts < cutoff => Verdict::Remove,
            _ => Verdict::Keep,
        })
    }
}
