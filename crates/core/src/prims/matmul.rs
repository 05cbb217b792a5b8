//! `MatMul`: batched matrix product `[..., m, k] x [..., k, n]` with broadcast batch axes.
//!
//! ```
//! use spore_core::Tensor;
//! let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let i = Tensor::eye(2, spore_core::DType::F32).unwrap();
//! assert_eq!(a.matmul(&i).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
//! ```

use std::panic::Location;
use std::sync::Arc;

use spore_kernels::matmul_epilogue::{
    BufferEpilogue, Contiguous, matmul_add_in_place, matmul_with_epilogue,
};
use spore_kernels::{Buffer, DType, Dims, matmul as k};

use super::elementwise::when;
use super::in_place::EvalContext;
use super::{broadcast_shapes, require_same_dtype, sum_to_shape};
use crate::apply::apply;
use crate::error::Result;
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    match op {
        Op::MatMul => infer_product(inputs),
        Op::MatMulAdd { .. } => infer_plus(inputs),
        Op::MatMulBias { .. } => infer_bias(inputs),
        Op::MatMulReluGrad => infer_masked(inputs),
        _ => Err(super::not_in_family(op, "matmul")),
    }
}

pub(crate) fn eval(
    op: &Op,
    inputs: &[&Tensor],
    out: &TensorType,
    ctx: &mut EvalContext,
) -> Result<Storage, String> {
    match op {
        Op::MatMul => eval_product(inputs, out),
        Op::MatMulAdd { beta_bits } => eval_plus(inputs, f64::from_bits(*beta_bits), out, ctx),
        Op::MatMulBias { relu } => eval_bias(inputs, *relu, out),
        Op::MatMulReluGrad => eval_masked(inputs, out),
        _ => Err(super::not_in_family(op, "matmul")),
    }
}

fn infer_product(inputs: &[&TensorType]) -> Result<TensorType, String> {
    let (a, b) = (inputs[0], inputs[1]);
    require_same_dtype(a, b)?;
    if a.dtype == DType::Bool {
        return Err("inputs must be numeric, got Bool".into());
    }
    if a.rank() < 2 || b.rank() < 2 {
        return Err(format!(
            "inputs must have rank >= 2, got {:?} and {:?}",
            a.shape, b.shape
        ));
    }
    let (m, ka) = (a.shape[a.rank() - 2], a.shape[a.rank() - 1]);
    let (kb, n) = (b.shape[b.rank() - 2], b.shape[b.rank() - 1]);
    if ka != kb {
        return Err(format!(
            "inner dimensions differ: {:?} x {:?} ({ka} != {kb})",
            a.shape, b.shape
        ));
    }
    let mut shape = broadcast_shapes(&a.shape[..a.rank() - 2], &b.shape[..b.rank() - 2])?;
    shape.extend([m, n]);
    Ok(TensorType::new(&shape, a.dtype))
}

fn eval_product(inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    let (a, b) = (inputs[0], inputs[1]);
    let batch = &out.shape[..out.rank() - 2];
    let shape_a: Dims = batch
        .iter()
        .copied()
        .chain(a.shape()[a.rank() - 2..].iter().copied())
        .collect();
    let shape_b: Dims = batch
        .iter()
        .copied()
        .chain(b.shape()[b.rank() - 2..].iter().copied())
        .collect();
    let la = a.layout().broadcast_to(&shape_a);
    let lb = b.layout().broadcast_to(&shape_b);
    let buf = k::matmul(&a.buf().buffer, &la, &b.buf().buffer, &lb, batch)?;
    Ok(Storage::contiguous(buf, &out.shape))
}

/// `MatMulAdd(A, B, D)`: two float matrices and an addend of their product's type.
fn infer_plus(inputs: &[&TensorType]) -> Result<TensorType, String> {
    infer_shaped_as_product(inputs, "addend")
}

/// `MatMulReluGrad(A, B, Y)`: two float matrices and a mask of their product's type.
fn infer_masked(inputs: &[&TensorType]) -> Result<TensorType, String> {
    infer_shaped_as_product(inputs, "mask")
}

/// The product type of two float matrices, which the third input (`what`) must have.
fn infer_shaped_as_product(inputs: &[&TensorType], what: &str) -> Result<TensorType, String> {
    let product = infer_matrices(inputs)?;
    if inputs[2] != &product {
        return Err(format!(
            "the {what} must have the product's type {product}, got {}",
            inputs[2]
        ));
    }
    Ok(product)
}

/// `MatMulBias(A, B, bias)`: two float matrices and a bias of one value per column.
fn infer_bias(inputs: &[&TensorType]) -> Result<TensorType, String> {
    let product = infer_matrices(inputs)?;
    let n = product.shape[1];
    if inputs[2].shape.as_slice() != [n] || inputs[2].dtype != product.dtype {
        return Err(format!(
            "the bias must be [{n}] of {}, got {}",
            product.dtype, inputs[2]
        ));
    }
    Ok(product)
}

/// The product type of the first two inputs, which must be float matrices.
fn infer_matrices(inputs: &[&TensorType]) -> Result<TensorType, String> {
    let product = infer_product(&inputs[..2])?;
    if product.rank() != 2 || !product.dtype.is_float() {
        return Err(format!(
            "expected two float matrices, got {} and {}",
            inputs[0], inputs[1]
        ));
    }
    Ok(product)
}

/// `A · B + beta · D`, each `beta · D` rounded before the sum: the bits of a product and
/// a separate multiply-add. Written over D's buffer when an executor lent it (see
/// [`super::in_place`]); D's tensor is then empty and is not read.
fn eval_plus(
    inputs: &[&Tensor],
    beta: f64,
    out: &TensorType,
    ctx: &mut EvalContext,
) -> Result<Storage, String> {
    match ctx.take_lent() {
        Some((2, mut d)) => {
            let (a, b) = (inputs[0], inputs[1]);
            let (la, lb) = (a.layout(), b.layout());
            let (ba, bb) = (&a.buf().buffer, &b.buf().buffer);
            if let Err(e) = matmul_add_in_place(&mut d, ba, &la, bb, &lb, beta) {
                // Left as it was: the executor gives it back to its owner.
                ctx.relend(2, d);
                return Err(e);
            }
            return Ok(Storage::contiguous(d, &out.shape));
        }
        Some((r, d)) => {
            ctx.relend(r, d);
            return Err(format!(
                "internal: MatMulAdd was lent input {r}, not its addend"
            ));
        }
        None => {}
    }
    eval_with(inputs, out, |d| BufferEpilogue {
        addend: Some((d, beta)),
        ..Default::default()
    })
}

/// `A · B + bias`, then ReLU with `relu`: the bits of the product, a broadcast add and a
/// ReLU.
fn eval_bias(inputs: &[&Tensor], relu: bool, out: &TensorType) -> Result<Storage, String> {
    eval_with(inputs, out, |bias| BufferEpilogue {
        bias: Some(bias),
        relu,
        ..Default::default()
    })
}

/// `Y > 0 ? A · B : 0` (`+0` where `Y` is not positive, NaN included): the bits of the
/// product and a `Select(Y > 0, P, 0)`.
fn eval_masked(inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    eval_with(inputs, out, |y| BufferEpilogue {
        mask: Some(y),
        ..Default::default()
    })
}

/// The product of `inputs[0]` and `inputs[1]` with the epilogue `epilogue` makes of
/// `inputs[2]` (read where it lies when contiguous).
fn eval_with(
    inputs: &[&Tensor],
    out: &TensorType,
    epilogue: impl for<'a> FnOnce(Contiguous<'a>) -> BufferEpilogue<'a>,
) -> Result<Storage, String> {
    let (a, b) = (inputs[0], inputs[1]);
    let (operand, offset) = contiguous_run(inputs[2]);
    let buf = matmul_with_epilogue(
        &a.buf().buffer,
        &a.layout(),
        &b.buf().buffer,
        &b.layout(),
        &epilogue((&operand, offset)),
    )?;
    Ok(Storage::contiguous(buf, &out.shape))
}

/// A tensor's values as one contiguous run of a buffer: (buffer, offset of the first
/// value). A contiguous view of a larger buffer is used where it lies; anything else is
/// copied.
fn contiguous_run(t: &Tensor) -> (Arc<Buffer>, usize) {
    let s = t.buf();
    if s.layout.is_contiguous() && s.buffer.len() >= s.layout.offset + t.numel() {
        (s.buffer.clone(), s.layout.offset)
    } else {
        (t.contiguous_buffer(), 0)
    }
}

pub(crate) fn vjp(inputs: &[Tensor], g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let (a, b) = (&inputs[0], &inputs[1]);
    Ok(vec![
        when(a.requires_grad(), || {
            sum_to_shape(&g.matmul(&b.transpose()?)?, a.shape())
        })?,
        when(b.requires_grad(), || {
            if is_transposed_matrix(b) && same_batch(a, b) {
                // b = Wᵀ of a contiguous W (a `Dense` weight, or a batch of matrices so
                // viewed): (gᵀ a)ᵀ equals aᵀ g and is laid out like b, so the gradient that
                // reaches W is contiguous and the optimizer reads it in order. (Traced graphs
                // get the same from the simplify pass, which also catches views of views,
                // such as attention's keys split into heads, that this test does not.)
                g.transpose()?.matmul(a)?.transpose()
            } else {
                sum_to_shape(&a.transpose()?.matmul(g)?, b.shape())
            }
        })?,
    ])
}

/// True when `a` and `b` have the same batch axes (nothing broadcast).
fn same_batch(a: &Tensor, b: &Tensor) -> bool {
    let r = a.rank();
    r >= 2 && b.rank() == r && a.shape()[..r - 2] == b.shape()[..r - 2]
}

/// True for a concrete tensor of rank 2 or more that is the view, with its last two axes
/// swapped, of a contiguous tensor.
fn is_transposed_matrix(t: &Tensor) -> bool {
    let r = t.rank();
    if t.is_symbolic() || r < 2 || t.shape()[r - 1] <= 1 {
        return false;
    }
    let mut dims = t.shape().to_vec();
    dims.swap(r - 2, r - 1);
    let mut strides = spore_kernels::layout::Layout::contiguous(&dims).strides;
    strides.swap(r - 2, r - 1);
    t.layout().strides[..] == strides[..]
}

impl Tensor {
    /// Matrix product with NumPy's rules: over the last two axes with leading axes
    /// broadcast; a 1-d left operand is a row vector and a 1-d right operand a column
    /// vector, each axis removed from the result again (so vector · vector is a scalar).
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        let loc = Location::caller();
        if self.rank() >= 2 && other.rank() >= 2 {
            return apply(Op::MatMul, &[self, other], loc);
        }
        // Rank 0 reaches the primitive, whose error names both shapes.
        if self.rank() == 0 || other.rank() == 0 {
            return apply(Op::MatMul, &[self, other], loc);
        }
        let a = if self.rank() == 1 {
            self.unsqueeze(0)?
        } else {
            self.clone()
        };
        let b = if other.rank() == 1 {
            other.unsqueeze(-1)?
        } else {
            other.clone()
        };
        let mut y = apply(Op::MatMul, &[&a, &b], loc)?;
        if other.rank() == 1 {
            y = y.squeeze(&[-1])?;
        }
        if self.rank() == 1 {
            y = y.squeeze(&[-1 - (other.rank() >= 2) as isize])?;
        }
        Ok(y)
    }

    /// MindSpore's `MatMul`/`BatchMatMul` with `transpose_a`/`transpose_b`: the product of
    /// the operands with their last two axes swapped where asked (as views: no copy).
    #[track_caller]
    pub fn matmul_t(&self, other: &Tensor, transpose_a: bool, transpose_b: bool) -> Result<Tensor> {
        let loc = Location::caller();
        if self.rank() < 2 || other.rank() < 2 {
            return Err(crate::apply::op_error(
                &Op::MatMul,
                format!(
                    "transpose_a/transpose_b need operands of rank >= 2, got {:?} and {:?}",
                    self.shape(),
                    other.shape()
                ),
                &[self, other],
                loc,
            ));
        }
        let a = if transpose_a {
            self.transpose()?
        } else {
            self.clone()
        };
        let b = if transpose_b {
            other.transpose()?
        } else {
            other.clone()
        };
        apply(Op::MatMul, &[&a, &b], loc)
    }
}
