//! The default schema a session sees: the store's tables, read from its
//! catalog on every lookup so DDL is visible at once, and the session's
//! own tables (external files, views), which live as long as the session.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;

use crate::Error;
use crate::query::{CellarTable, to_df};
use crate::store::Store;

/// Tables a session registered: `CREATE EXTERNAL TABLE`, `CREATE VIEW`.
pub(crate) type SessionTables = Arc<RwLock<BTreeMap<String, Arc<dyn TableProvider>>>>;

#[derive(Debug)]
pub(crate) struct StoreSchema {
    pub store: Store,
    pub session: SessionTables,
}

impl StoreSchema {
    fn session_table(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.session
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }
}

#[async_trait]
impl SchemaProvider for StoreSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.store.list_tables();
        names.extend(
            self.session
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .cloned(),
        );
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        match CellarTable::new(self.store.clone(), name) {
            Ok(t) => Ok(Some(Arc::new(t))),
            Err(Error::TableNotFound { .. }) => Ok(self.session_table(name)),
            Err(e) => Err(to_df(e)),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.store.table(name).is_ok() || self.session_table(name).is_some()
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if self.store.table(&name).is_ok() {
            return Err(to_df(Error::InvalidArgument(format!(
                "a cellar table named {name} exists; give the {} another name",
                kind(table.as_ref())
            ))));
        }
        Ok(self
            .session
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let removed = self
            .session
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        if removed.is_none() && self.store.table(name).is_ok() {
            return Err(to_df(Error::InvalidArgument(format!(
                "{name} is a cellar table: DROP TABLE {name} deletes it and its data"
            ))));
        }
        Ok(removed)
    }
}

/// What a session table is, in words.
pub(crate) fn kind(table: &dyn TableProvider) -> &'static str {
    match table.table_type() {
        TableType::View => "view",
        _ => "external table",
    }
}

/// The word that drops it: `DROP VIEW` or `DROP TABLE`.
pub(crate) fn drop_word(table: &dyn TableProvider) -> &'static str {
    match table.table_type() {
        TableType::View => "VIEW",
        _ => "TABLE",
    }
}
