//! Scalar functions cellar adds: `reverse_domain('www.example.com')` is
//! `com.example.www`, so that one site's rows sort together (the guides'
//! reversed domain names) and a domain is one key prefix;
//! `hll_count(sketch)` reads the estimate of a HyperLogLog family's cell;
//! `to_json(value)` writes any value as JSON text (a family map as an
//! object), which is how COPY TO writes maps into CSV. `substr` is
//! DataFusion's, faster over ASCII text (see [`substr_udf`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, StringBuilder};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::json::writer::{EncoderOptions, make_encoder};
use datafusion::common::Result as DfResult;
use datafusion::common::cast::{as_int64_array, as_string_array};
use datafusion::functions::unicode::substr::{SubstrFunc, get_true_start_end};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, create_udf,
};

/// The labels of a dotted name in reverse order.
pub fn reverse_domain(name: &str) -> String {
    name.rsplit('.').collect::<Vec<_>>().join(".")
}

/// `reverse_domain(text) -> text`.
pub fn reverse_domain_udf() -> ScalarUDF {
    create_udf(
        "reverse_domain",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let input = as_string_array(&arrays[0])?;
            let out: StringArray = input.iter().map(|v| v.map(reverse_domain)).collect();
            let out: ArrayRef = Arc::new(out);
            Ok(ColumnarValue::Array(out))
        }),
    )
}

/// `hll_count(bytes) -> bigint`: the distinct count a HyperLogLog sketch
/// holds; a value that is not a sketch is an error naming it.
pub fn hll_count_udf() -> ScalarUDF {
    create_udf(
        "hll_count",
        vec![DataType::Binary],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let input = datafusion::common::cast::as_binary_array(&arrays[0])?;
            let mut out = Vec::with_capacity(input.len());
            for v in input.iter() {
                out.push(match v {
                    None => None,
                    Some(sketch) => {
                        let n = crate::store::hll_estimate(sketch).map_err(|e| {
                            datafusion::error::DataFusionError::Execution(format!("hll_count: {e}"))
                        })?;
                        Some(i64::try_from(n).unwrap_or(i64::MAX))
                    }
                });
            }
            let out: ArrayRef = Arc::new(datafusion::arrow::array::Int64Array::from(out));
            Ok(ColumnarValue::Array(out))
        }),
    )
}

/// `to_json(any) -> text`: the value as JSON, as the JSON writer writes
/// it (maps and structs as objects, lists as arrays, binary as hex); NULL
/// stays NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToJson {
    signature: Signature,
}

/// `to_json` as a function to register.
pub fn to_json_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ToJson {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

impl ScalarUDFImpl for ToJson {
    fn name(&self) -> &str {
        "to_json"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let array = &arrays[0];
        let options = EncoderOptions::default();
        let mut encoder = make_encoder(&args.arg_fields[0], array.as_ref(), &options)?;
        let mut text = Vec::new();
        let mut out = StringBuilder::with_capacity(array.len(), array.len() * 16);
        for i in 0..array.len() {
            if encoder.is_null(i) {
                out.append_null();
                continue;
            }
            text.clear();
            encoder.encode(i, &mut text);
            out.append_value(String::from_utf8_lossy(&text));
        }
        let out: ArrayRef = Arc::new(out.finish());
        Ok(ColumnarValue::Array(out))
    }
}

/// `substr(text, start [, length])` (and `substring`): DataFusion's
/// function, answers and errors alike, with one change in speed only.
/// DataFusion 55 counts the characters of every value when the first
/// rows ask for a short prefix (start + length ≤ 32 on average) instead of
/// checking whether the array is all ASCII, where a character is a byte;
/// `substr(_key, 1, length(_key) - 2)` over row keys spent a sixth of a
/// query there. This checks the array (a scan of its bytes) and, when it
/// is ASCII, cuts by bytes; any other input goes to DataFusion's own.
pub fn substr_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Substr {
        inner: SubstrFunc::new(),
    })
}

/// Plans `SUBSTR(...)` and `SUBSTRING(... FROM ... FOR ...)`, which the
/// SQL parser reads as syntax of their own, as [`substr_udf`] (ahead of
/// DataFusion's planner of them, which names its function directly).
#[derive(Debug)]
pub struct SubstrPlanner;

impl ExprPlanner for SubstrPlanner {
    fn plan_substring(&self, args: Vec<Expr>) -> DfResult<PlannerResult<Vec<Expr>>> {
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(Arc::new(substr_udf()), args),
        )))
    }
}

/// See [`substr_udf`].
#[derive(Debug, PartialEq, Eq, Hash)]
struct Substr {
    inner: SubstrFunc,
}

impl ScalarUDFImpl for Substr {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(args)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        match ascii_substr(&args.args, args.number_rows)? {
            Some(out) => Ok(ColumnarValue::Array(out)),
            None => self.inner.invoke_with_args(args),
        }
    }
}

/// `substr` of an ASCII `Utf8` array by byte offsets (what DataFusion's
/// `get_true_start_end` gives for ASCII input); `None` for any other
/// input.
fn ascii_substr(args: &[ColumnarValue], rows: usize) -> DfResult<Option<ArrayRef>> {
    let [ColumnarValue::Array(text), start, rest @ ..] = args else {
        return Ok(None);
    };
    let Some(text) = text.as_string_opt::<i32>() else {
        return Ok(None);
    };
    if !text.is_ascii() {
        return Ok(None);
    }
    let start = start.to_array(rows)?;
    let start = as_int64_array(&start)?;
    let length = rest.first().map(|l| l.to_array(rows)).transpose()?;
    let length = length.as_deref().map(as_int64_array).transpose()?;
    let nulls =
        NullBuffer::union_many([text.nulls(), start.nulls(), length.and_then(|l| l.nulls())]);
    let mut out = StringBuilder::with_capacity(text.len(), text.value_data().len());
    for i in 0..text.len() {
        if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            out.append_null();
            continue;
        }
        let value = text.value(i);
        let count = length.map(|l| l.value(i));
        let (from, to) = get_true_start_end(value, start.value(i), count, true)?;
        out.append_value(&value[from..to]);
    }
    Ok(Some(Arc::new(out.finish())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::Field;
    use datafusion::common::ScalarValue;
    use datafusion::config::ConfigOptions;
    use proptest::prelude::*;

    /// `udf` over `args` as a plan calls it (rows, fields, types).
    fn call(udf: &dyn ScalarUDFImpl, args: Vec<ColumnarValue>, rows: usize) -> DfResult<ArrayRef> {
        let arg_fields = args
            .iter()
            .map(|a| Arc::new(Field::new("a", a.data_type(), true)))
            .collect();
        let out = udf.invoke_with_args(ScalarFunctionArgs {
            args,
            arg_fields,
            number_rows: rows,
            return_field: Arc::new(Field::new("out", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        })?;
        out.to_array(rows)
    }

    proptest! {
        /// Ours gives what DataFusion's gives, value for value and error
        /// for error, over ASCII and other text, NULLs, scalar and array
        /// positions, negative ones too.
        #[test]
        fn substr_is_datafusions(
            values in prop_oneof![
                prop::collection::vec(prop::option::weighted(0.9, "[a-c#0-9]{0,12}"), 1..20),
                prop::collection::vec(prop::option::weighted(0.9, "[a-cé🌏]{0,6}"), 1..20),
            ],
            starts in prop::collection::vec(prop::option::weighted(0.9, -4i64..16), 20),
            lengths in prop::collection::vec(prop::option::weighted(0.9, -1i64..16), 20),
            scalar_start in any::<bool>(),
            with_length in any::<bool>(),
        ) {
            let rows = values.len();
            let text: ArrayRef = Arc::new(StringArray::from(values));
            let start = match scalar_start {
                true => ColumnarValue::Scalar(ScalarValue::Int64(starts[0])),
                false => ColumnarValue::Array(Arc::new(Int64Array::from(starts[..rows].to_vec()))),
            };
            let mut args = vec![ColumnarValue::Array(text), start];
            if with_length {
                args.push(ColumnarValue::Array(Arc::new(Int64Array::from(lengths[..rows].to_vec()))));
            }
            let ours = call(&Substr { inner: SubstrFunc::new() }, args.clone(), rows);
            let theirs = call(&SubstrFunc::new(), args, rows);
            match (ours, theirs) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a.as_string::<i32>(), b.as_string::<i32>()),
                (Err(_), Err(_)) => {}
                (a, b) => prop_assert!(false, "ours {:?}, DataFusion's {:?}", a, b),
            }
        }
    }

    #[test]
    fn reverses_labels() {
        assert_eq!(reverse_domain("www.google.com"), "com.google.www");
        assert_eq!(reverse_domain("localhost"), "localhost");
        assert_eq!(reverse_domain(""), "");
        assert_eq!(reverse_domain("a..b"), "b..a");
    }
}
