//! Spore's own single-precision GEMM for x86-64 with AVX2 and FMA: `C (+)= A * B` over
//! strided operands, packing into a reused per-thread workspace, a 6x16 register-tile
//! microkernel, and threads over column (or row) panels.
//!
//! ```
//! use spore_kernels::matmul::{gemm_into, MatRef};
//! use gemm::Parallelism;
//! // [2x3] * [3x2]; gemm_into picks this GEMM for f32 on machines with AVX2 and FMA.
//! let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let row = |cols: isize| MatRef { offset: 0, row_stride: cols, col_stride: 1 };
//! let mut c = [0.0f32; 4];
//! gemm_into(&mut c, false, 2, 2, 3, &a, row(3), &a, row(2), Parallelism::None);
//! assert_eq!(c, [22.0, 28.0, 49.0, 64.0]);
//! ```
//!
//! Why our own and not only the `gemm` crate: that crate allocates its packing buffers on
//! every call (a compiled step must not allocate) and is tuned for large products, while
//! most of a small network's products are thin (6 or 16 rows, a few hundred columns).
//! `gemm` stays the path for f64, for machines without AVX2, and for other architectures.

mod blocked;
pub(crate) mod dot;
mod epilogue;
pub(crate) mod gather;
mod kernel;
pub(crate) mod kernel512;
mod pack;
pub(crate) mod scatter;
pub(crate) mod shifted;
mod thin;

pub(crate) use blocked::{
    PARALLEL_PRODUCT_MIN, PanelsA, blocked_finishing, blocked_threads_finishing, blocked_with,
    blocked_with_threads, prepack_a, prepacked_a_len,
};
pub(crate) use kernel::transpose_pack;
pub(crate) use pack::pack_b as pack_b_panel;

use std::cell::RefCell;
use std::ops::Range;

use crate::operand::Epilogue;
use crate::operand::MatRef;
pub(crate) use epilogue::TileEpilogue;

/// Rows of C one microkernel call computes.
pub(crate) const MR: usize = 6;
/// Columns of C one microkernel call computes (two 8-lane vectors).
pub(crate) const NR: usize = 16;
/// Depth of one packed block: a 6x256 A panel (6 KiB) and a 256x16 B panel (16 KiB) stay
/// in L1 while a tile accumulates.
const KC: usize = 256;

/// A last depth block shorter than this is merged into the block before it.
const MIN_TAIL: usize = 64;

/// The depth blocks of a product of depth `k`: [`KC`] steps each, except that a short
/// remainder joins the last full block (so a block holds at most `KC + MIN_TAIL` steps).
/// Why: 784 = 3 x 256 + 16 would end with a block of 16 steps, whose tiles load and store
/// C for very little arithmetic, which slowed the MLP's 64x512x784 product (measured:
/// BENCHMARKS.md, "Figures moved from code comments").
pub(crate) fn depth_blocks(k: usize) -> impl Iterator<Item = (usize, usize)> {
    let full = (k / KC).max(1);
    let merge = k > KC && k % KC < MIN_TAIL;
    let count = if merge { full } else { k.div_ceil(KC).max(1) };
    (0..count).map(move |b| {
        let p0 = b * KC;
        let kc = if b + 1 == count { k - p0 } else { KC };
        (p0, kc)
    })
}

/// Longer than any block [`depth_blocks`] yields.
pub(crate) const MAX_DEPTH_BLOCK: usize = KC + MIN_TAIL;

/// At most the longest block [`depth_blocks`] yields for any depth up to `k`.
pub(crate) fn depth_block_bound(k: usize) -> usize {
    k.min(MAX_DEPTH_BLOCK)
}

/// The longest block [`depth_blocks`] yields for depth `k`.
pub(crate) fn max_depth_block(k: usize) -> usize {
    depth_blocks(k).map(|(_, kc)| kc).max().unwrap_or(0)
}

/// Depth from which products of depth-contiguous operands use the dot-product kernel.
const DOT_MIN_DEPTH: usize = 32;
/// Rows up to which such products use it: with more rows, packing B pays for itself and
/// the packed kernel (one load per two multiply-adds) is faster (measured on the MLP's
/// 64x512x784 with `Wᵀ` and 64x512x512: BENCHMARKS.md, "Figures moved from code
/// comments").
const DOT_MAX_ROWS: usize = 64;
/// Rows up to which the dot kernel is used even when its rows are 4 KiB apart.
const DOT_MAX_ROWS_ALIASED: usize = 16;

/// True when rows `stride` floats apart fall into the same L1 sets (4 KiB apart): the
/// dot kernel's seven streams then evict each other, and packing wins from 16 rows on
/// (ResNet's weight gradients, 1,024 columns per GEMM; measured: BENCHMARKS.md, "Figures
/// moved from code comments").
fn aliased(stride: isize) -> bool {
    stride.unsigned_abs().is_multiple_of(1024)
}

/// Rows up to which a product takes the thin path (B read in place, no B block packed).
pub(crate) const THIN_MAX_ROWS: usize = 3 * MR;

thread_local! {
    /// Scratch of the GEMM this thread drives (a thin product's packed A and B panels),
    /// kept between calls so that steady state allocates nothing.
    static SHARED: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
    /// Scratch this thread uses as a worker of a blocked GEMM (its packed B and A blocks).
    static PRIVATE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// Smallest scratch vector a thread keeps: every product of LeNet's and the MLP's steps
/// fits, so a thread's first GEMM sizes its scratch for all later ones.
const MIN_SCRATCH: usize = 1 << 16;

/// Runs `f` on at least `len` values of this thread's scratch `slot` (see
/// [`crate::scratch`]). Vectors grow to powers of two (at least [`MIN_SCRATCH`]) and all
/// stay, so a thread reallocates a handful of times in its life, not per size.
fn with_scratch<R>(
    slot: &'static std::thread::LocalKey<RefCell<Vec<Vec<f32>>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    let keep = crate::scratch::Keep {
        min: MIN_SCRATCH,
        max: usize::MAX,
    };
    crate::scratch::with_scratch(slot, len, keep, f)
}

/// Gives this thread's scratch slots `depth` vectors of [`MIN_SCRATCH`] values each, so
/// that GEMMs this thread runs later (as driver, as worker, or nested while waiting) find
/// their scratch ready.
pub(crate) fn reserve_scratch(depth: usize) {
    for slot in [&SHARED, &PRIVATE] {
        let _ = slot.try_with(|stack| {
            let mut stack = stack.borrow_mut();
            let missing = depth.saturating_sub(stack.len());
            stack.reserve(missing + 2);
            while stack.len() < depth {
                stack.push(vec![0.0; MIN_SCRATCH]);
            }
        });
    }
}

/// True when the AVX2/FMA microkernel may run ([`crate::isa`]) and the environment does
/// not ask for the `gemm` crate (`SPORE_GEMM=crate`, to compare the two); checked once.
pub(crate) fn available() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var("SPORE_GEMM").as_deref() != Ok("crate")
            && crate::isa::allows(crate::isa::Isa::Avx2)
    })
}

/// A raw pointer to C that may cross threads: every thread writes a disjoint set of tiles.
#[derive(Clone, Copy)]
pub(crate) struct Dst(pub(crate) *mut f32);
// SAFETY: threads write disjoint tiles of C (split by panel ranges), and the pointer
// outlives the parallel section (it borrows the caller's `c`).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

/// One product `C[m x n] (+)= A[m x k] * B[k x n]`, C row-major with row stride `n`,
/// then the epilogue (see [`crate::matmul_epilogue`]). The caller checked `available()`,
/// that `m, n, k > 0`, that every strided access lies inside `a` and `b`, that `c` (and an
/// addend) hold at least `m * n` values, and a bias at least `n`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    c: &mut [f32],
    accumulate: bool,
    epilogue: Option<Epilogue<'_, f32>>,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ma: MatRef,
    b: &[f32],
    mb: MatRef,
    threads: usize,
) {
    debug_assert!(available() && m > 0 && n > 0 && k > 0 && c.len() >= m * n);
    let dst = Dst(c.as_mut_ptr());
    let threads = threads.max(1);
    let product = Product {
        dst,
        accumulate,
        epilogue: epilogue.as_ref().map(TileEpilogue::new),
        m,
        n,
        k,
        a,
        ma,
        b,
        mb,
    };
    match Strategy::of(m, k, ma, mb) {
        Strategy::Dot => dot::run(&product, threads),
        Strategy::Thin => thin::run(&product, threads),
        Strategy::Blocked => blocked::run(&product, threads),
    }
}

/// `C = A * B + beta * C` for an `m x n` C that holds the addend on entry, as [`sgemm`]
/// with an addend would compute it from a separate D, bit for bit. The caller checked
/// [`adds_in_place`] besides [`sgemm`]'s conditions.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_add_in_place(
    c: &mut [f32],
    beta: f32,
    m: usize,
    n: usize,
    k: usize,
    (a, ma): (&[f32], MatRef),
    (b, mb): (&[f32], MatRef),
    threads: usize,
) {
    debug_assert!(adds_in_place(m, k, ma, mb) && n > 0 && c.len() >= m * n);
    let dst = Dst(c.as_mut_ptr());
    let product = Product {
        dst,
        accumulate: false,
        // D is C itself: both pointers come from the one `&mut` borrow of `c`.
        epilogue: Some(TileEpilogue::addend_only(dst.0.cast_const(), beta)),
        m,
        n,
        k,
        a,
        ma,
        b,
        mb,
    };
    match Strategy::of(m, k, ma, mb) {
        Strategy::Thin => thin::run(&product, threads.max(1)),
        Strategy::Blocked => blocked::run(&product, threads.max(1)),
        Strategy::Dot => unreachable!("adds_in_place excludes the dot kernel"),
    }
}

/// True when the tiles can read the addend from C itself: every tile reads its part of D
/// and then stores the same part of C, once. That holds for the thin and blocked
/// strategies when the depth is one block (an optimizer's weight gradient, whose depth is
/// the batch). Not for the dot kernel, which stores the product and adds D in a pass
/// after, nor for longer depths, whose first blocks store partial sums over D.
pub(crate) fn adds_in_place(m: usize, k: usize, ma: MatRef, mb: MatRef) -> bool {
    available()
        && k > 0
        && depth_blocks(k).count() == 1
        && Strategy::of(m, k, ma, mb) != Strategy::Dot
}

/// Which of the three kernels a product runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Strategy {
    Dot,
    Thin,
    Blocked,
}

impl Strategy {
    fn of(m: usize, k: usize, ma: MatRef, mb: MatRef) -> Strategy {
        let dot_rows = if aliased(ma.row_stride) || aliased(mb.col_stride) {
            DOT_MAX_ROWS_ALIASED
        } else {
            DOT_MAX_ROWS
        };
        if ma.col_stride == 1 && mb.row_stride == 1 && k >= DOT_MIN_DEPTH && m <= dot_rows {
            Strategy::Dot
        } else if m <= THIN_MAX_ROWS {
            Strategy::Thin
        } else {
            Strategy::Blocked
        }
    }
}

/// The operands of one product, shared by the three strategies.
struct Product<'a> {
    dst: Dst,
    accumulate: bool,
    /// Run by the tiles of the last depth block.
    epilogue: Option<TileEpilogue>,
    m: usize,
    n: usize,
    k: usize,
    a: &'a [f32],
    ma: MatRef,
    b: &'a [f32],
    mb: MatRef,
}

impl Product<'_> {
    /// Parts a parallel product's `blocks` are cut into: several per thread, taken by
    /// whichever thread is free (rayon's work stealing), so that a core slowed by another
    /// tenant of the machine takes fewer of them. Each part does at least
    /// [`MIN_PART_FLOP`], so small products stay at one part per thread.
    ///
    /// Why: with one part per thread, the two halves of the MLP's products finished well
    /// apart on the shared host, time the faster core spent waiting. Steps alternating
    /// one part per thread and this split in one process: the MLP ran faster with the
    /// split on a busy host and about even on a quiet one, ResNet-18 faster, and LeNet5
    /// unchanged, its products being small (measured: BENCHMARKS.md, "Figures moved from
    /// code comments").
    fn balanced_parts(&self, blocks: usize, threads: usize) -> usize {
        let flop = 2 * self.m * self.n * self.k;
        let by_work = (flop / MIN_PART_FLOP).max(threads);
        blocks.min(threads * PARTS_PER_THREAD).min(by_work)
    }
}

/// See [`Product::balanced_parts`].
const PARTS_PER_THREAD: usize = 16;
/// See [`Product::balanced_parts`]: a short stretch of one core's multiply-adds.
const MIN_PART_FLOP: usize = 1 << 20;

/// Part `t` of `parts` of `0..len`, the parts' lengths differing by at most one (none
/// is empty while `parts <= len`).
pub(crate) fn split(len: usize, parts: usize, t: usize) -> Range<usize> {
    len * t / parts..len * (t + 1) / parts
}

/// Runs the microkernel for one tile: row panel `ap` (packed, `MR x kc`) times the B panel
/// `bp` (`kc` rows of `NR`, `ldb` apart) into C (rows `ldc` apart) at (`i0`, `j0`), of
/// which only `height` x `width` exists (edge tiles go through a small buffer), then the
/// epilogue (of the whole C) on the tile.
///
/// # Safety
/// As [`kernel::tile`], with the `height` x `width` tile at (`i0`, `j0`) inside C (and D).
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn tile_at(
    (dst, ldc): (Dst, usize),
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    ldb: isize,
    (i0, j0): (usize, usize),
    (height, width): (usize, usize),
    accumulate: bool,
    epilogue: Option<TileEpilogue>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let c = dst.0.add(i0 * ldc + j0);
        let epilogue = epilogue.map(|e| e.at(i0, j0, ldc));
        if height == MR && width == NR {
            kernel::tile(kc, ap, bp, ldb, c, ldc, accumulate, epilogue.as_ref());
        } else {
            let tile = (kc, ap, bp, ldb);
            edge_tile(tile, (c, ldc), (height, width), accumulate, epilogue);
        }
    }
}

/// Two full tiles of consecutive row panels (`ap` and `ap + MR * kc`, rows `i0..i0 + 12`)
/// against one full B panel, in one call of the 12x16 AVX-512 kernel.
///
/// # Safety
/// As [`kernel512::tile_pair`], with the 12 x 16 block at (`i0`, `j0`) inside C (and D).
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn tile_pair_at(
    (dst, ldc): (Dst, usize),
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    ldb: isize,
    (i0, j0): (usize, usize),
    accumulate: bool,
    epilogue: Option<TileEpilogue>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let c = dst.0.add(i0 * ldc + j0);
        let top = epilogue.map(|e| e.at(i0, j0, ldc));
        let bottom = epilogue.map(|e| e.at(i0 + MR, j0, ldc));
        let a = (ap, ap.add(MR * kc));
        let epilogues = [top.as_ref(), bottom.as_ref()];
        kernel512::tile_pair(kc, a, bp, ldb, c, ldc, accumulate, epilogues);
    }
}

/// [`tile_at`] for a tile that C cuts short: the microkernel writes a whole tile into a
/// buffer, and its `height x width` corner is copied to C through the epilogue. Kept out
/// of line so that full tiles take the short path inlined: with the buffer and the
/// scalar loop in the same function, every tile paid for a 600-byte stack frame and the
/// epilogue's copy into it, which slowed 512x784x64 (measured: BENCHMARKS.md, "Figures
/// moved from code comments").
///
/// # Safety
/// As [`tile_at`], with `c` at the tile's first element and the epilogue at the tile.
#[inline(never)]
#[cold]
unsafe fn edge_tile(
    (kc, ap, bp, ldb): (usize, *const f32, *const f32, isize),
    (c, ldc): (*mut f32, usize),
    (height, width): (usize, usize),
    accumulate: bool,
    epilogue: Option<TileEpilogue>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        // Uninitialised: the microkernel stores all of it (zeroing it called `memset`).
        let mut tmp = std::mem::MaybeUninit::<[f32; MR * NR]>::uninit();
        kernel::tile(kc, ap, bp, ldb, tmp.as_mut_ptr().cast(), NR, false, None);
        let tmp = tmp.assume_init();
        if width == NR {
            // Only the height is cut short (the last row panel): whole rows of 16.
            kernel::store_rows(&tmp, height, c, ldc, accumulate, epilogue.as_ref());
            return;
        }
        for r in 0..height {
            let row = c.add(r * ldc);
            for q in 0..width {
                let mut v = tmp[r * NR + q];
                if accumulate {
                    v += *row.add(q);
                }
                if let Some(e) = epilogue {
                    v = e.finish1(r, q, ldc, v);
                }
                *row.add(q) = v;
            }
        }
    }
}
