//! Conditional writes: rows written with `CheckAndMutateRow` only if a
//! predicate says they are as they were read, and the waits between
//! tries when another writer came in between. UPDATE (`write.rs`) and the
//! HLL merge (`hll.rs`) write this way.

use super::{BigtableStore, data, remote};
use crate::error::Result;

/// Reads and writes of one row an UPDATE tries before it gives up: each
/// failed try is a write by another client between its read and write.
pub(super) const UPDATE_ATTEMPTS: u32 = 32;
/// Conditional writes of one UPDATE in flight at once.
const UPDATES_IN_FLIGHT: usize = 32;

/// How long a try waits before the `attempt`-th: a random time up to a
/// limit that doubles with every try (2 ms, 4 ms, ... up to 1 s), so
/// that writers that collided spread out instead of colliding again in
/// step ("full jitter"). Twelve writers of one row under load lost 24
/// tries in a row with a fixed 2-27 ms wait, and 32 with a limit of
/// 128 ms when each try took longer (cellar's own Bigtable face, its
/// reads and writes on a machine busy with other tests).
pub(super) fn backoff(attempt: u32) -> std::time::Duration {
    let limit = 2u64 << attempt.min(9);
    let mut random = [0u8; 2];
    let spread = getrandom::fill(&mut random).map_or(limit / 2, |()| {
        u64::from(u16::from_le_bytes(random)) % (limit + 1)
    });
    std::time::Duration::from_millis(spread.max(1))
}

/// The predicate of a conditional UPDATE write, and whether the write
/// goes when it matches (`true`) or when it does not (`false`).
pub(super) struct Condition {
    pub(super) filter: data::RowFilter,
    pub(super) write_on_match: bool,
}

/// Sends each row's conditional write, [`UPDATES_IN_FLIGHT`] at a time;
/// per row (its place in `keys`) whether it was written.
pub(super) fn conditional_writes(
    store: &BigtableStore,
    table: &str,
    keys: &[Vec<u8>],
    calls: Vec<(usize, Condition, Vec<data::Mutation>)>,
) -> Result<Vec<(usize, Result<bool>)>> {
    use futures::StreamExt;
    let client = store.data.clone();
    let table_name = store.table_path(table);
    let requests: Vec<(usize, bool, data::CheckAndMutateRowRequest)> = calls
        .into_iter()
        .map(|(i, condition, mutations)| {
            let (true_mutations, false_mutations) = if condition.write_on_match {
                (mutations, Vec::new())
            } else {
                (Vec::new(), mutations)
            };
            let request = data::CheckAndMutateRowRequest {
                table_name: table_name.clone(),
                row_key: keys[i].clone(),
                predicate_filter: Some(condition.filter),
                true_mutations,
                false_mutations,
                ..Default::default()
            };
            (i, condition.write_on_match, request)
        })
        .collect();
    let call = format!("CheckAndMutateRow on table {table}");
    store.run(async move {
        let outcomes = futures::stream::iter(requests)
            .map(|(i, write_on_match, request)| {
                let mut client = client.clone();
                let call = call.clone();
                async move {
                    let matched = client
                        .check_and_mutate_row(request)
                        .await
                        .map(|r| r.into_inner().predicate_matched)
                        .map_err(|s| remote(call, &s));
                    (i, matched.map(|m| m == write_on_match))
                }
            })
            .buffer_unordered(UPDATES_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        Ok(outcomes)
    })
}
