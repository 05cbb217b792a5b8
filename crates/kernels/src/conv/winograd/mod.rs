//! Winograd F(4x4, 3x3) convolution: 3x3, stride-1, "same"-padded f32 layers (ResNet's)
//! as 36 products over transformed tiles, 4x fewer multiply-adds than the direct form.
//! Sides that are not a multiple of 4 (ResNet-50's 14x14 and 7x7) end in partial tiles.
//!
//! ```
//! use spore_kernels::conv::{choose, conv2d, ConvGeometry, ConvPath, Pass};
//! // 16 -> 16 channels over four 8x8 images (16 tiles): Winograd is chosen (AVX2/FMA
//! // machines).
//! let g = ConvGeometry::new([4, 16, 8, 8], [16, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let x = vec![1.0f32; 4 * 16 * 64];
//! let w = vec![0.5f32; 16 * 16 * 9];
//! let y = conv2d(&x, &w, &g);
//! // An interior output sums 9 taps of 16 channels: 144 * 0.5; a corner sees 4 taps.
//! assert!((y[9] - 72.0).abs() < 1e-3 && (y[0] - 32.0).abs() < 1e-3);
//! let winograd = choose(&g, Pass::Forward, true) == ConvPath::Winograd;
//! assert_eq!(winograd, spore_kernels::matmul::own_f32_gemm());
//! ```
//!
//! Each 4x4 block of outputs (a tile) reads a 6x6 block of the padded input. With the
//! transforms of Lavin & Gray ("Fast Algorithms for Convolutional Neural Networks"):
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`. Summed over input channels, the elementwise product
//! becomes one matrix product per tile position ξ (36 of them):
//! `M[ξ] (O x tiles) = U[ξ] (O x C) · V[ξ] (C x tiles)`, with `U` the transformed filters
//! and `V` the transformed input tiles. The products run on Spore's GEMM, with `U`
//! written straight into its packed layout; the transforms take eight tiles per vector
//! (each lane one tile: four-value loads per tile row, transposed 4x4 in registers).
//!
//! Why F(4x4, 3x3) and not F(2x2, 3x3): it needs 36 multiply-adds per 16 outputs and
//! channel pair (the direct form needs 144; F(2x2) needs 64 per 16 outputs), and inflates
//! the input less (36 values per 16 outputs against 64). Its rounding error is larger
//! (coefficients up to 8 and 1/24): about ten times the direct form's, within 1e-5 of the
//! summed terms' magnitude at ResNet-18's sizes (`tests.rs` measures both);
//! `SPORE_WINOGRAD=off` turns it off.
//!
//! Why this is worth it: ResNet-18's 3x3 layers already ran near the machine's FMA peak
//! in the direct form, so only fewer multiply-adds could make them faster.

use super::geometry::ConvGeometry;
use super::plan::winograd_applies;

/// Outputs per tile side.
pub(super) const M: usize = super::plan::WINOGRAD_TILE;
/// Input values per tile side (`M + 3 - 1`).
const ALPHA: usize = M + 2;
/// Positions in a transformed tile: one product each.
const XI: usize = ALPHA * ALPHA;

/// Filter transform `G` (3 taps to 6 positions).
const G: [[f32; 3]; ALPHA] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// Bytes of transformed inputs and products (`V` and `M`) one block of images may take:
/// they are written and read back within the block, from the 32 MiB L3.
const BLOCK_BYTES: usize = 8 << 20;

/// Tiles one vector transforms at a time.
const LANES: usize = 8;

/// Zero values after the padded images: a tile's row is read as two groups of four (six
/// used), so the last tile reads a little past its image.
const SLACK: usize = 8;

/// Tile counts of `g`: (tile rows, tiles per row). Where a side is not a multiple of
/// [`M`] the last tiles reach past the image: their inputs there are zero and their
/// outputs there are dropped.
fn tiles(g: &ConvGeometry) -> (usize, usize) {
    (g.h.div_ceil(M), g.w.div_ceil(M))
}

/// Sides of one channel's plane as the input transform reads it: the image with a zero
/// border of one, widened with zeros to whole tiles.
fn padded_sides(g: &ConvGeometry) -> (usize, usize) {
    let (th, tw) = tiles(g);
    (M * th + 2, M * tw + 2)
}

/// `y = conv2d(x, w)` for a geometry where the planner chose `Winograd`: x [N, C, H, W], w [O, C, 3,
/// 3], y [N, O, H, W], all contiguous.
///
/// The batch goes in blocks of images whose transformed tiles fit 8 MiB; per
/// block the threads split the input channels (input transform), then the 36 products,
/// then the output channels (output transform).
pub(super) fn forward(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32]) {
    assert!(
        winograd_applies(g),
        "winograd::forward: geometry {g:?} does not apply"
    );
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    assert!(
        x.len() >= g.n * c * hw && w.len() >= o * c * 9 && y.len() >= g.n * o * hw,
        "winograd::forward: buffers too small for {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    plan::forward(x, w, g, y, BLOCK_BYTES);
}

/// The transformed filters of `w` for [`forward_transformed`] (`U`, four times `w`).
pub(super) fn transform_filters(w: &[f32], g: &ConvGeometry) -> Vec<f32> {
    assert!(
        winograd_applies(g) && w.len() >= g.o * g.c * 9,
        "winograd::transform_filters: {g:?} does not apply or the weight is too small"
    );
    #[cfg(target_arch = "x86_64")]
    return plan::transform_filters(w, g, rayon::current_num_threads());
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}

/// [`forward`] with the filters [`transform_filters`] made.
pub(super) fn forward_transformed(x: &[f32], u: &[f32], g: &ConvGeometry, y: &mut [f32]) {
    assert!(
        winograd_applies(g) && x.len() >= g.n * g.c * g.h * g.w && y.len() >= g.n * g.o * g.h * g.w,
        "winograd::forward_transformed: buffers too small for {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    plan::forward_transformed(x, u, g, y, &plan::Plan::new(g, BLOCK_BYTES));
}

/// `dw = conv2d_backward_filter(dy, x)` for a geometry where the planner chose `Winograd`: dy [N, O,
/// H, W], x [N, C, H, W], dw [O, C, 3, 3]. The gradient of the Winograd form is exact
/// (the form equals the convolution), so it runs the same way backwards:
/// `dU[ξ] = Σ_tiles dM[ξ] · V[ξ]ᵀ` with `dM = A dY Aᵀ` per tile, then `dw = Gᵀ dU G`.
pub(super) fn filter_gradient(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    assert!(
        winograd_applies(g),
        "winograd::filter_gradient: geometry {g:?} does not apply"
    );
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    assert!(
        x.len() >= g.n * c * hw && dy.len() >= g.n * o * hw && dw.len() >= o * c * 9,
        "winograd::filter_gradient: buffers too small for {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    plan::filter_gradient(dy, x, g, dw, BLOCK_BYTES);
}

#[cfg(target_arch = "x86_64")]
mod filters;
#[cfg(target_arch = "x86_64")]
mod plan;
#[cfg(target_arch = "x86_64")]
mod simd;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
#[cfg(target_arch = "x86_64")]
mod tiles;
