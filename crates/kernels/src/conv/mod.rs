//! 2-D convolution (NCHW input, OIHW weight) and its two gradients, on the path the
//! planner ([`plan`]) picks for each pass.
//!
//! ```
//! use spore_kernels::conv::{conv2d, ConvGeometry};
//! // One 3x3 image, one 2x2 filter of ones, stride 1, no padding.
//! let g = ConvGeometry::new([1, 1, 3, 3], [1, 1, 2, 2], [1, 1], [1, 1], [0, 0, 0, 0], 1);
//! let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
//! assert_eq!(conv2d(&x, &[1.0; 4], &g), vec![12.0, 16.0, 24.0, 28.0]);
//! ```
//!
//! The paths, each a private module beside the planner: `general` (im2col and a GEMM;
//! always applies), `implicit` (small unpadded images: products that gather from the
//! image, wide positions, and the scatter-add input gradient), `panels` (GEMM panels
//! copied straight from the images), `winograd` (F(4x4, 3x3)) and `transposed` (an input
//! gradient as a forward convolution). `batch` splits a batch among threads and
//! `lowering` holds im2col, col2im and the bordered copies. [`bf16`] runs the three passes
//! on bfloat16 inputs; [`epilogue`] finishes a forward pass's values (a per-channel
//! factor and term, a residual, ReLU) before they are stored.

mod batch;
pub mod bf16;
pub mod epilogue;
mod general;
mod geometry;
mod implicit;
mod lowering;
mod panel_copies;
mod panels;
pub mod plan;
pub mod prepared;
mod transposed;
mod winograd;

#[cfg(test)]
mod bf16_tests;
#[cfg(test)]
mod sweep_tests;

use rayon::prelude::*;

use crate::arena;
use crate::buffer::Buffer;
use crate::elementwise::{Num, UnaryFn};
use crate::matmul::{as_f32, as_f32_mut};

pub use epilogue::ChannelEpilogue;
pub use geometry::ConvGeometry;
pub(crate) use panels::reserve_tap_rows;
pub use plan::{ConvPath, Pass, applicable, choose};

/// `n` test values in [-1, 1), a different sequence per `seed`.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
        })
        .collect()
}

/// Whether `T` is f32 (the specialised paths' type).
fn is_f32<T: Num>() -> bool {
    T::DTYPE == crate::DType::F32
}

/// `relu(conv2d(x, w))`, for a convolution whose only reader is a ReLU (the graph
/// compiler folds the two). On wide positions (LeNet's `conv1`) the ReLU is applied as
/// the output rows are copied out of the product, in L1; elsewhere it is a pass over the
/// output right after the convolution, while it is still in cache. Why: a separate ReLU
/// op read and wrote `conv1`'s 602 KB output once more per step (measured: BENCHMARKS.md,
/// "Figures moved from code comments").
pub fn conv2d_relu<T: Num>(x: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    let (mut y, applied) = convolve(x, w, g, true);
    if !applied {
        relu_in_place(&mut y);
    }
    y
}

/// ReLU over a convolution's output, in parallel blocks when it is large.
fn relu_in_place<T: Num>(y: &mut [T]) {
    let relu = |chunk: &mut [T]| chunk.iter_mut().for_each(|v| *v = v.unary(UnaryFn::Relu));
    if y.len() < crate::layout::PARALLEL_THRESHOLD {
        relu(y);
    } else {
        y.par_chunks_mut(crate::layout::PARALLEL_THRESHOLD / 4)
            .for_each(relu);
    }
}

/// Forward convolution: x [N, C, H, W] contiguous, w [O, C/g, KH, KW] contiguous ->
/// y [N, O, OH, OW].
pub fn conv2d<T: Num>(x: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    convolve(x, w, g, false).0
}

/// The forward pass on the planner's path. With `relu`, the path that copies its output
/// row by row (`Wide`) applies the ReLU as it copies; the second value says whether it
/// did.
fn convolve<T: Num>(x: &[T], w: &[T], g: &ConvGeometry, relu: bool) -> (Vec<T>, bool) {
    let path = choose(g, Pass::Forward, is_f32::<T>());
    forward_on(path, x, w, g, relu)
}

/// The forward pass on `path`, which must be one of [`applicable`]'s for `g`.
pub(crate) fn forward_on<T: Num>(
    path: ConvPath,
    x: &[T],
    w: &[T],
    g: &ConvGeometry,
    relu: bool,
) -> (Vec<T>, bool) {
    let out_len = g.o * g.ohw();
    // No input channels per group (ckk = 0): every output is an empty sum, zero.
    if g.n * out_len == 0 || g.ckk() == 0 {
        return (arena::zeroed::<T>(g.n * out_len), false);
    }
    // Not zeroed: every path writes every element.
    let mut y = arena::for_overwrite::<T>(g.n * out_len);
    let specialised = matches!(
        path,
        ConvPath::Winograd | ConvPath::Implicit | ConvPath::Wide | ConvPath::Panels
    );
    if specialised
        && let (Some(xf), Some(wf), Some(yf)) = (as_f32(x), as_f32(w), as_f32_mut(&mut y))
    {
        let applied = match path {
            ConvPath::Winograd => {
                winograd::forward(xf, wf, g, yf);
                false
            }
            ConvPath::Implicit => {
                implicit::forward(xf, wf, g, yf);
                false
            }
            ConvPath::Wide => {
                implicit::forward_wide(xf, wf, g, yf, relu);
                relu
            }
            _ => {
                panels::forward(xf, wf, g, yf);
                false
            }
        };
        return (y, applied);
    }
    general::forward(x, w, g, &mut y);
    (y, false)
}

/// Gradient with respect to the input: dy [N, O, OH, OW], w -> dx [N, C, H, W].
pub fn conv2d_backward_input<T: Num>(dy: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    let path = choose(g, Pass::InputGradient, is_f32::<T>());
    input_gradient_on(path, dy, w, g)
}

/// The input gradient on `path`, which must be one of [`applicable`]'s for `g`.
pub(crate) fn input_gradient_on<T: Num>(
    path: ConvPath,
    dy: &[T],
    w: &[T],
    g: &ConvGeometry,
) -> Vec<T> {
    let chw = g.c * g.h * g.w;
    if g.n * chw == 0 {
        return arena::zeroed::<T>(0);
    }
    if let (Some(dyf), Some(wf)) = (as_f32(dy), as_f32(w)) {
        match path {
            ConvPath::AsForward => {
                if let Some(gt) = plan::transposed_geometry(g) {
                    if let Some(dx) = one_by_one_as_forward(dyf, wf, g, &gt)
                        && let Some(dx) = T::vec_of(Buffer::F32(dx))
                    {
                        return dx;
                    }
                    let wt = transposed::transposed_filter(wf, g);
                    let (dx, _) = convolve(dyf, &wt, &gt, false);
                    arena::recycle(Buffer::F32(wt));
                    // `as_f32` matched, so T is f32 and this cast is the identity.
                    if let Some(dx) = T::vec_of(Buffer::F32(dx)) {
                        return dx;
                    }
                }
            }
            ConvPath::ScatterAdd | ConvPath::PaddedScatterAdd => {
                // Zeroed image by image inside, in parallel, just before it is added into.
                let mut dx = arena::for_overwrite::<T>(g.n * chw);
                if let Some(dxf) = as_f32_mut(&mut dx) {
                    implicit::input_gradient(dyf, wf, g, dxf);
                    return dx;
                }
            }
            ConvPath::Im2colPackedFilters => return general::input_gradient(dy, w, g, true),
            _ => {}
        }
    }
    general::input_gradient(dy, w, g, false)
}

/// Gradient with respect to the weight: dy [N, O, OH, OW], x -> dw [O, C/g, KH, KW].
pub fn conv2d_backward_filter<T: Num>(dy: &[T], x: &[T], g: &ConvGeometry) -> Vec<T> {
    let path = choose(g, Pass::FilterGradient, is_f32::<T>());
    filter_gradient_on(path, dy, x, g)
}

/// The weight gradient on `path`, which must be one of [`applicable`]'s for `g`.
pub(crate) fn filter_gradient_on<T: Num>(
    path: ConvPath,
    dy: &[T],
    x: &[T],
    g: &ConvGeometry,
) -> Vec<T> {
    let dw_len = g.o * g.ckk();
    if g.n == 0 || g.ohw() == 0 || dw_len == 0 {
        return arena::zeroed::<T>(dw_len);
    }
    let specialised = matches!(
        path,
        ConvPath::Winograd
            | ConvPath::Implicit
            | ConvPath::PaddedGathered
            | ConvPath::Panels
            | ConvPath::Wide
    );
    if specialised && let (Some(dyf), Some(xf)) = (as_f32(dy), as_f32(x)) {
        let mut dw = arena::for_overwrite::<T>(dw_len);
        if let Some(dwf) = as_f32_mut(&mut dw) {
            match path {
                ConvPath::Winograd => winograd::filter_gradient(dyf, xf, g, dwf),
                ConvPath::Panels => panels::filter_gradient(dyf, xf, g, dwf),
                ConvPath::Wide => implicit::filter_gradient_wide(dyf, xf, g, dwf),
                _ => implicit::filter_gradient(dyf, xf, g, dwf),
            }
            return dw;
        }
    }
    general::filter_gradient(dy, x, g)
}

/// The input gradient of a 1x1 convolution as its transposed forward pass `gt` on the
/// packed-panels path, with `Wᵀ` packed straight from `W` (a 1x1 filter turned by 180°
/// is itself); `None` where `gt` takes another path. Why: the transposed copy of a
/// 2048 x 512 filter took a third as long as the product it feeds (BENCHMARKS.md,
/// "Where the time goes: ResNet-50 training").
fn one_by_one_as_forward(
    dy: &[f32],
    w: &[f32],
    g: &ConvGeometry,
    gt: &ConvGeometry,
) -> Option<Vec<f32>> {
    let packs = g.kh == 1
        && g.kw == 1
        && gt.ckk() > 0
        && choose(gt, Pass::Forward, true) == ConvPath::Panels;
    if !packs {
        return None;
    }
    let mut dx = arena::for_overwrite::<f32>(g.n * g.c * g.h * g.w);
    let (filters, filter_len) = panels::packed_filters(w, g, true);
    panels::forward_packed(dy, &filters, filter_len, gt, &mut dx, None);
    arena::recycle(Buffer::F32(filters));
    Some(dx)
}

/// Whether [`conv2d_backward_input`] computes `g`'s input gradient (f32) as a forward
/// convolution of the output gradient (`ConvPath::AsForward`): ResNet's stride-1 3x3
/// layers.
pub fn input_gradient_runs_forward(g: &ConvGeometry) -> bool {
    choose(g, Pass::InputGradient, true) == ConvPath::AsForward
}
