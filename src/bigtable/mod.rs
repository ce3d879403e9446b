//! Cloud Bigtable as a cellar backend (the `bigtable` feature).
//!
//! [`BigtableStore`] implements [`Backend`] over Google's generated gRPC
//! clients for the data API (`google.bigtable.v2`) and the table admin API
//! (`google.bigtable.admin.v2`), on the tonic the Flight server uses.
//!
//! - A cellar table is a Bigtable table of the same name; its families,
//!   with their GC policies, are Bigtable column families (`admin.rs`).
//! - cellar's own schema (row-key schemas, declared columns, series
//!   layouts, `.proto` sources) lives in one table of the instance,
//!   [`CATALOG_TABLE`], a row per table (`table/<name>`, the definition as
//!   JSON) and per setting (`setting/<name>`): where Bigtable users keep
//!   metadata of their own (HBase's `hbase:meta`, Phoenix's
//!   `SYSTEM.CATALOG`), readable with `cbt read _cellar`, and never in the
//!   way of their tables (cellar table names start with a letter).
//! - Reads become `ReadRows` with a row set and a filter chain (`read.rs`);
//!   GC policies and the parts of the filter Bigtable cannot be trusted
//!   with are applied again as the rows arrive, so answers match the
//!   embedded store's.
//! - Writes become `MutateRow(s)`, `CheckAndMutateRow` and
//!   `ReadModifyWriteRow` (`write.rs`), after the same validation as the
//!   embedded store's.
//!
//! The trait is synchronous (the embedded store is); this backend runs its
//! calls on a small runtime of its own and waits for them, so it can be
//! called from any thread, inside or outside another runtime.

pub(crate) mod admin;
mod conditional;
mod connect;
mod hll;
mod read;
mod translate;
mod write;

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin_api;
use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as data;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::store::{
    AlterOp, Backend, BadRows, CellBatch, FamilyFormat, FormatChange, GcPolicy, GcStats, Mutation,
    Pinned, ReadFilter, ReadModifyWrite, ReadRequest, Row, RowChange, RowMutation, RowSet,
    RowStream, TableDef, TableSpec, WriteGate, validate_table_name,
};

use admin_api::bigtable_table_admin_client::BigtableTableAdminClient;
use data::bigtable_client::BigtableClient;

/// The table of an instance that holds cellar's schema.
pub const CATALOG_TABLE: &str = "_cellar";
/// Its one family.
const CATALOG_FAMILY: &str = "c";
const TABLE_ROW_PREFIX: &str = "table/";
const SETTING_ROW_PREFIX: &str = "setting/";
const NEXT_ID_ROW: &str = "meta/next_id";
/// The metadata key of a definition whose Bigtable table is not named as
/// the table is: a series given a new layout (`ALTER SERIES ... SET
/// LAYOUT`) keeps the table its rows were copied into, since Bigtable
/// cannot rename one.
const BIGTABLE_TABLE_KEY: &str = crate::store::BIGTABLE_TABLE_METADATA;

/// The Bigtable table that holds `def`'s rows.
fn physical(def: &TableDef) -> &str {
    def.metadata
        .get(BIGTABLE_TABLE_KEY)
        .map_or(def.name.as_str(), String::as_str)
}

/// A Cloud Bigtable instance (or the emulator) as a cellar store.
pub struct BigtableStore {
    /// `projects/P/instances/I`.
    instance: String,
    /// Where the calls go.
    endpoint: String,
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    data: BigtableClient<InterceptedService<Channel, connect::Auth>>,
    admin: BigtableTableAdminClient<InterceptedService<Channel, connect::Auth>>,
    tables: RwLock<BTreeMap<String, TableDef>>,
    damaged: RwLock<BTreeMap<String, String>>,
    ddl: Mutex<()>,
    gates: Mutex<HashMap<String, Arc<WriteGate>>>,
}

impl std::fmt::Debug for BigtableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtableStore")
            .field("instance", &self.instance)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Drop for BigtableStore {
    fn drop(&mut self) {
        // Dropped possibly inside another runtime, where waiting for the
        // workers is not allowed: let them wind down on their own.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The error of a failed call, with what was called.
pub(crate) fn remote(call: impl Into<String>, status: &tonic::Status) -> Error {
    let call = call.into();
    match status.code() {
        tonic::Code::InvalidArgument
        | tonic::Code::FailedPrecondition
        | tonic::Code::OutOfRange => {
            Error::InvalidArgument(format!("Bigtable refused {call}: {}", status.message()))
        }
        code => Error::Remote {
            call,
            code: format!("{code:?}"),
            message: status.message().to_string(),
        },
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Checks `projects/P/instances/I`.
fn check_instance(instance: &str) -> Result<()> {
    let parts: Vec<&str> = instance.split('/').collect();
    let ok = parts.len() == 4
        && parts[0] == "projects"
        && parts[2] == "instances"
        && !parts[1].is_empty()
        && !parts[3].is_empty();
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "a Bigtable instance is named projects/<project>/instances/<instance>, not {instance:?}"
        )))
    }
}

impl BigtableStore {
    /// Opens the instance `projects/P/instances/I`. With
    /// `BIGTABLE_EMULATOR_HOST` set (`host:port`, as Google's clients read
    /// it) the calls go to that emulator, unauthenticated; otherwise to
    /// Cloud Bigtable over TLS, authenticated by Google's application
    /// default credentials. cellar's catalog table is created if the
    /// instance has none.
    pub fn open(instance: &str) -> Result<BigtableStore> {
        let endpoint = match std::env::var("BIGTABLE_EMULATOR_HOST") {
            Ok(host) if !host.trim().is_empty() => format!("http://{}", host.trim()),
            _ => connect::CLOUD_ENDPOINT.to_string(),
        };
        BigtableStore::connect(instance, &endpoint)
    }

    /// Opens the instance at `endpoint`: `http://host:port` is the
    /// emulator (no credentials); `https://...` is Cloud Bigtable (or an
    /// endpoint of it), with TLS and application default credentials.
    pub fn connect(instance: &str, endpoint: &str) -> Result<BigtableStore> {
        check_instance(instance)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cellar-bigtable")
            .enable_all()
            .build()?;
        let target = endpoint.to_string();
        let connect = async move {
            let auth = if target.starts_with("https://") {
                connect::Auth::application_default().await?
            } else {
                connect::Auth::default()
            };
            let data = connect::channel(&target).await?;
            let admin_target = connect::admin_endpoint(&target);
            let admin = if admin_target == target {
                data.clone()
            } else {
                connect::channel(admin_target).await?
            };
            Ok((data, admin, auth))
        };
        let (data, admin, auth) = match wait(runtime.handle(), connect) {
            Ok(channels) => channels,
            Err(e) => {
                // Perhaps inside another runtime, where waiting is not allowed.
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let store = BigtableStore {
            instance: instance.to_string(),
            endpoint: endpoint.to_string(),
            data: BigtableClient::with_interceptor(data, auth.clone())
                .max_decoding_message_size(256 * 1024 * 1024),
            admin: BigtableTableAdminClient::with_interceptor(admin, auth),
            runtime: Some(runtime),
            tables: RwLock::default(),
            damaged: RwLock::default(),
            ddl: Mutex::default(),
            gates: Mutex::default(),
        };
        store.ensure_catalog()?;
        store.load_catalog()?;
        Ok(store)
    }

    /// Runs `call` on this store's runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| Error::Internal("the Bigtable store is closing".into()))?;
        wait(runtime.handle(), call)
    }

    /// The full name of the Bigtable table that holds `table`'s rows (its
    /// own name unless the catalog maps it to another; an unknown table,
    /// and the catalog itself, by name).
    fn table_path(&self, table: &str) -> String {
        let mapped = (table != CATALOG_TABLE)
            .then(|| self.def(table).ok())
            .flatten()
            .and_then(|def| def.metadata.get(BIGTABLE_TABLE_KEY).cloned());
        self.bigtable_path(mapped.as_deref().unwrap_or(table))
    }

    /// The full name of Bigtable table `id`.
    fn bigtable_path(&self, id: &str) -> String {
        format!("{}/tables/{id}", self.instance)
    }

    /// A Bigtable table id for a new table `name`: its name, unless a
    /// table of the catalog holds its rows there (after a change of
    /// layout), then the first of `name-1`, `name-2`, ... that no table of
    /// the catalog uses and the instance does not have.
    fn free_bigtable_id(&self, name: &str) -> Result<String> {
        self.load_catalog()?;
        let used: std::collections::BTreeSet<String> = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|def| physical(def).to_string())
            .collect();
        if !used.contains(name) {
            return Ok(name.to_string());
        }
        // As many tries as there are tables to be in the way, and one more.
        for n in 1..=used.len() + 1 {
            let id = format!("{name}-{n}");
            if !used.contains(&id) && !admin::table_exists(self, &id)? {
                return Ok(id);
            }
        }
        Err(Error::InvalidArgument(format!(
            "no free Bigtable table id for table {name}: {name}-1 to {name}-{} are all taken \
             (by tables cellar did not create); pick another name",
            used.len() + 1
        )))
    }

    /// The definition of `name` as cached, or as the catalog has it now
    /// (another cellar may have created it).
    fn def(&self, name: &str) -> Result<TableDef> {
        if let Some(def) = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
        {
            return Ok(def.clone());
        }
        if let Some(reason) = self
            .damaged
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
        {
            return Err(Error::TableDamaged {
                table: name.to_string(),
                reason: reason.clone(),
            });
        }
        let key = format!("{TABLE_ROW_PREFIX}{name}");
        match self.catalog_value(&key)? {
            Some(json) => {
                let def: TableDef =
                    serde_json::from_slice(&json).map_err(|e| Error::TableDamaged {
                        table: name.to_string(),
                        reason: format!("its definition in {CATALOG_TABLE} does not parse: {e}"),
                    })?;
                self.cache(def.clone());
                Ok(def)
            }
            None => Err(Error::TableNotFound {
                table: name.to_string(),
            }),
        }
    }

    fn cache(&self, def: TableDef) {
        self.tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(def.name.clone(), def);
    }

    fn uncache(&self, name: &str) {
        self.tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// The latest value of a catalog row's one column.
    fn catalog_value(&self, row: &str) -> Result<Option<Vec<u8>>> {
        let request =
            ReadRequest::rows(RowSet::keys([row.as_bytes()])).filter(ReadFilter::latest());
        let rows = read::collect(self, &catalog_def(), request)?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|r| r.cells.into_iter().next())
            .map(|c| c.value))
    }

    /// Writes (`Some`) or deletes (`None`) a catalog row's value.
    fn put_catalog(&self, row: &str, value: Option<Vec<u8>>) -> Result<()> {
        let mutations = match value {
            Some(value) => vec![
                Mutation::DeleteRow,
                Mutation::SetCell {
                    family: CATALOG_FAMILY.into(),
                    qualifier: b"v".to_vec(),
                    timestamp: Some(0),
                    value,
                },
            ],
            None => vec![Mutation::DeleteRow],
        };
        write::mutate_row(
            self,
            &catalog_def(),
            RowMutation::new(row.as_bytes().to_vec(), mutations),
        )
    }

    /// `count` fresh ids, the first returned.
    fn next_ids(&self, count: u64) -> Result<u64> {
        let delta = i64::try_from(count).map_err(|_| Error::Internal("too many ids".into()))?;
        let row = write::read_modify_write(
            self,
            &catalog_def(),
            NEXT_ID_ROW.as_bytes(),
            vec![ReadModifyWrite::Increment {
                family: CATALOG_FAMILY.into(),
                qualifier: b"n".to_vec(),
                delta,
            }],
        )?;
        let value = row
            .cells
            .first()
            .and_then(|c| <[u8; 8]>::try_from(c.value.as_slice()).ok())
            .map(i64::from_be_bytes)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "{CATALOG_TABLE} row {NEXT_ID_ROW} is not a counter"
                ))
            })?;
        // Ids start at 1: the counter holds the last id handed out.
        Ok(u64::try_from(value - delta).unwrap_or(0) + 1)
    }

    fn ensure_catalog(&self) -> Result<()> {
        let exists = admin::table_exists(self, CATALOG_TABLE)?;
        if !exists {
            admin::create_table(self, &catalog_def(), CATALOG_TABLE)?;
        }
        Ok(())
    }

    fn load_catalog(&self) -> Result<()> {
        let request = ReadRequest::rows(RowSet::prefix(TABLE_ROW_PREFIX.as_bytes()))
            .filter(ReadFilter::latest());
        let rows = read::collect(self, &catalog_def(), request)?;
        let mut tables = BTreeMap::new();
        let mut damaged = BTreeMap::new();
        for row in rows {
            let name = String::from_utf8_lossy(&row.key[TABLE_ROW_PREFIX.len()..]).into_owned();
            let Some(cell) = row.cells.first() else {
                continue;
            };
            match serde_json::from_slice::<TableDef>(&cell.value) {
                Ok(def) => {
                    tables.insert(name, def);
                }
                Err(e) => {
                    damaged.insert(name, format!("its definition does not parse: {e}"));
                }
            }
        }
        *self.tables.write().unwrap_or_else(PoisonError::into_inner) = tables;
        *self.damaged.write().unwrap_or_else(PoisonError::into_inner) = damaged;
        Ok(())
    }
}

impl BigtableStore {
    /// Deletes what the GC policies of `table`'s families (or of `only`)
    /// select now, cell by cell, as the embedded store's collection does:
    /// Bigtable collects in the background, some time later, so without
    /// this a policy loosened before it ran would bring cells back.
    /// Safe against concurrent writes: a newer cell only makes more of
    /// the old ones garbage, never fewer.
    fn collect(&self, table: &str, only: Option<&str>) -> Result<GcStats> {
        let def = self.def(table)?;
        if let Some(family) = only {
            def.family(family)?;
        }
        let families: Vec<String> = def
            .families
            .iter()
            .filter(|f| only.is_none_or(|o| o == f.name) && f.gc != GcPolicy::KeepAll)
            .map(|f| f.name.clone())
            .collect();
        let mut stats = GcStats::default();
        if families.is_empty() {
            return Ok(stats);
        }
        // Every cell as stored: the policies are applied here, not by the read.
        let mut stored = def.clone();
        for f in &mut stored.families {
            f.gc = GcPolicy::KeepAll;
        }
        let request = ReadRequest::all().filter(ReadFilter::all().families(families));
        let now = crate::store::now_micros();
        let mut pending: Vec<RowMutation> = Vec::new();
        let flush = |pending: &mut Vec<RowMutation>| -> Result<()> {
            for outcome in write::mutate_rows(self, &def, std::mem::take(pending))? {
                outcome?;
            }
            Ok(())
        };
        for row in read::stream(self, &stored, request)? {
            let row = row?;
            let mut deletes = Vec::new();
            let mut index = 0;
            for (i, cell) in row.cells.iter().enumerate() {
                let same_column = i > 0 && {
                    let before = &row.cells[i - 1];
                    before.family == cell.family && before.qualifier == cell.qualifier
                };
                index = if same_column { index + 1 } else { 0 };
                if def
                    .family(&cell.family)?
                    .gc
                    .is_garbage(index, cell.timestamp, now)
                {
                    deletes.push(Mutation::DeleteCells {
                        family: cell.family.to_string(),
                        qualifier: cell.qualifier.clone(),
                        time_range: crate::store::TimeRange::new(
                            cell.timestamp,
                            cell.timestamp + 1,
                        ),
                    });
                }
            }
            if !deletes.is_empty() {
                stats.rows_touched += 1;
                stats.cells_removed += deletes.len() as u64;
                pending.push(RowMutation::new(row.key, deletes));
                if pending.len() >= 1000 {
                    flush(&mut pending)?;
                }
            }
        }
        flush(&mut pending)?;
        Ok(stats)
    }
}

/// The catalog table's definition (never in the catalog itself).
fn catalog_def() -> TableDef {
    TableDef {
        id: 0,
        name: CATALOG_TABLE.into(),
        families: vec![crate::store::FamilyDef {
            id: 0,
            name: CATALOG_FAMILY.into(),
            gc: GcPolicy::MaxVersions(1),
            kind: Default::default(),
            format: FamilyFormat::Cells,
            converting: None,
            blocks: None,
        }],
        metadata: BTreeMap::new(),
    }
}

/// Runs `call` on `runtime` and blocks this thread until it is done
/// (allowed on any thread: nothing here needs a runtime of the caller's).
fn wait<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    call: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let task = runtime.spawn(call);
    // Unconstrained: on a tokio worker whose task ran out of its budget,
    // a constrained poll would defer its wake-up to a scheduler this
    // thread never returns to while it blocks here.
    futures::executor::block_on(tokio::task::coop::unconstrained(task))
        .map_err(|e| Error::Internal(format!("a Bigtable call did not finish: {e}")))?
}

impl Backend for BigtableStore {
    fn locator(&self) -> String {
        format!("bigtable {} at {}", self.instance, self.endpoint)
    }

    fn address(&self) -> String {
        format!("bigtable:{}@{}", self.instance, self.endpoint)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn timestamp_granularity(&self) -> i64 {
        1000
    }

    fn list_tables(&self) -> Vec<String> {
        self.tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn table(&self, name: &str) -> Result<TableDef> {
        self.def(name)
    }

    fn create_table(&self, spec: TableSpec) -> Result<TableDef> {
        validate_table_name(&spec.name)?;
        crate::store::check_families(&spec.name, &spec.families)?;
        admin::check_supported(
            &spec.name,
            spec.families.iter().map(|f| (&f.name, f.format)),
        )?;
        let _ddl = lock(&self.ddl);
        match self.def(&spec.name) {
            Ok(_) => return Err(Error::TableExists { table: spec.name }),
            Err(e @ Error::TableDamaged { .. }) => return Err(e),
            Err(_) => {}
        }
        let count = 1 + spec.families.len() as u64;
        let mut id = self.next_ids(count)?;
        let mut def = TableDef::from_spec(spec, &mut id);
        let bigtable_id = self.free_bigtable_id(&def.name)?;
        if bigtable_id != def.name {
            def.metadata
                .insert(BIGTABLE_TABLE_KEY.to_string(), bigtable_id.clone());
        }
        if admin::table_exists(self, &bigtable_id)? {
            return Err(Error::InvalidArgument(format!(
                "the instance already has a Bigtable table {bigtable_id} that cellar did not \
                 create; pick another name"
            )));
        }
        admin::create_table(self, &def, &bigtable_id)?;
        let json = serde_json::to_vec(&def)
            .map_err(|e| Error::Internal(format!("a table definition did not serialize: {e}")))?;
        self.put_catalog(&format!("{TABLE_ROW_PREFIX}{}", def.name), Some(json))?;
        self.cache(def.clone());
        Ok(def)
    }

    fn alter_table(&self, name: &str, ops: Vec<AlterOp>) -> Result<TableDef> {
        let _ddl = lock(&self.ddl);
        let old = self.def(name)?;
        let mut def = old.clone();
        let mut id = self.next_ids(ops.len() as u64 + 1)?;
        let specs = def.apply(ops, &mut id)?;
        crate::store::check_families(name, &specs)?;
        admin::check_supported(name, specs.iter().map(|f| (&f.name, f.format)))?;
        admin::modify_families(self, &old, &def)?;
        let json = serde_json::to_vec(&def)
            .map_err(|e| Error::Internal(format!("a table definition did not serialize: {e}")))?;
        self.put_catalog(&format!("{TABLE_ROW_PREFIX}{name}"), Some(json))?;
        self.cache(def.clone());
        Ok(def)
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        let _ddl = lock(&self.ddl);
        let damaged = self
            .damaged
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
            .is_some();
        let bigtable_id = if damaged {
            name.to_string()
        } else {
            physical(&self.def(name)?).to_string()
        };
        self.put_catalog(&format!("{TABLE_ROW_PREFIX}{name}"), None)?;
        self.uncache(name);
        // Never a Bigtable table that another table of the catalog holds
        // its rows in (a change of layout stopped between its two catalog
        // writes leaves two names on one table).
        self.load_catalog()?;
        let shared = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|def| physical(def) == bigtable_id);
        if shared {
            return Ok(());
        }
        admin::delete_table(self, &bigtable_id)
    }

    /// Bigtable cannot rename a table, so `target`'s definition becomes
    /// `source`'s under `target`'s name, mapped to `source`'s Bigtable
    /// table; then `source`'s catalog row goes and `target`'s old Bigtable
    /// table is deleted. Queries planned before see the change (the
    /// definition's id) and ask to be run again.
    fn replace_table(&self, target: &str, source: &str) -> Result<TableDef> {
        let _ddl = lock(&self.ddl);
        let old = self.def(target)?;
        let new = self.def(source)?;
        let mut def = new.clone();
        def.name = target.to_string();
        def.metadata
            .insert(BIGTABLE_TABLE_KEY.to_string(), physical(&new).to_string());
        let json = serde_json::to_vec(&def)
            .map_err(|e| Error::Internal(format!("a table definition did not serialize: {e}")))?;
        // The switch: one row. Until the next write, both names hold the
        // rows; drop_table then keeps the Bigtable table.
        self.put_catalog(&format!("{TABLE_ROW_PREFIX}{target}"), Some(json))?;
        self.cache(def.clone());
        self.put_catalog(&format!("{TABLE_ROW_PREFIX}{source}"), None)?;
        self.uncache(source);
        if physical(&old) != physical(&def) {
            admin::delete_table(self, physical(&old))?;
        }
        Ok(def)
    }

    fn damaged_tables(&self) -> Vec<(String, String)> {
        self.damaged
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn put_setting(&self, key: &str, value: Option<&str>) -> Result<()> {
        if key.is_empty() || key.len() > 4096 {
            return Err(Error::InvalidArgument(format!(
                "setting name must be 1 to 4096 bytes, got {}",
                key.len()
            )));
        }
        self.put_catalog(
            &format!("{SETTING_ROW_PREFIX}{key}"),
            value.map(|v| v.as_bytes().to_vec()),
        )
    }

    fn settings(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let request = ReadRequest::rows(RowSet::prefix(
            format!("{SETTING_ROW_PREFIX}{prefix}").into_bytes(),
        ))
        .filter(ReadFilter::latest());
        let rows = read::collect(self, &catalog_def(), request)?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let name =
                    String::from_utf8_lossy(&row.key[SETTING_ROW_PREFIX.len()..]).into_owned();
                let cell = row.cells.into_iter().next()?;
                Some((name, String::from_utf8_lossy(&cell.value).into_owned()))
            })
            .collect())
    }

    fn read_rows(&self, table: &str, request: ReadRequest) -> Result<RowStream> {
        let def = self.def(table)?;
        read::stream(self, &def, request)
    }

    fn pin(&self, table: &str) -> Result<Pinned> {
        let def = self.def(table)?;
        Ok(Pinned::new(def.clone(), Arc::new(def)))
    }

    fn read_pinned(&self, pinned: &Pinned, request: ReadRequest) -> Result<RowStream> {
        let def = self.def(&pinned.def().name)?;
        if def.id != pinned.def().id {
            return Err(Error::InvalidArgument(format!(
                "table {} was dropped or replaced after the query was planned; run it again",
                def.name
            )));
        }
        read::stream(self, &def, request)
    }

    fn sample_row_keys(&self, table: &str) -> Result<Vec<(Vec<u8>, u64)>> {
        self.def(table)?;
        read::sample_row_keys(self, table)
    }

    fn approximate_cells(&self, table: &str) -> Result<u64> {
        // Bigtable counts bytes, not cells: about 64 bytes a cell.
        Ok(self.table_disk_space(table)? / 64)
    }

    fn table_disk_space(&self, table: &str) -> Result<u64> {
        Ok(self
            .sample_row_keys(table)?
            .last()
            .map_or(0, |(_, bytes)| *bytes))
    }

    fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()> {
        let def = self.def(table)?;
        write::mutate_row(self, &def, row)
    }

    fn mutate_rows(&self, table: &str, rows: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        let def = self.def(table)?;
        write::mutate_rows(self, &def, rows)
    }

    fn write_batch(
        &self,
        table: &str,
        batch: &CellBatch,
        bad: BadRows,
    ) -> Result<Vec<(usize, Error)>> {
        let def = self.def(table)?;
        write::write_batch(self, &def, batch, bad)
    }

    fn update_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        filter: &ReadFilter,
        change: &mut RowChange<'_>,
    ) -> Result<Vec<Result<()>>> {
        let def = self.def(table)?;
        write::update_rows(self, &def, keys, filter, change)
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        predicate: ReadFilter,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let def = self.def(table)?;
        write::check_and_mutate(self, &def, key, predicate, on_match, on_no_match)
    }

    fn read_modify_write(
        &self,
        table: &str,
        key: &[u8],
        rules: Vec<ReadModifyWrite>,
    ) -> Result<Row> {
        let def = self.def(table)?;
        write::read_modify_write(self, &def, key, rules)
    }

    fn write_gate(&self, table: &str) -> Arc<WriteGate> {
        Arc::clone(lock(&self.gates).entry(table.to_string()).or_default())
    }

    fn set_family_format(
        &self,
        table: &str,
        family: &str,
        format: FamilyFormat,
        _progress: &mut dyn FnMut(FormatChange) -> bool,
    ) -> Result<FormatChange> {
        let def = self.def(table)?;
        def.family(family)?;
        match format {
            // (Bigtable keeps cells its own way: AUTO is what it does.)
            FamilyFormat::Cells | FamilyFormat::Auto => Ok(FormatChange::default()),
            FamilyFormat::Packed => Err(admin::no_packed(table, family)),
        }
    }

    fn format_changes(&self) -> Vec<(String, String, FamilyFormat, FormatChange)> {
        Vec::new()
    }

    fn collect_garbage(&self, table: &str) -> Result<GcStats> {
        self.collect(table, None)
    }

    fn collect_family_garbage(&self, table: &str, family: &str) -> Result<GcStats> {
        self.collect(table, Some(family))
    }

    fn compact(&self, table: &str) -> Result<()> {
        self.def(table).map(drop)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
}
