//! A background thread owned by a handle: dropping the handle tells the
//! thread to stop and waits for it.

use super::commit::lock;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Whether the thread is to stop, and the signal that wakes it.
pub(super) type Stop = Arc<(Mutex<bool>, Condvar)>;

/// A running background thread; dropping it stops the thread and waits
/// for it.
pub(crate) struct Worker {
    stop: Stop,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts thread `name` running `work`, which looks at its [`Stop`]
    /// (see [`stopped`]); `None` if the OS refused a thread.
    pub(super) fn start(name: &str, work: impl FnOnce(&Stop) + Send + 'static) -> Option<Worker> {
        let stop: Stop = Arc::default();
        let signal = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || work(&signal))
            .ok()?;
        Some(Worker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        *lock(&self.stop.0) = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits `wait`, or until the thread is told to stop; whether it is.
pub(super) fn stopped(stop: &Stop, wait: Duration) -> bool {
    let guard = lock(&stop.0);
    let (guard, _) = stop
        .1
        .wait_timeout_while(guard, wait, |s| !*s)
        .unwrap_or_else(PoisonError::into_inner);
    *guard
}
