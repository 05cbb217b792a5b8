//! bfloat16 convolutions: the three passes on bfloat16 inputs, accumulated in float32 and
//! rounded once to bfloat16 (nearest, ties to even), as mixed-precision training wants.
//!
//! ```
//! use spore_kernels::bf16;
//! use spore_kernels::conv::{bf16 as conv_bf16, ConvGeometry, Pass};
//! // One 3x3 image, one 2x2 filter of ones, stride 1, no padding.
//! let g = ConvGeometry::new([1, 1, 3, 3], [1, 1, 2, 2], [1, 1], [1, 1], [0, 0, 0, 0], 1);
//! let x: Vec<bf16> = (1..=9).map(|v| bf16::from_f32(v as f32)).collect();
//! let path = conv_bf16::best_path(&g, Pass::Forward);
//! let y = conv_bf16::forward(path, &x, &[bf16::ONE; 4], &g, false);
//! let y: Vec<f32> = y.iter().map(|v| v.to_f32()).collect();
//! assert_eq!(y, vec![12.0, 16.0, 24.0, 28.0]);
//! ```
//!
//! Two ways to compute each pass ([`Path`]):
//! - **Native** (CPUs with AVX512_BF16): im2col copies bfloat16 windows (no widening), and
//!   the products run on [`crate::bf16_gemm`]'s dot products, twice the float32 FMA rate.
//!   A 1x1 convolution with stride 1 and no padding reads its images as they lie when
//!   they have at least 256 positions.
//! - **Widened**: inputs widened to float32, the float32 planner's path, output rounded.
//!
//! [`best_path`] takes the native form except for small products (LeNet's layers), where
//! the float32 paths made for them win, and where the float32 path is Winograd
//! F(4x4, 3x3) on images of 8x8 and more: that form does 4x fewer multiply-adds than a
//! direct convolution, more than the dot products' 2x can win back (ResNet's stride-1
//! 3x3 layers but the last stage's).

use half::bf16;
use rayon::prelude::*;

use super::batch::{batch_blocks, group_output_gradient, sum_partials};
use super::general::{images_per_gemm, lower_images};
use super::geometry::ConvGeometry;
use super::lowering::col2im;
use super::plan::{ConvPath, Pass, choose, transposed_geometry};
use crate::arena;
use crate::bf16_gemm::{self, Path, gemm_bf16};
use crate::buffer::Buffer;
use crate::half_float::{round_to_bf16, widen_bf16};
use crate::matmul::MatRef;

/// Fewest rows of the product (output channels per group for the forward pass and the
/// weight gradient, input taps per group for the input gradient) for the native path.
/// Why: the microkernel's tiles are 8 rows by 32 columns, and below these the float32
/// paths made for small layers win: LeNet's forward passes and weight gradients (6 and
/// 16 output channels) ran 0.35-0.9x as fast natively, its input gradients (25 and 150
/// taps) 1.2-2.4x faster (`conv_micro lenet bf16`).
const NATIVE_MIN_ROWS: [usize; 2] = [32, 16];

/// Output positions per image below which the native path beats Winograd, and above
/// which it does for the weight gradient too. Why: on small images Winograd's
/// transforms outweigh its savings: ResNet-50's 7x7 layers ran 1.3-1.6x faster natively
/// in all three passes, ResNet-18's 4x4 ones 1.0-1.4x in the forward pass and the input
/// gradient but 0.80-0.94x in the weight gradient, and 8x8 ones 0.5-0.85x
/// (`conv_micro "3x3" bf16`).
const NATIVE_BEATS_WINOGRAD: (usize, usize) = (64, 16);

/// The path for `pass` of `g`: [`Path::Native`] where the CPU has AVX512_BF16, the
/// product has at least [`NATIVE_MIN_ROWS`] rows, and the float32 path would not be
/// Winograd (directly, or as the forward convolution that an input gradient becomes)
/// on images large enough for Winograd to win ([`NATIVE_BEATS_WINOGRAD`]); else
/// [`Path::Widened`].
pub fn best_path(g: &ConvGeometry, pass: Pass) -> Path {
    let (below, weight_gradient_above) = NATIVE_BEATS_WINOGRAD;
    let small_image =
        g.ohw() < below && (pass != Pass::FilterGradient || g.ohw() > weight_gradient_above);
    let winograd = !small_image
        && match pass {
            Pass::InputGradient => {
                choose(g, pass, true) == ConvPath::AsForward
                    && transposed_geometry(g)
                        .is_some_and(|gt| choose(&gt, Pass::Forward, true) == ConvPath::Winograd)
            }
            _ => choose(g, pass, true) == ConvPath::Winograd,
        };
    let rows = match pass {
        Pass::InputGradient => g.ckk() >= NATIVE_MIN_ROWS[1],
        _ => g.og() >= NATIVE_MIN_ROWS[0],
    };
    if bf16_gemm::native_available() && rows && !winograd {
        Path::Native
    } else {
        Path::Widened
    }
}

/// Forward pass: x [N, C, H, W], w [O, C/g, KH, KW] -> y [N, O, OH, OW], with `relu`
/// applied to the result.
///
/// # Panics
/// When `path` is [`Path::Native`] on a CPU without AVX512_BF16.
pub fn forward(path: Path, x: &[bf16], w: &[bf16], g: &ConvGeometry, relu: bool) -> Vec<bf16> {
    let out_len = g.n * g.o * g.ohw();
    let mut y = match path {
        Path::Widened => widened(x, w, |x, w| {
            if relu {
                super::conv2d_relu(x, w, g)
            } else {
                super::conv2d(x, w, g)
            }
        }),
        Path::Native if out_len == 0 || g.ckk() == 0 => arena::zeroed::<bf16>(out_len),
        Path::Native => {
            let mut y = arena::for_overwrite::<bf16>(out_len);
            native_forward(x, w, g, &mut y);
            y
        }
    };
    if relu && path == Path::Native {
        super::relu_in_place(&mut y);
    }
    y
}

/// Input gradient: dy [N, O, OH, OW], w -> dx [N, C, H, W].
///
/// # Panics
/// As [`forward`].
pub fn input_gradient(path: Path, dy: &[bf16], w: &[bf16], g: &ConvGeometry) -> Vec<bf16> {
    let dx_len = g.n * g.c * g.h * g.w;
    match path {
        Path::Widened => widened(dy, w, |dy, w| super::conv2d_backward_input(dy, w, g)),
        Path::Native if dx_len == 0 || g.ohw() == 0 || g.og() == 0 => arena::zeroed::<bf16>(dx_len),
        Path::Native => {
            let mut dx = arena::for_overwrite::<bf16>(dx_len);
            native_input_gradient(dy, w, g, &mut dx);
            dx
        }
    }
}

/// Weight gradient: dy [N, O, OH, OW], x -> dw [O, C/g, KH, KW].
///
/// # Panics
/// As [`forward`].
pub fn filter_gradient(path: Path, dy: &[bf16], x: &[bf16], g: &ConvGeometry) -> Vec<bf16> {
    let dw_len = g.o * g.ckk();
    match path {
        Path::Widened => widened(dy, x, |dy, x| super::conv2d_backward_filter(dy, x, g)),
        Path::Native if g.n == 0 || g.ohw() == 0 || dw_len == 0 => arena::zeroed::<bf16>(dw_len),
        Path::Native => native_filter_gradient(dy, x, g),
    }
}

/// `f` on the float32 values of `a` and `b`, its result rounded to bfloat16.
fn widened(a: &[bf16], b: &[bf16], f: impl FnOnce(&[f32], &[f32]) -> Vec<f32>) -> Vec<bf16> {
    let wide = |v: &[bf16]| {
        let mut out = arena::for_overwrite::<f32>(v.len());
        widen_bf16(v, &mut out);
        out
    };
    let (wa, wb) = (wide(a), wide(b));
    let result = f(&wa, &wb);
    let mut out = arena::for_overwrite::<bf16>(result.len());
    round_to_bf16(&result, &mut out);
    for v in [wa, wb, result] {
        arena::recycle(Buffer::F32(v));
    }
    out
}

/// Fewest positions per image for [`reads_images_in_place`]. Why: a product per image
/// packs the filters again for each image, and with ResNet-50's 14x14 and 7x7 layers
/// that packing outweighed the narrow products; there, im2col's copies (several images
/// side by side per product) run 1.1-1.4x faster (`conv_micro r50 bf16`).
const IN_PLACE_MIN_POSITIONS: usize = 256;

/// Whether each image is its own column matrix (1x1 filter, stride 1, no padding) and
/// wide enough to be a product of its own: the products then read the images in place,
/// one image per product, with no im2col copy.
pub(super) fn reads_images_in_place(g: &ConvGeometry) -> bool {
    let one_by_one = g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.pads == [0; 4];
    one_by_one && g.ohw() >= IN_PLACE_MIN_POSITIONS
}

/// How the native passes split the batch: one block of `per` consecutive images per
/// thread (`blocks` of them), `nb` images side by side per product, and the threads left
/// over shared among the blocks' products (all of them for a batch of one image; two each
/// for 8 images on 16 threads).
struct Split {
    blocks: usize,
    per: usize,
    nb: usize,
    threads: usize,
}

impl Split {
    fn new(g: &ConvGeometry) -> Split {
        let (blocks, per) = batch_blocks(g.n);
        let nb = if reads_images_in_place(g) {
            1
        } else {
            images_per_gemm::<bf16>(g, per)
        };
        let threads = (rayon::current_num_threads() / blocks).max(1);
        Split {
            blocks,
            per,
            nb,
            threads,
        }
    }
}

/// A row-major matrix of `cols` columns at `offset`.
fn rows_of(offset: usize, cols: usize) -> MatRef {
    MatRef {
        offset,
        row_stride: cols as isize,
        col_stride: 1,
    }
}

/// The column matrix ([ckk, k * ohw]) of images `s0..s0 + k`, group `group`: the images
/// themselves where [`reads_images_in_place`] (then `k` is 1), else im2col into `cols`.
fn columns<'a>(
    x: &'a [bf16],
    g: &ConvGeometry,
    (s0, k): (usize, usize),
    group: usize,
    cols: &'a mut [bf16],
) -> (&'a [bf16], MatRef) {
    if reads_images_in_place(g) {
        let at = (s0 * g.c + group * g.cg()) * g.h * g.w;
        return (x, rows_of(at, g.ohw()));
    }
    lower_images(x, g, group, s0, k, cols);
    (cols, rows_of(0, k * g.ohw()))
}

/// Scratch of `len` values per block (at least one, so that chunks of it exist).
fn per_block<T: crate::Element>(split: &Split, len: usize) -> (Vec<T>, usize) {
    let len = len.max(1);
    (arena::for_overwrite::<T>(split.blocks * len), len)
}

fn native_forward(x: &[bf16], w: &[bf16], g: &ConvGeometry, y: &mut [bf16]) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let out_len = g.o * ohw;
    let s = Split::new(g);
    let in_place = reads_images_in_place(g);
    let (mut cols, cols_len) = per_block::<bf16>(&s, if in_place { 0 } else { ckk * s.nb * ohw });
    let (mut products, product_len) = per_block::<f32>(&s, og * s.nb * ohw);
    y.par_chunks_mut(s.per * out_len)
        .zip(cols.par_chunks_mut(cols_len))
        .zip(products.par_chunks_mut(product_len))
        .enumerate()
        .for_each(|(b, ((yb, cols), product))| {
            for (c, ys) in yb.chunks_mut(s.nb * out_len).enumerate() {
                let (s0, k) = (b * s.per + c * s.nb, ys.len() / out_len);
                let ld = k * ohw;
                for group in 0..g.groups {
                    let (src, cm) = columns(x, g, (s0, k), group, cols);
                    let product = &mut product[..og * ld];
                    let wg = rows_of(group * og * ckk, ckk);
                    let dims = (og, ld, ckk);
                    gemm_bf16(
                        Path::Native,
                        product,
                        false,
                        dims,
                        (w, wg),
                        (src, cm),
                        s.threads,
                    );
                    // Each image's rows of the product, rounded into its output planes.
                    for (i, image) in ys.chunks_mut(out_len).enumerate() {
                        for o in 0..og {
                            let row = &product[o * ld + i * ohw..][..ohw];
                            round_to_bf16(row, &mut image[(group * og + o) * ohw..][..ohw]);
                        }
                    }
                }
            }
        });
    arena::recycle(Buffer::BF16(cols));
    arena::recycle(Buffer::F32(products));
}

fn native_input_gradient(dy: &[bf16], w: &[bf16], g: &ConvGeometry, dx: &mut [bf16]) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let chw = g.c * g.h * g.w;
    let s = Split::new(g);
    let in_place = reads_images_in_place(g);
    let (mut cols, cols_len) = per_block::<f32>(&s, if in_place { 0 } else { ckk * s.nb * ohw });
    let (mut images, images_len) = per_block::<f32>(&s, s.nb * chw);
    let (mut gathered, gathered_len) = per_block::<bf16>(&s, og * s.nb * ohw);
    dx.par_chunks_mut(s.per * chw)
        .zip(cols.par_chunks_mut(cols_len))
        .zip(images.par_chunks_mut(images_len))
        .zip(gathered.par_chunks_mut(gathered_len))
        .enumerate()
        .for_each(|(b, (((dxb, cols), images), gathered))| {
            for (c, dxs) in dxb.chunks_mut(s.nb * chw).enumerate() {
                let (s0, k) = (b * s.per + c * s.nb, dxs.len() / chw);
                let ld = k * ohw;
                let images = &mut images[..k * chw];
                if !in_place {
                    // col2im adds into it.
                    images.fill(0.0);
                }
                for group in 0..g.groups {
                    // cols (ckk x k*ohw) = W_gᵀ (ckk x og) * dY_g (og x k*ohw)
                    let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, gathered);
                    // Wᵀ read in place (column-major): the packing reads its columns.
                    let wtg = MatRef {
                        offset: group * og * ckk,
                        row_stride: 1,
                        col_stride: ckk as isize,
                    };
                    let dims = (ckk, ld, og);
                    if in_place {
                        let dst = &mut images[group * ckk * ohw..][..ckk * ohw];
                        gemm_bf16(
                            Path::Native,
                            dst,
                            false,
                            dims,
                            (w, wtg),
                            (dyg, dm),
                            s.threads,
                        );
                        continue;
                    }
                    let cols = &mut cols[..ckk * ld];
                    gemm_bf16(
                        Path::Native,
                        cols,
                        false,
                        dims,
                        (w, wtg),
                        (dyg, dm),
                        s.threads,
                    );
                    for (i, image) in images.chunks_mut(chw).enumerate() {
                        col2im(&cols[i * ohw..], ld, g, group, image);
                    }
                }
                round_to_bf16(images, dxs);
            }
        });
    for v in [cols, images] {
        arena::recycle(Buffer::F32(v));
    }
    arena::recycle(Buffer::BF16(gathered));
}

fn native_filter_gradient(dy: &[bf16], x: &[bf16], g: &ConvGeometry) -> Vec<bf16> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let dw_len = g.o * ckk;
    let s = Split::new(g);
    let in_place = reads_images_in_place(g);
    // Each block of the batch sums a private float32 dW; the partials are added after.
    let (mut partials, _) = per_block::<f32>(&s, dw_len);
    let (mut cols, cols_len) = per_block::<bf16>(&s, if in_place { 0 } else { ckk * s.nb * ohw });
    let (mut gathered, gathered_len) = per_block::<bf16>(&s, og * s.nb * ohw);
    partials
        .par_chunks_mut(dw_len)
        .zip(cols.par_chunks_mut(cols_len))
        .zip(gathered.par_chunks_mut(gathered_len))
        .enumerate()
        .for_each(|(b, ((dw, cols), gathered))| {
            let end = ((b + 1) * s.per).min(g.n);
            let mut s0 = b * s.per;
            // The first product of each group overwrites the partial.
            let mut first = true;
            while s0 < end {
                let k = s.nb.min(end - s0);
                let ld = k * ohw;
                for group in 0..g.groups {
                    let (src, cm) = columns(x, g, (s0, k), group, cols);
                    // dW_g (og x ckk) += dY_g (og x k*ohw) * cols_t (k*ohw x ckk)
                    let cols_t = MatRef {
                        offset: cm.offset,
                        row_stride: 1,
                        col_stride: cm.row_stride,
                    };
                    let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, gathered);
                    let dw_g = &mut dw[group * og * ckk..][..og * ckk];
                    let dims = (og, ckk, ld);
                    gemm_bf16(
                        Path::Native,
                        dw_g,
                        !first,
                        dims,
                        (dyg, dm),
                        (src, cols_t),
                        s.threads,
                    );
                }
                first = false;
                s0 += k;
            }
        });
    let mut sum = arena::for_overwrite::<f32>(dw_len);
    sum_partials(&mut sum, &partials[..s.blocks * dw_len]);
    let mut dw = arena::for_overwrite::<bf16>(dw_len);
    round_to_bf16(&sum, &mut dw);
    for v in [sum, partials] {
        arena::recycle(Buffer::F32(v));
    }
    arena::recycle(Buffer::BF16(cols));
    arena::recycle(Buffer::BF16(gathered));
    dw
}
