//! bfloat16 matrix products: `C (+)= A * B` with A and B in bfloat16 and C in float32.
//! Where the CPU has AVX512_BF16 (AMD Zen 4, Intel Cooper Lake and Sapphire Rapids) the
//! products run on its dot-product instruction, which does two bfloat16 multiply-adds per
//! float32 lane, twice the float32 FMA rate; elsewhere A and B are widened to float32 and
//! multiplied by the float32 GEMM.
//!
//! ```
//! use spore_kernels::bf16_gemm::{gemm_bf16, Path};
//! use spore_kernels::{bf16, matmul::MatRef};
//! let a: Vec<bf16> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].map(bf16::from_f32).to_vec();
//! let row = |cols: isize| MatRef { offset: 0, row_stride: cols, col_stride: 1 };
//! let mut c = [0.0f32; 4];
//! gemm_bf16(Path::best(), &mut c, false, (2, 2, 3), (&a, row(3)), (&a, row(2)), 1);
//! assert_eq!(c, [22.0, 28.0, 49.0, 64.0]);
//! ```
//!
//! Blocking as in BLIS (and as [`crate::sgemm`]): per thread, a block of [`KC`] depth
//! steps and up to [`NC`] columns of B is packed, then [`MC`] rows of A at a time, and the
//! [`MR`] x [`NR`] microkernel runs over them. Threads split the columns (or, for a narrow
//! C, the rows), so every element of C is summed in the same order on any thread count.

// Elsewhere only the widened path runs: the native driver's items are unused there.
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, unused_variables, unused_imports)
)]

mod batched;
#[cfg(target_arch = "x86_64")]
mod kernel;
#[cfg(target_arch = "x86_64")]
mod pack;

use std::cell::RefCell;
use std::ops::Range;

use half::bf16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

pub(crate) use batched::batched;

use crate::matmul::{MatRef, check_reach};
use crate::sgemm::{Dst, split};

/// Rows of C one microkernel call computes.
const MR: usize = 8;
/// Columns of C one microkernel call computes (two 16-lane vectors).
const NR: usize = 32;
/// Depth steps per packed block (even, so that every block but the last starts a pair).
const KC: usize = 768;
/// A last depth block shorter than this joins the block before it.
const MIN_TAIL: usize = 128;
/// Rows of A packed at once (a multiple of [`MR`]).
const MC: usize = 128;
/// Columns of B packed at once (a multiple of [`NR`]).
const NC: usize = 2048;

/// How a product computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// AVX512_BF16 dot products (only where [`native_available`]).
    Native,
    /// A and B widened to float32 (exact), then the float32 GEMM.
    Widened,
}

impl Path {
    /// [`Path::Native`] where the CPU has it, else [`Path::Widened`].
    pub fn best() -> Path {
        if native_available() {
            Path::Native
        } else {
            Path::Widened
        }
    }
}

/// True when AVX-512 with AVX512_BF16 may run ([`crate::isa`]) and the environment does
/// not set `SPORE_BF16_NATIVE=0` (to measure or test the float32 path on such a CPU);
/// checked once.
pub fn native_available() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var("SPORE_BF16_NATIVE").as_deref() != Ok("0")
            && crate::isa::allows(crate::isa::Isa::Avx512Bf16)
    })
}

/// `C[m x n] (+)= A[m x k] * B[k x n]` for `(m, n, k) = dims`, C row-major with row stride
/// `n`, on up to `threads` threads of the current rayon pool.
///
/// # Panics
/// When `path` is [`Path::Native`] on a CPU without it, when `c` holds fewer than `m * n`
/// values, or when an operand's strides reach outside its slice.
pub fn gemm_bf16(
    path: Path,
    c: &mut [f32],
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
    (a, ma): (&[bf16], MatRef),
    (b, mb): (&[bf16], MatRef),
    threads: usize,
) {
    assert!(
        c.len() >= m * n,
        "gemm_bf16: C holds {} < {m} x {n}",
        c.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return;
    }
    check_reach(ma, m, k, a.len());
    check_reach(mb, k, n, b.len());
    match path {
        Path::Native => {
            assert!(native_available(), "gemm_bf16: this CPU has no AVX512_BF16");
            let product = Product {
                m,
                n,
                k,
                a: (a.reinterpret_cast(), ma),
                b: (b.reinterpret_cast(), mb),
            };
            #[cfg(target_arch = "x86_64")]
            product.run(Dst(c.as_mut_ptr()), accumulate, threads.max(1));
        }
        Path::Widened => widened(c, accumulate, (m, n, k), (a, ma), (b, mb), threads),
    }
}

/// [`Path::Widened`]: both operands widened to float32 (exactly), then the float32 GEMM.
fn widened(
    c: &mut [f32],
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
    (a, ma): (&[bf16], MatRef),
    (b, mb): (&[bf16], MatRef),
    threads: usize,
) {
    if m >= 2 && k * n <= HALVES_MAX_B {
        halves(c, accumulate, (m, n, k), (a, ma), (b, mb), threads);
        return;
    }
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    with_widened(a, ma, (m, k), threads, |wa, ma| {
        with_widened(b, mb, (k, n), threads, |wb, mb| {
            crate::matmul::gemm_into(c, accumulate, m, n, k, wa, ma, wb, mb, par)
        })
    })
}

/// B's values up to which a widened product runs as two halves of its rows
/// ([`halves`]): beyond, widening B twice costs more than it saves.
const HALVES_MAX_B: usize = 1 << 16;

/// [`Path::Widened`] for a product with a small B: the top and the bottom rows of C as
/// two products, each widening its rows of A and all of B itself and multiplying them
/// on one thread, side by side where `threads > 1`. Why: widened on one thread and
/// multiplied on two, the values a thread reads sit in the other core's cache; a LeNet5
/// layer's product (32 x 120 x 400) ran at 40 % of its float32 speed. The halves do
/// not depend on `threads`, so neither do the results' bits.
fn halves(
    c: &mut [f32],
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
    (a, ma): (&[bf16], MatRef),
    (b, mb): (&[bf16], MatRef),
    threads: usize,
) {
    let top = m.div_ceil(2);
    let (c_top, c_bottom) = c[..m * n].split_at_mut(top * n);
    let bottom_a = MatRef {
        offset: (ma.offset as isize + top as isize * ma.row_stride) as usize,
        ..ma
    };
    let half = |c: &mut [f32], ma: MatRef, rows: usize, wb: &[f32], mb: MatRef| {
        with_widened(a, ma, (rows, k), 1, |wa, ma| {
            let none = gemm::Parallelism::None;
            crate::matmul::gemm_into(c, accumulate, rows, n, k, wa, ma, wb, mb, none)
        })
    };
    if threads > 1 {
        let own_b = |c: &mut [f32], ma: MatRef, rows: usize| {
            with_widened(b, mb, (k, n), 1, |wb, mb| half(c, ma, rows, wb, mb))
        };
        rayon::join(
            || own_b(c_top, ma, top),
            || own_b(c_bottom, bottom_a, m - top),
        );
    } else {
        with_widened(b, mb, (k, n), 1, |wb, mb| {
            half(c_top, ma, top, wb, mb);
            half(c_bottom, bottom_a, m - top, wb, mb);
        });
    }
}

/// Values from which [`with_widened`] converts on several threads.
const PARALLEL_WIDEN_MIN: usize = 1 << 16;

/// Runs `f` on the float32 values of a `rows x cols` operand and where they lie, in this
/// thread's scratch. A dense operand (row- or column-major, the usual case) is widened as
/// one run, keeping its strides; any other is gathered row-major.
fn with_widened<R>(
    src: &[bf16],
    s: MatRef,
    (rows, cols): (usize, usize),
    threads: usize,
    f: impl FnOnce(&[f32], MatRef) -> R,
) -> R {
    let at = |i: usize, j: usize| {
        (s.offset as isize + i as isize * s.row_stride + j as isize * s.col_stride) as usize
    };
    let wide = |v: &bf16| crate::half_float::bf16_to_f32(*v);
    let (first, last) = (at(0, 0), at(rows - 1, cols - 1));
    if s.row_stride >= 0 && s.col_stride >= 0 && last - first < rows * cols {
        return with_scratch(&WIDE, last - first + 1, |out| {
            let run = &src[first..=last];
            let convert = |(o, v): (&mut [f32], &[bf16])| crate::half_float::widen_slice(v, o);
            if threads > 1 && out.len() >= PARALLEL_WIDEN_MIN {
                let chunk = out.len().div_ceil(threads);
                out.par_chunks_mut(chunk)
                    .zip(run.par_chunks(chunk))
                    .for_each(convert);
            } else {
                convert((out, run));
            }
            f(out, MatRef { offset: 0, ..s })
        });
    }
    with_scratch(&WIDE, rows * cols, |out| {
        for i in 0..rows {
            for j in 0..cols {
                out[i * cols + j] = wide(&src[at(i, j)]);
            }
        }
        let row_major = MatRef {
            offset: 0,
            row_stride: cols as isize,
            col_stride: 1,
        };
        f(out, row_major)
    })
}

/// One native product's operands (bfloat16 as raw bits).
struct Product<'a> {
    m: usize,
    n: usize,
    k: usize,
    a: (&'a [u16], MatRef),
    b: (&'a [u16], MatRef),
}

/// The depth blocks of a product of depth `k`: [`KC`] steps each, except that a remainder
/// shorter than [`MIN_TAIL`] joins the last full block.
fn depth_blocks(k: usize) -> impl Iterator<Item = (usize, usize)> {
    let merge = k > KC && k % KC < MIN_TAIL;
    let count = if merge { k / KC } else { k.div_ceil(KC) };
    (0..count).map(move |b| {
        let p0 = b * KC;
        let kc = if b + 1 == count { k - p0 } else { KC };
        (p0, kc)
    })
}

thread_local! {
    /// Packing buffers this thread reuses, a stack of them: a rayon worker waiting inside
    /// one product may run a part of another on the same thread.
    static PACKED: RefCell<Vec<Vec<u32>>> = const { RefCell::new(Vec::new()) };
    /// Widened operands of [`Path::Widened`] products, likewise.
    static WIDE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on at least `len` values of this thread's scratch `slot` (see
/// [`crate::scratch`]); vectors above [`MAX_KEPT`] go back to the allocator after use,
/// so that one huge widened product does not hold its memory for the life of the thread.
fn with_scratch<T: Copy + Default + 'static, R>(
    slot: &'static std::thread::LocalKey<RefCell<Vec<Vec<T>>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let keep = crate::scratch::Keep {
        min: 0,
        max: MAX_KEPT,
    };
    crate::scratch::with_scratch(slot, len, keep, f)
}

/// Values of the largest scratch vector a thread keeps between products (16 MiB of
/// float32): the packed blocks always fit, and so do the widened operands of products up
/// to 2048 x 2048.
const MAX_KEPT: usize = 1 << 22;

#[cfg(target_arch = "x86_64")]
impl Product<'_> {
    /// Splits the tiles among `threads` and runs each part.
    fn run(&self, c: Dst, accumulate: bool, threads: usize) {
        let (panels_m, panels_n) = (self.m.div_ceil(MR), self.n.div_ceil(NR));
        let one = |rows: Range<usize>, cols: Range<usize>| self.part(c, accumulate, rows, cols);
        if threads <= 1 || panels_m * panels_n < 2 {
            one(0..panels_m, 0..panels_n);
        } else if panels_n >= threads {
            (0..threads)
                .into_par_iter()
                .for_each(|t| one(0..panels_m, split(panels_n, threads, t)));
        } else {
            let parts = threads.min(panels_m);
            (0..parts)
                .into_par_iter()
                .for_each(|t| one(split(panels_m, parts, t), 0..panels_n));
        }
    }

    /// The tiles of row panels `rows` and column panels `cols`, on this thread.
    fn part(&self, c: Dst, accumulate: bool, rows: Range<usize>, cols: Range<usize>) {
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        let max_kc = depth_blocks(self.k).map(|(_, kc)| kc).max().unwrap_or(0);
        let nc_panels = (NC / NR).min(cols.len());
        let mc_panels = (MC / MR).min(rows.len());
        let b_len = nc_panels * NR * pack::pairs(max_kc);
        let a_len = mc_panels * MR * pack::pairs(max_kc);
        with_scratch(&PACKED, b_len + a_len, |scratch| {
            let (bp, ap) = scratch.split_at_mut(b_len);
            for jc in cols.clone().step_by(nc_panels) {
                let jc_end = (jc + nc_panels).min(cols.end);
                for (p0, kc) in depth_blocks(self.k) {
                    self.block(
                        c,
                        accumulate || p0 > 0,
                        (bp, ap),
                        (p0, kc),
                        &rows,
                        jc..jc_end,
                    );
                }
            }
        });
    }

    /// One depth block `p0..p0 + kc` of column panels `cols`: packs B, then A [`MC`] rows
    /// at a time, and runs the microkernel over every tile.
    fn block(
        &self,
        c: Dst,
        accumulate: bool,
        (bp, ap): (&mut [u32], &mut [u32]),
        (p0, kc): (usize, usize),
        rows: &Range<usize>,
        cols: Range<usize>,
    ) {
        let n_pairs = pack::pairs(kc);
        let (b, mb) = self.b;
        let (a, ma) = self.a;
        let col_range = cols.start * NR..(cols.end * NR).min(self.n);
        // SAFETY: `run` is only reached on CPUs with AVX512F (`native_available`).
        unsafe { pack::pack_b(bp, b, mb, p0, kc, col_range) };
        for ic in rows.clone().step_by(MC / MR) {
            let ic_end = (ic + MC / MR).min(rows.end);
            let row_range = ic * MR..(ic_end * MR).min(self.m);
            pack::pack_a(ap, a, ma, row_range, p0, kc);
            for jp in cols.clone() {
                let b_panel = &bp[(jp - cols.start) * NR * n_pairs..][..NR * n_pairs];
                for ip in ic..ic_end {
                    let a_panel = &ap[(ip - ic) * MR * n_pairs..][..MR * n_pairs];
                    let (i0, j0) = (ip * MR, jp * NR);
                    let size = (MR.min(self.m - i0), NR.min(self.n - j0));
                    // SAFETY: the CPU has AVX512_BF16 (`native_available`); the panels
                    // hold `n_pairs` groups each (sliced above); the tile at (i0, j0) of
                    // `size` lies inside C (`c.len() >= m * n`, checked by `gemm_bf16`),
                    // and no other thread writes it (threads own disjoint panels).
                    unsafe {
                        kernel::tile(
                            n_pairs,
                            a_panel.as_ptr(),
                            b_panel.as_ptr(),
                            c.0.add(i0 * self.n + j0),
                            self.n,
                            size,
                            accumulate,
                        )
                    };
                }
            }
        }
    }
}
