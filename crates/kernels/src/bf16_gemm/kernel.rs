//! The bfloat16 microkernel: an [`MR`] x [`NR`] tile of C accumulated in float32 from
//! packed pairs of depth steps, one `vdpbf16ps` per 16 columns and pair.
//!
//! `vdpbf16ps acc, a, b` adds `a[2l] * b[2l] + a[2l + 1] * b[2l + 1]` to float32 lane `l`.
//! So the packed A holds, per row, the two values of one depth pair in one 32-bit word
//! (broadcast to every lane), and the packed B holds, per column, the same pair of depth
//! steps (see [`super::pack`]).

use std::arch::x86_64::*;

use super::{MR, NR};

/// `C[height x width] (+)= Apanel * Bpanel` over `pairs` depth pairs: `a` holds `pairs`
/// groups of [`MR`] words (one per row), `b` holds `pairs` groups of [`NR`] words (one per
/// column); C's rows are `ldc` floats apart. Edge tiles (`height < MR` or `width < NR`)
/// are computed in full into a local tile and only their `height x width` part is written.
///
/// The instruction treats subnormal inputs as zero and flushes subnormal results to zero
/// (it ignores MXCSR); products of bfloat16 values are exact in float32, and each lane
/// rounds to nearest even after each of its two additions.
///
/// # Safety
/// The CPU has AVX512F and AVX512_BF16; `a` and `b` point to `pairs * MR` and
/// `pairs * NR` readable words; C's `height x width` tile at `c` is writable.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    pairs: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    (height, width): (usize, usize),
    accumulate: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    // SAFETY (whole body): the caller's contract bounds every read and write below.
    unsafe {
        for p in 0..pairs {
            let b0 = as_bh(_mm512_loadu_si512(b.add(p * NR).cast()));
            let b1 = as_bh(_mm512_loadu_si512(b.add(p * NR + 16).cast()));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = as_bh(_mm512_set1_epi32(*a.add(p * MR + r) as i32));
                row[0] = _mm512_dpbf16_ps(row[0], av, b0);
                row[1] = _mm512_dpbf16_ps(row[1], av, b1);
            }
        }
        if height == MR && width == NR {
            for (r, row) in acc.iter().enumerate() {
                store(c.add(r * ldc), row, accumulate);
            }
            return;
        }
        // Why a local tile: masked stores would need a mask per width; edge tiles are few.
        let mut local = [0.0f32; MR * NR];
        for (r, row) in acc.iter().enumerate() {
            store(local.as_mut_ptr().add(r * NR), row, false);
        }
        for r in 0..height {
            let dst = c.add(r * ldc);
            for (j, &v) in local[r * NR..r * NR + width].iter().enumerate() {
                *dst.add(j) = if accumulate { *dst.add(j) + v } else { v };
            }
        }
    }
}

/// Writes (or adds) one row of the tile, [`NR`] floats at `dst`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store(dst: *mut f32, row: &[__m512; 2], accumulate: bool) {
    // SAFETY: the caller's contract ([`tile`]'s).
    unsafe {
        for (h, &v) in row.iter().enumerate() {
            let p = dst.add(16 * h);
            let v = if accumulate {
                _mm512_add_ps(v, _mm512_loadu_ps(p))
            } else {
                v
            };
            _mm512_storeu_ps(p, v);
        }
    }
}

/// The same 512 bits seen as 32 bfloat16 values.
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
fn as_bh(v: __m512i) -> __m512bh {
    // SAFETY: both are plain 512-bit vectors; every bit pattern is valid for each.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}
