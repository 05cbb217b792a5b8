//! What a product's tiles do after their last depth block besides storing C: add
//! `beta * D` (`C = A·B + beta·D`, an optimizer's moment update `m * 0.9 + dW`) while the
//! tile is still in registers.
//!
//! `beta * D` is rounded before the sum (a multiply, then an add: no fused multiply-add),
//! so the result has the bits of the separate ops it replaces.
//!
//! Why not Momentum's weight step (`W' = W - lr * C`) here too: built and measured, it
//! made the products slower than a product and a separate loop (784x512: 0.398 against
//! 0.382 ms with warm caches, 0.65 against 0.52 cold). A tile touches six rows of each
//! operand, 3 KiB apart, which the hardware prefetcher follows far worse than a loop's
//! single stream, and the cold lines of W and W' stall the tile's stores.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::matmul::Addend;

/// An [`Addend`] as a raw pointer at one tile (or at C's first element); D has C's row
/// stride.
#[derive(Clone, Copy)]
pub(crate) struct Epilogue {
    values: *const f32,
    beta: f32,
}

// SAFETY: D is only read, and it outlives the product (it borrows the caller's slice).
unsafe impl Send for Epilogue {}
unsafe impl Sync for Epilogue {}

impl Epilogue {
    /// The epilogue of a whole product (at C's first element).
    pub(crate) fn new(addend: &Addend<'_, f32>) -> Epilogue {
        Epilogue {
            values: addend.values.as_ptr(),
            beta: addend.beta,
        }
    }

    /// The epilogue of the tile at (`i0`, `j0`) of a C with rows `ldc` apart.
    ///
    /// # Safety
    /// That element lies inside D.
    pub(crate) unsafe fn at(self, i0: usize, j0: usize, ldc: usize) -> Epilogue {
        Epilogue {
            // SAFETY: the caller's contract.
            values: unsafe { self.values.add(i0 * ldc + j0) },
            beta: self.beta,
        }
    }

    /// Asks for the lines of D's 16 values at offset `o`, which the tile reads only after
    /// its depth loop.
    ///
    /// # Safety
    /// Offsets `o..o + 16` lie inside D.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(crate) unsafe fn prefetch(self, o: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(self.values.add(o).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(self.values.add(o + 15).cast::<i8>());
        }
    }

    /// The finished values `(lo, hi)` at offset `o` (16 of them) plus `beta * D`.
    ///
    /// # Safety
    /// AVX2 is available; offsets `o..o + 16` lie inside D.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) unsafe fn finish16(self, o: usize, lo: __m256, hi: __m256) -> (__m256, __m256) {
        // SAFETY: the caller's contract.
        unsafe {
            let beta = _mm256_set1_ps(self.beta);
            let d = self.values.add(o);
            let lo = _mm256_add_ps(lo, _mm256_mul_ps(beta, _mm256_loadu_ps(d)));
            let hi = _mm256_add_ps(hi, _mm256_mul_ps(beta, _mm256_loadu_ps(d.add(8))));
            (lo, hi)
        }
    }

    /// One finished value at offset `o` plus `beta * D` (edge tiles).
    ///
    /// # Safety
    /// Offset `o` lies inside D.
    pub(crate) unsafe fn finish1(self, o: usize, v: f32) -> f32 {
        // SAFETY: the caller's contract.
        v + self.beta * unsafe { *self.values.add(o) }
    }
}
