//! What a client holds between calls: tickets for planned results and
//! prepared statements, each under a random handle and owned by the
//! session that made it. Another session asking for a handle is told it
//! does not exist, the same answer as for a handle that never did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::prelude::DataFrame;
use tonic::Status;

use super::auth::{Caller, random_hex};

/// A ticket not fetched within this time is dropped.
const TICKET_TTL: Duration = Duration::from_secs(600);
/// At most this many prepared statements live at once (per server).
const MAX_PREPARED: usize = 10_000;

/// A planned result waiting for its DoGet: one DataFrame per parameter
/// row, or the plan the session kept for the statement.
pub struct Pending {
    /// The frames to stream, in order; all of one schema.
    pub frames: Vec<DataFrame>,
    /// The schema announced in GetFlightInfo.
    pub schema: SchemaRef,
    /// The statement, as `SHOW QUERIES` shows it.
    pub sql: String,
    /// A statement without parameters: what planning it saw, so its plan
    /// may be kept for the next time it runs.
    pub seen: Option<crate::sql::PlansSeen>,
    /// The plan the session kept for the statement (then `frames` is
    /// empty).
    pub kept: Option<crate::sql::KeptPlan>,
}

/// A prepared statement.
#[derive(Clone)]
pub struct Prepared {
    /// The SQL with `?` placeholders numbered (`$1`, `$2`, ...).
    pub sql: String,
    /// Parameter values bound by DoPut; each row is one execution.
    pub parameters: Option<RecordBatch>,
    /// How many placeholders the statement has (known when prepared).
    pub parameter_count: usize,
}

struct Owned<T> {
    owner: Caller,
    created: Instant,
    value: T,
}

/// The handles of one server.
#[derive(Clone, Default)]
pub struct Handles {
    pending: Arc<Mutex<HashMap<String, Owned<Pending>>>>,
    prepared: Arc<Mutex<HashMap<String, Owned<Prepared>>>>,
}

fn poisoned<E>(_: E) -> Status {
    Status::internal("handle table poisoned by an earlier panic")
}

fn not_found(what: &str, handle: &str) -> Status {
    Status::not_found(format!(
        "no {what} with handle {:?} in this session (closed, expired or never made)",
        handle.chars().take(40).collect::<String>()
    ))
}

impl Handles {
    /// Keeps a planned result until DoGet takes it; returns its ticket.
    pub fn put_pending(&self, owner: &Caller, pending: Pending) -> Result<String, Status> {
        let mut map = self.pending.lock().map_err(poisoned)?;
        let now = Instant::now();
        map.retain(|_, e| now.duration_since(e.created) < TICKET_TTL);
        let handle = random_hex()?;
        map.insert(
            handle.clone(),
            Owned {
                owner: owner.clone(),
                created: now,
                value: pending,
            },
        );
        Ok(handle)
    }

    /// Takes a planned result: a ticket is good for one DoGet.
    pub fn take_pending(&self, owner: &Caller, handle: &str) -> Result<Pending, Status> {
        let mut map = self.pending.lock().map_err(poisoned)?;
        match map.get(handle) {
            Some(e) if &e.owner == owner => map
                .remove(handle)
                .map(|e| e.value)
                .ok_or_else(|| not_found("ticket", handle)),
            _ => Err(not_found("ticket", handle)),
        }
    }

    /// Drops a planned result that will not be fetched (CancelFlightInfo).
    pub fn cancel_pending(&self, owner: &Caller, handle: &str) -> Result<bool, Status> {
        let mut map = self.pending.lock().map_err(poisoned)?;
        Ok(match map.get(handle) {
            Some(e) if &e.owner == owner => map.remove(handle).is_some(),
            _ => false,
        })
    }

    /// Keeps a prepared statement; returns its handle.
    pub fn prepare(&self, owner: &Caller, prepared: Prepared) -> Result<String, Status> {
        let mut map = self.prepared.lock().map_err(poisoned)?;
        if map.len() >= MAX_PREPARED {
            return Err(Status::resource_exhausted(format!(
                "{MAX_PREPARED} prepared statements are open; close some first"
            )));
        }
        let handle = random_hex()?;
        map.insert(
            handle.clone(),
            Owned {
                owner: owner.clone(),
                created: Instant::now(),
                value: prepared,
            },
        );
        Ok(handle)
    }

    /// A copy of a prepared statement of this session.
    pub fn prepared(&self, owner: &Caller, handle: &str) -> Result<Prepared, Status> {
        let map = self.prepared.lock().map_err(poisoned)?;
        match map.get(handle) {
            Some(e) if &e.owner == owner => Ok(e.value.clone()),
            _ => Err(not_found("prepared statement", handle)),
        }
    }

    /// Binds parameters to a prepared statement of this session.
    pub fn bind(&self, owner: &Caller, handle: &str, batch: RecordBatch) -> Result<(), Status> {
        let mut map = self.prepared.lock().map_err(poisoned)?;
        match map.get_mut(handle) {
            Some(e) if &e.owner == owner => {
                e.value.parameters = Some(batch);
                Ok(())
            }
            _ => Err(not_found("prepared statement", handle)),
        }
    }

    /// Closes a prepared statement of this session.
    pub fn close(&self, owner: &Caller, handle: &str) -> Result<(), Status> {
        let mut map = self.prepared.lock().map_err(poisoned)?;
        match map.get(handle) {
            Some(e) if &e.owner == owner => {
                map.remove(handle);
                Ok(())
            }
            _ => Err(not_found("prepared statement", handle)),
        }
    }

    /// Drops every ticket and prepared statement of `owner` (its
    /// session ended).
    pub fn forget_owner(&self, owner: &Caller) -> Result<(), Status> {
        self.pending
            .lock()
            .map_err(poisoned)?
            .retain(|_, e| e.owner != *owner);
        self.prepared
            .lock()
            .map_err(poisoned)?
            .retain(|_, e| e.owner != *owner);
        Ok(())
    }

    /// How many prepared statements are open (for tests and metrics).
    pub fn prepared_count(&self) -> usize {
        self.prepared.lock().map(|m| m.len()).unwrap_or(0)
    }
}
