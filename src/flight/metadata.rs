//! What the server tells clients about itself: SqlInfo, the XDBC type
//! list, table types and primary keys (a table's row key).

use std::sync::{Arc, LazyLock};

use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    Nullable, Searchable, SqlInfo, SqlNullOrdering, SqlSupportedTransaction, XdbcDataType,
};
use datafusion::arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::{
    schema::{Segment, TableSchema},
    store::Store,
};

/// The one catalog and schema a server shows.
pub(super) const CATALOG: &str = "cellar";
/// See [`CATALOG`].
pub(super) const SCHEMA: &str = "public";

/// Keywords cellar adds to SQL (for clients' syntax highlighting).
const KEYWORDS: &[&str] = &[
    "ROW",
    "KEY",
    "FAMILY",
    "QUALIFIER",
    "QUALIFIERS",
    "DELIMITER",
    "SALT",
    "PROTO",
    "GC",
    "MAXVERSIONS",
    "MAXAGE",
    "AGGREGATE",
];

/// The SqlInfo answers.
pub static SQL_INFO: LazyLock<Result<SqlInfoData, FlightError>> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "cellar");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow IPC format version written (metadata V5).
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.5.0");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    b.append(SqlInfo::FlightSqlServerCancel, true);
    b.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    b.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, false);
    b.append(SqlInfo::SqlDdlTable, true);
    // Unquoted identifiers fold to lower case (SqlCaseSensitivity LOWERCASE).
    b.append(SqlInfo::SqlIdentifierCase, 3i32);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.append(SqlInfo::SqlAllTablesAreSelectable, true);
    b.append(
        SqlInfo::SqlNullOrdering,
        SqlNullOrdering::SqlNullsSortedHigh as i32,
    );
    b.append(SqlInfo::SqlKeywords, KEYWORDS);
    b.append(SqlInfo::SqlSearchStringEscape, "\\");
    b.append(SqlInfo::SqlSupportsColumnAliasing, true);
    b.append(SqlInfo::SqlNullPlusNullIsNull, true);
    b.build()
});

fn xdbc(
    name: &str,
    data_type: XdbcDataType,
    size: Option<i32>,
    prefix: Option<&str>,
) -> XdbcTypeInfo {
    let quoted = prefix.is_some();
    XdbcTypeInfo {
        type_name: name.into(),
        data_type,
        column_size: size,
        literal_prefix: prefix.map(Into::into),
        literal_suffix: prefix.map(Into::into),
        create_params: None,
        nullable: Nullable::NullabilityNullable,
        case_sensitive: quoted,
        searchable: Searchable::Full,
        unsigned_attribute: (!quoted).then_some(false),
        fixed_prec_scale: false,
        auto_increment: Some(false),
        local_type_name: Some(name.into()),
        minimum_scale: None,
        maximum_scale: None,
        sql_data_type: data_type,
        datetime_subcode: None,
        num_prec_radix: (!quoted).then_some(10),
        interval_precision: None,
    }
}

/// The types a client can use in cellar's DDL and queries.
pub static XDBC_TYPES: LazyLock<Result<XdbcTypeInfoData, FlightError>> = LazyLock::new(|| {
    let mut b = XdbcTypeInfoDataBuilder::new();
    b.append(xdbc("BIGINT", XdbcDataType::XdbcBigint, Some(19), None));
    b.append(xdbc("DOUBLE", XdbcDataType::XdbcDouble, Some(15), None));
    b.append(xdbc("BOOLEAN", XdbcDataType::XdbcBit, Some(1), None));
    b.append(xdbc(
        "TIMESTAMP",
        XdbcDataType::XdbcTimestamp,
        Some(26),
        Some("'"),
    ));
    b.append(xdbc("TEXT", XdbcDataType::XdbcVarchar, None, Some("'")));
    b.append(xdbc("BYTES", XdbcDataType::XdbcVarbinary, None, None));
    b.build()
});

/// The schema of a GetPrimaryKeys answer.
pub fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// A table's primary key: its row-key segments in key order (constant
/// segments are not columns), or `_key` when no segments are declared.
pub fn primary_keys(
    store: &Store,
    catalog: &str,
    schema: &str,
    table: &str,
) -> Result<RecordBatch, crate::error::Error> {
    let def = store.table(table)?;
    let columns: Vec<String> = match TableSchema::of(&def)?.key {
        Some(key) => key
            .segments
            .iter()
            .filter_map(|s| match s {
                Segment::Field { name, .. } => Some(name.clone()),
                Segment::Literal(_) => None,
            })
            .collect(),
        None => vec!["_key".to_string()],
    };
    let n = columns.len();
    let sequence: Vec<i32> = (1..=i32::try_from(n).unwrap_or(i32::MAX)).collect();
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![catalog; n])),
        Arc::new(StringArray::from(vec![schema; n])),
        Arc::new(StringArray::from(vec![table; n])),
        Arc::new(StringArray::from(columns)),
        Arc::new(StringArray::from(vec!["row_key"; n])),
        Arc::new(Int32Array::from(sequence)),
    ];
    RecordBatch::try_new(primary_keys_schema(), arrays)
        .map_err(|e| crate::error::Error::InvalidArgument(e.to_string()))
}
