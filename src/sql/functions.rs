//! Scalar functions cellar adds: `reverse_domain('www.example.com')` is
//! `com.example.www`, so that one site's rows sort together (the guides'
//! reversed domain names) and a domain is one key prefix;
//! `hll_count(sketch)` reads the estimate of a HyperLogLog family's cell;
//! `to_json(value)` writes any value as JSON text (a family map as an
//! object), which is how COPY TO writes maps into CSV.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::json::writer::{EncoderOptions, make_encoder};
use datafusion::common::Result as DfResult;
use datafusion::common::cast::as_string_array;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, create_udf,
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

#[cfg(test)]
mod tests {
    use super::reverse_domain;

    #[test]
    fn reverses_labels() {
        assert_eq!(reverse_domain("www.google.com"), "com.google.www");
        assert_eq!(reverse_domain("localhost"), "localhost");
        assert_eq!(reverse_domain(""), "");
        assert_eq!(reverse_domain("a..b"), "b..a");
    }
}
