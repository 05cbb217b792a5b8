//! The 6x16 microkernel: twelve 8-lane accumulators (six rows of C, two vectors each)
//! updated by one broadcast of A and two loads of B per step of the depth.
//!
//! ```text
//! for p in 0..kc:  b0, b1 = B[p, 0..8], B[p, 8..16]
//!                  for r in 0..6:  acc[r] += A[r, p] * (b0, b1)
//! ```
//! Twelve accumulators, two B vectors and one broadcast use 15 of the 16 AVX registers.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{MR, NR, TileEpilogue};

/// How far ahead in A (values) each step of the tile asks for a line: 128 steps, about
/// 700 cycles of multiply-adds, the time a line takes to come from memory. Why: a
/// convolution at batch 1 reads its prepacked filters once per call, straight from
/// memory (ResNet-18's 512-channel layers: 9.4 MB each, past L3 for the whole network),
/// and the hardware prefetcher alone left its tiles waiting (measured: BENCHMARKS.md,
/// "ONNX"). Where A is already in cache the request costs one load slot per 12 FMAs.
pub(super) const PREFETCH_A: usize = MR * 128;

/// `C[6 x 16] (+)= A_panel * B_panel`, then the epilogue: `a` is packed depth-major (`MR`
/// values per step), `b` holds `kc` rows of `NR` values, `ldb` elements apart; C rows
/// (and the epilogue's) are `ldc` apart.
///
/// Why the epilogue by reference: by value (40 bytes then; more now) it made every product through this
/// kernel slower, convolutions included (measured on LeNet's step: BENCHMARKS.md, "Figures
/// moved from code comments").
///
/// # Safety
/// The CPU supports AVX2 and FMA; `a` has `MR * kc` readable values, `b` `kc` rows of
/// `NR`, and `c` (and the epilogue's operands) six rows of sixteen.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    kc: usize,
    a: *const f32,
    b: *const f32,
    ldb: isize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    epilogue: Option<&TileEpilogue>,
) {
    // SAFETY (whole body): pointer arithmetic stays inside the ranges the caller promised.
    unsafe {
        // The tile of C is read and written once, after the loop: ask for its lines now
        // so that large products (C far out of cache) do not stall on them at the end.
        // The same holds for the epilogue's operands.
        for r in 0..MR {
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR - 1).cast::<i8>());
            if let Some(e) = epilogue {
                e.prefetch(r, ldc);
            }
        }
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let (mut a, mut b) = (a, b);
        for _ in 0..kc {
            // A hint: no fault past the end of A (hence `wrapping_add`).
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PREFETCH_A).cast::<i8>());
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
            a = a.add(MR);
            b = b.offset(ldb);
        }
        store_tile(&acc, c, ldc, accumulate, epilogue);
    }
}

/// Writes (or adds, with `accumulate`) a tile's twelve accumulators to C's six rows of 16
/// at `c`, `ldc` apart, after the epilogue (if any) ran on them: the last step of every
/// 6x16 microkernel here.
///
/// # Safety
/// AVX2 is available; `c` has six writable (and, with `accumulate`, readable) rows of 16,
/// and the epilogue's operands six rows of 16, `ldc` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn store_tile(
    acc: &[[__m256; 2]; MR],
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    epilogue: Option<&TileEpilogue>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        // An optimizer's moment update (`+ beta * D` alone) gets a loop of its own. Why:
        // the general epilogue tests its four parts for every eight values, and the weight
        // gradients' tiles (depth 64, the batch) are short enough that those tests cost a
        // visible share of the product (512x784x64 written over D; measured:
        // BENCHMARKS.md, "Figures moved from code comments").
        if let Some((d, beta)) = epilogue.and_then(TileEpilogue::addend_alone) {
            let beta = _mm256_set1_ps(beta);
            for (r, row) in acc.iter().enumerate() {
                let (out, d) = (c.add(r * ldc), d.add(r * ldc));
                let (mut lo, mut hi) = (row[0], row[1]);
                if accumulate {
                    lo = _mm256_add_ps(lo, _mm256_loadu_ps(out));
                    hi = _mm256_add_ps(hi, _mm256_loadu_ps(out.add(8)));
                }
                lo = _mm256_add_ps(lo, _mm256_mul_ps(beta, _mm256_loadu_ps(d)));
                hi = _mm256_add_ps(hi, _mm256_mul_ps(beta, _mm256_loadu_ps(d.add(8))));
                _mm256_storeu_ps(out, lo);
                _mm256_storeu_ps(out.add(8), hi);
            }
            return;
        }
        for (r, row) in acc.iter().enumerate() {
            let out = c.add(r * ldc);
            let (mut lo, mut hi) = (row[0], row[1]);
            if accumulate {
                lo = _mm256_add_ps(lo, _mm256_loadu_ps(out));
                hi = _mm256_add_ps(hi, _mm256_loadu_ps(out.add(8)));
            }
            if let Some(e) = epilogue {
                (lo, hi) = (e.finish8(r, 0, ldc, lo), e.finish8(r, 8, ldc, hi));
            }
            _mm256_storeu_ps(out, lo);
            _mm256_storeu_ps(out.add(8), hi);
        }
    }
}

/// Writes (or adds, with `accumulate`) the first `height` rows of a tile computed into
/// `tmp` (rows of [`NR`]) to C at `c`, rows `ldc` apart, through the epilogue (if any),
/// eight values at a time: the bottom tiles of a C whose rows are not a multiple of
/// [`MR`], whose width is whole.
///
/// # Safety
/// AVX2 is available; `c` has `height` writable (and, with `accumulate`, readable) rows of
/// 16, and the epilogue's operands `height` rows of 16, `ldc` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn store_rows(
    tmp: &[f32; MR * NR],
    height: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    epilogue: Option<&TileEpilogue>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for (r, row) in tmp.chunks_exact(NR).take(height).enumerate() {
            let out = c.add(r * ldc);
            for q in [0, 8] {
                let mut v = _mm256_loadu_ps(row.as_ptr().add(q));
                if accumulate {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(out.add(q)));
                }
                if let Some(e) = epilogue {
                    v = e.finish8(r, q, ldc, v);
                }
                _mm256_storeu_ps(out.add(q), v);
            }
        }
    }
}

/// Copies (or adds, with `accumulate`) the `height x width` corner of a full tile computed
/// into `tmp` (rows of [`NR`]) to C at (`i0`, `j0`), rows `ldc` apart: how the products
/// that take C as a slice finish their edge tiles.
pub(super) fn write_edge(
    c: &mut [f32],
    ldc: usize,
    (i0, j0): (usize, usize),
    (height, width): (usize, usize),
    tmp: &[f32; MR * NR],
    accumulate: bool,
) {
    for r in 0..height {
        let row = &mut c[(i0 + r) * ldc + j0..][..width];
        for (d, &v) in row.iter_mut().zip(&tmp[r * NR..][..width]) {
            *d = if accumulate { *d + v } else { v };
        }
    }
}

/// Packs a full B panel of a transposed B (`mb.row_stride == 1`: each column contiguous
/// along the depth) by 8x8 register transposes, eight times fewer loads than an element
/// gather. Returns false (nothing written) where it does not apply.
pub(crate) fn transpose_pack(
    dst: &mut [f32],
    b: &[f32],
    mb: crate::operand::MatRef,
    p0: usize,
    kc: usize,
    j0: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if mb.row_stride != 1 || mb.col_stride <= 0 || dst.len() < kc * NR {
            return false;
        }
        let col = |q: usize| (mb.offset as isize + (j0 + q) as isize * mb.col_stride) as usize + p0;
        // Every column q of the panel holds kc values from col(q).
        if col(NR - 1) + kc > b.len() {
            return false;
        }
        let k8 = kc / 8 * 8;
        let cols: [usize; NR] = std::array::from_fn(col);
        // SAFETY: AVX2 is available (callers run only when `available()`), column q spans
        // b[col(q)..col(q) + kc] (checked above), dst holds kc rows of NR.
        unsafe { transpose_blocks(dst, b, &cols, k8) };
        for p in k8..kc {
            for q in 0..NR {
                dst[p * NR + q] = b[col(q) + p];
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dst, b, mb, p0, kc, j0);
        false
    }
}

/// Packs a full `MR`-row panel of a row-major A (`ma.col_stride == 1`): rows `i0..i0 +
/// MR`, depth `p0..p0 + kc`, into `panel[p * MR + r]`, eight depth steps at a time
/// through an 8x8 transpose (six rows and two zero rows). Returns false, having written
/// nothing, when A is not laid out that way or a row would leave `a`.
///
/// Why: packing one value at a time made six scalar stores per depth step, a large share
/// of ResNet's layer4 forward pass (its 512 x 4608 filters are packed on every call) and
/// of layer1's weight gradient (whose A is dY) under `perf` (measured: BENCHMARKS.md,
/// "Figures moved from code comments").
pub(super) fn transpose_pack_a(
    panel: &mut [f32],
    a: &[f32],
    ma: crate::operand::MatRef,
    i0: usize,
    p0: usize,
    kc: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if ma.col_stride != 1 || panel.len() < kc * MR {
            return false;
        }
        let row = |r: usize| ma.offset as isize + (i0 + r) as isize * ma.row_stride + p0 as isize;
        if (0..MR).any(|r| row(r) < 0 || row(r) as usize + kc > a.len()) {
            return false;
        }
        let rows: [usize; MR] = std::array::from_fn(|r| row(r) as usize);
        let k8 = kc / 8 * 8;
        // SAFETY: AVX2 is available (callers run only when `available()`), row r spans
        // a[rows[r]..rows[r] + kc] (checked above), and panel holds kc * MR values.
        unsafe { transpose_rows_blocks(panel, a, &rows, k8) };
        for p in k8..kc {
            for (r, &at) in rows.iter().enumerate() {
                panel[p * MR + r] = a[at + p];
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (panel, a, ma, i0, p0, kc);
        false
    }
}

/// The first `k8` (a multiple of 8) depth steps of [`transpose_pack_a`]: row `r` of the
/// panel starts at `a[rows[r]]`.
///
/// # Safety
/// AVX2 is available; `a[rows[r]..rows[r] + k8]` and `panel[..k8 * MR]` are in bounds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_rows_blocks(panel: &mut [f32], a: &[f32], rows: &[usize; MR], k8: usize) {
    // SAFETY: the caller's contract; every store below ends inside `panel[..k8 * MR]`.
    unsafe {
        let (src, out) = (a.as_ptr(), panel.as_mut_ptr());
        let mut p = 0;
        while p < k8 {
            let mut block = [_mm256_setzero_ps(); 8];
            for (r, v) in block.iter_mut().take(MR).enumerate() {
                *v = _mm256_loadu_ps(src.add(rows[r] + p));
            }
            // Column pp of the block: the six rows' values at depth p + pp, then two zeros.
            let columns = transpose8(block);
            for (pp, v) in columns.iter().take(7).enumerate() {
                // Eight values where six belong: the next column's store overwrites the
                // two extra ones, which stay inside this block's 48 values.
                _mm256_storeu_ps(out.add((p + pp) * MR), *v);
            }
            // The last column stores exactly six values (four, then two).
            let last = out.add((p + 7) * MR);
            _mm_storeu_ps(last, _mm256_castps256_ps128(columns[7]));
            // `_mm_storel_epi64` has no alignment requirement (an `f64` store would need
            // 8-byte alignment, which `last + 4` need not have).
            let high = _mm256_extractf128_ps::<1>(columns[7]);
            _mm_storel_epi64(last.add(4).cast::<__m128i>(), _mm_castps_si128(high));
            p += 8;
        }
    }
}

/// The first `k8` (a multiple of 8) depth steps of [`transpose_pack`]: column `q` of
/// the panel starts at `b[cols[q]]`.
///
/// # Safety
/// AVX2 is available; `b[cols[q]..cols[q] + k8]` and `dst[..k8 * NR]` are in bounds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_blocks(dst: &mut [f32], b: &[f32], cols: &[usize; NR], k8: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        let (src, out) = (b.as_ptr(), dst.as_mut_ptr());
        for half in 0..2 {
            let mut p = 0;
            while p < k8 {
                let mut rows = [_mm256_setzero_ps(); 8];
                for (q, r) in rows.iter_mut().enumerate() {
                    *r = _mm256_loadu_ps(src.add(cols[half * 8 + q] + p));
                }
                for (pp, v) in transpose8(rows).iter().enumerate() {
                    _mm256_storeu_ps(out.add((p + pp) * NR + half * 8), *v);
                }
                p += 8;
            }
        }
    }
}

/// Transposes an 8x8 block held as eight row vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Never called: [`super::available`] is false off x86-64.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    _kc: usize,
    _a: *const f32,
    _b: *const f32,
    _ldb: isize,
    _c: *mut f32,
    _ldc: usize,
    _accumulate: bool,
    _epilogue: Option<&TileEpilogue>,
) {
    unreachable!("the AVX2 microkernel exists only on x86-64")
}

const _: () = assert!(
    NR == 16,
    "the microkernel computes two 8-lane vectors per row"
);
