//! `google.bigtable.admin.v2.BigtableTableAdmin`: the calls a client
//! library and `cbt` need (tables, column families with GC rules and
//! aggregate types, dropping row ranges, consistency), over the store's
//! own catalog, so a table made here is a table in SQL too. Backups,
//! snapshots, authorized views, schema bundles and IAM answer
//! UNIMPLEMENTED.

use std::collections::HashMap;

use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin;
use googleapis_tonic_google_iam_v1::google::iam::v1 as iam;
use googleapis_tonic_google_longrunning::google::longrunning::Operation;
use tonic::{Request, Response, Status};

use super::Face;
use super::convert::{instance_of, invalid, status, table_of};
use super::stubs::Empty;
use super::stubs::bigtable_table_admin_server::BigtableTableAdmin;
use crate::bigtable::admin::{gc_rule, value_type};
use crate::sql::Role;
use crate::store::{
    AlterOp, FamilyKind, FamilySpec, GcPolicy, Mutation, ReadFilter, ReadRequest, RowMutation,
    RowSet, TableDef, TableSpec,
};
use admin::modify_column_families_request::modification::Mod;
use admin::r#type::{self as ty, aggregate::Aggregator};
use admin::{ColumnFamily, GcRule, gc_rule as rule};

/// Rows deleted per write by DropRowRange.
const DROP_BATCH: usize = 1000;
/// Tables per ListTables page when the client does not say.
const PAGE: usize = 1000;

/// A cellar GC policy for Bigtable's rule (checked by the store after).
fn policy(rule: Option<&GcRule>, depth: usize) -> Result<GcPolicy, Status> {
    if depth > crate::store::MAX_GC_DEPTH {
        return Err(invalid(format!(
            "the GC rule nests deeper than {} levels",
            crate::store::MAX_GC_DEPTH
        )));
    }
    let Some(rule) = rule.and_then(|r| r.rule.as_ref()) else {
        return Ok(GcPolicy::KeepAll);
    };
    let list = |rules: &[GcRule]| -> Result<Vec<GcPolicy>, Status> {
        rules.iter().map(|r| policy(Some(r), depth + 1)).collect()
    };
    Ok(match rule {
        rule::Rule::MaxNumVersions(n) => match u32::try_from(*n) {
            Ok(n) if n > 0 => GcPolicy::MaxVersions(n),
            _ => {
                return Err(invalid(format!(
                    "max_num_versions must be at least 1, not {n}"
                )));
            }
        },
        rule::Rule::MaxAge(age) => {
            let micros = age
                .seconds
                .checked_mul(1_000_000)
                .and_then(|s| s.checked_add(i64::from(age.nanos) / 1000))
                .filter(|m| *m > 0)
                .ok_or_else(|| {
                    invalid(format!(
                        "max_age {}s {}ns is not a positive duration",
                        age.seconds, age.nanos
                    ))
                })?;
            GcPolicy::MaxAge(micros)
        }
        rule::Rule::Intersection(all) => GcPolicy::Intersection(list(&all.rules)?),
        rule::Rule::Union(any) => GcPolicy::Union(list(&any.rules)?),
    })
}

/// The kind of family an aggregate value type makes.
fn kind(value_type: Option<&admin::Type>) -> Result<FamilyKind, Status> {
    let Some(kind) = value_type.and_then(|t| t.kind.as_ref()) else {
        return Ok(FamilyKind::Normal);
    };
    match kind {
        ty::Kind::AggregateType(aggregate) => match &aggregate.aggregator {
            Some(Aggregator::Sum(_)) => Ok(FamilyKind::Sum),
            Some(Aggregator::Min(_)) => Ok(FamilyKind::Min),
            Some(Aggregator::Max(_)) => Ok(FamilyKind::Max),
            Some(Aggregator::HllppUniqueCount(_)) => Ok(FamilyKind::HyperLogLog),
            None => Err(invalid("an aggregate value type names no aggregator")),
        },
        ty::Kind::BytesType(_) => Ok(FamilyKind::Normal),
        _ => Err(Status::unimplemented(
            "column family value types other than bytes and aggregates are not supported by cellar",
        )),
    }
}

fn family_spec(name: &str, family: &ColumnFamily) -> Result<FamilySpec, Status> {
    Ok(FamilySpec::new(name)
        .gc(policy(family.gc_rule.as_ref(), 0)?)
        .kind(kind(family.value_type.as_ref())?))
}

/// Bigtable's view of a table: its name, and with `schema` its families.
fn table_message(instance: &str, def: &TableDef, schema: bool) -> admin::Table {
    let mut table = admin::Table {
        name: format!("{instance}/tables/{}", def.name),
        ..Default::default()
    };
    if schema {
        table.column_families = def
            .families
            .iter()
            .map(|f| {
                (
                    f.name.clone(),
                    ColumnFamily {
                        gc_rule: gc_rule(&f.gc),
                        value_type: value_type(f.kind),
                    },
                )
            })
            .collect::<HashMap<_, _>>();
        table.granularity = admin::table::TimestampGranularity::Millis as i32;
    }
    table
}

/// `projects/P/instances/I` of a table's full name.
fn instance_part(name: &str) -> &str {
    name.rsplit_once("/tables/").map_or(name, |(i, _)| i)
}

fn unimplemented<T>(call: &str) -> Result<Response<T>, Status> {
    Err(Status::unimplemented(format!(
        "{call} is not supported by cellar's Bigtable server"
    )))
}

impl Face {
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&crate::store::Store) -> crate::error::Result<T> + Send + 'static,
    ) -> Result<T, Status> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&store).map_err(|e| status(&e)))
            .await
            .map_err(|e| Status::internal(format!("a store task failed: {e}")))?
    }
}

#[tonic::async_trait]
impl BigtableTableAdmin for Face {
    async fn create_table(
        &self,
        request: Request<admin::CreateTableRequest>,
    ) -> Result<Response<admin::Table>, Status> {
        self.allow(&request, Role::Admin, "CreateTable")?;
        let req = request.into_inner();
        let instance = instance_of(&req.parent)?.to_string();
        let table = req.table.unwrap_or_default();
        let granularity = table.granularity;
        if granularity != 0 && granularity != admin::table::TimestampGranularity::Millis as i32 {
            return Err(invalid(format!(
                "timestamp granularity {granularity} is not supported (only MILLIS)"
            )));
        }
        let mut names: Vec<&String> = table.column_families.keys().collect();
        names.sort();
        let mut spec = TableSpec::new(req.table_id.clone());
        for name in names {
            spec = spec.family(family_spec(name, &table.column_families[name])?);
        }
        let def = self.run(move |store| store.create_table(spec)).await?;
        Ok(Response::new(table_message(&instance, &def, true)))
    }

    async fn create_table_from_snapshot(
        &self,
        _request: Request<admin::CreateTableFromSnapshotRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("CreateTableFromSnapshot")
    }

    async fn list_tables(
        &self,
        request: Request<admin::ListTablesRequest>,
    ) -> Result<Response<admin::ListTablesResponse>, Status> {
        self.allow(&request, Role::Reader, "ListTables")?;
        let req = request.into_inner();
        let instance = instance_of(&req.parent)?.to_string();
        let page = match req.page_size {
            0 => PAGE,
            n if n < 0 => return Err(invalid(format!("page_size {n} is negative"))),
            n => usize::try_from(n).unwrap_or(PAGE),
        };
        let schema = req.view == admin::table::View::SchemaView as i32
            || req.view == admin::table::View::Full as i32;
        let after = req.page_token;
        let (tables, more) = self
            .run(move |store| {
                let mut names = store.list_tables();
                names.sort();
                names.retain(|n| *n > after);
                let more = names.len() > page;
                names.truncate(page);
                let mut tables = Vec::with_capacity(names.len());
                for name in names {
                    match store.table(&name) {
                        Ok(def) => tables.push(def),
                        // Dropped since it was listed.
                        Err(crate::error::Error::TableNotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok((tables, more))
            })
            .await?;
        let next_page_token = if more {
            tables.last().map(|t| t.name.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(admin::ListTablesResponse {
            tables: tables
                .iter()
                .map(|def| table_message(&instance, def, schema))
                .collect(),
            next_page_token,
        }))
    }

    async fn get_table(
        &self,
        request: Request<admin::GetTableRequest>,
    ) -> Result<Response<admin::Table>, Status> {
        self.allow(&request, Role::Reader, "GetTable")?;
        let req = request.into_inner();
        let name = table_of(&req.name)?;
        let schema = req.view != admin::table::View::NameOnly as i32;
        let def = self.run(move |store| store.table(&name)).await?;
        Ok(Response::new(table_message(
            instance_part(&req.name),
            &def,
            schema,
        )))
    }

    async fn update_table(
        &self,
        _request: Request<admin::UpdateTableRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("UpdateTable")
    }

    async fn delete_table(
        &self,
        request: Request<admin::DeleteTableRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.allow(&request, Role::Admin, "DeleteTable")?;
        let name = table_of(&request.get_ref().name)?;
        self.run(move |store| store.drop_table(&name)).await?;
        Ok(Response::new(()))
    }

    async fn undelete_table(
        &self,
        _request: Request<admin::UndeleteTableRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("UndeleteTable")
    }

    async fn create_authorized_view(
        &self,
        _request: Request<admin::CreateAuthorizedViewRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("CreateAuthorizedView")
    }

    async fn list_authorized_views(
        &self,
        _request: Request<admin::ListAuthorizedViewsRequest>,
    ) -> Result<Response<admin::ListAuthorizedViewsResponse>, Status> {
        unimplemented("ListAuthorizedViews")
    }

    async fn get_authorized_view(
        &self,
        _request: Request<admin::GetAuthorizedViewRequest>,
    ) -> Result<Response<admin::AuthorizedView>, Status> {
        unimplemented("GetAuthorizedView")
    }

    async fn update_authorized_view(
        &self,
        _request: Request<admin::UpdateAuthorizedViewRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("UpdateAuthorizedView")
    }

    async fn delete_authorized_view(
        &self,
        _request: Request<admin::DeleteAuthorizedViewRequest>,
    ) -> Result<Response<Empty>, Status> {
        unimplemented("DeleteAuthorizedView")
    }

    async fn modify_column_families(
        &self,
        request: Request<admin::ModifyColumnFamiliesRequest>,
    ) -> Result<Response<admin::Table>, Status> {
        self.allow(&request, Role::Admin, "ModifyColumnFamilies")?;
        let req = request.into_inner();
        let name = table_of(&req.name)?;
        let mut ops = Vec::with_capacity(req.modifications.len());
        for m in &req.modifications {
            match &m.r#mod {
                Some(Mod::Create(family)) => {
                    ops.push(AlterOp::AddFamily(family_spec(&m.id, family)?))
                }
                Some(Mod::Update(family)) => {
                    if family.value_type.is_some() {
                        return Err(invalid(format!(
                            "family {:?}: a family's value type cannot be changed",
                            m.id
                        )));
                    }
                    ops.push(AlterOp::SetGc {
                        family: m.id.clone(),
                        gc: policy(family.gc_rule.as_ref(), 0)?,
                    });
                }
                Some(Mod::Drop(true)) => ops.push(AlterOp::DropFamily(m.id.clone())),
                Some(Mod::Drop(false)) | None => {
                    return Err(invalid(format!(
                        "modification of family {:?} names no change",
                        m.id
                    )));
                }
            }
        }
        if ops.is_empty() {
            return Err(invalid(
                "ModifyColumnFamilies needs at least one modification",
            ));
        }
        // A changed policy's garbage is reclaimed there and then, under the
        // old policy and under the new, as SQL's ALTER ... SET GC does
        // (Bigtable collects whenever it likes): what a policy discarded
        // (cells written since the last change too) does not come back
        // when it is loosened.
        let updated: Vec<String> = ops
            .iter()
            .filter_map(|op| match op {
                AlterOp::SetGc { family, .. } => Some(family.clone()),
                _ => None,
            })
            .collect();
        let def = self
            .run(move |store| {
                for family in &updated {
                    if store.table(&name)?.family(family).is_ok() {
                        store.collect_family_garbage(&name, family)?;
                    }
                }
                let def = store.alter_table(&name, ops)?;
                for family in &updated {
                    store.collect_family_garbage(&name, family)?;
                }
                Ok(def)
            })
            .await?;
        Ok(Response::new(table_message(
            instance_part(&req.name),
            &def,
            true,
        )))
    }

    async fn drop_row_range(
        &self,
        request: Request<admin::DropRowRangeRequest>,
    ) -> Result<Response<Empty>, Status> {
        use admin::drop_row_range_request::Target;
        self.allow(&request, Role::Admin, "DropRowRange")?;
        let req = request.into_inner();
        let name = table_of(&req.name)?;
        let rows = match req.target {
            Some(Target::RowKeyPrefix(prefix)) if !prefix.is_empty() => RowSet::prefix(prefix),
            Some(Target::DeleteAllDataFromTable(true)) => RowSet::all(),
            _ => {
                return Err(invalid(
                    "DropRowRange needs a non-empty row_key_prefix or delete_all_data_from_table",
                ));
            }
        };
        self.run(move |store| drop_rows(store, &name, rows)).await?;
        Ok(Response::new(()))
    }

    async fn generate_consistency_token(
        &self,
        request: Request<admin::GenerateConsistencyTokenRequest>,
    ) -> Result<Response<admin::GenerateConsistencyTokenResponse>, Status> {
        self.allow(&request, Role::Reader, "GenerateConsistencyToken")?;
        let name = table_of(&request.get_ref().name)?;
        self.run(move |store| store.table(&name)).await?;
        // One store, no replicas: every acknowledged write is already seen.
        Ok(Response::new(admin::GenerateConsistencyTokenResponse {
            consistency_token: "cellar".into(),
        }))
    }

    async fn check_consistency(
        &self,
        request: Request<admin::CheckConsistencyRequest>,
    ) -> Result<Response<admin::CheckConsistencyResponse>, Status> {
        self.allow(&request, Role::Reader, "CheckConsistency")?;
        let name = table_of(&request.get_ref().name)?;
        self.run(move |store| store.table(&name)).await?;
        Ok(Response::new(admin::CheckConsistencyResponse {
            consistent: true,
        }))
    }

    async fn snapshot_table(
        &self,
        _request: Request<admin::SnapshotTableRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("SnapshotTable")
    }

    async fn get_snapshot(
        &self,
        _request: Request<admin::GetSnapshotRequest>,
    ) -> Result<Response<admin::Snapshot>, Status> {
        unimplemented("GetSnapshot")
    }

    async fn list_snapshots(
        &self,
        _request: Request<admin::ListSnapshotsRequest>,
    ) -> Result<Response<admin::ListSnapshotsResponse>, Status> {
        unimplemented("ListSnapshots")
    }

    async fn delete_snapshot(
        &self,
        _request: Request<admin::DeleteSnapshotRequest>,
    ) -> Result<Response<Empty>, Status> {
        unimplemented("DeleteSnapshot")
    }

    async fn create_backup(
        &self,
        _request: Request<admin::CreateBackupRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("CreateBackup")
    }

    async fn get_backup(
        &self,
        _request: Request<admin::GetBackupRequest>,
    ) -> Result<Response<admin::Backup>, Status> {
        unimplemented("GetBackup")
    }

    async fn update_backup(
        &self,
        _request: Request<admin::UpdateBackupRequest>,
    ) -> Result<Response<admin::Backup>, Status> {
        unimplemented("UpdateBackup")
    }

    async fn delete_backup(
        &self,
        _request: Request<admin::DeleteBackupRequest>,
    ) -> Result<Response<Empty>, Status> {
        unimplemented("DeleteBackup")
    }

    async fn list_backups(
        &self,
        _request: Request<admin::ListBackupsRequest>,
    ) -> Result<Response<admin::ListBackupsResponse>, Status> {
        unimplemented("ListBackups")
    }

    async fn restore_table(
        &self,
        _request: Request<admin::RestoreTableRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("RestoreTable")
    }

    async fn copy_backup(
        &self,
        _request: Request<admin::CopyBackupRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("CopyBackup")
    }

    async fn get_iam_policy(
        &self,
        _request: Request<iam::GetIamPolicyRequest>,
    ) -> Result<Response<iam::Policy>, Status> {
        unimplemented("GetIamPolicy (cellar's roles are set with --users)")
    }

    async fn set_iam_policy(
        &self,
        _request: Request<iam::SetIamPolicyRequest>,
    ) -> Result<Response<iam::Policy>, Status> {
        unimplemented("SetIamPolicy (cellar's roles are set with --users)")
    }

    async fn test_iam_permissions(
        &self,
        _request: Request<iam::TestIamPermissionsRequest>,
    ) -> Result<Response<iam::TestIamPermissionsResponse>, Status> {
        unimplemented("TestIamPermissions (cellar's roles are set with --users)")
    }

    async fn create_schema_bundle(
        &self,
        _request: Request<admin::CreateSchemaBundleRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("CreateSchemaBundle")
    }

    async fn update_schema_bundle(
        &self,
        _request: Request<admin::UpdateSchemaBundleRequest>,
    ) -> Result<Response<Operation>, Status> {
        unimplemented("UpdateSchemaBundle")
    }

    async fn get_schema_bundle(
        &self,
        _request: Request<admin::GetSchemaBundleRequest>,
    ) -> Result<Response<admin::SchemaBundle>, Status> {
        unimplemented("GetSchemaBundle")
    }

    async fn list_schema_bundles(
        &self,
        _request: Request<admin::ListSchemaBundlesRequest>,
    ) -> Result<Response<admin::ListSchemaBundlesResponse>, Status> {
        unimplemented("ListSchemaBundles")
    }

    async fn delete_schema_bundle(
        &self,
        _request: Request<admin::DeleteSchemaBundleRequest>,
    ) -> Result<Response<Empty>, Status> {
        unimplemented("DeleteSchemaBundle")
    }
}

/// Deletes the rows of `rows`, a batch at a time (as Bigtable's
/// DropRowRange, not one atomic step: rows written meanwhile may stay).
fn drop_rows(store: &crate::store::Store, table: &str, rows: RowSet) -> crate::error::Result<()> {
    let def = store.table(table)?;
    let mut filter = ReadFilter::latest();
    for family in &def.families {
        filter = filter.values_only(family.name.clone(), Vec::<Vec<u8>>::new());
    }
    let mut keys = Vec::with_capacity(DROP_BATCH);
    for row in store.read_rows(table, ReadRequest::rows(rows).filter(filter))? {
        keys.push(row?.key);
        if keys.len() == DROP_BATCH {
            delete(store, table, std::mem::take(&mut keys))?;
        }
    }
    delete(store, table, keys)
}

fn delete(
    store: &crate::store::Store,
    table: &str,
    keys: Vec<Vec<u8>>,
) -> crate::error::Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let rows = keys
        .into_iter()
        .map(|k| RowMutation::new(k, vec![Mutation::DeleteRow]))
        .collect();
    for result in store.mutate_rows(table, rows)? {
        result?;
    }
    Ok(())
}
