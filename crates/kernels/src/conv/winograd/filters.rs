//! The filter transform `U = G w Gᵀ`, written straight into the GEMM's packed layout,
//! and its adjoint `dw = Gᵀ dU G` for the weight gradient.

use std::arch::x86_64::*;

use super::simd::*;
use super::*;
use crate::sgemm::{MR, depth_blocks, prepacked_a_len};

// The packed filters' panels are six rows (`store_panel`).
const _: () = assert!(MR == 6);

/// Scratch values [`untransform_filter`] needs: the 9 taps, then `G` applied to the rows.
pub(super) fn filter_scratch(c: usize) -> usize {
    (9 + ALPHA * 3) * c
}

/// Writes `U[ξ] = G w Gᵀ` of output channels `MR·panel..` (rows past `o` zero) into
/// every ξ's packed filters at `u` (`XI` blocks of `prepacked_a_len(o, c)`, each laid
/// out as `sgemm::prepack_a` does): eight input channels at a time, then one by one.
///
/// # Safety
/// The CPU has AVX2 and FMA; `u` holds the `XI` packed blocks; no other thread
/// writes this panel.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn transform_filter_panel(
    w: &[f32],
    o: usize,
    c: usize,
    panel: usize,
    u: *mut f32,
) {
    let (len, rows) = (prepacked_a_len(o, c), o.div_ceil(MR) * MR);
    for (p0, kc) in depth_blocks(c) {
        // This panel's [kc][MR] values of ξ start at `start(ξ)`.
        let start = |xi: usize| xi * len + p0 * rows + panel * MR * kc;
        let mut ch = p0;
        // Depth blocks start at multiples of 256: eight channels never straddle two.
        while ch + LANES <= p0 + kc {
            // values[ξ][r]: ξ of output channel `MR·panel + r`, eight input channels.
            let mut values = [[_mm256_setzero_ps(); MR]; XI];
            for r in 0..MR.min(o - panel * MR) {
                let oc = panel * MR + r;
                let transformed = transform_filters8(&w[(oc * c + ch) * 9..][..LANES * 9]);
                for (slot, value) in values.iter_mut().zip(transformed) {
                    slot[r] = value;
                }
            }
            for (xi, &column) in values.iter().enumerate() {
                // SAFETY: the caller's contract; eight depth steps of MR values
                // inside this panel's block.
                unsafe { store_panel(column, u.add(start(xi) + (ch - p0) * MR)) };
            }
            ch += LANES;
        }
        for ch in ch..p0 + kc {
            for r in 0..MR {
                let oc = panel * MR + r;
                let values = if oc < o {
                    transform_filter1(&w[(oc * c + ch) * 9..][..9])
                } else {
                    [0.0; XI]
                };
                for (xi, &value) in values.iter().enumerate() {
                    // SAFETY: as above.
                    unsafe { *u.add(start(xi) + (ch - p0) * MR + r) = value };
                }
            }
        }
    }
}

/// `G w Gᵀ` of eight consecutive 3x3 filters (`w`, 72 values), one per lane.
#[target_feature(enable = "avx2,fma")]
pub(super) fn transform_filters8(w: &[f32]) -> [__m256; XI] {
    let mut taps = [[0.0f32; LANES]; 9];
    for (lane, filter) in w.chunks_exact(9).enumerate() {
        for (k, &value) in filter.iter().enumerate() {
            taps[k][lane] = value;
        }
    }
    let taps = taps.map(|t| load8(&t));
    // rows[i][l] = Σ_k G[i][k] · w[k][l], then U[i·α + j] = Σ_l G[j][l] · rows[i][l]
    let mut rows = [[_mm256_setzero_ps(); 3]; ALPHA];
    for (i, row) in rows.iter_mut().enumerate() {
        for (l, value) in row.iter_mut().enumerate() {
            *value = weigh(&G[i], [taps[l], taps[3 + l], taps[6 + l]]);
        }
    }
    let mut u = [_mm256_setzero_ps(); XI];
    for (i, row) in rows.iter().enumerate() {
        for j in 0..ALPHA {
            u[i * ALPHA + j] = weigh(&G[j], *row);
        }
    }
    u
}

/// `Σ coef[k] · v[k]` over the nonzero coefficients.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn weigh(coef: &[f32; 3], v: [__m256; 3]) -> __m256 {
    let mut sum = _mm256_setzero_ps();
    for (&k, v) in coef.iter().zip(v) {
        if k != 0.0 {
            sum = _mm256_fmadd_ps(_mm256_set1_ps(k), v, sum);
        }
    }
    sum
}

/// `G w Gᵀ` of one 3x3 filter, for the channels past the last group of eight.
pub(super) fn transform_filter1(w: &[f32]) -> [f32; XI] {
    let mut rows = [[0.0f32; 3]; ALPHA];
    for (i, row) in rows.iter_mut().enumerate() {
        for (l, value) in row.iter_mut().enumerate() {
            *value = (0..3).map(|k| G[i][k] * w[k * 3 + l]).sum();
        }
    }
    std::array::from_fn(|xi| (0..3).map(|l| G[xi % ALPHA][l] * rows[xi / ALPHA][l]).sum())
}

/// Stores six rows of eight depth steps (`rows[r]`, lane = step) depth-major, as a
/// packed panel holds them: step `s`'s six values at `dst + 6·s`.
///
/// # Safety
/// AVX2 is available; `dst` has 48 writable values.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn store_panel(rows: [__m256; MR], dst: *mut f32) {
    let quads = transpose4([rows[0], rows[1], rows[2], rows[3]]);
    // Rows 4 and 5 of steps (0, 1 | 4, 5) and (2, 3 | 6, 7), paired.
    let pairs = [
        _mm256_unpacklo_ps(rows[4], rows[5]),
        _mm256_unpackhi_ps(rows[4], rows[5]),
    ];
    for step in 0..LANES {
        let half = |v: __m256| {
            if step < 4 {
                _mm256_castps256_ps128(v)
            } else {
                _mm256_extractf128_ps::<1>(v)
            }
        };
        let quad = half(quads[step % 4]);
        let pair = half(pairs[(step % 4) / 2]);
        let pair = if step % 2 == 0 {
            pair
        } else {
            _mm_movehl_ps(pair, pair)
        };
        // SAFETY: the caller's contract. The pair is stored as four values; its
        // last two land on the next step's first two, stored after it. The last
        // step stores its pair one value at a time, staying inside the 48.
        unsafe {
            let at = dst.add(step * MR);
            _mm_storeu_ps(at, quad);
            if step + 1 < LANES {
                _mm_storeu_ps(at.add(4), pair);
            } else {
                _mm_store_ss(at.add(4), pair);
                _mm_store_ss(at.add(5), _mm_movehdup_ps(pair));
            }
        }
    }
}

/// `dst = Σ coef · src` over the terms with a nonzero coefficient (zero where none
/// is). Why skip zeros: `G` is a third zeros, and `0 · inf` would be NaN.
#[inline(always)]
pub(super) fn combine<'a>(dst: &mut [f32], terms: impl Iterator<Item = (f32, &'a [f32])>) {
    let mut first = true;
    for (coef, src) in terms {
        if coef == 0.0 {
            continue;
        }
        let src = &src[..dst.len()];
        if first {
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d = coef * s);
            first = false;
        } else {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d = coef.mul_add(s, *d));
        }
    }
    if first {
        dst.fill(0.0);
    }
}

/// `dw[oc][ch] = Gᵀ dU[·][oc][ch] G` for every input channel: the adjoint of
/// [`transform_filter_panel`], from `du` ([XI, O, C]) into `dw` ([C, 3, 3]).
#[target_feature(enable = "avx2,fma")]
pub(super) fn untransform_filter(
    du: &[f32],
    oc: usize,
    o: usize,
    dw: &mut [f32],
    scratch: &mut [f32],
) {
    let c = dw.len() / 9;
    let (taps, rows) = scratch[..filter_scratch(c)].split_at_mut(9 * c);
    let du_at = |xi: usize| &du[(xi * o + oc) * c..][..c];
    // rows[k][j][ch] = Σ_i G[i][k] · dU[i·α + j][ch]
    for k in 0..3 {
        for j in 0..ALPHA {
            let dst = &mut rows[(k * ALPHA + j) * c..][..c];
            combine(dst, (0..ALPHA).map(|i| (G[i][k], du_at(i * ALPHA + j))));
        }
    }
    // taps[k][l][ch] = Σ_j G[j][l] · rows[k][j][ch]
    for k in 0..3 {
        for l in 0..3 {
            let dst = &mut taps[(k * 3 + l) * c..][..c];
            combine(
                dst,
                (0..ALPHA).map(|j| (G[j][l], &rows[(k * ALPHA + j) * c..][..c])),
            );
        }
    }
    for (ch, f) in dw.chunks_exact_mut(9).enumerate() {
        for (kl, v) in f.iter_mut().enumerate() {
            *v = taps[kl * c + ch];
        }
    }
}
