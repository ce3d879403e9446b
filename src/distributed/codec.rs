//! Ballista's extension codecs for cellar: a `CellarTable` travels from
//! the client to the scheduler as (store address, table definition,
//! view), and a `KeyScanExec` from the scheduler to the executors as its
//! whole `ScanSpec` (key ranges, projection, pushed filters, time range,
//! the residual predicate as DataFusion's protobuf), so an executor runs
//! exactly the scan the scheduler planned. Anything else goes to
//! Ballista's own codecs.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result as DfResult, TableReference};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan, ScalarUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use serde::{Deserialize, Serialize};

use super::split::{self, SplitScan};
use crate::proto::FieldMask;
use crate::query::{
    CellarTable, GatherExec, GatherParts, GatherPlan, KeyScanExec, Layout, Projection, ScanSpec,
    View,
};
use crate::schema::KeyOrder;
use crate::store::{QualifierFilter, RowRange, Store, TableDef, TimeRange};

/// Marks cellar's own encodings, so that bytes of Ballista's (protobuf,
/// which never starts with these) go to Ballista's codec.
const MAGIC: &[u8] = b"CELLAR1\0";
/// Marks a column-per-event series' gather (`GatherWire`).
const GATHER_MAGIC: &[u8] = b"CELLAR1G";

/// The stores a process has open, by address: the session's own (so
/// in-process executors share its handle, and an embedded store its
/// lock), and those opened for plans that name another.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stores(Arc<Mutex<HashMap<String, Store>>>);

impl Stores {
    /// Knows `store` by its address.
    pub(crate) fn with(store: &Store) -> Stores {
        let stores = Stores::default();
        stores.lock().insert(store.address(), store.clone());
        stores
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Store>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store at `address`, opened on first use.
    fn get(&self, address: &str) -> DfResult<Store> {
        if let Some(store) = self.lock().get(address) {
            return Ok(store.clone());
        }
        let store = Store::open_address(address).map_err(|e| {
            DataFusionError::Execution(format!(
                "a distributed plan reads the store at {address}, which this process cannot \
                 open: {e}"
            ))
        })?;
        Ok(self
            .lock()
            .entry(address.to_string())
            .or_insert(store)
            .clone())
    }
}

fn wire_error(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("cellar's distributed {what} does not decode: {e}"))
}

/// A table as it travels to the scheduler.
#[derive(Serialize, Deserialize)]
struct TableWire {
    address: String,
    def: TableDef,
    view: View,
}

impl TableWire {
    /// `layout` on `store`, as `layout_of` builds it again. A series'
    /// events are the table's default view: their layout's own `view` is
    /// the physical one it reads (versions for cells per event), which
    /// would rebuild as that view instead of the series.
    fn of(store: &Store, layout: &Layout) -> TableWire {
        let view = match layout.series {
            Some(_) => View::Wide { as_of: None },
            None => layout.view.clone(),
        };
        TableWire {
            address: store.address(),
            def: layout.def.clone(),
            view,
        }
    }
}

/// Rebuilds a table's layout as it was planned, pinned (for a series)
/// to the same table.
fn layout_of(store: &Store, def: TableDef, view: View) -> DfResult<Layout> {
    let id = def.id;
    let name = def.name.clone();
    let mut layout = Layout::new(store, def, view)?;
    if layout.series.is_some() {
        let pinned = store.pin(&name)?;
        if pinned.def().id != id {
            return Err(DataFusionError::Execution(format!(
                "table {name} was replaced after this query was planned; run it again"
            )));
        }
        layout.pinned = Some(pinned);
    }
    Ok(layout)
}

/// Which qualifiers a scan reads, on the wire (a regex by its pattern).
#[derive(Serialize, Deserialize)]
enum QualifiersWire {
    All,
    Set(BTreeSet<Vec<u8>>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
    Regex(String),
}

impl QualifiersWire {
    fn of(filter: &QualifierFilter) -> Self {
        match filter {
            QualifierFilter::All => QualifiersWire::All,
            QualifierFilter::Set(set) => QualifiersWire::Set(set.clone()),
            QualifierFilter::Range(a, b) => QualifiersWire::Range(a.clone(), b.clone()),
            QualifierFilter::Regex(re) => QualifiersWire::Regex(re.as_str().to_string()),
        }
    }

    fn filter(self) -> DfResult<QualifierFilter> {
        Ok(match self {
            QualifiersWire::All => QualifierFilter::All,
            QualifiersWire::Set(set) => QualifierFilter::Set(set),
            QualifiersWire::Range(a, b) => QualifierFilter::Range(a, b),
            QualifiersWire::Regex(anchored) => QualifierFilter::Regex(
                regex::bytes::RegexBuilder::new(&anchored)
                    .unicode(false)
                    .build()
                    .map_err(|e| wire_error("scan", e))?,
            ),
        })
    }
}

/// A column-per-event series' gather as it travels to an executor.
#[derive(Serialize, Deserialize)]
struct GatherWire {
    table: TableWire,
    time: TimeRange,
    columns: Vec<usize>,
    partitions: Vec<Vec<RowRange>>,
    reverse: bool,
    one_series: bool,
    fetch: Option<usize>,
    batch_size: usize,
}

/// A scan as it travels to an executor: `ScanSpec` field by field.
#[derive(Serialize, Deserialize)]
struct ScanWire {
    table: TableWire,
    projection: Vec<usize>,
    needed: Vec<bool>,
    families: Vec<String>,
    ranges: Option<Vec<RowRange>>,
    pushed: Vec<String>,
    time: TimeRange,
    time_used: Vec<String>,
    cells_per_column: Option<usize>,
    qualifiers: QualifiersWire,
    qualifiers_used: Option<String>,
    proto_masks: HashMap<usize, FieldMask>,
    map_keys: HashMap<usize, BTreeSet<String>>,
    splits: Option<Vec<RowRange>>,
    /// The ranges of each partition this plan runs: all the scan's, or
    /// those of the tasks Ballista gave it.
    partitions: Vec<Vec<RowRange>>,
    /// DataFusion's protobuf of the predicate re-checked per row.
    residual: Option<Vec<u8>>,
    residual_text: Vec<String>,
    residual_in_time: bool,
    drop_misfits: bool,
    limit: Option<usize>,
    reverse: bool,
    order: Option<KeyOrder>,
    by_group: bool,
    batch_size: usize,
    target_partitions: usize,
}

fn encode_json(value: &impl Serialize, buf: &mut Vec<u8>) -> DfResult<()> {
    buf.extend_from_slice(MAGIC);
    serde_json::to_writer(buf, value).map_err(|e| wire_error("plan", e))
}

/// cellar's checked arithmetic is not registered by name (and its `sum`
/// shares DataFusion's name): marked on the wire, found by the mark.
macro_rules! checked_functions {
    () => {
        fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
            match crate::query::checked_udf(node.name()) {
                Some(_) => {
                    buf.extend_from_slice(MAGIC);
                    Ok(())
                }
                None => self.inner.try_encode_udf(node, buf),
            }
        }

        fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
            match crate::query::checked_udf(name) {
                Some(udf) if buf == MAGIC => Ok(udf),
                _ => self.inner.try_decode_udf(name, buf),
            }
        }

        fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> DfResult<()> {
            match crate::query::checked_sum_wire(node) {
                Some(mark) => {
                    buf.extend_from_slice(MAGIC);
                    buf.extend_from_slice(mark);
                    Ok(())
                }
                None => self.inner.try_encode_udaf(node, buf),
            }
        }

        fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<AggregateUDF>> {
            match buf
                .strip_prefix(MAGIC)
                .and_then(crate::query::checked_sum_from_wire)
            {
                Some(udaf) => Ok(udaf),
                None => self.inner.try_decode_udaf(name, buf),
            }
        }
    };
}

/// The logical codec: cellar tables, then Ballista's own.
#[derive(Debug)]
pub(crate) struct CellarLogicalCodec {
    stores: Stores,
    inner: BallistaLogicalExtensionCodec,
}

impl CellarLogicalCodec {
    pub(crate) fn new(stores: Stores) -> Self {
        CellarLogicalCodec {
            stores,
            inner: BallistaLogicalExtensionCodec::default(),
        }
    }
}

impl LogicalExtensionCodec for CellarLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> DfResult<Extension> {
        self.inner.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> DfResult<()> {
        self.inner.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn TableProvider>> {
        let Some(json) = buf.strip_prefix(MAGIC) else {
            return self
                .inner
                .try_decode_table_provider(buf, table_ref, schema, ctx);
        };
        let wire: TableWire = serde_json::from_slice(json).map_err(|e| wire_error("table", e))?;
        let store = self.stores.get(&wire.address)?;
        let layout = layout_of(&store, wire.def, wire.view)?;
        Ok(Arc::new(CellarTable::from_layout(store, layout)))
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> DfResult<()> {
        let Some(table) = node.downcast_ref::<CellarTable>() else {
            return self.inner.try_encode_table_provider(table_ref, node, buf);
        };
        encode_json(&TableWire::of(table.store(), table.layout()), buf)
    }

    checked_functions!();
}

/// The physical codec: cellar's key scans, then Ballista's own.
#[derive(Debug)]
pub(crate) struct CellarPhysicalCodec {
    stores: Stores,
    inner: BallistaPhysicalExtensionCodec,
}

impl CellarPhysicalCodec {
    pub(crate) fn new(stores: Stores) -> Self {
        CellarPhysicalCodec {
            stores,
            inner: BallistaPhysicalExtensionCodec::default(),
        }
    }

    fn encode_scan(
        &self,
        spec: &ScanSpec,
        partitions: Vec<Vec<RowRange>>,
        buf: &mut Vec<u8>,
    ) -> DfResult<()> {
        let residual = spec
            .residual
            .as_ref()
            .map(|e| {
                datafusion_proto::physical_plan::to_proto::serialize_physical_expr(e, self)
                    .map(|node| node.encode_to_vec())
            })
            .transpose()?;
        let wire = ScanWire {
            table: TableWire::of(&spec.store, &spec.layout),
            projection: spec.projection.columns().to_vec(),
            needed: spec.needed.clone(),
            families: spec.families.clone(),
            ranges: spec.ranges.clone(),
            pushed: spec.pushed.clone(),
            time: spec.time,
            time_used: spec.time_used.clone(),
            cells_per_column: spec.cells_per_column,
            qualifiers: QualifiersWire::of(&spec.qualifiers),
            qualifiers_used: spec.qualifiers_used.clone(),
            proto_masks: spec.proto_masks.clone(),
            map_keys: spec.map_keys.clone(),
            splits: spec.splits.clone(),
            partitions,
            residual,
            residual_text: spec.residual_text.clone(),
            residual_in_time: spec.residual_in_time,
            drop_misfits: spec.drop_misfits,
            limit: spec.limit,
            reverse: spec.reverse,
            order: spec.order.clone(),
            by_group: spec.by_group,
            batch_size: spec.batch_size,
            target_partitions: spec.target_partitions,
        };
        encode_json(&wire, buf)
    }

    fn encode_gather(&self, gather: &GatherExec, buf: &mut Vec<u8>) -> DfResult<()> {
        let parts = gather.parts();
        let wire = GatherWire {
            table: TableWire::of(&parts.plan.store, &parts.plan.layout),
            time: parts.plan.time,
            columns: parts.plan.columns.clone(),
            partitions: parts.partitions,
            reverse: parts.reverse,
            one_series: parts.one_series,
            fetch: parts.fetch,
            batch_size: parts.batch_size,
        };
        buf.extend_from_slice(GATHER_MAGIC);
        serde_json::to_writer(buf, &wire).map_err(|e| wire_error("gather", e))
    }

    fn decode_gather(&self, json: &[u8]) -> DfResult<GatherExec> {
        let w: GatherWire = serde_json::from_slice(json).map_err(|e| wire_error("gather", e))?;
        let store = self.stores.get(&w.table.address)?;
        let layout = Arc::new(layout_of(&store, w.table.def, w.table.view)?);
        // A gather reads a column-per-event series, whose table has a
        // row-key schema: anything else on the wire is refused here, not
        // met by the reader.
        let gathers =
            layout.key.is_some() && layout.series.as_ref().is_some_and(|s| s.column_per_event());
        if !gathers {
            return Err(wire_error(
                "gather",
                format!("table {} is not a column-per-event series", layout.table),
            ));
        }
        let schema = Arc::new(layout.arrow.project(&w.columns)?);
        let plan = Arc::new(GatherPlan::new(store, layout, w.time, w.columns, schema)?);
        Ok(GatherExec::from_parts(GatherParts {
            plan,
            partitions: w.partitions,
            reverse: w.reverse,
            one_series: w.one_series,
            fetch: w.fetch,
            batch_size: w.batch_size,
        }))
    }

    fn decode_scan(&self, json: &[u8], ctx: &TaskContext) -> DfResult<KeyScanExec> {
        let w: ScanWire = serde_json::from_slice(json).map_err(|e| wire_error("scan", e))?;
        let store = self.stores.get(&w.table.address)?;
        let layout = Arc::new(layout_of(&store, w.table.def, w.table.view)?);
        let residual = w
            .residual
            .map(|bytes| {
                let node = datafusion_proto::protobuf::PhysicalExprNode::decode(bytes.as_slice())
                    .map_err(|e| wire_error("scan predicate", e))?;
                datafusion_proto::physical_plan::from_proto::parse_physical_expr(
                    &node,
                    ctx,
                    &layout.arrow,
                    self,
                )
            })
            .transpose()?;
        let projection = Projection::new(&layout, w.projection)
            .map_err(|e| wire_error("a scan's columns", e))?;
        let spec = ScanSpec {
            store,
            layout,
            projection,
            needed: w.needed,
            families: w.families,
            ranges: w.ranges,
            pushed: w.pushed,
            time: w.time,
            time_used: w.time_used,
            cells_per_column: w.cells_per_column,
            qualifiers: w.qualifiers.filter()?,
            qualifiers_used: w.qualifiers_used,
            proto_masks: w.proto_masks,
            map_keys: w.map_keys,
            splits: w.splits,
            few_rows: None,
            residual,
            residual_text: w.residual_text,
            residual_in_time: w.residual_in_time,
            drop_misfits: w.drop_misfits,
            limit: w.limit,
            reverse: w.reverse,
            order: w.order,
            by_group: w.by_group,
            batch_size: w.batch_size,
            target_partitions: w.target_partitions,
        };
        Ok(KeyScanExec::from_parts(spec, w.partitions))
    }
}

impl PhysicalExtensionCodec for CellarPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(json) = buf.strip_prefix(GATHER_MAGIC) {
            return Ok(Arc::new(self.decode_gather(json)?));
        }
        match buf.strip_prefix(MAGIC) {
            Some(json) => Ok(Arc::new(self.decode_scan(json, ctx)?)),
            None => self.inner.try_decode(buf, inputs, ctx, proto_converter),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        if let Some(scan) = node.downcast_ref::<KeyScanExec>() {
            return self.encode_scan(scan.spec(), scan.partition_ranges().to_vec(), buf);
        }
        if let Some(gather) = node.downcast_ref::<GatherExec>() {
            return self.encode_gather(gather, buf);
        }
        // A split scan, with the partitions of the task it was given to.
        if let Some(files) = node
            .downcast_ref::<DataSourceExec>()
            .and_then(|e| e.data_source().downcast_ref::<FileScanConfig>())
            && let Some(scan) = files.file_source().downcast_ref::<SplitScan>()
        {
            return self.encode_scan(scan.spec(), split::partitions(files)?, buf);
        }
        self.inner.try_encode(node, buf, proto_converter)
    }

    checked_functions!();
}
