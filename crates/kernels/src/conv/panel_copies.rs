//! The copies that fill a convolution's GEMM panels from its images: 16 values, 16 picks
//! from 32 (stride 2), and the prefetch of the line a later panel reads.
//!
//! ```text
//! copy_16(dst, src):       dst[0..16] = src[0..16]
//! copy_16_even(dst, src):  dst[t] = src[2t], t in 0..16
//! ```

use crate::sgemm::NR;

/// Panels ahead whose source lines [`prefetch_ahead`] asks for.
const PREFETCH_PANELS: usize = 4;

/// Asks for the line that the panel [`PREFETCH_PANELS`] after this one reads in the same
/// row of taps (`sx` values per position further along the plane).
///
/// Why: a panel's rows come from `kc` planes (in ResNet-50's pointwise layers up to
/// 320 of them, 0.2 to 12.5 KB apart), one line from each, and the next panel reads the next
/// line of each: more streams than the hardware prefetcher follows, so without this
/// each row waited on memory and packing took a third of those layers' forward pass
/// (measured: BENCHMARKS.md, "Pointwise panels").
#[inline(always)]
pub(super) fn prefetch_ahead(src: *const f32, at: usize, sx: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, and `wrapping_add` forms the
    // address without assuming it lies inside `src`'s allocation.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let ahead = src.wrapping_add(at + PREFETCH_PANELS * NR * sx);
        _mm_prefetch::<_MM_HINT_T0>(ahead.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, at, sx);
}

/// Copies 16 values from `src` to `dst`.
///
/// # Safety
/// Both point to 16 valid values.
#[inline(always)]
pub(super) unsafe fn copy_16(dst: *mut f32, src: *const f32) {
    // SAFETY: the caller's contract; unaligned reads and writes of 16 values.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, NR) }
}

/// Copies values 0, 2, .., 30 of `src` to the 16 values of `dst`.
///
/// # Safety
/// `src` points to 32 valid values and `dst` to 16.
#[inline(always)]
pub(super) unsafe fn copy_16_even(dst: *mut f32, src: *const f32) {
    // SAFETY: the caller's contract (the arrays are read and written unaligned-safe: f32
    // alignment only, which both pointers have).
    let (d, s) = unsafe { (&mut *dst.cast::<[f32; NR]>(), &*src.cast::<[f32; 2 * NR]>()) };
    for (t, v) in d.iter_mut().enumerate() {
        *v = s[2 * t];
    }
}
