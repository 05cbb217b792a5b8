//! The functional interface, named after MindSpore's `mindspore.ops` where natural
//! (`ops::tensor_pow`, `ops::reshape`, `ops::reduce_sum`, ...). Each is a thin call to the
//! `Tensor` method of the same operator.
//!
//! ```
//! use spore_core::{ops, Tensor};
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
//! let y = ops::tensor_pow(&x, &Tensor::scalar(2.0f32)).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 4.0, 9.0]);
//! ```

use spore_kernels::DType;

pub use crate::autodiff::{grad, value_and_grad};
use crate::error::Result;
pub use crate::prims::conv::{Conv2dOptions, PadMode};
pub use crate::prims::conv_transpose::ConvTranspose2dOptions;
pub use crate::prims::padding::PaddingMode;
pub use crate::prims::pool::Pool2dOptions;
pub use crate::prims::print::{PrintArg, print};
pub use crate::prims::strided_slice::StridedSliceMasks;
use crate::tensor::Tensor;

macro_rules! unary {
    ($($name:ident => $method:ident),* $(,)?) => {$(
        #[track_caller]
        pub fn $name(x: &Tensor) -> Result<Tensor> { x.$method() }
    )*};
}
unary!(neg => neg, exp => exp, log => log, sqrt => sqrt, rsqrt => rsqrt, abs => abs,
       sign => sign, tanh => tanh, sigmoid => sigmoid, relu => relu, sin => sin, cos => cos,
       erf => erf, square => square, reciprocal => reciprocal, stop_gradient => stop_gradient);

macro_rules! binary {
    ($($name:ident => $method:ident),* $(,)?) => {$(
        #[track_caller]
        pub fn $name(x: &Tensor, y: &Tensor) -> Result<Tensor> { x.$method(y) }
    )*};
}
binary!(add => add, sub => sub, mul => mul, div => div, tensor_pow => pow, pow => pow,
        maximum => maximum, minimum => minimum, equal => equal, not_equal => not_equal,
        less => less, less_equal => less_equal, greater => greater,
        greater_equal => greater_equal, matmul => matmul);

/// MindSpore's `ops.MatMul(transpose_a, transpose_b)(a, b)`.
#[track_caller]
pub fn mat_mul(a: &Tensor, b: &Tensor, transpose_a: bool, transpose_b: bool) -> Result<Tensor> {
    a.matmul_t(b, transpose_a, transpose_b)
}
/// MindSpore's `ops.BatchMatMul(transpose_a, transpose_b)(a, b)`: operands of rank 3 or
/// more, batch axes broadcast.
#[track_caller]
pub fn batch_matmul(
    a: &Tensor,
    b: &Tensor,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Tensor> {
    if a.rank() < 3 || b.rank() < 3 {
        return Err(crate::error::Error::invalid_here(format!(
            "BatchMatMul: both inputs must have rank >= 3, got {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    a.matmul_t(b, transpose_a, transpose_b)
}

#[track_caller]
pub fn select(cond: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    Tensor::select(cond, x, y)
}
#[track_caller]
pub fn cast(x: &Tensor, dtype: DType) -> Result<Tensor> {
    x.cast(dtype)
}
#[track_caller]
pub fn reduce_sum(x: &Tensor, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
    x.sum(axes, keep_dims)
}
#[track_caller]
pub fn reduce_max(x: &Tensor, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
    x.max(axes, keep_dims)
}
#[track_caller]
pub fn reduce_min(x: &Tensor, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
    x.min(axes, keep_dims)
}
#[track_caller]
pub fn reduce_mean(x: &Tensor, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
    x.mean(axes, keep_dims)
}
#[track_caller]
pub fn argmax(x: &Tensor, axis: isize, keep_dims: bool) -> Result<Tensor> {
    x.argmax(axis, keep_dims)
}
#[track_caller]
pub fn argmin(x: &Tensor, axis: isize, keep_dims: bool) -> Result<Tensor> {
    x.argmin(axis, keep_dims)
}
/// Reshape where one entry may be -1 (inferred), as MindSpore's `ops.reshape`.
#[track_caller]
pub fn reshape(x: &Tensor, shape: &[isize]) -> Result<Tensor> {
    x.reshape_infer(shape)
}
#[track_caller]
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    x.permute(perm)
}
#[track_caller]
pub fn broadcast_to(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    x.broadcast_to(shape)
}
/// MindSpore's `ops.StridedSlice(begin_mask, ..., shrink_axis_mask)(x, begin, end,
/// strides)`; `StridedSliceMasks::default()` is the plain slice.
#[track_caller]
pub fn strided_slice(
    x: &Tensor,
    begin: &[isize],
    end: &[isize],
    strides: &[isize],
    masks: &StridedSliceMasks,
) -> Result<Tensor> {
    x.strided_slice_masked(begin, end, strides, masks)
}
/// MindSpore's `ops.pad` with its modes; `paddings` holds one (before, after) pair per
/// axis in axis order (MindSpore's flat tuple starts from the last axis), negative
/// amounts crop.
#[track_caller]
pub fn pad(x: &Tensor, paddings: &[(isize, isize)], mode: PaddingMode) -> Result<Tensor> {
    x.pad_with(paddings, mode)
}
#[track_caller]
pub fn concat(xs: &[&Tensor], axis: isize) -> Result<Tensor> {
    Tensor::concat(xs, axis)
}
#[track_caller]
pub fn stack(xs: &[&Tensor], axis: isize) -> Result<Tensor> {
    Tensor::stack(xs, axis)
}
#[track_caller]
pub fn squeeze(x: &Tensor, axes: &[isize]) -> Result<Tensor> {
    x.squeeze(axes)
}
#[track_caller]
pub fn expand_dims(x: &Tensor, axis: isize) -> Result<Tensor> {
    x.unsqueeze(axis)
}
#[track_caller]
pub fn flatten(x: &Tensor) -> Result<Tensor> {
    x.flatten(1)
}
#[track_caller]
pub fn conv2d(x: &Tensor, weight: &Tensor, opts: &Conv2dOptions) -> Result<Tensor> {
    x.conv2d(weight, opts)
}
#[track_caller]
pub fn conv_transpose2d(
    x: &Tensor,
    weight: &Tensor,
    opts: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    x.conv_transpose2d(weight, opts)
}
#[track_caller]
pub fn max_pool2d(x: &Tensor, opts: &Pool2dOptions) -> Result<Tensor> {
    x.max_pool2d(opts)
}
#[track_caller]
pub fn avg_pool2d(x: &Tensor, opts: &Pool2dOptions) -> Result<Tensor> {
    x.avg_pool2d(opts)
}
#[track_caller]
pub fn gather(x: &Tensor, indices: &Tensor, axis: isize) -> Result<Tensor> {
    x.gather(indices, axis)
}
#[track_caller]
pub fn scatter_add(x: &Tensor, indices: &Tensor, updates: &Tensor, axis: isize) -> Result<Tensor> {
    x.scatter_add(indices, updates, axis)
}
/// MindSpore's `ops.one_hot(indices, depth, on_value, off_value, axis)`.
#[track_caller]
pub fn one_hot(
    indices: &Tensor,
    depth: usize,
    on_value: &Tensor,
    off_value: &Tensor,
    axis: isize,
) -> Result<Tensor> {
    indices.one_hot_with(depth, on_value, off_value, axis)
}
#[track_caller]
pub fn softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    x.softmax(axis)
}
#[track_caller]
pub fn log_softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    x.log_softmax(axis)
}
#[track_caller]
pub fn dropout(x: &Tensor, p: f64, training: bool) -> Result<Tensor> {
    x.dropout(p, training)
}
#[track_caller]
pub fn gelu(x: &Tensor, approximate: bool) -> Result<Tensor> {
    x.gelu(approximate)
}
