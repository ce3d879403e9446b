//! A session per client: each token a client authenticated with gets its
//! own SQL session over the shared store (its settings, external tables,
//! views and kept plans; see [`SqlSession::for_client`]), made at its
//! first call and dropped when the client closes it (the CloseSession
//! action), when its token is no longer valid, or when it has been idle
//! as long as a token may be. The store's tables, the memory pool and
//! the heavy-query turns stay shared.
//!
//! Sessions are bounded per user: past [`MAX_PER_USER`] the least
//! recently used of that user's sessions is dropped (its client gets a
//! fresh one at its next call), so one user making sessions in a loop
//! never takes another user's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use datafusion::execution::runtime_env::RuntimeEnv;
use tonic::Status;

use super::auth::{Caller, Principal};
use crate::sql::{Access, SqlSession};

/// Live sessions one user may hold.
pub const MAX_PER_USER: usize = 64;

struct Entry {
    session: SqlSession,
    principal: Principal,
    used: Instant,
}

/// The sessions of a server's clients.
#[derive(Clone)]
pub struct ClientSessions {
    base: SqlSession,
    runtime: Result<Arc<RuntimeEnv>, String>,
    idle: Duration,
    live: Arc<Mutex<HashMap<Caller, Entry>>>,
}

impl ClientSessions {
    /// Sessions made from `base` (its settings and limits), their files
    /// confined as `base`'s access says for the network, dropped after
    /// `idle` without a call.
    pub fn new(base: SqlSession, idle: Duration) -> Self {
        let runtime = base
            .client_runtime()
            .map_err(|e| format!("the runtime of client sessions cannot be made: {e}"));
        ClientSessions {
            base,
            runtime,
            idle,
            live: Arc::default(),
        }
    }

    /// The same sessions, dropped after `idle` without a call.
    pub fn with_idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// The session of `caller`, made now if it has none.
    pub fn get(&self, caller: &Caller, principal: &Principal) -> Result<SqlSession, Status> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if let Some(entry) = live.get_mut(caller)
            && entry.principal == *principal
        {
            entry.used = now;
            return Ok(entry.session.clone());
        }
        let idle = self.idle;
        live.retain(|_, e| now.duration_since(e.used) < idle);
        let mine: Vec<(&Caller, Instant)> = live
            .iter()
            .filter(|(_, e)| e.principal.name == principal.name)
            .map(|(c, e)| (c, e.used))
            .collect();
        if mine.len() >= MAX_PER_USER
            && let Some(oldest) = mine
                .iter()
                .min_by_key(|(_, used)| *used)
                .map(|(c, _)| (*c).clone())
        {
            live.remove(&oldest);
        }
        let access = Access {
            role: principal.role,
            user: principal.name.clone(),
            files: self.base.access().files.over_network(),
        };
        let runtime = self
            .runtime
            .as_ref()
            .map_err(|e| Status::internal(e.clone()))?;
        let session = self.base.for_client(access, Arc::clone(runtime));
        live.insert(
            caller.clone(),
            Entry {
                session: session.clone(),
                principal: principal.clone(),
                used: now,
            },
        );
        Ok(session)
    }

    /// Drops the session of `caller`; whether it had one.
    pub fn close(&self, caller: &Caller) -> bool {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(caller)
            .is_some()
    }

    /// Drops the sessions idle too long and those whose token `live`
    /// says has ended.
    pub fn sweep(&self, token_live: impl Fn(&str) -> bool) {
        let now = Instant::now();
        let idle = self.idle;
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|caller, e| {
                now.duration_since(e.used) < idle
                    && match caller {
                        Caller::Session(token) => token_live(token),
                        Caller::Anonymous => true,
                    }
            });
    }

    /// Sessions alive now.
    pub fn count(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Flight's `CloseSessionResult` (arrow-flight 59 does not define the
/// session actions): field 1, the status.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseSessionResult {
    /// `CLOSED` once the session is gone.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `CloseSessionResult.Status.CLOSED`.
pub const SESSION_CLOSED: i32 = 1;
