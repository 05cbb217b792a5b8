//! Large products, blocked as in BLIS. The columns (or, for a narrow C or a tall
//! transposed A, the rows) are split into parts once; each part then runs alone: for
//! every block of `NC` columns and `KC` depth it packs its B panels, then `MC` rows of A
//! at a time (kept in L2), and runs the microkernel over them. Where A is small and the
//! product large, A is packed once up front and the columns are cut into several parts
//! per thread, taken by whichever thread is free (see `Product::balanced_parts`);
//! otherwise there is one part per thread, and each packs A itself (or its rows' share
//! of A, where the rows are split).
//!
//! Why one split per product and private packing: a fork per depth block (with B packed
//! once and shared) cost more in wake-ups and cross-core traffic than packing A twice:
//! the MLP's 64x512x784 product ran slower that way (measured: BENCHMARKS.md, "Figures
//! moved from code comments").
//!
//! A product may also bring its own panels ([`blocked_with`]): A packed once beforehand
//! and shared by many products ([`prepack_a`]), and B written panel by panel by a
//! function, which is how a convolution reads its column matrix straight from the image.

use std::ops::Range;

use rayon::prelude::*;

use super::pack::{pack_a, pack_b};
use super::{
    Dst, MR, NR, PRIVATE, Product, SHARED, TileEpilogue, depth_blocks, kernel512, max_depth_block,
    split, tile_at, tile_pair_at, with_scratch,
};
use crate::operand::MatRef;

/// Columns of B packed at once: 256 x 1024 values (1 MiB per thread).
const NC: usize = 1024;
/// Rows of A packed at once (a multiple of MR): 144 x 256 values (144 KiB) stay in L2.
const MC: usize = 144;
/// Largest packed A (values) that a product splitting its columns packs once, up front,
/// for all its parts: 1 MiB, which stays in L2 while the parts read it. (The MLP's
/// products pack 33-34 thousand values.)
const SHARED_A_MAX: usize = 1 << 18;

/// Where a blocked product's A panels come from.
#[derive(Clone, Copy)]
pub(crate) enum PanelsA<'a> {
    /// A strided matrix, packed `MC` rows at a time as the product goes.
    Strided(&'a [f32], MatRef),
    /// Every panel already packed, as [`prepack_a`] lays them out.
    Prepacked(&'a [f32]),
}

/// Writes B's panel of depth `p0..p0 + kc` and columns `j0..j0 + width` into `dst` (`kc`
/// rows of [`NR`] values; columns past `width` must be written too, any value).
pub(crate) type PanelsB<'a> = &'a mut dyn FnMut(&mut [f32], usize, usize, usize, usize);

/// [`PanelsB`] for a product split among threads: one function all of them call.
pub(crate) type SharedPanelsB<'a> = &'a (dyn Fn(&mut [f32], usize, usize, usize, usize) + Sync);

/// Values [`prepack_a`] writes for an `m x k` A.
pub(crate) fn prepacked_a_len(m: usize, k: usize) -> usize {
    m.div_ceil(MR) * MR * k
}

/// Packs all of A (`m x k`) for [`PanelsA::Prepacked`]: depth block after depth block,
/// each holding every `MR`-row panel of that depth (`dst[p0 * rows + panel * MR * kc
/// ..]`, where `rows` is `m` rounded up to `MR`).
pub(crate) fn prepack_a(dst: &mut [f32], a: &[f32], ma: MatRef, m: usize, k: usize) {
    let rows = m.div_ceil(MR) * MR;
    assert!(dst.len() >= rows * k, "prepack_a: destination too small");
    let out = Dst(dst.as_mut_ptr());
    // Tasks of one depth block (ResNet's last filters are 9 MB, too much for one thread),
    // and of part of its row panels where a block is large (an MLP's weight gradient
    // packs one block of 33 thousand values, which the threads then share).
    let panels = rows / MR;
    let groups = if rows * k >= PARALLEL_PACK_MIN {
        rayon::current_num_threads().clamp(1, panels)
    } else {
        1
    };
    let blocks = depth_blocks(k).count();
    (0..blocks * groups).into_par_iter().for_each(|task| {
        let (b, g) = (task / groups, task % groups);
        let Some((p0, kc)) = depth_blocks(k).nth(b) else {
            return;
        };
        let own = split(panels, groups, g);
        let out = &out; // the whole `Dst` (Sync), not its raw pointer field
        // SAFETY: each task writes the panels `own` of depth block `b`, at
        // `p0 * rows + own.start * MR * kc..` for `own.len() * MR * kc` values: disjoint
        // across tasks and inside `dst` (asserted above), which outlives this section.
        let part = unsafe {
            std::slice::from_raw_parts_mut(
                out.0.add(p0 * rows + own.start * MR * kc),
                own.len() * MR * kc,
            )
        };
        pack_a(part, a, ma, own.start * MR..(own.end * MR).min(m), p0, kc);
    });
}

/// Values of A from which [`prepack_a`] splits a depth block's panels among the threads.
const PARALLEL_PACK_MIN: usize = 1 << 14;

pub(super) fn run(p: &Product, threads: usize) {
    let (panels_m, panels_n) = (p.m.div_ceil(MR), p.n.div_ceil(NR));
    let a = PanelsA::Strided(p.a, p.ma);
    let b_panels = |dst: &mut [f32], p0, kc, j0, width| pack_b(dst, p.b, p.mb, p0, kc, j0, width);
    // `{ b_panels }`: a fresh copy of the closure (it holds only references) per call.
    let strided_part = |rows, cols| part(p, a, &mut { b_panels }, rows, cols);
    let parts = p.balanced_parts(panels_n, threads);
    let a_len = prepacked_a_len(p.m, p.k);
    if threads <= 1 || panels_m * panels_n < 2 {
        strided_part(0..panels_m, 0..panels_n);
    } else if parts > threads && a_len <= SHARED_A_MAX {
        // A packed once for all parts, so that the columns can be cut into more parts
        // than threads (see `Product::balanced_parts`) without packing A once per part.
        with_scratch(&SHARED, a_len, |packed| {
            prepack_a(packed, p.a, p.ma, p.m, p.k);
            let a = PanelsA::Prepacked(packed);
            (0..parts).into_par_iter().with_max_len(1).for_each(|t| {
                let cols = split(panels_n, parts, t);
                part(p, a, &mut { b_panels }, 0..panels_m, cols)
            });
        });
    } else if panels_n >= threads && !rows_first(p, panels_m, threads) {
        (0..threads)
            .into_par_iter()
            .for_each(|t| strided_part(0..panels_m, split(panels_n, threads, t)));
    } else {
        let parts = threads.min(panels_m);
        (0..parts)
            .into_par_iter()
            .for_each(|t| strided_part(split(panels_m, parts, t), 0..panels_n));
    }
}

/// True when a product with one part per thread should split its rows, not its columns:
/// A stored transposed (a weight gradient's `dYᵀ`, whose packing reads each depth step
/// from a different matrix row) and at least twice as tall as C is wide. Each thread then
/// packs half of A and all of B, where a column split has every thread pack all of A.
/// Why: the BERT encoder's 1024 x 256 x 2048 weight gradient spent 14 % of its time
/// packing its 8 MB A on one thread, and with the columns split that share did not shrink
/// on two (BENCHMARKS.md, "Page faults in a slice's gradient, and weight gradients split
/// by rows"). Every element of C is still summed by one thread in the same order, so the
/// bits do not depend on the split.
fn rows_first(p: &Product, panels_m: usize, threads: usize) -> bool {
    p.ma.row_stride == 1 && p.m >= 2 * p.n && panels_m >= threads
}

/// `C[m x n] (+)= A * B` on this thread, with A and B from the given sources (see
/// [`PanelsA`], [`PanelsB`]). The caller checked `super::available()`, that `m, n, k > 0`,
/// `c.len() >= m * n`, and that the sources cover `m x k` and `k x n`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn blocked_with(
    c: &mut [f32],
    accumulate: bool,
    m: usize,
    n: usize,
    k: usize,
    a: PanelsA,
    b: PanelsB,
) {
    let product = product_into(c, accumulate, (m, n, k), a);
    part(&product, a, b, 0..m.div_ceil(MR), 0..n.div_ceil(NR));
}

/// [`blocked_with`] writing (not adding to) C, each tile finishing its values through
/// `epilogue` (given at C's first element) before it stores them.
pub(crate) fn blocked_finishing(
    c: &mut [f32],
    (m, n, k): (usize, usize, usize),
    a: PanelsA,
    b: PanelsB,
    epilogue: TileEpilogue,
) {
    let mut product = product_into(c, false, (m, n, k), a);
    product.epilogue = Some(epilogue);
    part(&product, a, b, 0..m.div_ceil(MR), 0..n.div_ceil(NR));
}

/// [`blocked_with`] with C cut into a grid of parts, one per thread: column panels
/// first (each thread packs its own B panels and reads all of A), then, where there are
/// fewer column panels than threads, row panels too. `b` writes panels for several
/// threads at once. Products below [`PARALLEL_PRODUCT_MIN`] multiply-adds run on this
/// thread.
///
/// Why: a convolution of one image is one product, and the batch split that keeps the
/// other threads busy has nothing to split (ResNet-18's 8x8 and 4x4 layers at batch 1).
/// Splitting the rows first, so that each thread reads half of A, was slower on the 8x8
/// layers (BENCHMARKS.md, "ONNX").
pub(crate) fn blocked_with_threads(
    c: &mut [f32],
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
    a: PanelsA,
    b: SharedPanelsB,
    threads: usize,
) {
    blocked_threads_finishing(c, accumulate, (m, n, k), a, b, threads, None);
}

/// [`blocked_with_threads`], each tile finishing its values through `epilogue` (given
/// at C's first element), where there is one, before it stores them.
pub(crate) fn blocked_threads_finishing(
    c: &mut [f32],
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
    a: PanelsA,
    b: SharedPanelsB,
    threads: usize,
    epilogue: Option<TileEpilogue>,
) {
    let mut product = product_into(c, accumulate, (m, n, k), a);
    product.epilogue = epilogue;
    let (panels_m, panels_n) = (m.div_ceil(MR), n.div_ceil(NR));
    let threads = threads.max(1);
    let (cols, rows) = if m * n * k < PARALLEL_PRODUCT_MIN {
        (1, 1)
    } else {
        let cols = panels_n.min(threads);
        (cols, panels_m.min(threads / cols).max(1))
    };
    let run = |t: usize| {
        let (ci, ri) = (t % cols, t / cols);
        let mut panels = |dst: &mut [f32], p0, kc, j0, width| b(dst, p0, kc, j0, width);
        let (row_range, col_range) = (split(panels_m, rows, ri), split(panels_n, cols, ci));
        part(&product, a, &mut panels, row_range, col_range);
    };
    if cols * rows == 1 {
        run(0);
    } else {
        (0..cols * rows)
            .into_par_iter()
            .with_max_len(1)
            .for_each(run);
    }
}

/// Multiply-adds from which [`blocked_with_threads`] splits a product: below this the
/// fork costs more than the second thread saves.
pub(crate) const PARALLEL_PRODUCT_MIN: usize = 1 << 18;

/// The product that [`blocked_with`] and [`blocked_with_threads`] compute, with their
/// checks of the sizes.
fn product_into<'a>(
    c: &'a mut [f32],
    accumulate: bool,
    (m, n, k): (usize, usize, usize),
    a: PanelsA,
) -> Product<'a> {
    assert!(
        m > 0 && n > 0 && k > 0 && c.len() >= m * n,
        "blocked_with: sizes"
    );
    if let PanelsA::Prepacked(packed) = a {
        assert!(
            packed.len() >= prepacked_a_len(m, k),
            "blocked_with: packed A"
        );
    }
    Product {
        dst: Dst(c.as_mut_ptr()),
        accumulate,
        epilogue: None,
        m,
        n,
        k,
        a: &[],
        ma: MatRef::default(),
        b: &[],
        mb: MatRef::default(),
    }
}

/// Row panels `rows` x column panels `cols` of C, on this thread (`p` gives C and the
/// sizes; A and B come from `a` and `b`).
fn part(p: &Product, a: PanelsA, b: PanelsB, rows: Range<usize>, cols: Range<usize>) {
    let kc_max = max_depth_block(p.k);
    // Rows that fit one MC block never reuse a B panel after its row tiles: each panel is
    // then packed into L1 right before its tiles run, instead of a whole NC block being
    // packed first (1 MiB, past L2, so that the tiles found their panels evicted).
    let streaming = rows.len() <= MC / MR;
    let nc_panels = if streaming {
        1
    } else {
        (NC / NR).min(cols.len())
    };
    let b_len = nc_panels * kc_max * NR;
    let a_len = if matches!(a, PanelsA::Strided(..)) {
        MC * kc_max
    } else {
        0
    };
    let all_rows = p.m.div_ceil(MR) * MR;
    with_scratch(&PRIVATE, b_len + a_len, |scratch| {
        let (packed_b, a_scratch) = scratch.split_at_mut(b_len);
        // The row tiles of rows `r0..` (packed in `packed_a`) against one packed B panel.
        // Full pairs of row tiles go to the 12x16 kernel where it pays (AVX-512 at full width).
        let pairs = kernel512::chosen();
        let tiles = |packed_a: &[f32], r0: usize, bp: &[f32], j0: usize, kc: usize, acc, plus| {
            let width = NR.min(p.n - j0);
            let count = packed_a.len() / (MR * kc);
            let mut s = 0;
            while s < count {
                let i0 = r0 + s * MR;
                let ap = packed_a[s * MR * kc..].as_ptr();
                if pairs && width == NR && s + 1 < count && i0 + 2 * MR <= p.m {
                    // SAFETY: two packed panels of MR x kc from `ap`, a kc x NR panel;
                    // the 12 x 16 block lies inside C.
                    unsafe {
                        let at = (i0, j0);
                        tile_pair_at(
                            (p.dst, p.n),
                            kc,
                            ap,
                            bp.as_ptr(),
                            NR as isize,
                            at,
                            acc,
                            plus,
                        )
                    };
                    s += 2;
                    continue;
                }
                let shape = (MR.min(p.m - i0), width);
                // SAFETY: packed panels of MR x kc and kc x NR; the tile lies inside C.
                unsafe {
                    tile_at(
                        (p.dst, p.n),
                        kc,
                        ap,
                        bp.as_ptr(),
                        NR as isize,
                        (i0, j0),
                        shape,
                        acc,
                        plus,
                    )
                };
                s += 1;
            }
        };
        for jb in cols.clone().step_by(NC / NR) {
            let block_cols = jb..(jb + NC / NR).min(cols.end);
            for (p0, kc) in depth_blocks(p.k) {
                let acc = p.accumulate || p0 > 0;
                let plus = if p0 + kc == p.k { p.epilogue } else { None };
                let mut pack_b_panel = |packed_b: &mut [f32], q: usize, jp: usize| {
                    let j0 = jp * NR;
                    let panel = &mut packed_b[q * kc * NR..][..kc * NR];
                    b(panel, p0, kc, j0, NR.min(p.n - j0));
                };
                if !streaming {
                    for (q, jp) in block_cols.clone().enumerate() {
                        pack_b_panel(packed_b, q, jp);
                    }
                }
                let mut ip0 = rows.start;
                while ip0 < rows.end {
                    let ip1 = (ip0 + MC / MR).min(rows.end);
                    let (r0, r1) = (ip0 * MR, (ip1 * MR).min(p.m));
                    let packed_a: &[f32] = match a {
                        PanelsA::Strided(a, ma) => {
                            let dst = &mut a_scratch[..(ip1 - ip0) * MR * kc];
                            pack_a(dst, a, ma, r0..r1, p0, kc);
                            dst
                        }
                        PanelsA::Prepacked(all) => {
                            &all[p0 * all_rows + r0 * kc..][..(ip1 - ip0) * MR * kc]
                        }
                    };
                    for (q, jp) in block_cols.clone().enumerate() {
                        let q = if streaming {
                            pack_b_panel(packed_b, 0, jp);
                            0
                        } else {
                            q
                        };
                        tiles(
                            packed_a,
                            r0,
                            &packed_b[q * kc * NR..][..kc * NR],
                            jp * NR,
                            kc,
                            acc,
                            plus,
                        );
                    }
                    ip0 = ip1;
                }
            }
        }
    })
}
