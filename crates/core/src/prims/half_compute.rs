//! float16 and bfloat16 tensors through ops whose kernels compute in float32: matrix
//! products, convolutions, average pooling, reductions, indexing. Their 16-bit
//! inputs are widened (exactly), the float32 kernel runs, and each 16-bit output is
//! rounded once, to nearest with ties to even. Elementwise and movement ops handle
//! 16-bit buffers themselves (per element in float32, or by copying), with the same
//! rounding.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap().cast(DType::BF16).unwrap();
//! let p = a.matmul(&a).unwrap();
//! assert_eq!(p.dtype(), DType::BF16);
//! assert_eq!(p.cast(DType::F32).unwrap().to_vec::<f32>().unwrap(), vec![7.0, 10.0, 15.0, 22.0]);
//! ```
//!
//! Why here and not in each kernel: one place gives every op the same rule (accumulate
//! in float32, round once), which is what PyTorch and MindSpore do on CPUs without 16-bit
//! arithmetic. Kernels that read 16-bit values themselves take over op by op, with the
//! same values: bfloat16 matrix products and convolutions (`spore_kernels::bf16_gemm`),
//! max pooling and its gradients (`spore_kernels::pool`), fused loops.

use spore_kernels::half_float::widen;

use spore_kernels::DType;

use super::in_place::EvalContext;
use crate::op::program::FusedProgram;
use crate::op::{Family, Op};
use crate::tensor::{Storage, Tensor, TensorType};

/// Whether `op` on these types goes through float32 here: some input or the output is
/// 16-bit and the op's family does not handle 16-bit buffers itself.
pub(crate) fn goes_through_f32(op: &Op, inputs: &[&Tensor], out: &TensorType) -> bool {
    let half = out.dtype.is_half() || inputs.iter().any(|t| t.dtype().is_half());
    let family_handles_it = matches!(
        op.row().family,
        Family::Elementwise | Family::Movement | Family::Print | Family::Custom
    );
    let pools_itself = pools_16_bit_planes(op) && inputs.iter().all(|t| t.dtype() == out.dtype);
    half && !family_handles_it
        && !bf16_product(op, inputs)
        && !handles_16_bit_itself(op)
        && !pools_itself
}

/// Max pooling and its gradients, on inputs of their output's type: the kernel widens a
/// few planes at a time (`spore_kernels::pool`), and gives the values computing in
/// float32 here would.
fn pools_16_bit_planes(op: &Op) -> bool {
    matches!(
        op,
        Op::MaxPool2d(_) | Op::MaxPool2dGrad(_) | Op::MaxPool2dGradOfRelu(_)
    )
}

/// Fused loops read 16-bit inputs themselves, widening each chunk as they load it (a
/// float32 loop reading a cast's 16-bit input), and a 16-bit loop rounds each
/// instruction's result itself (`prims::fused`), giving the values of its ops run one by
/// one. (A 16-bit `FusedReduceSum`, built by hand, goes through float32 here.)
fn handles_16_bit_itself(op: &Op) -> bool {
    match op {
        Op::Fused(_) => true,
        Op::FusedReduceSum { program, .. } => !program.compute.is_half(),
        _ => false,
    }
}

/// A bfloat16 matrix product or convolution: the kernels multiply bfloat16 operands
/// themselves (with AVX512_BF16 dot products where the CPU has them), accumulating in
/// float32 as here.
fn bf16_product(op: &Op, inputs: &[&Tensor]) -> bool {
    let product = matches!(
        op,
        Op::MatMul
            | Op::Conv2d(_)
            | Op::Conv2dRelu(_)
            | Op::Conv2dBackpropInput { .. }
            | Op::Conv2dBackpropFilter { .. }
    );
    product && inputs.iter().all(|t| t.dtype() == DType::BF16)
}

/// Runs `op` on the float32 values of its 16-bit inputs and rounds its 16-bit output.
pub(crate) fn eval_through_f32(
    op: &Op,
    inputs: &[&Tensor],
    out: &TensorType,
) -> Result<Storage, String> {
    let wide: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if t.dtype().is_half() {
                widened(t)
            } else {
                Ok((*t).clone())
            }
        })
        .collect::<Result<_, String>>()?;
    let refs: Vec<&Tensor> = wide.iter().collect();
    let wide_out = if out.dtype.is_half() {
        TensorType::new(&out.shape, DType::F32)
    } else {
        out.clone()
    };
    let op = widened_program(op);
    let result = super::eval(&op, &refs, &wide_out, &mut EvalContext::default())?;
    if !out.dtype.is_half() {
        return Ok(result);
    }
    let narrow = spore_kernels::elementwise::cast(&result.buffer, &result.layout, out.dtype);
    Ok(Storage::contiguous(narrow, &out.shape))
}

/// The float32 values of a 16-bit tensor. A view over most of its buffer (a transposed
/// weight, `Wᵀ`) is widened as the whole buffer, one vectorized run, and keeps its
/// strides; the float32 kernels read views as they read any other.
///
/// Why: widening a transposed view element by element, through its strides, cost more
/// than the float32 product it fed.
fn widened(t: &Tensor) -> Result<Tensor, String> {
    let s = t.buf();
    if s.layout.is_contiguous() || s.buffer.len() > 2 * t.numel() {
        return Tensor::from_buffer(widen(&s.buffer, &s.layout), t.shape())
            .map_err(|e| e.to_string());
    }
    let all = widen(
        &s.buffer,
        &spore_kernels::Layout::contiguous(&[s.buffer.len()]),
    );
    let storage = Storage {
        buffer: std::sync::Arc::new(all),
        layout: s.layout.clone(),
    };
    Ok(Tensor::from_parts(
        TensorType::new(t.shape(), DType::F32),
        storage,
        None,
        false,
    ))
}

/// A `FusedReduceSum` over 16-bit values computes in float32 here: its registers and its
/// sum, rounded once at the end. (The compiler makes none over 16-bit values; one built
/// by hand gets this. `FusedElementwise` over 16-bit values rounds each step itself.)
fn widened_program(op: &Op) -> std::borrow::Cow<'_, Op> {
    let widen = |p: &FusedProgram| {
        let wide = |d: DType| if d.is_half() { DType::F32 } else { d };
        FusedProgram {
            compute: wide(p.compute),
            out_dtype: wide(p.out_dtype),
            ..p.clone()
        }
    };
    match op {
        Op::FusedReduceSum {
            program,
            axes,
            keep_dims,
        } => std::borrow::Cow::Owned(Op::FusedReduceSum {
            program: widen(program),
            axes: axes.clone(),
            keep_dims: *keep_dims,
        }),
        other => std::borrow::Cow::Borrowed(other),
    }
}
