//! What the faces (the Flight server) ask of stored tables through the
//! session rather than past it: batches from outside written into a
//! table, and a table's columns as SQL reads them.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::error::Result as DfResult;
use datafusion::physical_plan::SendableRecordBatchStream;

use super::SqlSession;
use crate::error::Result;
use crate::query::{CellarTable, WriteOptions};

impl SqlSession {
    /// Writes `data` into stored table `table` through the table's sink,
    /// its columns matched to the table's by name (`source` names the
    /// batches in errors); the rows written.
    pub async fn write_stream(
        &self,
        table: &str,
        data: SendableRecordBatchStream,
        source: &str,
    ) -> DfResult<u64> {
        let target = CellarTable::new(self.store().clone(), table)?;
        let options = WriteOptions {
            by_name: Some(source.into()),
            ..WriteOptions::default()
        };
        target.load(data, &options).await
    }

    /// The columns of stored table `table` as SQL reads it (its wide
    /// view, or a series' events).
    pub fn stored_table_schema(&self, table: &str) -> Result<SchemaRef> {
        Ok(CellarTable::new(self.store().clone(), table)?.schema())
    }
}
