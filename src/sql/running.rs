//! Queries while they run: a registry (`SHOW QUERIES`, `CANCEL QUERY n`),
//! the per-query timeout, and the bound on heavy queries running at once.
//!
//! A query is heavy unless each of its scans reads a bounded number of
//! rows (point lookups, short key lists, a small LIMIT, a range that held
//! fewer than 256 rows when planned). At most
//! `heavy_queries` heavy ones run at a time, the others wait their turn
//! (shown as `queued`): a dozen whole-table aggregates then share the
//! cores in turn instead of all at once, and the point lookups that skip
//! the queue keep a low latency between them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, SendableRecordBatchStream, StatisticsArgs, StatisticsContext,
};
use futures::StreamExt;
use tokio::sync::{Semaphore, watch};

use crate::query::{
    BOUNDED_ROWS, GatherExec, KeyScanExec, ScanAggregateExec, StopOnDrop, interruptible,
};

/// Whose a query is: the session that runs it and its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The session's number.
    pub session: u64,
    /// Its user's name.
    pub user: String,
    /// Whether the user sees and cancels every session's queries.
    pub admin: bool,
}

/// One registered query.
struct Entry {
    owner: Owner,
    sql: String,
    started: Instant,
    heavy: bool,
    queued: Arc<std::sync::atomic::AtomicBool>,
    cancel: watch::Sender<bool>,
}

/// The queries of a session (and its clones), running or queued.
#[derive(Clone)]
pub(crate) struct Running {
    entries: Arc<Mutex<BTreeMap<u64, Entry>>>,
    next: Arc<AtomicU64>,
    heavy: Arc<Semaphore>,
    timeout: Option<Duration>,
}

impl Running {
    pub fn new(heavy_queries: usize, timeout: Option<Duration>) -> Self {
        Running {
            entries: Arc::default(),
            next: Arc::new(AtomicU64::new(1)),
            heavy: Arc::new(Semaphore::new(heavy_queries.max(1))),
            timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `plan` as query `sql`: registered until its stream ends or is
    /// dropped, cancellable, stopped at the timeout, queued when heavy.
    pub async fn execute(
        &self,
        owner: &Owner,
        sql: &str,
        plan: Arc<dyn ExecutionPlan>,
        context: Arc<datafusion::execution::TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let heavy = !bounded(plan.as_ref());
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (cancel, mut cancelled) = watch::channel(false);
        let queued = Arc::new(std::sync::atomic::AtomicBool::new(heavy));
        self.lock().insert(
            id,
            Entry {
                owner: owner.clone(),
                // Kept as given: it is shown on one line only when listed.
                sql: sql.to_owned(),
                started: Instant::now(),
                heavy,
                queued: Arc::clone(&queued),
                cancel,
            },
        );
        let registration = Registration {
            running: self.clone(),
            id,
        };
        let permit = if heavy {
            tokio::select! {
                permit = Arc::clone(&self.heavy).acquire_owned() => Some(permit.map_err(|e| crate::error::Error::Internal(format!("the heavy-query queue: {e}")))?),
                _ = cancelled.wait_for(|c| *c) => return Err(cancelled_error(id)),
            }
        } else {
            None
        };
        queued.store(false, Ordering::Relaxed);
        // Set when this query's stream goes (ended, cancelled, timed out,
        // dropped): operators that do not yield stop on it.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let plan = interruptible(plan, &stop)?;
        let stop = StopOnDrop(stop);
        let schema: SchemaRef = plan.schema();
        let stream = match heavy.then(heavy_runtime).flatten() {
            Some(runtime) => run_on(runtime, plan, context),
            None => datafusion::physical_plan::execute_stream(plan, context)?,
        };
        let deadline = self.timeout.map(|t| (t, tokio::time::Instant::now() + t));
        let state = (stream, cancelled, registration, (permit, stop));
        let guarded = futures::stream::unfold(Some(state), move |state| async move {
            let (mut stream, mut cancelled, registration, permit) = state?;
            let id = registration.id;
            let timeout = async {
                match deadline {
                    Some((_, at)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            enum Next<T> {
                Item(Option<T>),
                Cancelled,
                TimedOut,
            }
            let next = tokio::select! {
                item = stream.next() => Next::Item(item),
                _ = cancelled.wait_for(|c| *c) => Next::Cancelled,
                () = timeout => Next::TimedOut,
            };
            match next {
                Next::Item(item) => {
                    item.map(|i| (i, Some((stream, cancelled, registration, permit))))
                }
                Next::Cancelled => Some((Err(cancelled_error(id)), None)),
                Next::TimedOut => Some((
                    Err(crate::error::Error::QueryTimedOut {
                        id,
                        limit: deadline.map(|(t, _)| t).unwrap_or_default(),
                    }
                    .into()),
                    None,
                )),
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, guarded)))
    }

    /// Cancels query `id` if `viewer` may see it; false when no such
    /// query runs (or it is another session's).
    pub fn cancel(&self, viewer: &Owner, id: u64) -> bool {
        match self.lock().get(&id) {
            Some(entry) if sees(viewer, &entry.owner) => {
                let _ = entry.cancel.send(true);
                true
            }
            _ => false,
        }
    }

    /// The queries running or queued that `viewer` may see, as a table:
    /// its own session's, or every session's for an admin.
    pub fn show(&self, viewer: &Owner) -> DfResult<RecordBatch> {
        let all = self.lock();
        let entries: BTreeMap<&u64, &Entry> =
            all.iter().filter(|(_, e)| sees(viewer, &e.owner)).collect();
        let ids: Vec<u64> = entries.keys().map(|id| **id).collect();
        let states: Vec<&str> = entries
            .values()
            .map(|e| {
                if e.queued.load(Ordering::Relaxed) {
                    "queued"
                } else {
                    "running"
                }
            })
            .collect();
        let kinds: Vec<&str> = entries
            .values()
            .map(|e| if e.heavy { "heavy" } else { "light" })
            .collect();
        let elapsed: Vec<u64> = entries
            .values()
            .map(|e| u64::try_from(e.started.elapsed().as_millis()).unwrap_or(u64::MAX))
            .collect();
        let sql: Vec<String> = entries
            .values()
            .map(|e| e.sql.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        let users: Vec<&str> = entries.values().map(|e| e.owner.user.as_str()).collect();
        let sessions: Vec<u64> = entries.values().map(|e| e.owner.session).collect();
        let schema = Schema::new(vec![
            Field::new("id", DataType::UInt64, false),
            Field::new("state", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("elapsed_ms", DataType::UInt64, false),
            Field::new("user", DataType::Utf8, false),
            Field::new("session", DataType::UInt64, false),
            Field::new("sql", DataType::Utf8, false),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(ids)),
            Arc::new(StringArray::from(states)),
            Arc::new(StringArray::from(kinds)),
            Arc::new(UInt64Array::from(elapsed)),
            Arc::new(StringArray::from(users)),
            Arc::new(UInt64Array::from(sessions)),
            Arc::new(StringArray::from(sql)),
        ];
        Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
    }
}

/// Whether `viewer` sees (and may cancel) a query of `owner`.
fn sees(viewer: &Owner, owner: &Owner) -> bool {
    viewer.admin || viewer.session == owner.session
}

/// The threads heavy queries run on, one per core; `None` if the OS
/// refused them (heavy queries then run where they are polled).
fn heavy_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(std::thread::available_parallelism().map_or(2, usize::from))
                .thread_name("cellar-heavy")
                .on_thread_start(lower_priority)
                .enable_all()
                .build()
                .ok()
        })
        .as_ref()
}

/// Nice 10 for the calling thread (a lower priority is always allowed;
/// if the OS refuses, the thread keeps the normal one).
fn lower_priority() {
    use thread_priority::{ThreadPriority, ThreadPriorityValue};
    // The crate maps 0..=99 onto nice 19..=-20: 22 is nice 10.
    if let Ok(value) = ThreadPriorityValue::try_from(22u8) {
        let _ = thread_priority::set_current_thread_priority(ThreadPriority::Crossplatform(value));
    }
}

/// Aborts its task when dropped: a query whose stream is dropped stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Executes `plan` on `runtime` (so the tasks it spawns run there too) and
/// streams its batches back through a short channel. A panic in the query
/// becomes an error, never a silently shorter result.
fn run_on(
    runtime: &tokio::runtime::Runtime,
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<datafusion::execution::TaskContext>,
) -> SendableRecordBatchStream {
    let schema = plan.schema();
    let (sender, receiver) = tokio::sync::mpsc::channel(2);
    let task = runtime.spawn(async move {
        let mut stream = match datafusion::physical_plan::execute_stream(plan, context) {
            Ok(s) => s,
            Err(e) => {
                let _ = sender.send(Err(e)).await;
                return;
            }
        };
        while let Some(item) = stream.next().await {
            if sender.send(item).await.is_err() {
                return;
            }
        }
    });
    let state = (receiver, Some(AbortOnDrop(task)));
    let batches = futures::stream::unfold(state, |(mut receiver, mut task)| async move {
        if let Some(item) = receiver.recv().await {
            return Some((item, (receiver, task)));
        }
        // The channel closed: the query ended, or its task failed.
        let mut finished = task.take()?;
        match (&mut finished.0).await {
            Err(e) if e.is_panic() => Some((
                Err(crate::error::Error::Internal(format!(
                    "the query's task panicked: {}",
                    panic_message(e.into_panic())
                ))
                .into()),
                (receiver, None),
            )),
            _ => None,
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

fn cancelled_error(id: u64) -> DataFusionError {
    crate::error::Error::QueryCancelled { id }.into()
}

/// Removes its query from the registry when the query ends.
struct Registration {
    running: Running,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.running.lock().remove(&self.id);
    }
}

/// Whether every scan of `plan` reads a bounded number of rows.
fn bounded(plan: &dyn ExecutionPlan) -> bool {
    let children = plan.children();
    if let Some(scan) = plan.downcast_ref::<KeyScanExec>() {
        return scan.is_bounded();
    }
    if let Some(gather) = plan.downcast_ref::<GatherExec>() {
        return gather.is_bounded();
    }
    // An aggregate computed in its scan reads what the scan reads.
    if let Some(aggregate) = plan.downcast_ref::<ScanAggregateExec>() {
        return bounded(aggregate.scan().as_ref());
    }
    if children.is_empty() {
        // Other leaves (constants, in-memory batches, files) are light
        // when they know they are small.
        return StatisticsContext::default()
            .compute(plan, &StatisticsArgs::new())
            .ok()
            .and_then(|s| s.num_rows.get_value().copied())
            .is_some_and(|rows| rows <= BOUNDED_ROWS);
    }
    children.into_iter().all(|c| bounded(c.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heavy queries' threads run at nice 10: below the threads that serve
    /// point lookups.
    #[cfg(target_os = "linux")]
    #[test]
    fn heavy_threads_run_at_a_lower_priority() {
        let runtime = heavy_runtime().expect("the heavy runtime starts");
        let nice = runtime
            .block_on(runtime.spawn(async {
                let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
                // Field 19 (nice) counts from after the parenthesised name.
                let after_name = stat.rsplit(')').next().unwrap_or_default().to_string();
                after_name.split_whitespace().nth(16).map(str::to_string)
            }))
            .ok()
            .flatten();
        assert_eq!(nice.as_deref(), Some("10"));
    }
}
