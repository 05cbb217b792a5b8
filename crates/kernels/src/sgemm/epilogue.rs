//! The tiles' side of [`crate::matmul_epilogue`]: after its last depth block, a tile adds
//! `beta * D` and a per-column bias, applies ReLU and keeps only the values whose mask is
//! positive while they are still in registers, then stores them. A convolution's tiles
//! (rows are output channels) first scale and shift each row by its channel's values
//! (`crate::conv::ChannelEpilogue`: an inference BatchNorm, a bias).
//!
//! `beta * D` is rounded before the sum (a multiply, then an add: no fused multiply-add),
//! and ReLU is `max(x, 0)` with the zero second (`x > 0 ? x : 0`: NaN and -0 give 0), so
//! results have the bits of the separate ops they replace.
//!
//! Why not Momentum's weight step (`W' = W - lr * C`) here too: built and measured, it
//! made the products slower than a product and a separate loop (784x512, with warm
//! caches and cold). A tile touches six rows of each operand, 3 KiB apart, which the
//! hardware prefetcher follows far worse than a loop's single stream, and the cold lines
//! of W and W' stall the tile's stores. Nor on each thread's part of C right after its
//! tiles (the moment still in its core's L2): with the moment written in place,
//! 512x784x64 gained nothing when the threads split the rows, and lost time when they
//! split the columns (short strided rows). Measured: BENCHMARKS.md, "Figures moved from
//! code comments".

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::ops::Range;

use crate::operand::Epilogue;

/// An [`Epilogue`] as raw pointers at one tile (or at C's first element): D and the mask
/// have C's row stride, the bias one value per column.
#[derive(Clone, Copy)]
pub(crate) struct TileEpilogue {
    /// One factor per row of C, applied first (`v * s`, rounded).
    row_scale: Option<*const f32>,
    /// One term per row of C, added after the factor (`v + t`, rounded).
    row_shift: Option<*const f32>,
    addend: Option<(*const f32, f32)>,
    bias: Option<*const f32>,
    relu: bool,
    mask: Option<*const f32>,
}

// SAFETY: D, the bias, the mask and the row factors and terms are only read, and they
// outlive the product (they borrow the caller's slices). When D is C itself, each tile reads its own part of D before storing that
// part of C, and threads store disjoint tiles.
unsafe impl Send for TileEpilogue {}
unsafe impl Sync for TileEpilogue {}

impl TileEpilogue {
    /// The epilogue of a whole product (at C's first element).
    pub(crate) fn new(e: &Epilogue<'_, f32>) -> TileEpilogue {
        TileEpilogue {
            row_scale: None,
            row_shift: None,
            addend: e.addend.map(|(d, beta)| (d.as_ptr(), beta)),
            bias: e.bias.map(<[f32]>::as_ptr),
            relu: e.relu,
            mask: e.mask.map(<[f32]>::as_ptr),
        }
    }

    /// `+ beta * D` alone, with D at `d` (C's first element when C holds D).
    pub(crate) fn addend_only(d: *const f32, beta: f32) -> TileEpilogue {
        TileEpilogue {
            row_scale: None,
            row_shift: None,
            addend: Some((d, beta)),
            bias: None,
            relu: false,
            mask: None,
        }
    }

    /// A convolution's epilogue at C's first element (rows are output channels):
    /// `v * scale[row] + shift[row]`, each part where given, then `+ D` and ReLU.
    pub(crate) fn channels(
        scale: Option<*const f32>,
        shift: Option<*const f32>,
        addend: Option<*const f32>,
        relu: bool,
    ) -> TileEpilogue {
        TileEpilogue {
            row_scale: scale,
            row_shift: shift,
            addend: addend.map(|d| (d, 1.0)),
            bias: None,
            relu,
            mask: None,
        }
    }

    /// `(D, beta)` when the epilogue only adds `beta * D` (an optimizer's moment update),
    /// which the tiles then finish with a loop of their own (see `kernel::store_tile`).
    pub(crate) fn addend_alone(&self) -> Option<(*const f32, f32)> {
        match self {
            TileEpilogue {
                row_scale: None,
                row_shift: None,
                addend: Some(addend),
                bias: None,
                relu: false,
                mask: None,
            } => Some(*addend),
            _ => None,
        }
    }

    /// The epilogue of the tile at (`i0`, `j0`) of a C with rows `ldc` apart.
    ///
    /// # Safety
    /// That element lies inside D and the mask, column `j0` inside the bias and row `i0`
    /// inside the row factors and terms.
    pub(crate) unsafe fn at(self, i0: usize, j0: usize, ldc: usize) -> TileEpilogue {
        // SAFETY: the caller's contract.
        unsafe {
            TileEpilogue {
                row_scale: self.row_scale.map(|s| s.add(i0)),
                row_shift: self.row_shift.map(|t| t.add(i0)),
                addend: self.addend.map(|(d, beta)| (d.add(i0 * ldc + j0), beta)),
                bias: self.bias.map(|b| b.add(j0)),
                relu: self.relu,
                mask: self.mask.map(|y| y.add(i0 * ldc + j0)),
            }
        }
    }

    /// Asks for the lines of D's (and the mask's) 16 values in row `r`, which the tile
    /// reads only after its depth loop.
    ///
    /// # Safety
    /// Those values lie inside D (and the mask).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(crate) unsafe fn prefetch(self, r: usize, ldc: usize) {
        for m in [self.addend.map(|(d, _)| d), self.mask]
            .into_iter()
            .flatten()
        {
            // SAFETY: the caller's contract.
            unsafe {
                let row = m.add(r * ldc);
                _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
                _mm_prefetch::<_MM_HINT_T0>(row.add(15).cast::<i8>());
            }
        }
    }

    /// The eight finished values `v` from column `q` of row `r` through the epilogue.
    ///
    /// # Safety
    /// AVX2 is available; those values lie inside D and the mask, their columns inside
    /// the bias and row `r` inside the row factors and terms.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) unsafe fn finish8(self, r: usize, q: usize, ldc: usize, mut v: __m256) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(s) = self.row_scale {
                v = _mm256_mul_ps(v, _mm256_set1_ps(*s.add(r)));
            }
            if let Some(t) = self.row_shift {
                v = _mm256_add_ps(v, _mm256_set1_ps(*t.add(r)));
            }
            if let Some((d, beta)) = self.addend {
                let d = _mm256_loadu_ps(d.add(r * ldc + q));
                v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(beta), d));
            }
            if let Some(b) = self.bias {
                v = _mm256_add_ps(v, _mm256_loadu_ps(b.add(q)));
            }
            if self.relu {
                // `maxps` returns its second operand when either is NaN or both are zero.
                v = _mm256_max_ps(v, _mm256_setzero_ps());
            }
            if let Some(y) = self.mask {
                // Ordered compare: a NaN mask is not positive, and the value becomes +0.
                let y = _mm256_loadu_ps(y.add(r * ldc + q));
                let keep = _mm256_cmp_ps::<_CMP_GT_OQ>(y, _mm256_setzero_ps());
                v = _mm256_and_ps(keep, v);
            }
            v
        }
    }

    /// The finished values of `rows x cols` of a C at `c` (rows `ldc` apart; the
    /// epilogue at C's first element) through the epilogue, in place, eight at a time
    /// along each row.
    ///
    /// # Safety
    /// AVX2 is available; the region lies inside C (and D and the mask), its columns
    /// inside the bias and its rows inside the row factors and terms.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn finish_region(
        self,
        c: *mut f32,
        ldc: usize,
        rows: Range<usize>,
        cols: Range<usize>,
    ) {
        let width = cols.len();
        for i in rows {
            // SAFETY (loop body): the caller's contract.
            unsafe {
                let e = self.at(i, cols.start, ldc);
                let out = c.add(i * ldc + cols.start);
                let mut q = 0;
                while q + 8 <= width {
                    let v = e.finish8(0, q, ldc, _mm256_loadu_ps(out.add(q)));
                    _mm256_storeu_ps(out.add(q), v);
                    q += 8;
                }
                for q in q..width {
                    *out.add(q) = e.finish1(0, q, ldc, *out.add(q));
                }
            }
        }
    }

    /// One finished value, in row `r` and column `q` of the tile, through the epilogue
    /// (edge tiles and the dot-product kernel).
    ///
    /// # Safety
    /// That value lies inside D and the mask, column `q` inside the bias and row `r`
    /// inside the row factors and terms.
    #[inline]
    pub(crate) unsafe fn finish1(self, r: usize, q: usize, ldc: usize, mut v: f32) -> f32 {
        // SAFETY: the caller's contract.
        let kept = unsafe {
            if let Some(s) = self.row_scale {
                v *= *s.add(r);
            }
            if let Some(t) = self.row_shift {
                v += *t.add(r);
            }
            if let Some((d, beta)) = self.addend {
                v += beta * *d.add(r * ldc + q);
            }
            if let Some(b) = self.bias {
                v += *b.add(q);
            }
            self.mask.is_none_or(|y| *y.add(r * ldc + q) > 0.0)
        };
        // ReLU as the elementwise op has it: NaN and -0 give 0.
        match self.relu {
            _ if !kept => 0.0,
            true if v > 0.0 => v,
            true => 0.0,
            false => v,
        }
    }
}
