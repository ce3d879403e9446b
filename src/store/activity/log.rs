//! Where key activity is kept across restarts: each table's minutes in
//! the store's catalog keyspace, under `activity/<table> 0x00 <minute>`
//! (the minute's start in microseconds, big-endian, so that a table's
//! minutes sort by time), for as long as the retention says.

use super::record::{self, ActivityRecord};
use crate::error::Result;
use fjall::Keyspace;

/// What every key of the activity log starts with.
const PREFIX: &str = "activity/";

/// A table's activity minutes in a keyspace.
#[derive(Clone)]
pub struct ActivityLog {
    keyspace: Keyspace,
}

fn table_prefix(table: &str) -> Vec<u8> {
    let mut key = format!("{PREFIX}{table}").into_bytes();
    key.push(0);
    key
}

fn minute_key(table: &str, minute: i64) -> Vec<u8> {
    let mut key = table_prefix(table);
    // Minutes before 1970 sort before those after.
    key.extend_from_slice(&((minute as u64) ^ (1 << 63)).to_be_bytes());
    key
}

fn minute_of_key(key: &[u8]) -> Option<i64> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some((u64::from_be_bytes(tail) ^ (1 << 63)) as i64)
}

impl ActivityLog {
    /// The log in `keyspace` (cellar's catalog).
    pub fn new(keyspace: Keyspace) -> Self {
        ActivityLog { keyspace }
    }

    /// Adds `records` to what is kept for `table`'s `minute`: counters of
    /// a range already kept add up, other ranges are kept beside.
    pub fn add(&self, table: &str, minute: i64, records: &[ActivityRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let key = minute_key(table, minute);
        let mut all = match self.keyspace.get(&key)? {
            Some(bytes) => record::decode(minute, &bytes)?,
            None => Vec::new(),
        };
        for r in records {
            match all
                .iter_mut()
                .find(|a| a.start == r.start && a.end == r.end)
            {
                Some(a) => a.counters.add(&r.counters),
                None => all.push(r.clone()),
            }
        }
        all.sort_by(|a, b| (&a.start, &a.end).cmp(&(&b.start, &b.end)));
        let mut bytes = Vec::new();
        record::encode(&all, &mut bytes);
        self.keyspace.insert(key, bytes)?;
        Ok(())
    }

    /// `table`'s records of the minutes from `since` on, by minute.
    pub fn read(&self, table: &str, since: i64) -> Result<Vec<ActivityRecord>> {
        let prefix = table_prefix(table);
        let mut end = prefix.clone();
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        let mut out = Vec::new();
        for guard in self.keyspace.range(minute_key(table, since)..end) {
            let (key, value) = guard.into_inner()?;
            if let Some(minute) = minute_of_key(&key) {
                out.extend(record::decode(minute, &value)?);
            }
        }
        Ok(out)
    }

    /// Forgets `table`'s minutes before `before` (all of them with
    /// `i64::MAX`).
    pub fn forget(&self, table: &str, before: i64) -> Result<usize> {
        let start = table_prefix(table);
        let keys: Vec<_> = self
            .keyspace
            .range(start..minute_key(table, before))
            .map(|g| g.key())
            .collect::<std::result::Result<_, _>>()?;
        for key in &keys {
            self.keyspace.remove(key.clone())?;
        }
        Ok(keys.len())
    }

    /// The tables with minutes kept (a seek per table, not a walk over
    /// every minute).
    pub fn tables(&self) -> Result<Vec<String>> {
        let mut tables = Vec::new();
        let mut from = PREFIX.as_bytes().to_vec();
        let mut end = from.clone();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        while let Some(guard) = self.keyspace.range(from.clone()..end.clone()).next() {
            let key = guard.key()?;
            let name = key[PREFIX.len()..]
                .split(|b| *b == 0)
                .next()
                .unwrap_or_default();
            let name = String::from_utf8_lossy(name).into_owned();
            from = table_prefix(&name);
            if let Some(last) = from.last_mut() {
                *last = 1;
            }
            tables.push(name);
        }
        Ok(tables)
    }
}
