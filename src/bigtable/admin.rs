//! Tables, families and GC policies through Bigtable's table admin API.

use std::collections::HashMap;

use super::{BigtableStore, admin_api, remote};
use crate::error::{Error, Result};
use crate::store::{FamilyDef, FamilyFormat, FamilyKind, GcPolicy, TableDef};
use admin_api::modify_column_families_request::{Modification, modification::Mod};
use admin_api::r#type::{
    self as ty,
    aggregate::{self as agg, Aggregator},
};
use admin_api::{ColumnFamily, GcRule, gc_rule};

/// Bigtable's rule for a cellar GC policy (`None`: keep everything).
pub(crate) fn gc_rule(policy: &GcPolicy) -> Option<GcRule> {
    let rule = match policy {
        GcPolicy::KeepAll => return None,
        GcPolicy::MaxVersions(n) => {
            gc_rule::Rule::MaxNumVersions(i32::try_from(*n).unwrap_or(i32::MAX))
        }
        GcPolicy::MaxAge(micros) => gc_rule::Rule::MaxAge(prost_types::Duration {
            seconds: micros.div_euclid(1_000_000),
            nanos: i32::try_from(micros.rem_euclid(1_000_000) * 1000).unwrap_or(0),
        }),
        // A member that keeps everything adds nothing to a union and makes
        // an intersection keep everything.
        GcPolicy::Union(rules) => {
            let rules: Vec<GcRule> = rules.iter().filter_map(gc_rule).collect();
            if rules.is_empty() {
                return None;
            }
            gc_rule::Rule::Union(gc_rule::Union { rules })
        }
        GcPolicy::Intersection(rules) => gc_rule::Rule::Intersection(gc_rule::Intersection {
            rules: rules.iter().map(gc_rule).collect::<Option<_>>()?,
        }),
    };
    Some(GcRule { rule: Some(rule) })
}

fn int64() -> Option<Box<admin_api::Type>> {
    Some(Box::new(admin_api::Type {
        kind: Some(ty::Kind::Int64Type(ty::Int64::default())),
    }))
}

/// Bigtable's value type for a family of this kind (`None`: bytes).
pub(crate) fn value_type(kind: FamilyKind) -> Option<admin_api::Type> {
    let aggregator = match kind {
        FamilyKind::Normal => return None,
        FamilyKind::Sum => Aggregator::Sum(agg::Sum {}),
        FamilyKind::Min => Aggregator::Min(agg::Min {}),
        FamilyKind::Max => Aggregator::Max(agg::Max {}),
        FamilyKind::HyperLogLog => {
            Aggregator::HllppUniqueCount(agg::HyperLogLogPlusPlusUniqueCount {})
        }
    };
    let input = if kind == FamilyKind::HyperLogLog {
        Some(Box::new(admin_api::Type {
            kind: Some(ty::Kind::BytesType(ty::Bytes::default())),
        }))
    } else {
        int64()
    };
    Some(admin_api::Type {
        kind: Some(ty::Kind::AggregateType(Box::new(ty::Aggregate {
            input_type: input,
            state_type: if kind == FamilyKind::HyperLogLog {
                None
            } else {
                int64()
            },
            aggregator: Some(aggregator),
        }))),
    })
}

/// Bigtable's family for one of cellar's. An HLL family is plain bytes
/// there: it holds cellar's sketches, which cellar merges itself
/// (`hll.rs`), as Bigtable's own HLL families keep a format of their own.
fn family(f: &FamilyDef) -> ColumnFamily {
    ColumnFamily {
        gc_rule: gc_rule(&f.gc),
        value_type: match f.kind {
            FamilyKind::HyperLogLog => None,
            kind => value_type(kind),
        },
    }
}

/// The error for a PACKED family on Bigtable.
pub(crate) fn no_packed(table: &str, family: &str) -> Error {
    Error::InvalidArgument(format!(
        "family {family} of table {table}: FORMAT PACKED is a format of the embedded store; \
         Bigtable lays out cells itself, so families there are FORMAT CELLS"
    ))
}

/// Refuses what Bigtable tables cannot be: PACKED families (Sum, Min and
/// Max families are Bigtable's aggregate families of int64, HLL families
/// families of cellar's sketches).
pub(crate) fn check_supported<'a>(
    table: &str,
    families: impl IntoIterator<Item = (&'a String, FamilyFormat)>,
) -> Result<()> {
    for (name, format) in families {
        if format == FamilyFormat::Packed {
            return Err(no_packed(table, name));
        }
    }
    Ok(())
}

/// Whether the instance has Bigtable table `id`.
pub(crate) fn table_exists(store: &BigtableStore, id: &str) -> Result<bool> {
    let mut admin = store.admin.clone();
    let name = store.bigtable_path(id);
    let call = format!("GetTable {id}");
    store.run(async move {
        let request = admin_api::GetTableRequest {
            name,
            view: admin_api::table::View::NameOnly as i32,
        };
        match admin.get_table(request).await {
            Ok(_) => Ok(true),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(false),
            Err(status) => Err(remote(call, &status)),
        }
    })
}

/// Creates the Bigtable table of a definition, as Bigtable table `id`.
pub(crate) fn create_table(store: &BigtableStore, def: &TableDef, id: &str) -> Result<()> {
    let mut admin = store.admin.clone();
    let column_families: HashMap<String, ColumnFamily> = def
        .families
        .iter()
        .map(|f| (f.name.clone(), family(f)))
        .collect();
    let request = admin_api::CreateTableRequest {
        parent: store.instance.clone(),
        table_id: id.to_string(),
        table: Some(admin_api::Table {
            column_families,
            ..Default::default()
        }),
        initial_splits: Vec::new(),
    };
    let call = format!("CreateTable {}", def.name);
    store.run(async move {
        admin
            .create_table(request)
            .await
            .map(drop)
            .map_err(|s| remote(call, &s))
    })
}

/// Brings the table's families from `old` to `new`: created, updated
/// (GC policy) or dropped.
pub(crate) fn modify_families(store: &BigtableStore, old: &TableDef, new: &TableDef) -> Result<()> {
    let mut modifications = Vec::new();
    for f in &new.families {
        match old.families.iter().find(|o| o.name == f.name) {
            None => modifications.push(Modification {
                id: f.name.clone(),
                update_mask: None,
                r#mod: Some(Mod::Create(family(f))),
            }),
            Some(o) if o.gc != f.gc => modifications.push(Modification {
                id: f.name.clone(),
                update_mask: None,
                r#mod: Some(Mod::Update(ColumnFamily {
                    gc_rule: gc_rule(&f.gc),
                    // A family's type is set when it is made.
                    value_type: None,
                })),
            }),
            Some(_) => {}
        }
    }
    for o in &old.families {
        if !new.families.iter().any(|f| f.name == o.name) {
            modifications.push(Modification {
                id: o.name.clone(),
                update_mask: None,
                r#mod: Some(Mod::Drop(true)),
            });
        }
    }
    if modifications.is_empty() {
        return Ok(());
    }
    let mut admin = store.admin.clone();
    let request = admin_api::ModifyColumnFamiliesRequest {
        name: store.table_path(&new.name),
        modifications,
        ignore_warnings: false,
    };
    let call = format!("ModifyColumnFamilies {}", new.name);
    store.run(async move {
        admin
            .modify_column_families(request)
            .await
            .map(drop)
            .map_err(|s| remote(call, &s))
    })
}

/// Deletes Bigtable table `id` (gone already is fine).
pub(crate) fn delete_table(store: &BigtableStore, id: &str) -> Result<()> {
    let mut admin = store.admin.clone();
    let name = store.bigtable_path(id);
    let call = format!("DeleteTable {id}");
    store.run(async move {
        match admin
            .delete_table(admin_api::DeleteTableRequest { name })
            .await
        {
            Ok(_) => Ok(()),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            Err(status) => Err(remote(call, &status)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_policies_map_to_bigtable_rules() {
        assert_eq!(gc_rule(&GcPolicy::KeepAll), None);
        let keep = GcPolicy::Intersection(vec![GcPolicy::KeepAll, GcPolicy::MaxVersions(1)]);
        assert_eq!(gc_rule(&keep), None);
        let one = gc_rule(&GcPolicy::Union(vec![
            GcPolicy::KeepAll,
            GcPolicy::MaxVersions(1),
        ]));
        let Some(gc_rule::Rule::Union(union)) = one.and_then(|r| r.rule) else {
            panic!("not a union");
        };
        assert_eq!(union.rules.len(), 1);
        let rule = gc_rule(&GcPolicy::Union(vec![
            GcPolicy::MaxVersions(3),
            GcPolicy::MaxAge(90_500_000),
        ]))
        .and_then(|r| r.rule);
        let Some(gc_rule::Rule::Union(union)) = rule else {
            panic!("not a union: {rule:?}");
        };
        assert_eq!(union.rules[0].rule, Some(gc_rule::Rule::MaxNumVersions(3)));
        assert_eq!(
            union.rules[1].rule,
            Some(gc_rule::Rule::MaxAge(prost_types::Duration {
                seconds: 90,
                nanos: 500_000_000
            }))
        );
    }
}
