//! Per operator: given where its inputs are and (optionally) the user's strategy, the
//! layouts it needs its inputs in and the layout of its output. Every layout of one
//! op's plan shares one device matrix.
//!
//! ```
//! use spore_core::op::Op;
//! use spore_core::{DType, TensorType};
//! use spore_parallel::sharding::{plan_op, Layout, Strategy};
//! let x = TensorType::new(&[8, 16], DType::F32);
//! let w = TensorType::new(&[16, 32], DType::F32);
//! let out = TensorType::new(&[8, 32], DType::F32);
//! let whole = Layout::replicated(4, 2);
//! // Megatron's row-parallel product: both inputs split along the contraction.
//! let s: Strategy = "((1, 4), (4, 1))".parse().unwrap();
//! let p = plan_op(&Op::MatMul, &[&x, &w], &out, &[whole.clone(), whole], Some(&s), 4).unwrap();
//! assert_eq!(p.out.to_string(), "dev[1,4,1] (R, R) partial[1]");
//! ```
//!
//! Ops without a strategy follow their inputs (a ReLU keeps its input's blocks, a
//! product keeps its left input's rows and its right input's columns); ops without a
//! rule read whole inputs and compute the whole output on every rank. Either way the
//! result is right; strategies only decide where the work and the communication go.

mod elementwise;
mod linear;
mod shape;

use spore_core::TensorType;
use spore_core::op::Op;

use super::layout::Layout;
use super::strategy::Strategy;

/// Where an op needs its inputs and where its output lands.
#[derive(Clone, Debug, PartialEq)]
pub struct OpPlan {
    /// The layout each input is redistributed to before the op runs.
    pub args: Vec<Layout>,
    /// Per input, the device axes along which ranks compute different parts of the op
    /// while reading the input whole: its gradient is summed over them.
    pub marks: Vec<Vec<usize>>,
    /// The layout the op computes its output in (with partial sums where it splits a
    /// contraction).
    pub out: Layout,
    /// Where an `out_strategy` moves the output right after the op, if it sets one.
    pub result: Option<Layout>,
}

/// What a rule sees.
pub(crate) struct RuleInput<'a> {
    pub op: &'a Op,
    pub args: &'a [&'a TensorType],
    pub out: &'a TensorType,
    /// The inputs' current layouts.
    pub current: &'a [Layout],
    pub devices: usize,
}

/// Plans one op. `strategy` is the user's (MindSpore's `shard`); an op that takes no
/// strategy, or a strategy that does not fit, is an error naming both.
pub fn plan_op(
    op: &Op,
    args: &[&TensorType],
    out: &TensorType,
    current: &[Layout],
    strategy: Option<&Strategy>,
    devices: usize,
) -> Result<OpPlan, String> {
    if current.len() != args.len() {
        return Err(format!(
            "{}: {} inputs but {} layouts",
            op.name(),
            args.len(),
            current.len()
        ));
    }
    let input = RuleInput {
        op,
        args,
        out,
        current,
        devices,
    };
    let (args_l, out_l) = match strategy {
        Some(s) => with_strategy(&input, s)?,
        None => following(&input),
    };
    if args_l.len() != args.len() {
        return Err(format!(
            "{}: internal: the rule planned {} inputs of {}",
            op.name(),
            args_l.len(),
            args.len()
        ));
    }
    let marks = marks(&args_l, &out_l, args);
    Ok(OpPlan {
        args: args_l,
        marks,
        out: out_l,
        result: None,
    })
}

fn with_strategy(i: &RuleInput, s: &Strategy) -> Result<(Vec<Layout>, Layout), String> {
    let name = i.op.name();
    if s.inputs.len() != i.args.len() {
        return Err(format!(
            "{name} has {} inputs; strategy {s} gives {}",
            i.args.len(),
            s.inputs.len()
        ));
    }
    for (k, (st, t)) in s.inputs.iter().zip(i.args).enumerate() {
        if st.len() != t.shape.len() {
            return Err(format!(
                "{name}: input {k} has shape {:?} ({} dimensions); strategy {s} gives {} factors for it",
                t.shape,
                t.shape.len(),
                st.len()
            ));
        }
    }
    match i.op {
        op if op.is_elementwise() || matches!(op, Op::Identity | Op::StopGradient) => {
            elementwise::with_strategy(i, s)
        }
        Op::MatMul => linear::matmul_with_strategy(i, s),
        Op::Gather { axis } => shape::gather_with_strategy(i, s, *axis),
        Op::Conv2d(_) => linear::conv_with_strategy(i, s),
        Op::Reduce { .. } | Op::MaxPool2d(_) | Op::AvgPool2d(_) | Op::OneHot { .. } => {
            shape::first_input_strategy(i, s)
        }
        _ => Err(format!(
            "{name} takes no strategy in Spore yet (strategies apply to MatMul, Conv2D, Gather, elementwise ops, reductions, pooling and OneHot); its layout follows its inputs"
        )),
    }
}

/// The plan of an op without a strategy.
fn following(i: &RuleInput) -> (Vec<Layout>, Layout) {
    let planned = match i.op {
        op if op.is_elementwise() || matches!(op, Op::Identity | Op::StopGradient) => {
            Some(elementwise::following(i))
        }
        Op::MatMul => linear::matmul_following(i),
        Op::Conv2d(attrs) => linear::conv_following(i, attrs.groups),
        Op::MaxPool2d(_) | Op::AvgPool2d(_) => shape::pool_following(i),
        Op::Reduce {
            kind,
            axes,
            keep_dims,
        } => Some(shape::reduce(i, *kind, axes, *keep_dims)),
        Op::ArgReduce {
            axis, keep_dims, ..
        } => Some(shape::arg_reduce(i, *axis, *keep_dims)),
        Op::Transpose(perm) => Some(shape::transpose(i, perm)),
        Op::Reshape(_) => Some(shape::reshape(i)),
        Op::BroadcastTo(_) => Some(shape::broadcast_to(i)),
        Op::OneHot { .. } => Some(shape::one_hot(i)),
        Op::Gather { axis } => shape::gather(i, *axis),
        Op::Concat { axis } => Some(shape::concat(i, *axis)),
        Op::StridedSlice { begin, step, len } => Some(shape::strided_slice(i, begin, step, len)),
        Op::Pad { pads, .. } => Some(shape::pad(i, pads)),
        _ => None,
    };
    // A rule's plan must be one device matrix; anything else computes whole values.
    match planned {
        Some((args, out)) if fits(i, &args, &out) => (args, out),
        _ => whole(i),
    }
}

/// One device matrix for the whole plan, and every split divides its dimension.
fn fits(i: &RuleInput, args: &[Layout], out: &Layout) -> bool {
    args.iter().all(|a| a.dev == out.dev)
        && args
            .iter()
            .zip(i.args)
            .all(|(a, t)| a.local_shape(&t.shape).is_ok())
        && out.local_shape(&i.out.shape).is_ok()
}

/// Every input whole, the output whole, on every rank.
pub(crate) fn whole(i: &RuleInput) -> (Vec<Layout>, Layout) {
    (
        i.args
            .iter()
            .map(|t| Layout::replicated(i.devices, t.shape.len()))
            .collect(),
        Layout::replicated(i.devices, i.out.shape.len()),
    )
}

/// Device axes of size > 1 along which the op's work is divided; an input not split
/// along one of them is read whole by ranks computing different parts, so its gradient
/// is a sum over them.
fn marks(args: &[Layout], out: &Layout, types: &[&TensorType]) -> Vec<Vec<usize>> {
    let mut working: Vec<usize> = out.split_axes();
    working.extend(out.partial.iter().copied().filter(|&a| out.dev[a] > 1));
    for a in args {
        working.extend(a.split_axes());
    }
    working.sort_unstable();
    working.dedup();
    args.iter()
        .zip(types)
        .map(|(a, t)| {
            if !t.dtype.is_float() {
                return vec![];
            }
            let own = a.split_axes();
            working
                .iter()
                .copied()
                .filter(|w| !own.contains(w))
                .collect()
        })
        .collect()
}

/// A device matrix for `factors` over `devices` ranks: the factors as axes, behind a
/// leading axis of repeated work when they use fewer ranks than the job has. Returns
/// the matrix and the index of the first factor's axis.
pub(crate) fn device_matrix(
    name: &str,
    factors: &[usize],
    devices: usize,
) -> Result<(Vec<usize>, usize), String> {
    let Some(used) = factors.iter().try_fold(1usize, |a, &f| a.checked_mul(f)) else {
        return Err(format!(
            "{name}: the strategy's split factors {factors:?} multiply past any job's size"
        ));
    };
    if used == 0 || used > devices || !devices.is_multiple_of(used) {
        return Err(format!(
            "{name}: the strategy splits the work {used} ways, which must divide the job's {devices} ranks"
        ));
    }
    if used == devices {
        Ok((factors.to_vec(), 0))
    } else {
        let mut dev = vec![devices / used];
        dev.extend_from_slice(factors);
        Ok((dev, 1))
    }
}

/// An input's current layout without summands, or whole if it lives on another device
/// matrix than `dev`.
pub(crate) fn current_on(i: &RuleInput, k: usize, dev: &[usize]) -> Layout {
    let c = &i.current[k];
    if c.dev == dev {
        c.without_partial()
    } else {
        Layout {
            dev: dev.to_vec(),
            map: vec![None; i.args[k].shape.len()],
            partial: vec![],
        }
    }
}

/// The device matrix most of the inputs' splits live on: the first split input's.
pub(crate) fn leading_dev(i: &RuleInput) -> Vec<usize> {
    i.current
        .iter()
        .find(|l| !l.split_axes().is_empty())
        .map(|l| l.dev.clone())
        .unwrap_or_else(|| vec![i.devices])
}
