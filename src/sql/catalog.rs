//! The default schema a session sees: the store's tables, read from its
//! catalog on every lookup so DDL is visible at once, and the session's
//! own tables (external files, views), which live as long as the session.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;

use crate::error::Error;
use crate::query::CellarTable;
use crate::store::Store;

/// Tables a session registered (`CREATE EXTERNAL TABLE`, `CREATE VIEW`),
/// by name; clones share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionTables(Arc<RwLock<BTreeMap<String, Arc<dyn TableProvider>>>>);

impl SessionTables {
    pub fn get(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn insert(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Option<Arc<dyn TableProvider>> {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, table)
    }

    pub fn remove(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
    }

    /// Each table's name and what it is ("external table", "view").
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, table)| (name.clone(), kind(table.as_ref())))
            .collect()
    }
}

/// The error for a session table given the name of a cellar table.
pub(crate) fn cellar_name_taken(name: &str, table_kind: &str) -> Error {
    Error::InvalidArgument(format!(
        "a cellar table named {name} exists; give the {table_kind} another name"
    ))
}

#[derive(Debug)]
pub(crate) struct StoreSchema {
    pub store: Store,
    pub session: SessionTables,
}

#[async_trait]
impl SchemaProvider for StoreSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.store.list_tables();
        names.extend(self.session.list().into_iter().map(|(name, _)| name));
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        match CellarTable::new(self.store.clone(), name) {
            Ok(t) => Ok(Some(Arc::new(t))),
            Err(Error::TableNotFound { .. }) => Ok(self.session.get(name)),
            Err(e) => Err(e.into()),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.store.table(name).is_ok() || self.session.get(name).is_some()
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if self.store.table(&name).is_ok() {
            return Err(cellar_name_taken(&name, kind(table.as_ref())).into());
        }
        Ok(self.session.insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let removed = self.session.remove(name);
        if removed.is_none() && self.store.table(name).is_ok() {
            return Err(Error::InvalidArgument(format!(
                "{name} is a cellar table: DROP TABLE {name} deletes it and its data"
            ))
            .into());
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

/// Quoted paths as tables (`SELECT * FROM 'data/x.parquet'`), DataFusion's
/// own listing tables, made only where the session's access allows the
/// file. Under confined access a name that does not look like a path is
/// no table (it is not looked for in the server's directory).
#[derive(Debug)]
pub(crate) struct PathTables {
    inner: datafusion::datasource::dynamic_file::DynamicListTableFactory,
    access: Arc<super::Access>,
}

impl PathTables {
    pub fn new(access: Arc<super::Access>) -> Self {
        PathTables {
            inner: Default::default(),
            access,
        }
    }

    /// Makes the tables with `ctx`'s state (its formats and object stores).
    pub fn bind(&self, ctx: &datafusion::prelude::SessionContext) {
        self.inner.session_store().with_state(ctx.state_weak_ref());
    }
}

/// Whether a table name reads as a file path or URL rather than a name.
fn looks_like_path(name: &str) -> bool {
    const EXTENSIONS: [&str; 8] = [
        ".csv", ".tsv", ".parquet", ".json", ".ndjson", ".jsonl", ".arrow", ".avro",
    ];
    let lower = name.to_ascii_lowercase();
    name.contains(['/', '\\'])
        || name.contains("://")
        || EXTENSIONS.iter().any(|e| lower.ends_with(e))
}

#[async_trait]
impl datafusion::catalog::UrlTableFactory for PathTables {
    async fn try_new(&self, url: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if *self.access == super::Access::default() {
            return datafusion::catalog::UrlTableFactory::try_new(&self.inner, url).await;
        }
        if self.access.files != super::FileAccess::Full && !looks_like_path(url) {
            return Ok(None);
        }
        let path = self.access.file(url, super::FileUse::Read)?;
        datafusion::catalog::UrlTableFactory::try_new(&self.inner, &path).await
    }
}
