//! Products whose operands are both contiguous along the depth: A row-major and B
//! column-major, as in `x · Wᵀ` (Dense) and `dy · colsᵀ` (a convolution's weight
//! gradient). Each output is a dot product of two contiguous rows, computed in tiles of
//! 3 rows x 4 columns with twelve 8-lane partial sums, and nothing is packed.
//!
//! Why not pack: for these shapes B is often used by only 6-64 rows of A, and gathering
//! it into column panels cost more than the multiply-adds (LeNet's weight gradients).
//! Seven loads feed twelve fused multiply-adds, so the loop is bound by arithmetic, as
//! long as its sixteen vectors stay in registers (see [`tile`]).
//!
//! B's columns may also start anywhere ([`dot_columns`]): a convolution's weight gradient
//! on wide positions reads them from the image in place, one per filter tap.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::ops::Range;

use rayon::prelude::*;

use super::{Product, split};

/// Rows of A per tile (see [`row_tile`] for the last ones).
const TR: usize = 3;
/// Columns of B per tile.
const TC: usize = 4;
/// Depth per pass: three rows and four columns of this length (28 KiB) stay in L1. (512
/// split the MLP's 784-deep `x · Wᵀ` into two passes that each re-stream A from L2 and
/// reload C: 0.354 ms, against 0.296 ms in one pass.)
const KD: usize = 1024;

/// `C[m x n] (+)= A * B` for `ma.col_stride == 1` and `mb.row_stride == 1`.
pub(super) fn run(p: &Product, threads: usize) {
    let (m, n, k) = (p.m, p.n, p.k);
    for p0 in (0..k).step_by(KD) {
        let depth = p0..KD.min(k - p0) + p0;
        let acc = p.accumulate || p0 > 0;
        let epilogue = p.epilogue.filter(|_| depth.end == k);
        let (blocks_n, blocks_m) = (n.div_ceil(TC), row_tiles(m));
        // Each thread's part of C, then the epilogue over it, row by row, while it is
        // still in this core's cache. Why not in the tiles: passed into the kernel, the
        // epilogue cost its depth loop 2-6 % (64x512x784 with bias and ReLU: 0.314 ms
        // against 0.306 plain), and read back right after the tile's scalar stores it
        // stalled on store forwarding.
        let part = |cols: Range<usize>, rows: Range<usize>| {
            tiles(p, cols.clone(), rows.clone(), depth.clone(), acc);
            if let Some(e) = epilogue {
                let rows = row_span(m, rows);
                let cols = cols.start * TC..(cols.end * TC).min(n);
                // SAFETY: the part lies inside C (and D, and its columns in the bias).
                unsafe { e.finish_region(p.dst.0, n, rows, cols) };
            }
        };
        // Split the dimension whose largest share is the smaller fraction of the whole
        // (columns on a tie: each thread then reads only its part of B). Why: the MLP's
        // 10 output columns are 3 blocks, and a column split left one thread 2 of them.
        let share = |blocks: usize| blocks.div_ceil(threads) as f64 / blocks as f64;
        if threads <= 1 || blocks_n * blocks_m < 2 {
            part(0..blocks_n, 0..blocks_m);
        } else if blocks_n >= threads && share(blocks_n) <= share(blocks_m) {
            let parts = p.balanced_parts(blocks_n, threads);
            (0..parts)
                .into_par_iter()
                .with_max_len(1)
                .for_each(|t| part(split(blocks_n, parts, t), 0..blocks_m));
        } else {
            let parts = p.balanced_parts(blocks_m, threads);
            (0..parts)
                .into_par_iter()
                .with_max_len(1)
                .for_each(|t| part(0..blocks_n, split(blocks_m, parts, t)));
        }
    }
}

/// How many row tiles an `m`-row product has: see [`row_tile`].
fn row_tiles(m: usize) -> usize {
    if m % TR == 1 && m > 1 {
        m / TR + 1
    } else {
        m.div_ceil(TR)
    }
}

/// The rows of row tile `ib` of an `m`-row product: [`TR`] rows each, except that where
/// one row would be left over, the last four rows form two tiles of two. Why: a one-row
/// tile has only four chains of sums, too few to hide the multiply-add's latency, so the
/// MLP's 64-row products took as long as 66 rows would (half of 64x512x784: 0.300 ms,
/// 63 rows 0.289, 66 rows 0.302).
fn row_tile(m: usize, ib: usize) -> Range<usize> {
    let count = row_tiles(m);
    if m % TR == 1 && m > 1 && ib + 2 >= count {
        let i0 = (count - 2) * TR + (ib + 2 - count) * 2;
        return i0..i0 + 2;
    }
    ib * TR..(ib * TR + TR).min(m)
}

/// The rows that row tiles `tiles` of an `m`-row product cover.
fn row_span(m: usize, tiles: Range<usize>) -> Range<usize> {
    if tiles.is_empty() {
        return 0..0;
    }
    row_tile(m, tiles.start).start..row_tile(m, tiles.end - 1).end
}

/// B of a [`dot_columns`] product, described by where its columns start: column `j` is
/// `src[starts[j]..]`, contiguous along the depth.
#[derive(Clone, Copy)]
pub(crate) struct Columns<'a> {
    pub src: &'a [f32],
    pub starts: &'a [i32],
}

/// `C[m x n] (+)= A[m x k] * B` on this thread: row `i` of A is `a[i * lda..][..k]`,
/// column `j` of B is `b.src[b.starts[j]..][..k]` (columns may overlap: a convolution's
/// weight gradient reads the image shifted by each tap's offset), and C's rows are `ldc`
/// apart.
///
/// # Panics
/// When a row of A or a column of B reaches past its slice, a start is negative, or C
/// cannot hold the product (the kernel reads through raw pointers; checked once here).
pub(crate) fn dot_columns(
    c: &mut [f32],
    ldc: usize,
    (m, k): (usize, usize),
    accumulate: bool,
    (a, lda): (&[f32], usize),
    b: Columns,
) {
    let n = b.starts.len();
    if m == 0 || n == 0 {
        return;
    }
    assert!(super::available(), "dot_columns: needs AVX2 and FMA");
    assert!(
        b.starts
            .iter()
            .all(|&s| s >= 0 && s as usize + k <= b.src.len()),
        "dot_columns: a column of B reaches past its source"
    );
    assert!(
        lda >= k && a.len() >= (m - 1) * lda + k,
        "dot_columns: A too short"
    );
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "dot_columns: C too short"
    );
    for p0 in (0..k).step_by(KD) {
        let kd = KD.min(k - p0);
        let acc = accumulate || p0 > 0;
        for j0 in (0..n).step_by(TC) {
            let width = TC.min(n - j0);
            // SAFETY: every start plus `k` lies inside `src` (checked above).
            let columns = std::array::from_fn(|j| unsafe {
                b.src
                    .as_ptr()
                    .add(b.starts[j0 + j.min(width - 1)] as usize + p0)
            });
            for rows in (0..row_tiles(m)).map(|ib| row_tile(m, ib)) {
                let (i0, height) = (rows.start, rows.len());
                // SAFETY: rows i0..i0 + height of A and the tile's columns hold `kd`
                // values from `p0`, and the tile of C lies inside `c` (checked above);
                // AVX2 and FMA were detected.
                unsafe {
                    let ap = a.as_ptr().add(i0 * lda + p0);
                    let cp = c.as_mut_ptr().add(i0 * ldc + j0);
                    dispatch(height, width, kd, ap, lda as isize, &columns, cp, ldc, acc);
                }
            }
        }
    }
}

/// The tiles of column blocks `cols` x row blocks `rows` over depth `depth`.
fn tiles(p: &Product, cols: Range<usize>, rows: Range<usize>, depth: Range<usize>, acc: bool) {
    let kd = depth.len();
    for jb in cols {
        let j0 = jb * TC;
        let width = TC.min(p.n - j0);
        let b0 = p.mb.offset as isize + j0 as isize * p.mb.col_stride + depth.start as isize;
        for ib in rows.clone() {
            let Range { start: i0, end } = row_tile(p.m, ib);
            let height = end - i0;
            let a0 = p.ma.offset as isize + i0 as isize * p.ma.row_stride + depth.start as isize;
            // SAFETY: rows i0..i0+height of A and columns j0..j0+width of B, over
            // `depth`, are inside the operands (the caller's bounds check), and the
            // tile of C is inside `c` (row stride n); AVX2+FMA were detected.
            unsafe {
                let (ap, bp) = (p.a.as_ptr().offset(a0), p.b.as_ptr().offset(b0));
                let ldb = p.mb.col_stride;
                let columns = std::array::from_fn(|j| bp.offset(j.min(width - 1) as isize * ldb));
                let c = p.dst.0.add(i0 * p.n + j0);
                dispatch(
                    height,
                    width,
                    kd,
                    ap,
                    p.ma.row_stride,
                    &columns,
                    c,
                    p.n,
                    acc,
                );
            }
        }
    }
}

/// Calls the tile kernel specialised for `height` x `width` (edges are smaller).
///
/// # Safety
/// As [`tile`].
#[allow(clippy::too_many_arguments)]
unsafe fn dispatch(
    height: usize,
    width: usize,
    k: usize,
    a: *const f32,
    lda: isize,
    b: &[*const f32; TC],
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    macro_rules! go {
        ($($r:literal, $c:literal);*) => {
            match (height, width) {
                $(($r, $c) => unsafe { tile::<$r, $c>(k, a, lda, b, c, ldc, acc) },)*
                _ => unreachable!("tiles are at most {TR}x{TC}"),
            }
        };
    }
    go!(3, 4; 3, 3; 3, 2; 3, 1; 2, 4; 2, 3; 2, 2; 2, 1; 1, 4; 1, 3; 1, 2; 1, 1)
}

/// `C[R x C] (+)= A[R x k] * B[k x C]` with rows of A (`lda` apart) contiguous, and
/// column `j` of B contiguous from `b[j]` (the first `C` are used).
///
/// # Safety
/// AVX2 and FMA are available; the R rows and C columns of length `k` are readable and
/// C's R rows of C values (`ldc` apart) writable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize, const C: usize>(
    k: usize,
    a: *const f32,
    lda: isize,
    b: &[*const f32; TC],
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    // SAFETY (whole body): every access is inside the ranges the caller promised.
    unsafe {
        // The column pointers as locals, kept in registers: read through the reference,
        // each step would load them again (four more loads per twelve multiply-adds).
        let b: [*const f32; TC] = *b;
        let mut sums = [[_mm256_setzero_ps(); C]; R];
        let k8 = k / 8 * 8;
        let mut p = 0;
        while p < k8 {
            // The R rows of A first, then one column of B at a time: 12 sums + 3 rows +
            // 1 column fill the 16 registers exactly. (Loading the 4 columns first needs
            // 17, and the spilled sum's round trip through the stack halved the rate.)
            let mut av = [_mm256_setzero_ps(); R];
            for (i, v) in av.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(a.offset(i as isize * lda).add(p));
            }
            for j in 0..C {
                let bj = _mm256_loadu_ps(b[j].add(p));
                for (row, &ai) in sums.iter_mut().zip(&av) {
                    row[j] = _mm256_fmadd_ps(ai, bj, row[j]);
                }
            }
            p += 8;
        }
        if C == TC && k8 == k {
            // Four columns' sums at once: three horizontal adds and one 128-bit add give
            // the four totals of a row in one vector, one store (a sum at a time took
            // four times the instructions; 64x512x512: 0.191-0.195 ms against
            // 0.196-0.199). The `% C` only keeps the indices valid in the narrower
            // tiles' copies of this code, which never run it.
            for (i, row) in sums.iter().enumerate() {
                let pairs = _mm256_hadd_ps(
                    _mm256_hadd_ps(row[0], row[1 % C]),
                    _mm256_hadd_ps(row[2 % C], row[3 % C]),
                );
                let totals = _mm_add_ps(
                    _mm256_castps256_ps128(pairs),
                    _mm256_extractf128_ps::<1>(pairs),
                );
                let out = c.add(i * ldc);
                let v = if acc {
                    _mm_add_ps(_mm_loadu_ps(out), totals)
                } else {
                    totals
                };
                _mm_storeu_ps(out, v);
            }
            return;
        }
        for (i, row) in sums.iter().enumerate() {
            let ai = a.offset(i as isize * lda);
            for (j, &s) in row.iter().enumerate() {
                let bj = b[j];
                let mut total = hsum(s);
                for q in k8..k {
                    total += *ai.add(q) * *bj.add(q);
                }
                let out = c.add(i * ldc + j);
                *out = if acc { *out + total } else { total };
            }
        }
    }
}

/// Sum of the eight lanes of `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
}

/// Never called: [`super::available`] is false off x86-64.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const R: usize, const C: usize>(
    _k: usize,
    _a: *const f32,
    _lda: isize,
    _b: &[*const f32; TC],
    _c: *mut f32,
    _ldc: usize,
    _acc: bool,
) {
    unreachable!("the AVX2 kernels exist only on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row tiles of every height cover its rows once, in order, none taller than
    /// [`TR`], and none of one row unless the product has one row.
    #[test]
    fn row_tiles_partition_the_rows() {
        for m in 1..40 {
            let tiles: Vec<_> = (0..row_tiles(m)).map(|ib| row_tile(m, ib)).collect();
            let mut next = 0;
            for t in &tiles {
                assert_eq!(t.start, next, "m = {m}: {tiles:?}");
                assert!(
                    t.len() <= TR && (t.len() > 1 || m == 1),
                    "m = {m}: {tiles:?}"
                );
                next = t.end;
            }
            assert_eq!(next, m, "m = {m}: {tiles:?}");
            assert_eq!(row_span(m, 0..tiles.len()), 0..m);
            assert_eq!(row_span(m, 1..1), 0..0);
        }
    }
}
