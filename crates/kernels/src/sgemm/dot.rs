//! Products whose operands are both contiguous along the depth: A row-major and B
//! column-major, as in `x · Wᵀ` (Dense) and `dy · colsᵀ` (a convolution's weight
//! gradient). Each output is a dot product of two contiguous rows, computed in tiles of
//! 4 columns by 4 rows (3 rows without AVX-512, see [`TileKernel`]) with one 8-lane
//! partial sum per output, and nothing is packed.
//!
//! Why not pack: for these shapes B is often used by only 6-64 rows of A, and gathering
//! it into column panels cost more than the multiply-adds (LeNet's weight gradients).
//! Eight loads feed sixteen fused multiply-adds (seven feed twelve on AVX2), so the loop
//! is bound by arithmetic, as long as its vectors stay in registers (see [`tile_avx2`]).
//!
//! B's columns may also start anywhere ([`dot_columns`]): a convolution's weight gradient
//! on wide positions reads them from the image in place, one per filter tap.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::ops::Range;

use rayon::prelude::*;

use super::{Product, split};

/// Columns of B per tile.
const TC: usize = 4;
/// Depth per pass: four rows and four columns of this length (32 KiB) fit L1. Why not
/// 512: it split the MLP's 784-deep `x · Wᵀ` into two passes that each re-stream A from
/// L2 and reload C, slower than one pass (measured: BENCHMARKS.md, "Figures moved from
/// code comments").
const KD: usize = 1024;

/// The tile kernel a machine runs, and so the rows of A per tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileKernel {
    /// 3 x 4 tiles: 12 sums + 3 rows of A + 1 column of B fill AVX2's 16 registers.
    Avx2,
    /// 4 x 4 tiles in the same 8-lane vectors, with AVX-512's 32 registers holding 16
    /// sums + 4 rows + 1 column. Why: half a load per multiply-add (7/12 in 3 x 4) and
    /// 64 rows in whole tiles; the MLP's 64x512x784 `x · Wᵀ` with bias and ReLU and its
    /// 64x512x512 product ran faster than with 3 x 4 tiles, and tiles of 4 x 6 and 6 x 4
    /// were slower than 4 x 4 (measured: BENCHMARKS.md, "Figures moved from code
    /// comments").
    Avx512,
}

impl TileKernel {
    /// The widest kernel this machine runs (checked once).
    pub(crate) fn best() -> TileKernel {
        use std::sync::OnceLock;
        static BEST: OnceLock<TileKernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            if crate::isa::allows(crate::isa::Isa::Avx512) {
                return TileKernel::Avx512;
            }
            TileKernel::Avx2
        })
    }

    /// Rows of A per tile (see [`row_tile`] for the last ones).
    fn rows(self) -> usize {
        match self {
            TileKernel::Avx2 => 3,
            TileKernel::Avx512 => 4,
        }
    }
}

/// `C[m x n] (+)= A * B` for `ma.col_stride == 1` and `mb.row_stride == 1`.
pub(super) fn run(p: &Product, threads: usize) {
    let kernel = TileKernel::best();
    let tr = kernel.rows();
    let (m, n, k) = (p.m, p.n, p.k);
    for p0 in (0..k).step_by(KD) {
        let depth = p0..KD.min(k - p0) + p0;
        let acc = p.accumulate || p0 > 0;
        let epilogue = p.epilogue.filter(|_| depth.end == k);
        let (blocks_n, blocks_m) = (n.div_ceil(TC), row_tiles(m, tr));
        // Each thread's part of C, then the epilogue over it, row by row, while it is
        // still in this core's cache. Why not in the tiles: passed into the kernel, the
        // epilogue slowed its depth loop (measured: BENCHMARKS.md, "Figures moved from
        // code comments"), and read back right after the tile's scalar stores it stalled
        // on store forwarding.
        let part = |cols: Range<usize>, rows: Range<usize>| {
            tiles(p, kernel, cols.clone(), rows.clone(), depth.clone(), acc);
            if let Some(e) = epilogue {
                let rows = row_span(m, tr, rows);
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

/// How many row tiles of `tr` rows an `m`-row product has: see [`row_tile`].
fn row_tiles(m: usize, tr: usize) -> usize {
    if m % tr == 1 && m > 1 {
        m / tr + 1
    } else {
        m.div_ceil(tr)
    }
}

/// The rows of row tile `ib` of an `m`-row product: `tr` rows each, except that where one
/// row would be left over, the last `tr + 1` rows form two tiles (2 + 2, or 3 + 2). Why: a
/// one-row tile has only four chains of sums, too few to hide the multiply-add's latency,
/// so the MLP's 64-row products took as long as 66 rows would with 3-row tiles (measured:
/// BENCHMARKS.md, "Figures moved from code comments").
fn row_tile(m: usize, ib: usize, tr: usize) -> Range<usize> {
    let count = row_tiles(m, tr);
    if m % tr == 1 && m > 1 && ib + 2 >= count {
        let first = (tr + 2) / 2;
        let i0 = (count - 2) * tr;
        return if ib + 2 == count {
            i0..i0 + first
        } else {
            i0 + first..m
        };
    }
    ib * tr..(ib * tr + tr).min(m)
}

/// The rows that row tiles `tiles` (of `tr` rows) of an `m`-row product cover.
fn row_span(m: usize, tr: usize, tiles: Range<usize>) -> Range<usize> {
    if tiles.is_empty() {
        return 0..0;
    }
    row_tile(m, tiles.start, tr).start..row_tile(m, tiles.end - 1, tr).end
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
    dot_columns_with(TileKernel::best(), c, ldc, (m, k), accumulate, (a, lda), b);
}

/// [`dot_columns`] with the given tile kernel (tests run each kernel the machine has).
fn dot_columns_with(
    kernel: TileKernel,
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
            let tr = kernel.rows();
            for rows in (0..row_tiles(m, tr)).map(|ib| row_tile(m, ib, tr)) {
                let (i0, height) = (rows.start, rows.len());
                // SAFETY: rows i0..i0 + height of A and the tile's columns hold `kd`
                // values from `p0`, and the tile of C lies inside `c` (checked above);
                // AVX2 and FMA were detected.
                unsafe {
                    let ap = a.as_ptr().add(i0 * lda + p0);
                    let cp = c.as_mut_ptr().add(i0 * ldc + j0);
                    let at = Tile {
                        k: kd,
                        a: ap,
                        lda: lda as isize,
                        b: &columns,
                    };
                    dispatch(kernel, height, width, at, cp, ldc, acc);
                }
            }
        }
    }
}

/// The tiles of column blocks `cols` x row blocks `rows` over depth `depth`.
fn tiles(
    p: &Product,
    kernel: TileKernel,
    cols: Range<usize>,
    rows: Range<usize>,
    depth: Range<usize>,
    acc: bool,
) {
    let (kd, tr) = (depth.len(), kernel.rows());
    for jb in cols {
        let j0 = jb * TC;
        let width = TC.min(p.n - j0);
        let b0 = p.mb.offset as isize + j0 as isize * p.mb.col_stride + depth.start as isize;
        for ib in rows.clone() {
            let Range { start: i0, end } = row_tile(p.m, ib, tr);
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
                let at = Tile {
                    k: kd,
                    a: ap,
                    lda: p.ma.row_stride,
                    b: &columns,
                };
                dispatch(kernel, height, width, at, c, p.n, acc);
            }
        }
    }
}

/// Where a tile's operands are: rows of A `lda` apart from `a`, column `j` of B from
/// `b[j]`, each `k` long.
#[derive(Clone, Copy)]
struct Tile<'a> {
    k: usize,
    a: *const f32,
    lda: isize,
    b: &'a [*const f32; TC],
}

/// Calls `kernel`'s tile specialised for `height` x `width` (edges are smaller).
///
/// # Safety
/// As [`tile_avx2`], with `kernel` available on this machine.
unsafe fn dispatch(
    kernel: TileKernel,
    height: usize,
    width: usize,
    t: Tile,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    macro_rules! go {
        ($f:ident; $($r:literal, $c:literal);*) => {
            match (height, width) {
                $(($r, $c) => unsafe { $f::<$r, $c>(t.k, t.a, t.lda, t.b, c, ldc, acc) },)*
                _ => unreachable!("{kernel:?} tiles are at most {}x{TC}", kernel.rows()),
            }
        };
    }
    match kernel {
        TileKernel::Avx2 => {
            go!(tile_avx2; 3, 4; 3, 3; 3, 2; 3, 1; 2, 4; 2, 3; 2, 2; 2, 1; 1, 4; 1, 3; 1, 2; 1, 1)
        }
        TileKernel::Avx512 => go!(tile_avx512;
            4, 4; 4, 3; 4, 2; 4, 1; 3, 4; 3, 3; 3, 2; 3, 1;
            2, 4; 2, 3; 2, 2; 2, 1; 1, 4; 1, 3; 1, 2; 1, 1),
    }
}

/// Defines a tile kernel compiled for `$features`: `C[R x C] (+)= A[R x k] * B[k x C]`
/// with rows of A (`lda` apart) contiguous, and column `j` of B contiguous from `b[j]`
/// (the first `C` are used). Why a macro: the AVX2 and AVX-512 kernels are the same
/// code, and only a function's own target features decide how many registers the
/// compiler may give its sums; a shared body called from two wrappers would be compiled
/// once, for the narrower set.
///
/// # Safety (of the defined function)
/// `$features` are available; the R rows and C columns of length `k` are readable and
/// C's R rows of C values (`ldc` apart) writable.
macro_rules! tile_kernel {
    ($(#[$doc:meta])* $name:ident, $features:literal) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize, const C: usize>(
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
                // The column pointers as locals, kept in registers: read through the
                // reference, each step would load them again (four more loads per twelve
                // multiply-adds).
                let b: [*const f32; TC] = *b;
                let mut sums = [[_mm256_setzero_ps(); C]; R];
                let k8 = k / 8 * 8;
                let mut p = 0;
                while p < k8 {
                    // The R rows of A first, then one column of B at a time: on AVX2, 12
                    // sums + 3 rows + 1 column fill the 16 registers exactly. Loading the
                    // 4 columns first needs 17, and the spilled sum's round trip through
                    // the stack slowed the loop (measured: BENCHMARKS.md, "Figures moved
                    // from code comments").
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
                    // Four columns' sums at once: three horizontal adds and one 128-bit
                    // add give the four totals of a row in one vector, one store (a sum
                    // at a time took four times the instructions and ran slower; measured:
                    // BENCHMARKS.md, "Figures moved from code comments"). The `% C` only
                    // keeps the indices valid in the narrower tiles' copies of this code,
                    // which never run it.
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

        /// Never called: [`super::available`] is false off x86-64.
        #[cfg(not(target_arch = "x86_64"))]
        unsafe fn $name<const R: usize, const C: usize>(
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
    };
}

tile_kernel!(
    /// The tile kernel on AVX2 and FMA (16 vector registers): tiles of up to 3 x 4.
    tile_avx2,
    "avx2,fma"
);
tile_kernel!(
    /// The tile kernel with AVX-512's 32 vector registers (still 8-lane vectors): tiles
    /// of up to 4 x 4.
    tile_avx512,
    "avx2,fma,avx512f,avx512vl"
);

/// Sum of the eight lanes of `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row tiles of every height cover its rows once, in order, none taller than the
    /// kernel's rows, and none of one row unless the product has one row.
    #[test]
    fn row_tiles_partition_the_rows() {
        for tr in [3, 4] {
            for m in 1..40 {
                let tiles: Vec<_> = (0..row_tiles(m, tr))
                    .map(|ib| row_tile(m, ib, tr))
                    .collect();
                let mut next = 0;
                for t in &tiles {
                    assert_eq!(t.start, next, "tr = {tr}, m = {m}: {tiles:?}");
                    assert!(
                        t.len() <= tr && (t.len() > 1 || m == 1),
                        "tr = {tr}, m = {m}: {tiles:?}"
                    );
                    next = t.end;
                }
                assert_eq!(next, m, "tr = {tr}, m = {m}: {tiles:?}");
                assert_eq!(row_span(m, tr, 0..tiles.len()), 0..m);
                assert_eq!(row_span(m, tr, 1..1), 0..0);
            }
        }
    }

    /// Each tile kernel this machine runs, through [`dot_columns_with`], equals an f64
    /// loop for every tile height and width (edge tiles and the two-tile ends included),
    /// depths with and without a tail past the last 8 values, and accumulation.
    #[test]
    fn every_tile_kernel_matches_naive() {
        if !super::super::available() {
            eprintln!("SKIPPED every_tile_kernel_matches_naive: no AVX2 and FMA kernels here");
            return;
        }
        let mut kernels = vec![TileKernel::Avx2];
        if TileKernel::best() == TileKernel::Avx512 {
            kernels.push(TileKernel::Avx512);
        }
        let value = |i: usize, salt: usize| ((i * 37 + salt * 11) % 23) as f32 / 8.0 - 1.3;
        for kernel in kernels {
            for (m, n, k) in [(1, 1, 8), (2, 3, 5), (5, 4, 16), (7, 9, 37), (9, 6, 64)] {
                let lda = k + 3;
                let a: Vec<f32> = (0..m * lda).map(|i| value(i, 1)).collect();
                let src: Vec<f32> = (0..n * k + 7).map(|i| value(i, 2)).collect();
                // Columns start anywhere, overlapping (as a convolution's taps do).
                let starts: Vec<i32> = (0..n).map(|j| (j * k / 2 + j % 3) as i32).collect();
                for accumulate in [false, true] {
                    let ldc = n + 2;
                    let before: Vec<f32> = (0..m * ldc).map(|i| value(i, 3)).collect();
                    let mut c = before.clone();
                    let b = Columns {
                        src: &src,
                        starts: &starts,
                    };
                    dot_columns_with(kernel, &mut c, ldc, (m, k), accumulate, (&a, lda), b);
                    for i in 0..m {
                        for j in 0..n {
                            let dot: f64 = (0..k)
                                .map(|q| a[i * lda + q] as f64 * src[starts[j] as usize + q] as f64)
                                .sum();
                            let base = if accumulate { before[i * ldc + j] } else { 0.0 };
                            let want = base as f64 + dot;
                            let got = c[i * ldc + j] as f64;
                            assert!(
                                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                "{kernel:?} {m}x{n}x{k} acc={accumulate} ({i}, {j}): {got} vs {want}"
                            );
                        }
                    }
                    // Padding between C's rows stays as it was.
                    for i in 0..m {
                        assert_eq!(
                            c[i * ldc + n..i * ldc + ldc],
                            before[i * ldc + n..i * ldc + ldc]
                        );
                    }
                }
            }
        }
    }
}
