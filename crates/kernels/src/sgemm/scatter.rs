//! A GEMM that adds its result into scattered rows: row `r` of the product is added to
//! `dst[rows[r]..]`, so C is never stored. A convolution's input gradient is such a
//! product on wide positions: `cols[tap][p] = Σ_out Wᵀ[tap][out] · dY[out][p]`, and row
//! `tap` of it belongs at the tap's offset in the image gradient (col2im), which this
//! does in the tile's epilogue.
//!
//! ```text
//! for p in 0..kc:  b0, b1 = B[p, j0..j0 + 16];  acc[r] += A[r, p] * (b0, b1)
//! then:            dst[rows[r] + j0 .. + 16] += acc[r]        for each of the 6 rows
//! ```
//!
//! Rows whose targets overlap (two taps of one channel) are added one after the other, so
//! the result is exact whatever the offsets; but a row that reloads what the previous row
//! just stored waits for that store, so callers order rows to keep a tile's six targets
//! apart (see `implicit_conv`).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{MR, NR, depth_blocks};

/// Widest last panel that [`half_tile`] computes: one 8-lane vector per row.
const HALF: usize = NR / 2;

/// Length of a packed A of `m` rows and depth `k`: `m.div_ceil(MR)` panels, each
/// depth-major (`MR` values per step; rows past `m` are read but their results dropped).
pub(crate) fn packed_a_len(m: usize, k: usize) -> usize {
    m.div_ceil(MR) * MR * k
}

/// Index in a packed A (see [`packed_a_len`]) of element (`r`, `p`) of depth `k`.
#[inline]
pub(crate) fn packed_a_index(k: usize, r: usize, p: usize) -> usize {
    ((r / MR) * k + p) * MR + r % MR
}

/// `dst[rows[r] + j] += Σ_p A[r][p] · B[p][j]` for `r < rows.len()`, `j < n`, on this
/// thread: A packed as [`packed_a_index`] lays it out, B row-major with rows `ldb` apart
/// (each row readable up to the next multiple of 16 past `n`).
///
/// # Panics
/// When a row offset is negative or its row reaches past `dst`, or A or B is too short
/// (the kernel works through raw pointers; checked once here).
pub(crate) fn scatter_add_gemm(
    dst: &mut [f32],
    rows: &[i32],
    n: usize,
    (a, k): (&[f32], usize),
    (b, ldb): (&[f32], usize),
) {
    let m = rows.len();
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let padded = n.div_ceil(NR) * NR;
    assert!(super::available(), "scatter_add_gemm: needs AVX2 and FMA");
    assert!(
        rows.iter().all(|&o| o >= 0)
            && rows.iter().map(|&o| o as usize).max().unwrap_or(0) + n <= dst.len(),
        "scatter_add_gemm: a row reaches past its destination"
    );
    assert!(
        a.len() >= packed_a_len(m, k),
        "scatter_add_gemm: packed A too short"
    );
    assert!(
        ldb >= padded && b.len() >= (k - 1) * ldb + padded,
        "scatter_add_gemm: B too short"
    );
    let base = dst.as_mut_ptr();
    for (p0, kc) in depth_blocks(k) {
        for j0 in (0..n).step_by(NR) {
            let width = NR.min(n - j0);
            // SAFETY: B's rows p0..p0 + kc hold 16 values from j0 (checked above).
            let bp = unsafe { b.as_ptr().add(p0 * ldb + j0) };
            for i0 in (0..m).step_by(MR) {
                let height = MR.min(m - i0);
                let ap = &a[(i0 / MR * k + p0) * MR..][..kc * MR];
                if height == MR && width == NR {
                    let targets: [*mut f32; MR] = std::array::from_fn(|r| {
                        // SAFETY: rows[i0 + r] + j0 + 16 <= rows[..] + n <= dst.len().
                        unsafe { base.add(rows[i0 + r] as usize + j0) }
                    });
                    // SAFETY: AVX2/FMA checked; `ap` holds kc steps of MR, `bp` kc rows of
                    // 16 (`ldb` apart), and every target has 16 writable values.
                    unsafe { tile(kc, ap.as_ptr(), bp, ldb, &targets) };
                    continue;
                }
                if width <= HALF {
                    // A narrow last panel (LeNet's `conv2`: 136 positions, 8 past the last
                    // full panel): one vector per row, half the multiply-adds.
                    // SAFETY: AVX2/FMA checked; `ap` and `bp` as for a full tile (8 of its
                    // 16 columns read); this is the last panel, so each row's target ends at
                    // rows[r] + j0 + width = rows[r] + n <= dst.len() (checked above).
                    unsafe {
                        half_tile(
                            kc,
                            ap.as_ptr(),
                            bp,
                            ldb,
                            &rows[i0..][..height],
                            base,
                            j0,
                            width,
                        )
                    };
                    continue;
                }
                // Edge tile: computed into a buffer, then added value by value.
                let mut tmp = [0.0f32; MR * NR];
                let tmp_rows: [*mut f32; MR] = std::array::from_fn(|r| tmp[r * NR..].as_mut_ptr());
                // SAFETY: as above, with the buffer's six rows of 16 as targets.
                unsafe { tile(kc, ap.as_ptr(), bp, ldb, &tmp_rows) };
                for r in 0..height {
                    let row = &mut dst[rows[i0 + r] as usize + j0..][..width];
                    for (d, &v) in row.iter_mut().zip(&tmp[r * NR..][..width]) {
                        *d += v;
                    }
                }
            }
        }
    }
}

/// `targets[r][0..16] += Σ_p a[p][r] · b[p][0..16]` for the six rows, in row order.
///
/// # Safety
/// AVX2 and FMA are available; `a` has `MR * kc` readable values, `b` `kc` rows of 16
/// (`ldb` apart), and each target 16 readable and writable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(kc: usize, a: *const f32, b: *const f32, ldb: usize, targets: &[*mut f32; MR]) {
    // SAFETY (whole body): pointer arithmetic stays inside the ranges the caller promised.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for p in 0..kc {
            let (ap, bp) = (a.add(p * MR), b.add(p * ldb));
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*ap.add(r));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
        }
        for (row, &out) in acc.iter().zip(targets) {
            _mm256_storeu_ps(out, _mm256_add_ps(row[0], _mm256_loadu_ps(out)));
            let hi = out.add(8);
            _mm256_storeu_ps(hi, _mm256_add_ps(row[1], _mm256_loadu_ps(hi)));
        }
    }
}

/// `dst[rows[r] + j0..][..width] += Σ_p a[p][r] · b[p][0..width]` for the (up to six)
/// rows given, in row order, with `width <= 8`: a full vector add where `width` is 8,
/// value by value otherwise.
///
/// # Safety
/// AVX2 and FMA are available; `a` has `MR * kc` readable values, `b` `kc` rows of 8
/// (`ldb` apart); `rows.len() <= MR`, and `dst.add(rows[r] + j0)` has `width` readable
/// and writable values for each row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)] // the tile's operands, as `tile`'s plus its place
unsafe fn half_tile(
    kc: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    rows: &[i32],
    dst: *mut f32,
    j0: usize,
    width: usize,
) {
    // SAFETY (whole body): pointer arithmetic stays inside the ranges the caller promised.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); MR];
        for p in 0..kc {
            let (ap, b0) = (a.add(p * MR), _mm256_loadu_ps(b.add(p * ldb)));
            for (r, row) in acc.iter_mut().enumerate() {
                *row = _mm256_fmadd_ps(_mm256_broadcast_ss(&*ap.add(r)), b0, *row);
            }
        }
        for (row, &offset) in acc.iter().zip(rows) {
            let out = dst.add(offset as usize + j0);
            if width == HALF {
                _mm256_storeu_ps(out, _mm256_add_ps(*row, _mm256_loadu_ps(out)));
                continue;
            }
            let mut lanes = [0.0f32; HALF];
            _mm256_storeu_ps(lanes.as_mut_ptr(), *row);
            for (j, &v) in lanes[..width].iter().enumerate() {
                *out.add(j) += v;
            }
        }
    }
}

/// Never called: [`super::available`] is false off x86-64, and [`scatter_add_gemm`]
/// checks it.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn half_tile(
    _kc: usize,
    _a: *const f32,
    _b: *const f32,
    _ldb: usize,
    _rows: &[i32],
    _dst: *mut f32,
    _j0: usize,
    _width: usize,
) {
    unreachable!("the AVX2 microkernel exists only on x86-64")
}

/// Never called: [`super::available`] is false off x86-64, and [`scatter_add_gemm`]
/// checks it.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile(_kc: usize, _a: *const f32, _b: *const f32, _ldb: usize, _t: &[*mut f32; MR]) {
    unreachable!("the AVX2 microkernel exists only on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scattered_product_matches_naive_with_overlapping_rows() {
        if !super::super::available() {
            return;
        }
        // 9 rows (a short second tile) whose targets overlap (offsets 3 apart, n wide);
        // n columns: a last panel of 5 (added value by value), of 8 (one vector) and of 12
        // (through the edge buffer); depth 2 and 600 (several depth blocks).
        for (k, n) in [(2, 37), (600, 37), (2, 40), (600, 40), (600, 44)] {
            let m = 9;
            let rows: Vec<i32> = (0..m as i32).map(|r| (r * 3 + 40 * (r % 2)) % 90).collect();
            let mut a = vec![0.0; packed_a_len(m, k)];
            let av = |r: usize, p: usize| ((r * 5 + p * 3) % 13) as f32 - 6.0;
            for r in 0..m {
                for p in 0..k {
                    a[packed_a_index(k, r, p)] = av(r, p);
                }
            }
            let ldb = 48;
            let b: Vec<f32> = (0..k * ldb).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
            let mut dst: Vec<f32> = (0..140).map(|i| i as f32).collect();
            let mut want: Vec<f64> = dst.iter().map(|&v| v as f64).collect();
            scatter_add_gemm(&mut dst, &rows, n, (&a, k), (&b, ldb));
            for r in 0..m {
                for j in 0..n {
                    let s: f64 = (0..k)
                        .map(|p| av(r, p) as f64 * b[p * ldb + j] as f64)
                        .sum();
                    want[rows[r] as usize + j] += s;
                }
            }
            for (i, (&got, &w)) in dst.iter().zip(&want).enumerate() {
                assert_eq!(got as f64, w, "k {k}, dst[{i}]");
            }
        }
    }
}
