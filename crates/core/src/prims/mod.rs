//! The primitive families. Each file holds, for its operators, the three rules (`infer`,
//! `eval`, `vjp`) and the user-facing `Tensor` methods; this module only routes an [`Op`]
//! to its family and holds helpers they share.

pub mod conv;
pub mod conv_transpose;
pub mod custom;
pub mod elementwise;
pub mod filter_cache;
pub mod fused;
mod fused_flags;
pub mod fused_reduce;
mod half_compute;
pub mod in_place;
pub mod index;
pub mod matmul;
pub mod movement;
pub mod padding;
pub mod pool;
pub mod print;
pub mod random;
pub mod reduce;
pub mod strided_slice;

use spore_kernels::Dims;

use crate::error::Result;
use crate::op::{Family, Op};
use crate::tensor::{Storage, Tensor, TensorType};
use in_place::EvalContext;

/// An op's rules, routed to its family (defined here rather than beside the `Op` type, so
/// that the op's data depends on none of the rule files).
impl Op {
    /// Shape and dtype of the result; the only place inputs are validated.
    pub fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        if let Some(n) = self.arity()
            && inputs.len() != n
        {
            return Err(format!("expected {n} inputs, got {}", inputs.len()));
        }
        infer(self, inputs)
    }

    /// Runs the CPU kernel. `out` is the type `infer` returned for these inputs; `ctx`
    /// carries what an executor lends the op (see [`EvalContext`]).
    pub fn eval(
        &self,
        inputs: &[&Tensor],
        out: &TensorType,
        ctx: &mut EvalContext,
    ) -> Result<Storage, String> {
        eval(self, inputs, out, ctx)
    }

    /// Gradients of the inputs given the output's gradient `grad`; `None` where no gradient
    /// flows (integer inputs, indices, conditions).
    pub fn vjp(
        &self,
        inputs: &[Tensor],
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        vjp(self, inputs, out, grad)
    }
}

// Routing: the op table names each op's family; each family's file takes the op and
// finds its own variant. This is the only place that maps ops to rule files.

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    match op.row().family {
        Family::Elementwise => elementwise::infer(op, inputs),
        Family::Reduce => reduce::infer(op, inputs),
        Family::Movement => movement::infer(op, inputs),
        Family::MatMul => matmul::infer(op, inputs),
        Family::Conv => conv::infer(op, inputs),
        Family::Pool => pool::infer(op, inputs),
        Family::Index => index::infer(op, inputs),
        Family::Random => random::infer(op, inputs),
        Family::Fused => fused::infer(op, inputs),
        Family::Print => print::infer(op, inputs),
        Family::Custom => custom::infer(op, inputs),
    }
}

pub(crate) fn eval(
    op: &Op,
    inputs: &[&Tensor],
    out: &TensorType,
    ctx: &mut EvalContext,
) -> Result<Storage, String> {
    if half_compute::goes_through_f32(op, inputs, out) {
        return half_compute::eval_through_f32(op, inputs, out);
    }
    match op.row().family {
        Family::Elementwise => elementwise::eval(op, inputs, out),
        Family::Reduce => reduce::eval(op, inputs, out),
        Family::Movement => movement::eval(op, inputs, out),
        Family::MatMul => matmul::eval(op, inputs, out, ctx),
        Family::Conv => conv::eval(op, inputs, out),
        Family::Pool => pool::eval(op, inputs, out),
        Family::Index => index::eval(op, inputs, out),
        Family::Random => random::eval(op, inputs, out),
        Family::Fused => fused::eval(op, inputs, out, ctx),
        Family::Print => print::eval(op, inputs),
        Family::Custom => custom::eval(op, inputs, out),
    }
}

/// Gradients of `op`'s inputs. Ops the compiler makes run after autodiff and have none.
pub(crate) fn vjp(
    op: &Op,
    inputs: &[Tensor],
    out: &Tensor,
    grad: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let row = op.row();
    if row.compiler_made {
        return Err(crate::error::Error::invalid(format!(
            "{} has no gradient rule: the graph compiler builds it after autodiff, on compiled graphs only",
            row.name
        )));
    }
    match row.family {
        Family::Elementwise => elementwise::vjp(op, inputs, out, grad),
        Family::Reduce => reduce::vjp(op, inputs, out, grad),
        Family::Movement => movement::vjp(op, inputs, out, grad),
        Family::MatMul => matmul::vjp(inputs, grad),
        Family::Conv => conv::vjp(op, inputs, grad),
        Family::Pool => pool::vjp(op, inputs, grad),
        Family::Index => index::vjp(op, inputs, grad),
        // Samples do not depend on their key; printing passes nothing back.
        Family::Random | Family::Print => Ok(vec![None; inputs.len()]),
        // Compiler-made: answered above.
        Family::Fused => Ok(vec![None; inputs.len()]),
        Family::Custom => custom::vjp(op, inputs, out, grad),
    }
}

/// The error of a family asked about an op of another family (the op table and the
/// family's file disagree: a bug, reported rather than panicking).
pub(crate) fn not_in_family(op: &Op, family: &str) -> String {
    format!("internal error: {} routed to the {family} rules", op.name())
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
