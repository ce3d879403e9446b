//! What a table's replacement asks of the others (see `replace.rs`): the
//! write gate its writers pass, and the pins that keep a planned query on
//! the table it planned against.

use super::commit::lock;
use super::definition::TableDef;
use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// Writers of one table pass it one batch at a time; a rewrite closes it,
/// waiting for the writers inside, and holds new ones back until it ends.
#[derive(Debug, Default)]
pub struct WriteGate {
    /// (writers inside, closed)
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

/// A writer inside the gate; leaves it when dropped.
#[derive(Debug)]
pub struct Entered(Arc<WriteGate>);

/// The gate closed; opens again when dropped.
#[derive(Debug)]
pub struct Closed(Arc<WriteGate>);

impl WriteGate {
    /// Enters, after any rewrite under way ends.
    pub fn enter(self: &Arc<Self>) -> Entered {
        let mut state = self.wait_while(|(_, closed)| *closed);
        state.0 += 1;
        Entered(Arc::clone(self))
    }

    /// The state once `busy` no longer holds of it.
    fn wait_while(
        &self,
        busy: impl FnMut(&mut (usize, bool)) -> bool,
    ) -> std::sync::MutexGuard<'_, (usize, bool)> {
        self.changed
            .wait_while(lock(&self.state), busy)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the gate once the writers inside have left.
    pub fn close(self: &Arc<Self>) -> Closed {
        // One rewrite at a time: wait for another to end first.
        let mut state = self.wait_while(|(_, closed)| *closed);
        state.1 = true;
        drop(state);
        drop(self.wait_while(|(writers, _)| *writers > 0));
        Closed(Arc::clone(self))
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        lock(&self.0.state).0 -= 1;
        self.0.changed.notify_all();
    }
}

impl Drop for Closed {
    fn drop(&mut self) {
        lock(&self.0.state).1 = false;
        self.0.changed.notify_all();
    }
}

/// A table as it was when a query was planned: reads through it stay on
/// that table should it be replaced before they run.
#[derive(Clone)]
pub struct Pinned {
    def: TableDef,
    /// What the backend keeps to find the table again.
    held: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pinned({}, id {})", self.def.name, self.def.id)
    }
}

impl Pinned {
    /// A pin holding `held` for the backend.
    pub fn new(def: TableDef, held: Arc<dyn Any + Send + Sync>) -> Self {
        Pinned { def, held }
    }

    /// The table's definition when pinned.
    pub fn def(&self) -> &TableDef {
        &self.def
    }

    /// What the backend keeps, if it is a `T`.
    pub fn held<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        Arc::clone(&self.held).downcast().ok()
    }
}
