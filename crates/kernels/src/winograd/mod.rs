//! Winograd F(4x4, 3x3) convolution: 3x3, stride-1, "same"-padded f32 layers (ResNet's)
//! as 36 products over transformed tiles, 4x fewer multiply-adds than the direct form.
//!
//! ```
//! use spore_kernels::conv::{conv2d, ConvGeometry};
//! use spore_kernels::winograd;
//! // 16 -> 16 channels over 8x8 images: Winograd applies (AVX2/FMA machines).
//! let g = ConvGeometry::new([1, 16, 8, 8], [16, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let x = vec![1.0f32; 16 * 64];
//! let w = vec![0.5f32; 16 * 16 * 9];
//! let y = conv2d(&x, &w, &g);
//! // An interior output sums 9 taps of 16 channels: 144 * 0.5; a corner sees 4 taps.
//! assert!((y[9] - 72.0).abs() < 1e-3 && (y[0] - 32.0).abs() < 1e-3);
//! assert_eq!(winograd::applies(&g), spore_kernels::matmul::own_f32_gemm());
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
//! (coefficients up to 8 and 1/24): at most 3e-7 per summed term in the tests, against
//! f64.
//!
//! Why this is worth it: ResNet-18's 3x3 layers already ran near the machine's FMA peak
//! (150-180 GFLOP/s), so only fewer multiply-adds could make them faster.

use crate::conv::ConvGeometry;

/// Outputs per tile side.
const M: usize = 4;
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

/// Fewest input and output channels for which the transforms pay: with fewer, the
/// products are too shallow to amortise them (ResNet's first layer has 3).
const MIN_CHANNELS: usize = 16;

/// Whether [`forward`] computes `g` (f32): 3x3 filters, stride 1, no dilation or groups,
/// one pixel of padding on every side (so the output is the input's size), sides a
/// multiple of 4, at least 16 channels in and out, on machines where Spore's GEMM
/// runs (AVX2 and FMA), unless `SPORE_WINOGRAD=off`.
pub fn applies(g: &ConvGeometry) -> bool {
    g.kh == 3
        && g.kw == 3
        && g.stride == [1, 1]
        && g.dilation == [1, 1]
        && g.groups == 1
        && g.pads == [1; 4]
        && g.h.is_multiple_of(M)
        && g.w.is_multiple_of(M)
        && g.h > 0
        && g.w > 0
        && g.c >= MIN_CHANNELS
        && g.o >= MIN_CHANNELS
        && enabled()
}

/// Spore's GEMM runs here and the environment does not turn Winograd off (checked once).
fn enabled() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        crate::sgemm::available() && std::env::var("SPORE_WINOGRAD").as_deref() != Ok("off")
    })
}

/// Tiles one vector transforms at a time.
const LANES: usize = 8;

/// Zero values after the padded images: a tile's row is read as two groups of four (six
/// used), so the last tile reads a little past its image.
const SLACK: usize = 8;

/// Tile counts of `g`: (tile rows, tiles per row).
fn tiles(g: &ConvGeometry) -> (usize, usize) {
    (g.h / M, g.w / M)
}

/// `y = conv2d(x, w)` for a geometry where [`applies`] holds: x [N, C, H, W], w [O, C, 3,
/// 3], y [N, O, H, W], all contiguous.
///
/// The batch goes in blocks of images whose transformed tiles fit 8 MiB; per
/// block the threads split the input channels (input transform), then the 36 products,
/// then the output channels (output transform).
pub fn forward(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32]) {
    assert!(
        applies(g),
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

/// `dw = conv2d_backward_filter(dy, x)` for a geometry where [`applies`] holds: dy [N, O,
/// H, W], x [N, C, H, W], dw [O, C, 3, 3]. The gradient of the Winograd form is exact
/// (the form equals the convolution), so it runs the same way backwards:
/// `dU[ξ] = Σ_tiles dM[ξ] · V[ξ]ᵀ` with `dM = A dY Aᵀ` per tile, then `dw = Gᵀ dU G`.
pub fn filter_gradient(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    assert!(
        applies(g),
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
