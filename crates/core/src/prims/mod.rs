//! The primitive families. Each file holds, for its operators, the three rules (`infer`,
//! `eval`, `vjp`) and the user-facing `Tensor` methods; this module only routes an [`Op`]
//! to its family and holds helpers they share.

pub mod conv;
pub mod custom;
pub mod elementwise;
pub mod fused;
mod fused_contract;
pub mod fused_reduce;
pub mod in_place;
pub mod index;
pub mod matmul;
pub mod movement;
pub mod pool;
pub mod print;
pub mod random;
pub mod reduce;

use spore_kernels::Dims;

use crate::error::Result;
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    match op {
        Op::Identity | Op::StopGradient | Op::Unary(_) | Op::Binary(_) | Op::Compare(_) => {
            elementwise::infer(op, inputs)
        }
        Op::Select | Op::Cast(_) => elementwise::infer(op, inputs),
        Op::Reduce { .. } | Op::ArgReduce { .. } => reduce::infer(op, inputs),
        Op::Reshape(_) | Op::Transpose(_) | Op::BroadcastTo(_) | Op::StridedSlice { .. } => {
            movement::infer(op, inputs)
        }
        Op::StridedSliceGrad { .. } | Op::Pad { .. } | Op::Concat { .. } => {
            movement::infer(op, inputs)
        }
        Op::MatMul => matmul::infer(inputs),
        Op::MatMulAdd { .. } => matmul::infer_plus(inputs),
        Op::MatMulBias { .. } => matmul::infer_bias(inputs),
        Op::MatMulReluGrad => matmul::infer_masked(inputs),
        Op::Conv2d(_)
        | Op::Conv2dRelu(_)
        | Op::Conv2dBackpropInput { .. }
        | Op::Conv2dBackpropFilter { .. } => conv::infer(op, inputs),
        Op::MaxPool2d(_)
        | Op::MaxPool2dGrad(_)
        | Op::MaxPool2dGradOfRelu(_)
        | Op::AvgPool2d(_)
        | Op::AvgPool2dGrad { .. } => pool::infer(op, inputs),
        Op::Gather { .. } | Op::ScatterAdd { .. } | Op::OneHot { .. } => index::infer(op, inputs),
        Op::RandomUniform { .. } => random::infer(op, inputs),
        Op::Fused(p) => p.infer(inputs),
        Op::FusedReduceSum {
            program,
            axes,
            keep_dims,
        } => program.infer_sum(inputs, axes, *keep_dims),
        Op::Print(segments) => print::infer(segments, inputs),
        Op::Custom(c) => c.infer(inputs),
    }
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    match op {
        Op::Identity | Op::StopGradient | Op::Unary(_) | Op::Binary(_) | Op::Compare(_) => {
            elementwise::eval(op, inputs, out)
        }
        Op::Select | Op::Cast(_) => elementwise::eval(op, inputs, out),
        Op::Reduce { .. } | Op::ArgReduce { .. } => reduce::eval(op, inputs, out),
        Op::Reshape(_) | Op::Transpose(_) | Op::BroadcastTo(_) | Op::StridedSlice { .. } => {
            movement::eval(op, inputs, out)
        }
        Op::StridedSliceGrad { .. } | Op::Pad { .. } | Op::Concat { .. } => {
            movement::eval(op, inputs, out)
        }
        Op::MatMul => matmul::eval(inputs, out),
        Op::MatMulAdd { beta_bits } => matmul::eval_plus(inputs, f64::from_bits(*beta_bits), out),
        Op::MatMulBias { relu } => matmul::eval_bias(inputs, *relu, out),
        Op::MatMulReluGrad => matmul::eval_masked(inputs, out),
        Op::Conv2d(_)
        | Op::Conv2dRelu(_)
        | Op::Conv2dBackpropInput { .. }
        | Op::Conv2dBackpropFilter { .. } => conv::eval(op, inputs, out),
        Op::MaxPool2d(_)
        | Op::MaxPool2dGrad(_)
        | Op::MaxPool2dGradOfRelu(_)
        | Op::AvgPool2d(_)
        | Op::AvgPool2dGrad { .. } => pool::eval(op, inputs, out),
        Op::Gather { .. } | Op::ScatterAdd { .. } | Op::OneHot { .. } => {
            index::eval(op, inputs, out)
        }
        Op::RandomUniform { .. } => random::eval(op, inputs, out),
        Op::Fused(p) => p.eval(inputs, out),
        Op::FusedReduceSum { program, axes, .. } => program.eval_sum(inputs, axes, out),
        Op::Print(segments) => print::eval(segments, inputs),
        Op::Custom(c) => c.eval(inputs, out),
    }
}

pub(crate) fn vjp(
    op: &Op,
    inputs: &[Tensor],
    out: &Tensor,
    grad: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    match op {
        Op::Identity | Op::StopGradient | Op::Unary(_) | Op::Binary(_) | Op::Compare(_) => {
            elementwise::vjp(op, inputs, out, grad)
        }
        Op::Select | Op::Cast(_) => elementwise::vjp(op, inputs, out, grad),
        Op::Reduce { .. } | Op::ArgReduce { .. } => reduce::vjp(op, inputs, out, grad),
        Op::Reshape(_) | Op::Transpose(_) | Op::BroadcastTo(_) | Op::StridedSlice { .. } => {
            movement::vjp(op, inputs, out, grad)
        }
        Op::StridedSliceGrad { .. } | Op::Pad { .. } | Op::Concat { .. } => {
            movement::vjp(op, inputs, out, grad)
        }
        Op::MatMul => matmul::vjp(inputs, grad),
        Op::MatMulAdd { .. } | Op::MatMulBias { .. } | Op::MatMulReluGrad => {
            Err(crate::error::Error::invalid(format!(
                "{} has no gradient rule: the graph compiler builds it after autodiff",
                op.name()
            )))
        }
        Op::Conv2d(_)
        | Op::Conv2dRelu(_)
        | Op::Conv2dBackpropInput { .. }
        | Op::Conv2dBackpropFilter { .. } => conv::vjp(op, inputs, grad),
        Op::MaxPool2d(_)
        | Op::MaxPool2dGrad(_)
        | Op::MaxPool2dGradOfRelu(_)
        | Op::AvgPool2d(_)
        | Op::AvgPool2dGrad { .. } => pool::vjp(op, inputs, grad),
        Op::Gather { .. } | Op::ScatterAdd { .. } | Op::OneHot { .. } => {
            index::vjp(op, inputs, grad)
        }
        Op::RandomUniform { .. } => Ok(vec![None]),
        Op::Fused(p) | Op::FusedReduceSum { program: p, .. } => p.vjp(),
        Op::Print(_) => Ok(vec![None; inputs.len()]),
        Op::Custom(c) => c.vjp(inputs, out, grad),
    }
}

// ----- helpers shared by the families -----

/// NumPy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Dims, String> {
    let r = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(format!(
                    "shapes {a:?} and {b:?} cannot be broadcast (axis {i}: {da} vs {db})"
                ));
            }
        };
    }
    Ok(out)
}

/// Resolves a possibly negative axis against `rank`.
pub fn normalize_axis(axis: isize, rank: usize) -> Result<usize, String> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) || (rank == 0 && a != 0) {
        Err(format!(
            "axis {axis} is out of range for a tensor of rank {rank} (expected {}..{})",
            -r.max(1),
            r.max(1) - 1
        ))
    } else {
        Ok(a as usize)
    }
}

/// Resolves a list of axes (empty = all axes); rejects duplicates.
pub fn normalize_axes(axes: &[isize], rank: usize) -> Result<Vec<usize>, String> {
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(format!("axis {a} appears twice in {axes:?}"));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

pub(crate) fn require_float(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(format!(
            "{what} must be Float32 or Float64, got {}",
            t.dtype
        ))
    }
}

pub(crate) fn require_same_dtype(a: &TensorType, b: &TensorType) -> Result<(), String> {
    if a.dtype == b.dtype {
        Ok(())
    } else {
        Err(format!(
            "inputs must have the same dtype, got {} and {} (cast one first)",
            a.dtype, b.dtype
        ))
    }
}

/// Sums a broadcast gradient back to `shape` (the reverse of broadcasting).
pub(crate) fn sum_to_shape(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let extra = g.rank() - shape.len();
    let mut axes: Vec<isize> = (0..extra as isize).collect();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 && g.shape()[i + extra] != 1 {
            axes.push((i + extra) as isize);
        }
    }
    let s = if axes.is_empty() {
        g.clone()
    } else {
        g.sum(&axes, true)?
    };
    s.reshape(shape)
}
