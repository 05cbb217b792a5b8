//! Thin products (at most 12 rows, such as a small convolution's output channels): A is
//! packed whole, and full-width B panels of a row-major B are read where they lie, since
//! packing would copy each element of B for only 6-12 uses. Threads split the columns.

use std::ops::Range;

use rayon::prelude::*;

use super::pack::{pack_a, pack_b};
use super::{
    MR, NR, Product, SHARED, TileEpilogue, depth_blocks, max_depth_block, split, tile_at,
    with_scratch,
};

pub(super) fn run(p: &Product, threads: usize) {
    let kc_max = max_depth_block(p.k);
    let (panels_m, panels_n) = (p.m.div_ceil(MR), p.n.div_ceil(NR));
    let threads = threads.min(panels_n).max(1);
    let a_len = panels_m * MR * kc_max;
    let panel_len = kc_max * NR;
    with_scratch(&SHARED, a_len + threads * panel_len, |scratch| {
        let (packed_a, panels) = scratch.split_at_mut(a_len);
        for (p0, kc) in depth_blocks(p.k) {
            let packed_a = &mut packed_a[..panels_m * MR * kc];
            pack_a(packed_a, p.a, p.ma, 0..p.m, p0, kc);
            let packed_a = &*packed_a;
            let acc = p.accumulate || p0 > 0;
            let plus = if p0 + kc == p.k { p.epilogue } else { None };
            if threads == 1 {
                columns(p, packed_a, p0, kc, 0..panels_n, panels, (acc, plus));
            } else {
                panels
                    .par_chunks_mut(panel_len)
                    .enumerate()
                    .for_each(|(t, panel)| {
                        let cols = split(panels_n, threads, t);
                        columns(p, packed_a, p0, kc, cols, panel, (acc, plus))
                    });
            }
        }
    })
}

/// Every row panel times column panels `cols` over depth `p0..p0 + kc`; `panel` is this
/// thread's room for one packed B panel. `acc`: add to C; `plus`: the epilogue, on the last
/// depth block.
fn columns(
    p: &Product,
    packed_a: &[f32],
    p0: usize,
    kc: usize,
    cols: Range<usize>,
    panel: &mut [f32],
    (acc, plus): (bool, Option<TileEpilogue>),
) {
    let mb = p.mb;
    for jp in cols {
        let j0 = jp * NR;
        let width = NR.min(p.n - j0);
        let direct = width == NR && mb.col_stride == 1 && mb.row_stride > 0;
        let (bp, ldb) = if direct {
            let start = mb.offset as isize + p0 as isize * mb.row_stride + j0 as isize;
            // SAFETY: the caller's bounds check covers rows p0..p0+kc, columns j0..j0+16.
            (unsafe { p.b.as_ptr().offset(start) }, mb.row_stride)
        } else {
            pack_b(&mut panel[..kc * NR], p.b, mb, p0, kc, j0, width);
            (panel.as_ptr(), NR as isize)
        };
        for (ip, ap) in packed_a.chunks_exact(MR * kc).enumerate() {
            let i0 = ip * MR;
            let height = MR.min(p.m - i0);
            // SAFETY: `ap` is a packed MR x kc panel, `bp` kc rows of NR values `ldb`
            // apart, and the tile lies inside C.
            unsafe {
                tile_at(
                    (p.dst, p.n),
                    kc,
                    ap.as_ptr(),
                    bp,
                    ldb,
                    (i0, j0),
                    (height, width),
                    acc,
                    plus,
                )
            };
        }
    }
}
