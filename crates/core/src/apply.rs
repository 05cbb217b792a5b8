//! The one entry point of every operator: [`apply`] validates (`infer`), runs the kernel
//! (`eval`) and links the result into the autodiff graph when a gradient may flow.
//!
//! ```
//! use spore_core::{no_grad, Tensor, DType};
//! let w = Tensor::ones(&[2], DType::F32).with_requires_grad(true);
//! let y = w.exp().unwrap();
//! assert!(y.requires_grad());
//! let z = no_grad(|| w.exp()).unwrap();
//! assert!(!z.requires_grad());
//! ```

use std::cell::Cell;

use crate::error::{Error, Result, SourceLocation};
use crate::op::Op;
use crate::tensor::{Data, GradFn, Tensor, TensorType};
use crate::trace;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether new operations record autodiff links on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Runs `f` with gradient recording switched on or off, restoring the previous state after
/// (also when `f` panics).
pub fn with_grad_enabled<R>(enabled: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            GRAD_ENABLED.with(|g| g.set(self.0));
        }
    }
    let _restore = Restore(GRAD_ENABLED.with(|g| g.replace(enabled)));
    f()
}

/// Runs `f` without recording gradients (PyTorch's `torch.no_grad()`).
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    with_grad_enabled(false, f)
}

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
    let types: Vec<&TensorType> = inputs.iter().map(|t| t.tensor_type()).collect();
    let ty = op
        .infer(&types)
        .map_err(|m| op_error(&op, m, inputs, loc))?;
    let data = if inputs.iter().any(|t| t.is_symbolic()) {
        trace::record(&op, inputs, &ty, loc)?
    } else {
        Data::Concrete(
            op.eval(inputs, &ty)
                .map_err(|m| op_error(&op, m, inputs, loc))?,
        )
    };
    let differentiable = !matches!(op, Op::StopGradient);
    let track = differentiable && is_grad_enabled() && inputs.iter().any(|t| t.requires_grad());
    let node = track.then(|| GradFn {
        op,
        inputs: inputs.iter().map(|&t| t.clone()).collect(),
    });
    Ok(Tensor::from_data(ty, data, node, track))
}
