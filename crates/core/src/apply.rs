//! The one entry point of every operator: [`apply`] validates (`infer`), runs the kernel
//! (`eval`) and links the result into the autodiff graph when a gradient may flow.
//!
//! ```
//! use spore_core::{no_grad, Tensor, DType};
//! let w = Tensor::ones(&[2], DType::F32).unwrap().with_requires_grad(true);
//! let y = w.exp().unwrap();
//! assert!(y.requires_grad());
//! let z = no_grad(|| w.exp()).unwrap();
//! assert!(!z.requires_grad());
//! ```

use std::borrow::Cow;
use std::time::Instant;

use smallvec::SmallVec;

use crate::debug;
use crate::error::{Error, Result, SourceLocation};
use crate::op::Op;
use crate::prims::in_place::EvalContext;
use crate::tensor::{Data, GradFn, Tensor, TensorType};
use crate::trace;

pub use crate::depth::{is_grad_enabled, no_grad, with_grad_enabled};

/// Builds the error for `op` rejecting `inputs`.
pub(crate) fn op_error(op: &Op, message: String, inputs: &[&Tensor], loc: SourceLocation) -> Error {
    Error::Op {
        op: op.name(),
        message,
        inputs: inputs.iter().map(|t| t.tensor_type().clone()).collect(),
        location: Some(loc),
    }
}

/// Applies `op` to `inputs`: computes it (PyNative), or records it into the active trace
/// when an input is symbolic. `loc` is the user's call site, reported in errors and IR.
pub fn apply(op: Op, inputs: &[&Tensor], loc: SourceLocation) -> Result<Tensor> {
    if let Some(d) = crate::autocast::cast_target(&op, inputs) {
        // Mixed precision: float inputs of another type are cast first (see `autocast`).
        let cast: Vec<Tensor> = inputs
            .iter()
            .map(|t| match t.dtype().is_float() && t.dtype() != d {
                true => apply(Op::Cast(d), &[t], loc),
                false => Ok((*t).clone()),
            })
            .collect::<Result<_>>()?;
        let refs: SmallVec<[&Tensor; 8]> = cast.iter().collect();
        return apply(op, &refs, loc);
    }
    apply_observed(
        Cow::Owned(op),
        inputs,
        loc,
        true,
        &mut EvalContext::default(),
    )
}

/// [`apply`] for graph executors: borrows the node's op (a compiled step clones nothing),
/// passes on what the executor lends the op (`ctx`), and leaves reporting to dump and
/// profiler to the executor, which knows the graph's names.
pub fn apply_in_graph(
    op: &Op,
    inputs: &[&Tensor],
    loc: SourceLocation,
    ctx: &mut EvalContext,
) -> Result<Tensor> {
    apply_observed(Cow::Borrowed(op), inputs, loc, false, ctx)
}

/// `op` is owned when the caller gave it by value, so that recording an autodiff link
/// moves it instead of cloning.
fn apply_observed(
    op_arg: Cow<'_, Op>,
    inputs: &[&Tensor],
    loc: SourceLocation,
    observe: bool,
    ctx: &mut EvalContext,
) -> Result<Tensor> {
    let op: &Op = &op_arg;
    // Inline for every op's arity: inference allocates nothing in a compiled step.
    let types: SmallVec<[&TensorType; 8]> = inputs.iter().map(|t| t.tensor_type()).collect();
    let ty = op.infer(&types).map_err(|m| op_error(op, m, inputs, loc))?;
    // Before any kernel allocates the output (and before a trace records it).
    crate::memory::check(&ty.shape, ty.dtype).map_err(|m| op_error(op, m, inputs, loc))?;
    // Side effects inside a trace are recorded even without symbolic inputs, so that a
    // compiled graph prints on every run rather than once while tracing.
    let record =
        inputs.iter().any(|t| t.is_symbolic()) || (op.is_side_effect() && trace::is_tracing());
    // Values computed while tracing are constants of a graph, not executions to report.
    let started =
        (observe && !record && debug::enabled() && !trace::is_tracing()).then(Instant::now);
    let data = if record {
        trace::record(op, inputs, &ty, loc)?
    } else {
        // An eager op keeps the pool's other workers spinning (see `threads::awake`): the
        // next op's parallel kernel then finds them awake. A compiled step holds its own
        // guard for all its ops.
        let _awake = observe.then(crate::threads::keep_workers_awake);
        Data::Concrete(
            op.eval(inputs, &ty, ctx)
                .map_err(|m| op_error(op, m, inputs, loc))?,
        )
    };
    let reported = started.map(|s| (op.clone(), s));
    let differentiable = !matches!(op, Op::StopGradient);
    let track = differentiable && is_grad_enabled() && inputs.iter().any(|t| t.requires_grad());
    let node = track.then(|| GradFn {
        op: op_arg.into_owned(),
        inputs: inputs.iter().map(|&t| t.clone()).collect(),
    });
    let out = Tensor::from_data(ty, data, node, track);
    if let Some((op, start)) = reported {
        debug::report_eager(&op, inputs, &out, start)?;
    }
    Ok(out)
}
