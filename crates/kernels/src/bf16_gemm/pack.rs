//! Packing for the bfloat16 microkernel: blocks of A and B copied into the order
//! [`super::kernel::tile`] reads them, two depth steps per 32-bit word (the lower half
//! holds the even step). Panels at the edges are padded with zeros, and so is the upper
//! half of an odd depth's last word.

use std::ops::Range;

use super::{MR, NR};
use crate::operand::MatRef;

/// Index of element (i, j) of a strided operand (the caller checked the bounds).
#[inline(always)]
fn at(m: MatRef, i: usize, j: usize) -> usize {
    (m.offset as isize + i as isize * m.row_stride + j as isize * m.col_stride) as usize
}

/// Words per packed row or column of a depth block of `kc` steps.
pub(super) fn pairs(kc: usize) -> usize {
    kc.div_ceil(2)
}

/// Packs rows `rows` and depth `p0..p0 + kc` of A into `dst` as consecutive [`MR`]-row
/// panels, each pair-major (`dst[panel][pair][r]`).
pub(super) fn pack_a(
    dst: &mut [u32],
    a: &[u16],
    ma: MatRef,
    rows: Range<usize>,
    p0: usize,
    kc: usize,
) {
    let n_pairs = pairs(kc);
    for (ip, panel) in dst.chunks_mut(MR * n_pairs).enumerate() {
        let i0 = rows.start + ip * MR;
        if i0 >= rows.end {
            break;
        }
        let height = MR.min(rows.end - i0);
        if ma.col_stride == 1 && height == MR {
            pack_rows(panel, a, ma, i0, p0, kc);
            continue;
        }
        if ma.row_stride == 1 && height == MR {
            pack_columns(panel, a, ma, i0, p0, kc);
            continue;
        }
        for (pp, words) in panel.chunks_mut(MR).enumerate() {
            let p = p0 + 2 * pp;
            let has_hi = 2 * pp + 1 < kc;
            for (r, w) in words.iter_mut().enumerate() {
                *w = if r < height {
                    let lo = a[at(ma, i0 + r, p)];
                    let hi = if has_hi { a[at(ma, i0 + r, p + 1)] } else { 0 };
                    u32::from(lo) | u32::from(hi) << 16
                } else {
                    0
                };
            }
        }
    }
}

/// [`pack_a`] for one full panel of a row-major A: each row's depth run read as pairs,
/// without the per-value index arithmetic of the general case.
fn pack_rows(panel: &mut [u32], a: &[u16], ma: MatRef, i0: usize, p0: usize, kc: usize) {
    for r in 0..MR {
        let row = &a[at(ma, i0 + r, p0)..][..kc];
        let mut pairs = row.chunks_exact(2);
        let mut words = panel.iter_mut().skip(r).step_by(MR);
        // Pairs first: `zip` then stops without taking the word the odd last value needs.
        for (pair, w) in (&mut pairs).zip(&mut words) {
            *w = u32::from(pair[0]) | u32::from(pair[1]) << 16;
        }
        if let ([last], Some(w)) = (pairs.remainder(), words.next()) {
            *w = u32::from(*last);
        }
    }
}

/// [`pack_a`] for one full panel of a column-major A (a weight read as `Wᵀ`, as a
/// convolution's input gradient reads its filters): each pair of depth steps is two runs
/// of [`MR`] contiguous values, interleaved. Why: value by value, packing `Wᵀ` took
/// longer than ResNet-50's narrow input-gradient products it fed.
fn pack_columns(panel: &mut [u32], a: &[u16], ma: MatRef, i0: usize, p0: usize, kc: usize) {
    for (pp, words) in panel.chunks_mut(MR).enumerate() {
        let p = p0 + 2 * pp;
        let lo = &a[at(ma, i0, p)..][..MR];
        match (2 * pp + 1 < kc).then(|| &a[at(ma, i0, p + 1)..][..MR]) {
            Some(hi) => {
                for ((w, &l), &h) in words.iter_mut().zip(lo).zip(hi) {
                    *w = u32::from(l) | u32::from(h) << 16;
                }
            }
            None => {
                for (w, &l) in words.iter_mut().zip(lo) {
                    *w = u32::from(l);
                }
            }
        }
    }
}

/// Packs depth `p0..p0 + kc` and columns `cols` of B into `dst` as consecutive [`NR`]-column
/// panels, each pair-major (`dst[panel][pair][j]`).
///
/// # Safety
/// The CPU has AVX512F (used where B's rows are contiguous).
pub(super) unsafe fn pack_b(
    dst: &mut [u32],
    b: &[u16],
    mb: MatRef,
    p0: usize,
    kc: usize,
    cols: Range<usize>,
) {
    let n_pairs = pairs(kc);
    for (jp, panel) in dst.chunks_mut(NR * n_pairs).enumerate() {
        let j0 = cols.start + jp * NR;
        if j0 >= cols.end {
            break;
        }
        let width = NR.min(cols.end - j0);
        // Whole groups of 16 pairs read straight from B's columns (see `transpose_words`).
        let mut first = 0;
        if mb.row_stride == 1 && width == NR {
            first = (kc / 32) * 16;
            for pp in (0..first).step_by(16) {
                for h in 0..NR / 16 {
                    let column = |j: usize| &b[at(mb, p0 + 2 * pp, j0 + 16 * h + j)..][..32];
                    let out = &mut panel[pp * NR + 16 * h..];
                    // SAFETY: the caller's contract (AVX512F).
                    unsafe { transpose_words(out, NR, column) };
                }
            }
        }
        for (pp, words) in panel.chunks_mut(NR).enumerate().skip(first) {
            let p = p0 + 2 * pp;
            let has_hi = 2 * pp + 1 < kc;
            if mb.col_stride == 1 && width == NR {
                let lo = &b[at(mb, p, j0)..][..NR];
                let hi = has_hi.then(|| &b[at(mb, p + 1, j0)..][..NR]);
                // SAFETY: the caller's contract; both rows hold NR values (sliced above).
                unsafe { interleave_rows(words, lo, hi) };
                continue;
            }
            for (j, w) in words.iter_mut().enumerate() {
                *w = if j < width {
                    let lo = b[at(mb, p, j0 + j)];
                    let hi = if has_hi { b[at(mb, p + 1, j0 + j)] } else { 0 };
                    u32::from(lo) | u32::from(hi) << 16
                } else {
                    0
                };
            }
        }
    }
}

/// `dst[j] = lo[j] | hi[j] << 16` for [`NR`] columns (`hi` zero when absent).
#[target_feature(enable = "avx512f")]
fn interleave_rows(dst: &mut [u32], lo: &[u16], hi: Option<&[u16]>) {
    use std::arch::x86_64::*;
    assert!(dst.len() >= NR && lo.len() >= NR && hi.is_none_or(|h| h.len() >= NR));
    for h in 0..NR / 16 {
        // SAFETY: 16 values at offset 16h of each slice, in bounds by the assert.
        unsafe {
            let low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(lo.as_ptr().add(16 * h).cast()));
            let word = match hi {
                Some(hi) => {
                    let high = _mm256_loadu_si256(hi.as_ptr().add(16 * h).cast());
                    _mm512_or_si512(low, _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(high)))
                }
                None => low,
            };
            _mm512_storeu_si512(dst.as_mut_ptr().add(16 * h).cast(), word);
        }
    }
}

/// Writes the 16 x 16 transpose of 32-bit words: `dst[q * stride + j]` = word `q` of
/// `column(j)` (two bfloat16 values, the pair `2q, 2q + 1`), for 16 columns `j` and 16
/// pairs `q`. That is a B panel's layout when B's columns are contiguous in depth (a
/// weight read as `Wᵀ`), so each packed word is one unaligned 32-bit load.
///
/// Why a register transpose: word by word, the packing of a 512 x 784 `Wᵀ` took as long
/// as the product itself.
#[target_feature(enable = "avx512f")]
fn transpose_words<'a>(dst: &mut [u32], stride: usize, column: impl Fn(usize) -> &'a [u16]) {
    use std::arch::x86_64::*;
    assert!(dst.len() > 15 * stride + 15);
    // SAFETY: each column slice holds 32 values (16 words), checked by the slice
    // indexing in `column`; the stores stay inside `dst` by the assert.
    unsafe {
        let r: [__m512i; 16] = std::array::from_fn(|j| {
            let col = column(j);
            assert!(col.len() >= 32);
            _mm512_loadu_si512(col.as_ptr().cast())
        });
        // Stage 1 and 2: within each 128-bit lane, 4 x 4 blocks of words.
        let t: [__m512i; 16] = std::array::from_fn(|i| {
            let (x, y) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_epi32(x, y)
            } else {
                _mm512_unpackhi_epi32(x, y)
            }
        });
        // u[4g + c]: rows 4g..4g + 4 of words c, c + 4, c + 8, c + 12 (one per lane).
        let u: [__m512i; 16] = std::array::from_fn(|i| {
            let (g, c) = (i / 4, i % 4);
            let (x, y) = (t[4 * g + c / 2], t[4 * g + 2 + c / 2]);
            if c % 2 == 0 {
                _mm512_unpacklo_epi64(x, y)
            } else {
                _mm512_unpackhi_epi64(x, y)
            }
        });
        // Stage 3 and 4: move 128-bit lanes so that each vector holds one word of all rows.
        for c in 0..4 {
            let v0 = _mm512_shuffle_i32x4::<0x88>(u[c], u[4 + c]);
            let v1 = _mm512_shuffle_i32x4::<0xdd>(u[c], u[4 + c]);
            let v2 = _mm512_shuffle_i32x4::<0x88>(u[8 + c], u[12 + c]);
            let v3 = _mm512_shuffle_i32x4::<0xdd>(u[8 + c], u[12 + c]);
            let words = [
                (c, _mm512_shuffle_i32x4::<0x88>(v0, v2)),
                (c + 8, _mm512_shuffle_i32x4::<0xdd>(v0, v2)),
                (c + 4, _mm512_shuffle_i32x4::<0x88>(v1, v3)),
                (c + 12, _mm512_shuffle_i32x4::<0xdd>(v1, v3)),
            ];
            for (q, w) in words {
                _mm512_storeu_si512(dst.as_mut_ptr().add(q * stride).cast(), w);
            }
        }
    }
}
