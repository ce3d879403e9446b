//! Bulk ingest (`CommandStatementIngest`): Arrow batches streamed by a
//! client are written into an existing table, or into a new one whose row
//! key is a named column. Each incoming batch is written as it arrives,
//! so memory holds one batch, through the table's sink as COPY FROM
//! writes (columns by name, key encoding, type checks, errors naming the
//! row).

use arrow_flight::sql::{CommandStatementIngest, TableExistsOption, TableNotExistOption};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{Stream, StreamExt};
use tonic::Status;

use super::metadata::{CATALOG, SCHEMA};
use super::status::status;
use crate::sql::SqlSession;

/// The ingest option naming the row-key column of a table it creates
/// (default: the first column).
pub const ROW_KEY_OPTION: &str = "cellar.row_key";
/// The ingest option naming the family of the other columns (default `cf`).
pub const FAMILY_OPTION: &str = "cellar.family";

/// Runs one ingest; the number of rows written.
pub async fn ingest(
    session: &SqlSession,
    command: CommandStatementIngest,
    batches: impl Stream<Item = Result<RecordBatch, Status>> + Unpin + Send + 'static,
) -> Result<i64, Status> {
    check_target(&command)?;
    session
        .access()
        .require(
            crate::sql::Role::User,
            &format!("ingest into {}", command.table),
        )
        .map_err(|e| status(&DataFusionError::from(e)))?;
    let mut batches = batches.peekable();
    let first_schema: Option<SchemaRef> = match std::pin::Pin::new(&mut batches).peek().await {
        Some(Ok(b)) => Some(b.schema()),
        Some(Err(e)) => return Err(e.clone()),
        None => None,
    };
    let store = session.store();
    let table = command.table.as_str();
    let options = command.table_definition_options.unwrap_or_default();
    let exists = store.table(table).is_ok();
    if exists {
        match TableExistsOption::try_from(options.if_exists).unwrap_or_default() {
            TableExistsOption::Append => {}
            TableExistsOption::Replace => {
                // Everything about the new table is checked before the old
                // one is dropped: bad input must not cost the stored rows.
                let schema = need_schema(first_schema.as_ref(), table)?;
                let create = create_sql(table, schema, &command.options)?;
                crate::sql::parse_cellar_statement(&create).map_err(|e| {
                    Status::invalid_argument(format!("ingest cannot create table {table}: {e}"))
                })?;
                session
                    .query(&format!("DROP TABLE {}", quote(table)))
                    .await
                    .map_err(|e| status(&e))?;
                session.query(&create).await.map_err(|e| status(&e))?;
            }
            TableExistsOption::Fail | TableExistsOption::Unspecified => {
                return Err(Status::already_exists(format!(
                    "table {table} exists; ingest in append or replace mode to write to it"
                )));
            }
        }
    } else {
        match TableNotExistOption::try_from(options.if_not_exist).unwrap_or_default() {
            TableNotExistOption::Create => {
                let schema = need_schema(first_schema.as_ref(), table)?;
                let create = create_sql(table, schema, &command.options)?;
                session.query(&create).await.map_err(|e| status(&e))?;
            }
            TableNotExistOption::Fail | TableNotExistOption::Unspecified => {
                return Err(Status::not_found(format!(
                    "table {table} does not exist; ingest in create mode to make it"
                )));
            }
        }
    }

    let Some(schema) = first_schema else {
        // Nothing to write: the table is only checked to be readable.
        session
            .stored_table_schema(table)
            .map_err(|e| status(&DataFusionError::from(e)))?;
        return Ok(0);
    };
    // Each batch is written as it arrives, through the table's sink: the
    // columns matched by name, one bulk write per batch.
    let data = batches.map(|b| b.map_err(|s| DataFusionError::External(Box::new(s))));
    let stream = RecordBatchStreamAdapter::new(schema, data);
    let written = session
        .write_stream(table, Box::pin(stream), "the ingested batches")
        .await
        .map_err(|e| status(&e).map_message(|m| format!("ingest into {table}: {m}")))?;
    Ok(i64::try_from(written).unwrap_or(i64::MAX))
}

fn check_target(command: &CommandStatementIngest) -> Result<(), Status> {
    if command.table.is_empty() {
        return Err(Status::invalid_argument("ingest names no table"));
    }
    if let Some(c) = command.catalog.as_deref().filter(|c| *c != CATALOG) {
        return Err(Status::not_found(format!(
            "catalog {c:?} does not exist (the only one is {:?})",
            CATALOG
        )));
    }
    if let Some(s) = command.schema.as_deref().filter(|s| *s != SCHEMA) {
        return Err(Status::not_found(format!(
            "schema {s:?} does not exist (the only one is {:?})",
            SCHEMA
        )));
    }
    if command.temporary {
        return Err(Status::unimplemented(
            "temporary tables are not supported; ingest into a table",
        ));
    }
    if command.transaction_id.is_some() {
        return Err(Status::unimplemented("transactions are not supported"));
    }
    Ok(())
}

fn need_schema<'a>(schema: Option<&'a SchemaRef>, table: &str) -> Result<&'a Schema, Status> {
    schema.map(AsRef::as_ref).ok_or_else(|| {
        Status::invalid_argument(format!(
            "ingest into new table {table} sent no data to take its columns from"
        ))
    })
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The CREATE TABLE for batches of `schema`: the row key is one column
/// (text, or a zero-padded integer so keys sort numerically), every other
/// column a qualifier of one family.
fn create_sql(
    table: &str,
    schema: &Schema,
    options: &std::collections::HashMap<String, String>,
) -> Result<String, Status> {
    let key_name = match options
        .get(ROW_KEY_OPTION)
        .or_else(|| options.get("row_key"))
    {
        Some(k) => k.clone(),
        None => schema
            .fields()
            .first()
            .map(|f| f.name().clone())
            .ok_or_else(|| Status::invalid_argument("ingested batches have no columns"))?,
    };
    let family = options
        .get(FAMILY_OPTION)
        .cloned()
        .unwrap_or_else(|| "cf".to_string());
    let key = schema.field_with_name(&key_name).map_err(|_| {
        Status::invalid_argument(format!(
            "row key column {key_name:?} is not among the ingested columns ({})",
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let key_type = match key.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT",
        t if t.is_integer() && key_name != "_key" => "INT(19)",
        other => {
            return Err(Status::invalid_argument(format!(
                "row key column {key_name:?} has type {other}; a row key is text{}",
                if key_name == "_key" {
                    " (name an integer key column otherwise: it becomes a zero-padded INT segment)"
                } else {
                    " or an integer"
                }
            )));
        }
    };
    // `_key` is the name cellar gives the row key itself (SELECT *, COPY
    // TO): such batches load back as the plain row key, no key schema.
    let mut sql = if key_name == "_key" {
        format!("CREATE TABLE {} (FAMILY {}", quote(table), quote(&family))
    } else {
        format!(
            "CREATE TABLE {} (ROW KEY ({} {key_type}), FAMILY {}",
            quote(table),
            quote(&key_name),
            quote(&family)
        )
    };
    for field in schema.fields().iter().filter(|f| f.name() != &key_name) {
        let t = value_type(field.data_type()).ok_or_else(|| {
            Status::invalid_argument(format!(
                "column {:?} has type {}; cellar columns are BIGINT, DOUBLE, TEXT or BYTES",
                field.name(),
                field.data_type()
            ))
        })?;
        sql.push_str(&format!(
            ", {} {t} IN {}",
            quote(field.name()),
            quote(&family)
        ));
    }
    sql.push(')');
    Ok(sql)
}

fn value_type(t: &DataType) -> Option<&'static str> {
    Some(match t {
        t if t.is_integer() => "BIGINT",
        DataType::Float16 | DataType::Float32 | DataType::Float64 => "DOUBLE",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTES",
        _ => return None,
    })
}

trait MapMessage {
    fn map_message(self, f: impl FnOnce(&str) -> String) -> Status;
}

impl MapMessage for Status {
    fn map_message(self, f: impl FnOnce(&str) -> String) -> Status {
        Status::new(self.code(), f(self.message()))
    }
}
