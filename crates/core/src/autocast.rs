//! The compute dtype of mixed precision: inside [`with_compute_dtype`]`(d, ..)`, every op
//! that computes on floats gets its float inputs of another type cast to `d` first (the
//! casts are ops: gradients flow back through them, and traced graphs hold them). A cell
//! given `to_float(F16)` runs its `construct` this way; a BatchNorm inside it kept in
//! float32 (`keep_batchnorm_fp32`) runs in an inner `with_compute_dtype(F32, ..)`.
//!
//! ```
//! use spore_core::autocast::with_compute_dtype;
//! use spore_core::{DType, Tensor};
//! let w = Tensor::ones(&[2, 2], DType::F32).unwrap(); // a float32 master weight
//! let x = Tensor::ones(&[1, 2], DType::F32).unwrap();
//! let y = with_compute_dtype(Some(DType::BF16), || x.matmul(&w)).unwrap();
//! assert_eq!(y.dtype(), DType::BF16);
//! let z = with_compute_dtype(None, || x.matmul(&w)).unwrap(); // no override
//! assert_eq!(z.dtype(), DType::F32);
//! ```
//!
//! Why casts at the op and not a rewrite of the graph afterwards: the same rule then
//! holds in PyNative mode, where there is no graph, and in Graph mode, where tracing
//! records the casts with the cell's scope name (`save_graphs` shows them as `Cast`
//! nodes under `Default/conv1/...`).

use std::cell::Cell;

use crate::op::{Family, Op};
use crate::tensor::Tensor;
use spore_kernels::DType;

thread_local! {
    static COMPUTE: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Runs `f` with float ops computing in `dtype` (`None`: inherit the enclosing one);
/// restored after `f`, also when it panics.
pub fn with_compute_dtype<R>(dtype: Option<DType>, f: impl FnOnce() -> R) -> R {
    match dtype {
        Some(d) => crate::scoped::with_cell(&COMPUTE, Some(d), f),
        None => f(),
    }
}

/// The compute dtype in force on this thread, if any.
pub fn compute_dtype() -> Option<DType> {
    COMPUTE.with(|c| c.get())
}

/// The float dtype `op`'s float inputs are cast to before it runs, when one is in force,
/// the op computes on floats, and some input differs from it.
pub(crate) fn cast_target(op: &Op, inputs: &[&Tensor]) -> Option<DType> {
    let d = compute_dtype()?;
    let computes = !matches!(op, Op::Cast(_) | Op::Identity | Op::StopGradient)
        && !matches!(
            op.row().family,
            Family::Print | Family::Custom | Family::Random | Family::Fused
        );
    let differs = inputs
        .iter()
        .any(|t| t.dtype().is_float() && t.dtype() != d);
    (computes && differs).then_some(d)
}
