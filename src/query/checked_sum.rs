//! `sum` over BIGINT that fails on overflow instead of wrapping.
//!
//! DataFusion's `sum(BIGINT)` adds with wrapping: two rows of 9e18 sum to
//! a negative number. This `sum` adds in 128 bits (no realistic input
//! overflows them) and checks the total fits the result type when the
//! answer is produced, so a total that returns into range after
//! intermediate overflow is still right, and one that does not is an
//! error naming the total. It is called `sum`, so plans, column names and
//! EXPLAIN read as before; `CheckedArithmetic` puts it in place of
//! DataFusion's for sums of BIGINT and unsigned BIGINT, DISTINCT or not
//! (a DISTINCT sum keeps its distinct values and adds them at the end).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, PrimitiveArray,
};
use datafusion::arrow::datatypes::{
    ArrowPrimitiveType, DECIMAL128_MAX_PRECISION, DataType, Decimal128Type, Field, FieldRef,
    Int64Type, UInt64Type,
};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue, exec_datafusion_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::{AggregateOrderSensitivity, format_state_name};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, ReversedUDAF,
    Signature, Volatility,
};

/// The state: a 128-bit total, NULL while no value was added.
const STATE: DataType = DataType::Decimal128(DECIMAL128_MAX_PRECISION, 0);

/// The checked `sum`.
pub(crate) fn checked_sum() -> Arc<AggregateUDF> {
    static SUM: LazyLock<Arc<AggregateUDF>> = LazyLock::new(|| {
        Arc::new(AggregateUDF::new_from_impl(CheckedSum {
            signature: Signature::uniform(
                1,
                vec![DataType::Int64, DataType::UInt64],
                Volatility::Immutable,
            ),
        }))
    });
    Arc::clone(&SUM)
}

/// Whether `sum` over a value of `input` type is checked by `checked_sum`.
pub(crate) fn is_checked_sum_input(input: &DataType) -> bool {
    matches!(input, DataType::Int64 | DataType::UInt64)
}

/// Whether `func` is this checked `sum`.
pub(crate) fn is_checked_sum(func: &AggregateUDF) -> bool {
    func.inner().downcast_ref::<CheckedSum>().is_some()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedSum {
    signature: Signature,
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(t) if is_checked_sum_input(t) => Ok(t.clone()),
            other => Err(exec_datafusion_err!(
                "the checked sum takes BIGINT or unsigned BIGINT, not {other:?}"
            )),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let output = args.return_type().clone();
        if args.is_distinct {
            return Ok(Box::new(DistinctTotal {
                output,
                values: HashMap::new(),
            }));
        }
        Ok(Box::new(Total::new(output)))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        self.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        if args.is_distinct {
            return Ok(vec![Arc::new(Field::new_list(
                format_state_name(args.name, "sum distinct"),
                Field::new_list_field(STATE, true),
                false,
            ))]);
        }
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "sum"),
            STATE,
            true,
        ))])
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(GroupTotals {
            output: args.return_type().clone(),
            sums: Vec::new(),
            counts: Vec::new(),
        }))
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        AggregateOrderSensitivity::Insensitive
    }

    fn default_value(&self, data_type: &DataType) -> DfResult<ScalarValue> {
        ScalarValue::try_from(data_type)
    }
}

/// Calls `f(row, value)` for each non-NULL value of an input or state
/// array (BIGINT, unsigned BIGINT or the 128-bit state).
fn each_value(array: &ArrayRef, mut f: impl FnMut(usize, i128)) -> DfResult<()> {
    fn each<T: Copy>(
        values: &[T],
        nulls: Option<&datafusion::arrow::buffer::NullBuffer>,
        f: &mut impl FnMut(usize, i128),
        widen: impl Fn(T) -> i128,
    ) {
        match nulls {
            None => values.iter().enumerate().for_each(|(i, v)| f(i, widen(*v))),
            Some(nulls) => nulls.valid_indices().for_each(|i| f(i, widen(values[i]))),
        }
    }
    match array.data_type() {
        DataType::Int64 => {
            let a = array.as_primitive::<Int64Type>();
            each(a.values(), a.nulls(), &mut f, i128::from);
        }
        DataType::UInt64 => {
            let a = array.as_primitive::<UInt64Type>();
            each(a.values(), a.nulls(), &mut f, i128::from);
        }
        DataType::Decimal128(_, _) => {
            let a = array.as_primitive::<Decimal128Type>();
            each(a.values(), a.nulls(), &mut f, |v| v);
        }
        other => {
            return Err(exec_datafusion_err!(
                "the checked sum cannot add values of type {other}"
            ));
        }
    }
    Ok(())
}

fn overflow(total: i128, output: &DataType) -> DataFusionError {
    exec_datafusion_err!(
        "integer overflow: sum = {total} does not fit {output}; sum CAST(... AS DECIMAL(38, 0)) \
         for a wider total"
    )
}

/// The result: the total in the output type, or the overflow as an error.
fn finish(total: i128, output: &DataType) -> DfResult<ScalarValue> {
    match output {
        DataType::UInt64 => u64::try_from(total).map(|v| ScalarValue::UInt64(Some(v))),
        _ => i64::try_from(total).map(|v| ScalarValue::Int64(Some(v))),
    }
    .map_err(|_| overflow(total, output))
}

/// The groups' totals in the output type (NULL for a group without
/// values), or the first that does not fit as an error.
fn fit<T: ArrowPrimitiveType>(
    totals: impl Iterator<Item = (i128, u64)>,
    output: &DataType,
) -> DfResult<PrimitiveArray<T>>
where
    T::Native: TryFrom<i128>,
{
    totals
        .map(|(sum, count)| match T::Native::try_from(sum) {
            _ if count == 0 => Ok(None),
            Ok(v) => Ok(Some(v)),
            Err(_) => Err(overflow(sum, output)),
        })
        .collect()
}

/// Totals as the state's 128-bit decimal array.
fn state_array(totals: impl IntoIterator<Item = Option<i128>>) -> DfResult<ArrayRef> {
    let state = totals
        .into_iter()
        .collect::<Decimal128Array>()
        .with_precision_and_scale(DECIMAL128_MAX_PRECISION, 0)
        .map_err(|e| exec_datafusion_err!("the checked sum's state: {e}"))?;
    Ok(Arc::new(state))
}

fn add(sum: &mut i128, value: i128) -> DfResult<()> {
    *sum = sum
        .checked_add(value)
        .ok_or_else(|| exec_datafusion_err!("integer overflow: a sum exceeded 128 bits"))?;
    Ok(())
}

/// One total (no GROUP BY, and window frames).
#[derive(Debug)]
struct Total {
    output: DataType,
    sum: i128,
    /// Values in the total: NULL when none (a sliding frame retracts).
    count: u64,
}

impl Total {
    fn new(output: DataType) -> Total {
        Total {
            output,
            sum: 0,
            count: 0,
        }
    }

    fn fold(&mut self, array: &ArrayRef, sign: i128) -> DfResult<()> {
        let (mut sum, mut count, mut failed) = (self.sum, self.count, None);
        each_value(array, |_, v| {
            if failed.is_none() {
                failed = add(&mut sum, sign * v).err();
                count = if sign > 0 {
                    count.saturating_add(1)
                } else {
                    count.saturating_sub(1)
                };
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        self.sum = sum;
        self.count = count;
        Ok(())
    }
}

impl Accumulator for Total {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        match values.first() {
            Some(a) => self.fold(a, 1),
            None => Ok(()),
        }
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        match values.first() {
            Some(a) => self.fold(a, -1),
            None => Ok(()),
        }
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let sum = (self.count > 0).then_some(self.sum);
        Ok(vec![ScalarValue::Decimal128(
            sum,
            DECIMAL128_MAX_PRECISION,
            0,
        )])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.count == 0 {
            return ScalarValue::try_from(&self.output);
        }
        finish(self.sum, &self.output)
    }

    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

/// A DISTINCT total: each distinct value with how many times it is in the
/// frame (a sliding window frame retracts), added when the answer is made.
#[derive(Debug)]
struct DistinctTotal {
    output: DataType,
    values: HashMap<i128, u64>,
}

impl Accumulator for DistinctTotal {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let Some(array) = values.first() else {
            return Ok(());
        };
        each_value(array, |_, v| {
            *self.values.entry(v).or_default() += 1;
        })
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let Some(array) = values.first() else {
            return Ok(());
        };
        each_value(array, |_, v| {
            if let Some(n) = self.values.get_mut(&v) {
                *n -= 1;
                if *n == 0 {
                    self.values.remove(&v);
                }
            }
        })
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let Some(lists) = states.first() else {
            return Ok(());
        };
        let lists = lists.as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_valid(i) {
                self.update_batch(&[lists.value(i)])?;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .values
            .keys()
            .map(|v| ScalarValue::Decimal128(Some(*v), DECIMAL128_MAX_PRECISION, 0))
            .collect();
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &values, &STATE,
        ))])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.values.is_empty() {
            return ScalarValue::try_from(&self.output);
        }
        let mut total = 0i128;
        for v in self.values.keys() {
            add(&mut total, *v)?;
        }
        finish(total, &self.output)
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.values.capacity() * (size_of::<(i128, u64)>() + 1)
    }
}

/// Totals per group.
#[derive(Debug)]
struct GroupTotals {
    output: DataType,
    sums: Vec<i128>,
    /// Values added per group (0: the group's sum is NULL).
    counts: Vec<u64>,
}

impl GroupTotals {
    fn fold(
        &mut self,
        array: &ArrayRef,
        groups: &[usize],
        filter: Option<&BooleanArray>,
        total_groups: usize,
    ) -> DfResult<()> {
        self.sums.resize(total_groups, 0);
        self.counts.resize(total_groups, 0);
        let (sums, counts) = (&mut self.sums, &mut self.counts);
        let mut failed = None;
        each_value(array, |row, v| {
            if filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) || failed.is_some() {
                return;
            }
            let g = groups[row];
            failed = add(&mut sums[g], v).err();
            counts[g] = counts[g].saturating_add(1);
        })?;
        failed.map_or(Ok(()), Err)
    }
}

impl GroupsAccumulator for GroupTotals {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        let Some(values) = values.first() else {
            return Ok(());
        };
        self.fold(values, group_indices, opt_filter, total_num_groups)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.update_batch(values, group_indices, None, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        let Some(values) = values.first() else {
            return Ok(Vec::new());
        };
        let mut state = vec![None; values.len()];
        each_value(values, |row, v| {
            if opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row)) {
                state[row] = Some(v);
            }
        })?;
        Ok(vec![state_array(state)?])
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let counts = emit_to.take_needed(&mut self.counts);
        let totals = sums.into_iter().zip(counts);
        let array: ArrayRef = match self.output {
            DataType::UInt64 => Arc::new(fit::<UInt64Type>(totals, &self.output)?),
            _ => Arc::new(fit::<Int64Type>(totals, &self.output)?),
        };
        Ok(array)
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let sums = emit_to.take_needed(&mut self.sums);
        let counts = emit_to.take_needed(&mut self.counts);
        let state = sums
            .into_iter()
            .zip(counts)
            .map(|(sum, count)| (count > 0).then_some(sum));
        Ok(vec![state_array(state)?])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<i128>() + self.counts.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, UInt64Array};

    fn ints(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    fn groups() -> GroupTotals {
        GroupTotals {
            output: DataType::Int64,
            sums: Vec::new(),
            counts: Vec::new(),
        }
    }

    #[test]
    fn partial_states_merge_to_the_exact_total() -> DfResult<()> {
        let big = i64::MAX - 1;
        // Two partial aggregations, each over two groups.
        let mut left = groups();
        left.update_batch(&[ints(&[Some(big), Some(1), None])], &[0, 1, 1], None, 2)?;
        let mut right = groups();
        let filter = BooleanArray::from(vec![true, false, true]);
        right.update_batch(
            &[ints(&[Some(big), Some(99), Some(-big)])],
            &[0, 1, 0],
            Some(&filter),
            2,
        )?;
        // And rows passed on as state without pre-aggregation.
        let direct = right.convert_to_state(&[ints(&[Some(-big), None])], None)?;

        let mut last = groups();
        last.merge_batch(&left.state(EmitTo::All)?, &[0, 1], 2)?;
        last.merge_batch(&right.state(EmitTo::All)?, &[0, 1], 2)?;
        last.merge_batch(&direct, &[0, 1], 2)?;
        // Group 0: big + (big - big) - big = 0, past i64::MAX on the way.
        let out = last.evaluate(EmitTo::All)?;
        assert_eq!(
            out.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![Some(0), Some(1)])
        );
        Ok(())
    }

    #[test]
    fn a_total_out_of_range_is_an_error_and_an_empty_group_is_null() -> DfResult<()> {
        let mut g = groups();
        g.update_batch(
            &[ints(&[Some(i64::MAX), Some(1), None])],
            &[0, 0, 1],
            None,
            2,
        )?;
        let err = g.evaluate(EmitTo::All).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("sum = 9223372036854775808 does not fit Int64")));

        let mut g = groups();
        g.update_batch(&[ints(&[Some(3), None])], &[0, 1], None, 2)?;
        let out = g.evaluate(EmitTo::All)?;
        assert_eq!(
            out.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![Some(3), None])
        );
        Ok(())
    }

    #[test]
    fn a_sliding_total_retracts_and_unsigned_totals_check_their_own_range() -> DfResult<()> {
        let mut t = Total::new(DataType::Int64);
        t.update_batch(&[ints(&[Some(i64::MAX), Some(5)])])?;
        t.retract_batch(&[ints(&[Some(i64::MAX)])])?;
        assert_eq!(t.evaluate()?, ScalarValue::Int64(Some(5)));
        t.retract_batch(&[ints(&[Some(5)])])?;
        assert_eq!(t.evaluate()?, ScalarValue::Int64(None));

        let mut u = Total::new(DataType::UInt64);
        let unsigned: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX, 1]));
        u.update_batch(&[unsigned])?;
        let err = u.evaluate().err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("sum = 18446744073709551616 does not fit UInt64")));
        Ok(())
    }
}
