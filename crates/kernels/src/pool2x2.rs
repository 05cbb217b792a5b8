//! Max pooling with 2x2 windows and stride 2 (LeNet's, and most CNNs'), eight outputs
//! at a time with AVX2, for f32 planes without padding.
//!
//! ```
//! use spore_kernels::pool::{max_pool2d, max_pool2d_backward, PoolGeometry};
//! // One 2x16 plane: eight windows side by side, which the vector path pools together.
//! let g = PoolGeometry::new([1, 1, 2, 16], [2, 2], [2, 2], [0; 4]);
//! let x: Vec<f32> = (0..32).map(|i| ((i * 7) % 11) as f32).collect();
//! let y = max_pool2d(&x, &g);
//! assert_eq!(y, vec![9.0, 10.0, 8.0, 9.0, 10.0, 6.0, 9.0, 10.0]);
//! let dx = max_pool2d_backward(&x, &[1.0; 8], &g);
//! assert_eq!(dx.iter().sum::<f32>(), 8.0); // one gradient per window
//! ```
//!
//! Why: the scalar kernel decides each window with three data-dependent branches, which
//! mispredict about half the time on real activations. Here the four corners of eight
//! windows are compared as vectors, in the scalar kernel's order and with its rule (a
//! later value replaces the best only when strictly greater, so NaN and -0.0 resolve the
//! same way), and the backward pass writes each window's gradient and its three zeros
//! instead of clearing the whole gradient first.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the vector kernels may run (AVX2: [`crate::isa`]).
pub(crate) fn available() -> bool {
    crate::isa::allows(crate::isa::Isa::Avx2)
}

/// Whether the vector kernels take planes whose outputs are `ow` wide (AVX2, `ow >= 8`).
pub(crate) fn applies(ow: usize) -> bool {
    available() && ow >= 8
}

/// Output columns `0..ow` in blocks of eight: full blocks, then one block ending at `ow`
/// that overlaps the previous one (its outputs are recomputed identically). `ow >= 8`.
fn blocks(ow: usize) -> impl Iterator<Item = usize> {
    let full = (0..ow / 8).map(|b| b * 8);
    let tail = (!ow.is_multiple_of(8)).then_some(ow - 8);
    full.chain(tail)
}

/// Pools `plane` (rows `w` apart) into `out` (`oh` rows of `ow`).
///
/// # Panics
/// Unless [`applies`]`(ow)`, `plane` has `2 * oh` rows of `w >= 2 * ow` and `out` holds
/// `oh * ow` values (the caller's geometry guarantees all of it).
pub(crate) fn forward(plane: &[f32], w: usize, oh: usize, ow: usize, out: &mut [f32]) {
    assert!(
        applies(ow) && plane.len() >= 2 * oh * w && 2 * ow <= w && out.len() >= oh * ow,
        "pool2x2::forward: sizes out of contract"
    );
    // SAFETY: AVX2 and the sizes are checked above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        forward_rows(plane, w, oh, ow, out)
    };
}

/// [`forward`]'s loop, compiled for AVX2 as a whole so that the helpers inline.
///
/// # Safety
/// AVX2 is available; `plane` has `2 * oh` rows of `w >= 2 * ow`, `out` `oh * ow` values,
/// and `ow >= 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn forward_rows(plane: &[f32], w: usize, oh: usize, ow: usize, out: &mut [f32]) {
    for oy in 0..oh {
        let (r0, r1) = (&plane[2 * oy * w..][..w], &plane[(2 * oy + 1) * w..][..w]);
        let row = &mut out[oy * ow..][..ow];
        for ox in blocks(ow) {
            // SAFETY: columns 2*ox..2*ox + 16 <= 2*ow <= w of both rows, and outputs
            // ox..ox + 8 <= ow.
            unsafe {
                let [e0, o0, e1, o1] = corners(r0.as_ptr().add(2 * ox), r1.as_ptr().add(2 * ox));
                let best = _mm256_max_ps(o1, _mm256_max_ps(e1, _mm256_max_ps(o0, e0)));
                _mm256_storeu_ps(row.as_mut_ptr().add(ox), best);
            }
        }
    }
}

/// Writes the gradient of `plane` (`2 * oh` rows of `w == 2 * ow`) into `dx`: each output
/// gradient goes to the first maximum of its window, the other three cells get zero.
///
/// # Panics
/// Unless [`applies`]`(ow)` and the slices have those sizes.
pub(crate) fn backward(plane: &[f32], dy: &[f32], oh: usize, ow: usize, dx: &mut [f32]) {
    let len = 4 * oh * ow;
    assert!(
        applies(ow) && plane.len() >= len && dx.len() >= len && dy.len() >= oh * ow,
        "pool2x2::backward: sizes out of contract"
    );
    // SAFETY: AVX2 and the sizes are checked above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        backward_rows(plane, dy, oh, ow, dx)
    };
}

/// [`backward`]'s loop, compiled for AVX2 as a whole so that the helpers inline.
///
/// # Safety
/// AVX2 is available; `plane` and `dx` have `2 * oh` rows of `2 * ow`, `dy` `oh * ow`
/// values, and `ow >= 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn backward_rows(plane: &[f32], dy: &[f32], oh: usize, ow: usize, dx: &mut [f32]) {
    let w = 2 * ow;
    for oy in 0..oh {
        let (r0, r1) = (&plane[2 * oy * w..][..w], &plane[(2 * oy + 1) * w..][..w]);
        let g = &dy[oy * ow..][..ow];
        let (d0, d1) = dx[2 * oy * w..][..2 * w].split_at_mut(w);
        for ox in blocks(ow) {
            // SAFETY: columns 2*ox..2*ox + 16 <= w of the input and gradient rows, and
            // gradients ox..ox + 8 <= ow.
            unsafe {
                let [e0, o0, e1, o1] = corners(r0.as_ptr().add(2 * ox), r1.as_ptr().add(2 * ox));
                // The scalar rule, in its order: top-left, top-right, bottom-left,
                // bottom-right; a later corner wins only when strictly greater.
                let m1 = _mm256_cmp_ps::<_CMP_GT_OQ>(o0, e0);
                let v1 = _mm256_blendv_ps(e0, o0, m1);
                let m2 = _mm256_cmp_ps::<_CMP_GT_OQ>(e1, v1);
                let v2 = _mm256_blendv_ps(v1, e1, m2);
                let m3 = _mm256_cmp_ps::<_CMP_GT_OQ>(o1, v2);
                let gv = _mm256_loadu_ps(g.as_ptr().add(ox));
                let later = _mm256_or_ps(m2, m3);
                // `andnot(a, b)` is `!a & b`: each corner keeps the gradient only where no
                // later corner won.
                let at_o1 = _mm256_and_ps(m3, gv);
                let at_e1 = _mm256_andnot_ps(m3, _mm256_and_ps(m2, gv));
                let at_o0 = _mm256_andnot_ps(later, _mm256_and_ps(m1, gv));
                let at_e0 = _mm256_andnot_ps(_mm256_or_ps(later, m1), gv);
                store_interleaved(d0.as_mut_ptr().add(2 * ox), at_e0, at_o0);
                store_interleaved(d1.as_mut_ptr().add(2 * ox), at_e1, at_o1);
            }
        }
    }
}

/// The four corners of eight windows whose top-left cells are `top[0, 2, .., 14]` and
/// `bottom[0, 2, .., 14]`: [top-left, top-right, bottom-left, bottom-right].
///
/// # Safety
/// AVX2 is available; `top` and `bottom` have 16 readable values each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn corners(top: *const f32, bottom: *const f32) -> [__m256; 4] {
    // SAFETY: the caller's contract.
    unsafe {
        let (t0, t1) = (_mm256_loadu_ps(top), _mm256_loadu_ps(top.add(8)));
        let (b0, b1) = (_mm256_loadu_ps(bottom), _mm256_loadu_ps(bottom.add(8)));
        [even(t0, t1), odd(t0, t1), even(b0, b1), odd(b0, b1)]
    }
}

/// Elements 0, 2, .., 14 of the 16 values `lo ++ hi`, in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn even(lo: __m256, hi: __m256) -> __m256 {
    // The shuffle picks pairs (0,2) (8,10) | (4,6) (12,14); the permute puts the four
    // pairs in order.
    let pairs = _mm256_shuffle_ps::<0x88>(lo, hi);
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(pairs)))
}

/// Elements 1, 3, .., 15 of the 16 values `lo ++ hi`, in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn odd(lo: __m256, hi: __m256) -> __m256 {
    let pairs = _mm256_shuffle_ps::<0xDD>(lo, hi);
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(pairs)))
}

/// Stores `e[0], o[0], e[1], o[1], .., e[7], o[7]` at `dst` (16 values).
///
/// # Safety
/// AVX2 is available; `dst` has 16 writable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store_interleaved(dst: *mut f32, e: __m256, o: __m256) {
    let lo = _mm256_unpacklo_ps(e, o); // e0 o0 e1 o1 | e4 o4 e5 o5
    let hi = _mm256_unpackhi_ps(e, o); // e2 o2 e3 o3 | e6 o6 e7 o7
    // SAFETY: the caller's contract.
    unsafe {
        _mm256_storeu_ps(dst, _mm256_permute2f128_ps::<0x20>(lo, hi));
        _mm256_storeu_ps(dst.add(8), _mm256_permute2f128_ps::<0x31>(lo, hi));
    }
}
