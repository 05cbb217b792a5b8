//! A GEMM whose A is never stored: element (r, p) of A is `src[rows[r] + depth[p]]`, read
//! straight from its source by two offset tables. A convolution is such a product (an
//! implicit im2col): with output positions as rows and filter taps as the depth, `src` is
//! the image itself, and with the roles swapped it is the weight gradient's.
//!
//! ```text
//! for p in 0..kc:  b0, b1 = B[p, 0..8], B[p, 8..16]          (B packed, NR wide)
//!                  for r in 0..6:  acc[r] += src[rows[r] + depth[p]] * (b0, b1)
//! ```
//!
//! Why: lowering a small image copies every input value `KH * KW` times into a column
//! matrix that the GEMM then reads back, a large share of LeNet's `conv2` forward time
//! (measured: BENCHMARKS.md, "Figures moved from code comments"). The microkernel
//! broadcasts one value of A per row and step anyway; taking it from the image instead
//! of from a packed panel costs one offset load per step, and the image planes of a
//! small layer stay in L1 while the tables walk them.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::kernel::store_tile;
use super::kernel::write_edge;
use super::{MR, NR, depth_blocks};

/// A, described by where its elements lie: `a[r][p] = src[rows[r] + depth[p]]`.
#[derive(Clone, Copy)]
pub(crate) struct Gathered<'a> {
    pub src: &'a [f32],
    pub rows: &'a [i32],
    pub depth: &'a [i32],
}

/// Length of a packed B of depth `k` and `n` columns: `n.div_ceil(NR)` panels of `k`
/// rows of [`NR`] values.
pub(crate) fn packed_b_len(k: usize, n: usize) -> usize {
    n.div_ceil(NR) * k * NR
}

/// Index in a packed B (see [`packed_b_len`]) of element (`p`, `j`) of depth `k`.
#[inline]
pub(crate) fn packed_b_index(k: usize, p: usize, j: usize) -> usize {
    ((j / NR) * k + p) * NR + j % NR
}

/// `C[m x n] (+)= A * B` on this thread, with A gathered (`m = a.rows.len()`, depth
/// `k = a.depth.len()`), B packed as [`packed_b_index`] lays it out (columns past `n`
/// zero or not, they are discarded), and C's rows `ldc` apart.
///
/// # Panics
/// When an offset is negative or reaches past `a.src`, B is shorter than
/// [`packed_b_len`], or C cannot hold the product: the kernel reads through raw
/// pointers, so the bounds are checked here, once per call.
pub(crate) fn gather_gemm(
    c: &mut [f32],
    ldc: usize,
    n: usize,
    accumulate: bool,
    a: Gathered,
    b: &[f32],
) {
    let (m, k) = (a.rows.len(), a.depth.len());
    if m == 0 || n == 0 {
        return;
    }
    let reach = |offsets: &[i32]| {
        let (lo, hi) = offsets
            .iter()
            .fold((i32::MAX, i32::MIN), |(lo, hi), &o| (lo.min(o), hi.max(o)));
        assert!(lo >= 0, "gather_gemm: negative offset");
        hi as usize
    };
    let (row_reach, depth_reach) = (reach(a.rows), if k > 0 { reach(a.depth) } else { 0 });
    assert!(
        k == 0 || row_reach + depth_reach < a.src.len(),
        "gather_gemm: A reaches past its source"
    );
    assert!(
        b.len() >= packed_b_len(k, n),
        "gather_gemm: packed B too short"
    );
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "gather_gemm: C too small"
    );
    assert!(super::available(), "gather_gemm: needs AVX2 and FMA");
    if k == 0 {
        if !accumulate {
            c.chunks_mut(ldc).take(m).for_each(|row| row[..n].fill(0.0));
        }
        return;
    }
    for (p0, kc) in depth_blocks(k) {
        let acc = accumulate || p0 > 0;
        for jp in 0..n.div_ceil(NR) {
            let j0 = jp * NR;
            let width = NR.min(n - j0);
            let bp = &b[(jp * k + p0) * NR..][..kc * NR];
            for i0 in (0..m).step_by(MR) {
                let height = MR.min(m - i0);
                // SAFETY: AVX2/FMA checked; offsets of the `height` rows and of depth
                // p0..p0 + kc stay inside `a.src` (checked above); `bp` holds kc rows of
                // NR; the tile's rows and columns lie inside C (checked above).
                unsafe {
                    tile_at(
                        c,
                        ldc,
                        (i0, j0),
                        (height, width),
                        a,
                        p0,
                        kc,
                        bp.as_ptr(),
                        acc,
                    )
                }
            }
        }
    }
}

/// One `height x width` tile of C at (`i0`, `j0`) over depth `p0..p0 + kc`; edge tiles go
/// through a small buffer (missing rows repeat row `i0`, whose results are dropped).
///
/// # Safety
/// As [`tile`], for the rows and depth named.
#[allow(clippy::too_many_arguments)]
unsafe fn tile_at(
    c: &mut [f32],
    ldc: usize,
    (i0, j0): (usize, usize),
    (height, width): (usize, usize),
    a: Gathered,
    p0: usize,
    kc: usize,
    bp: *const f32,
    accumulate: bool,
) {
    let base = a.src.as_ptr();
    let rows: [*const f32; MR] = std::array::from_fn(|r| {
        let row = a.rows[i0 + if r < height { r } else { 0 }] as usize;
        // SAFETY: the row offset is inside `a.src` (the caller checked its reach).
        unsafe { base.add(row) }
    });
    let depth = a.depth[p0..].as_ptr();
    // SAFETY (both calls): the caller's contract; `c` has the tile's rows (checked by
    // `gather_gemm`), and `tmp` is one full tile.
    unsafe {
        let out = c.as_mut_ptr().add(i0 * ldc + j0);
        if height == MR && width == NR {
            tile(kc, &rows, depth, bp, out, ldc, accumulate);
            return;
        }
        let mut tmp = [0.0f32; MR * NR];
        tile(kc, &rows, depth, bp, tmp.as_mut_ptr(), NR, false);
        write_edge(c, ldc, (i0, j0), (height, width), &tmp, accumulate);
    }
}

/// `C[6 x 16] (+)= A * B_panel` with row `r` of A at `rows[r]`, its step `p` at offset
/// `depth[p]` from there, and `b` holding `kc` rows of [`NR`] values.
///
/// # Safety
/// AVX2 and FMA are available; `rows[r].add(depth[p])` is readable for every row and
/// `p < kc`; `b` has `kc * NR` readable values; `c` six writable rows of sixteen, `ldc`
/// apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(
    kc: usize,
    rows: &[*const f32; MR],
    depth: *const i32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    // SAFETY (whole body): pointer arithmetic stays inside the ranges the caller promised.
    unsafe {
        let rows = *rows;
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let mut b = b;
        for p in 0..kc {
            let o = *depth.add(p) as usize;
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*rows[r].add(o));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
            b = b.add(NR);
        }
        store_tile(&acc, c, ldc, accumulate, None);
    }
}

/// Never called: [`super::available`] is false off x86-64, and [`gather_gemm`] checks it.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile(
    _kc: usize,
    _rows: &[*const f32; MR],
    _depth: *const i32,
    _b: *const f32,
    _c: *mut f32,
    _ldc: usize,
    _accumulate: bool,
) {
    unreachable!("the AVX2 microkernel exists only on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_product_matches_naive_for_edge_tiles_and_depth_blocks() {
        if !super::super::available() {
            eprintln!("SKIPPED gathered_product_matches_naive: no AVX2 and FMA kernels here");
            return;
        }
        // 13 rows (a short last tile), 21 columns (a short last panel), depth 300 (one
        // merged block) and 600 (three blocks, so C accumulates between blocks).
        for k in [5, 300, 600] {
            let (m, n) = (13, 21);
            let src: Vec<f32> = (0..4000).map(|i| ((i * 7) % 23) as f32 - 11.0).collect();
            let rows: Vec<i32> = (0..m as i32).map(|r| r * 3 + (r % 2)).collect();
            let depth: Vec<i32> = (0..k as i32).map(|p| (p * 5) % 3000).collect();
            let bv = |p: usize, j: usize| ((p * 3 + j * 11) % 17) as f32 - 8.0;
            let mut b = vec![0.0; packed_b_len(k, n)];
            for p in 0..k {
                for j in 0..n {
                    b[packed_b_index(k, p, j)] = bv(p, j);
                }
            }
            let ldc = n + 2;
            let mut c = vec![1.0f32; m * ldc];
            let a = Gathered {
                src: &src,
                rows: &rows,
                depth: &depth,
            };
            gather_gemm(&mut c, ldc, n, true, a, &b);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = 1.0
                        + (0..k)
                            .map(|p| src[(rows[i] + depth[p]) as usize] as f64 * bv(p, j) as f64)
                            .sum::<f64>();
                    assert_eq!(c[i * ldc + j] as f64, want, "k {k}, ({i}, {j})");
                }
                // The padding between rows is untouched.
                assert_eq!(c[i * ldc + n], 1.0);
            }
        }
    }
}
