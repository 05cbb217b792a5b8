//! Whole operators for composites in PyNative mode: softmax over the last axis and GELU
//! (erf form), forward and gradient, and ReLU's gradient each run as one loop, where
//! their primitives take two to a dozen passes over memory, one operator at a time.
//! MindSpore runs `Softmax`, `GeLU` and `ReluGrad` as primitives in PyNative mode for the
//! same reason; `spore-nn` does the same for BatchNorm and LayerNorm with [`applies`]
//! and [`f32_values`].
//!
//! ```
//! use spore_core::Tensor;
//! let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0], &[1, 3]).unwrap().with_requires_grad(true);
//! let p = x.softmax(-1).unwrap();
//! assert_eq!(p.grad_fn().unwrap().op.name(), "Softmax"); // one operator, not five
//! assert!((p.to_vec::<f32>().unwrap().iter().sum::<f32>() - 1.0).abs() < 1e-6);
//! ```
//!
//! In PyNative mode an eager operator stands in when [`applies`]: nothing is being traced,
//! every value is float32 and no mixed-precision compute dtype is in force. Their gradient
//! operators are made only in a backward pass that is not itself recorded; a recorded one
//! (for a higher derivative) writes the same gradient with differentiable primitives.
//!
//! Softmax, GELU and LayerNorm also stand in inside a trace that [`in_traces`] runs (`jit`
//! traces the graphs it executes that way), where [`applies_traced`] holds. Why: fusion
//! cannot merge a sum over a row with the loops around it, so their composites still took
//! four to seven passes over memory per operator in Graph mode (softmax: max, exp, sum,
//! divide), and GELU's stored `1 + erf` one more; the whole operators take one, and none
//! of their neighbours could join their loops anyway (products and sums surround them).
//! (`spore-nn`'s BatchNorm takes its whole operators there too, when training; in
//! evaluation its composite is one multiply-add that fusion merges with what follows.)
//! ReLU's gradient keeps its primitives in graphs, where fusion merges it into
//! convolutions, products and pooling. Traces made for export (ONNX, C code, sharding
//! plans) never set the flag and see only primitives.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;

use spore_kernels::{DType, activation, arena};

use crate::error::{Error, Result};
use crate::op::custom::{CustomOp, CustomPrimitive};
use crate::tensor::{Tensor, TensorType};

/// Whether an eager operator may stand in for a composite on these tensors.
pub fn applies(tensors: &[&Tensor]) -> bool {
    !crate::trace::is_tracing() && float32_work(tensors) && tensors.iter().all(|t| !t.is_symbolic())
}

/// Every value float32, and no mixed-precision compute dtype in force: what every whole
/// operator needs, eager or traced.
fn float32_work(tensors: &[&Tensor]) -> bool {
    crate::autocast::compute_dtype().is_none_or(|d| d == DType::F32)
        && tensors.iter().all(|t| t.dtype() == DType::F32)
}

thread_local! {
    /// Whether the active trace lets whole operators stand in (see [`in_traces`]).
    static IN_TRACES: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, typically a trace whose graph will be executed, letting softmax, GELU,
/// LayerNorm and a training BatchNorm record as whole operators in it (see the module
/// docs).
pub fn in_traces<R>(f: impl FnOnce() -> R) -> R {
    crate::scoped::with_cell(&IN_TRACES, true, f)
}

/// Whether softmax, GELU, LayerNorm or a training BatchNorm may run as a whole operator
/// on these tensors: as [`applies`] eagerly, or inside a trace that [`in_traces`] runs,
/// on float32 values and with no mixed-precision compute dtype in force.
pub fn applies_traced(tensors: &[&Tensor]) -> bool {
    let traced = crate::trace::is_tracing() && IN_TRACES.with(Cell::get);
    applies(tensors) || (traced && float32_work(tensors))
}

/// Gives a copy that [`f32_values`] made (of a strided input) back to the buffer pool.
pub fn recycle_values(values: Cow<'_, [f32]>) {
    if let Cow::Owned(v) = values {
        arena::recycle(spore_kernels::Buffer::F32(v));
    }
}

/// The float32 values of a concrete tensor in row-major order, borrowed when contiguous.
pub fn f32_values(t: &Tensor) -> std::result::Result<Cow<'_, [f32]>, String> {
    if let Some(s) = t.storage()
        && s.layout.is_contiguous()
        && let Some(all) = s.buffer.as_slice::<f32>()
        && let Some(v) = all.get(s.layout.offset..s.layout.offset + t.numel())
    {
        return Ok(Cow::Borrowed(v));
    }
    t.to_vec::<f32>().map(Cow::Owned).map_err(|e| e.to_string())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    /// `x` → softmax over the last axis.
    Softmax,
    /// `(g, y)` → `y · (g - Σ g·y)` over the last axis.
    SoftmaxGrad,
    /// `x` → `x · (1 + erf(x / √2)) / 2`.
    Gelu,
    /// `(g, x)` → GELU's input gradient.
    GeluGrad,
    /// `(g, y)` → `g` where ReLU's output `y` is positive, else 0.
    ReluGrad,
}

#[derive(Debug)]
struct Eager(Kernel);

fn op(kernel: Kernel) -> CustomOp {
    CustomOp::new(Arc::new(Eager(kernel)))
}

impl CustomPrimitive for Eager {
    fn name(&self) -> &str {
        match self.0 {
            Kernel::Softmax => "Softmax",
            Kernel::SoftmaxGrad => "SoftmaxGrad",
            Kernel::Gelu => "GeLU",
            Kernel::GeluGrad => "GeLUGrad",
            Kernel::ReluGrad => "ReluGrad",
        }
    }

    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let arity = match self.0 {
            Kernel::Softmax | Kernel::Gelu => 1,
            Kernel::SoftmaxGrad | Kernel::GeluGrad | Kernel::ReluGrad => 2,
        };
        let rows = matches!(self.0, Kernel::Softmax | Kernel::SoftmaxGrad);
        let ok = inputs.len() == arity
            && inputs
                .iter()
                .all(|t| t.dtype == DType::F32 && *t == inputs[0])
            && (!rows || inputs[0].shape.last().is_some_and(|&d| d > 0));
        if !ok {
            return Err(format!(
                "expected {arity} float32 inputs of one shape (for softmax, a non-empty last axis), got {:?}",
                inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>()
            ));
        }
        Ok(inputs[0].clone())
    }

    /// Inputs were checked by `infer` (float32, one shape), and no value makes a kernel
    /// fail: a compiled step may write parameters in place before these ops.
    fn may_fail_on_values(&self) -> bool {
        false
    }

    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = f32_values(inputs[0])?;
        let shape = inputs[0].shape();
        let row = shape.last().copied().unwrap_or(1);
        // Every kernel below writes each element, so a pooled buffer's old values never show.
        let mut out = arena::for_overwrite::<f32>(x.len());
        let second = match self.0 {
            Kernel::Softmax | Kernel::Gelu => None,
            _ => Some(f32_values(inputs[1])?),
        };
        let y = second.as_deref().unwrap_or(&[]);
        match self.0 {
            Kernel::Softmax => activation::softmax_rows(&x, row, &mut out),
            Kernel::Gelu => activation::gelu_erf(&x, &mut out),
            Kernel::SoftmaxGrad => activation::softmax_rows_grad(&x, y, row, &mut out),
            Kernel::GeluGrad => activation::gelu_erf_grad(&x, y, &mut out),
            Kernel::ReluGrad => activation::relu_grad(&x, y, &mut out),
        }
        recycle_values(x);
        if let Some(y) = second {
            recycle_values(y);
        }
        Tensor::from_vec(out, shape).map_err(|e| e.to_string())
    }

    fn vjp(&self, inputs: &[Tensor], out: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let recorded = crate::is_grad_enabled();
        let dx = match self.0 {
            Kernel::Softmax if recorded => out.mul(&g.sub(&g.mul(out)?.sum(&[-1], true)?)?)?,
            Kernel::Softmax => g.custom(&op(Kernel::SoftmaxGrad), &[out])?,
            Kernel::Gelu if recorded => {
                let x = &inputs[0];
                let cdf = x
                    .mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?
                    .erf()?
                    .add_scalar(1.0)?
                    .mul_scalar(0.5)?;
                let pdf = x.mul(x)?.mul_scalar(-0.5)?.exp()?.mul_scalar(
                    0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2,
                )?;
                g.mul(&cdf.add(&x.mul(&pdf)?)?)?
            }
            Kernel::Gelu => g.custom(&op(Kernel::GeluGrad), &[&inputs[0]])?,
            k => {
                return Err(Error::invalid(format!(
                    "{k:?} has no gradient: it is made only where none is taken"
                )));
            }
        };
        Ok(vec![Some(dx)])
    }
}

/// Softmax over the last axis as one operator (the caller checked [`applies_traced`]).
#[track_caller]
pub(crate) fn softmax_last_axis(x: &Tensor) -> Result<Tensor> {
    x.custom(&op(Kernel::Softmax), &[])
}

/// ReLU's gradient from its output `y` as one operator, in a backward pass that is not
/// recorded (the caller checked [`applies`] and that no gradient is being recorded).
#[track_caller]
pub(crate) fn relu_grad(g: &Tensor, y: &Tensor) -> Result<Tensor> {
    g.custom(&op(Kernel::ReluGrad), &[y])
}

/// GELU (erf form) as one operator (the caller checked [`applies_traced`]).
#[track_caller]
pub(crate) fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    x.custom(&op(Kernel::Gelu), &[])
}
