//! Large products, blocked as in BLIS. The columns (or, for a narrow C, the rows) are
//! split across threads once; each thread then works alone on its part: for every block
//! of `NC` columns and `KC` depth it packs its B panels, then `MC` rows of A at a time
//! (kept in L2), and runs the microkernel over them.
//!
//! Why one split per product and private packing: a fork per depth block (with B packed
//! once and shared) cost more in wake-ups and cross-core traffic than packing A twice
//! (the MLP's 64x512x784 product ran 25 % slower that way).

use std::ops::Range;

use rayon::prelude::*;

use super::pack::{pack_a, pack_b};
use super::{
    MR, NR, PRIVATE, Product, depth_blocks, max_depth_block, split, tile_at, with_scratch,
};

/// Columns of B packed at once: 256 x 1024 values (1 MiB per thread).
const NC: usize = 1024;
/// Rows of A packed at once (a multiple of MR): 144 x 256 values (144 KiB) stay in L2.
const MC: usize = 144;

pub(super) fn run(p: &Product, threads: usize) {
    let (panels_m, panels_n) = (p.m.div_ceil(MR), p.n.div_ceil(NR));
    if threads <= 1 || panels_m * panels_n < 2 {
        part(p, 0..panels_m, 0..panels_n);
    } else if panels_n >= threads {
        (0..threads)
            .into_par_iter()
            .for_each(|t| part(p, 0..panels_m, split(panels_n, threads, t)));
    } else {
        let parts = threads.min(panels_m);
        (0..parts)
            .into_par_iter()
            .for_each(|t| part(p, split(panels_m, parts, t), 0..panels_n));
    }
}

/// Row panels `rows` x column panels `cols` of C, on this thread.
fn part(p: &Product, rows: Range<usize>, cols: Range<usize>) {
    let kc_max = max_depth_block(p.k);
    let nc_panels = (NC / NR).min(cols.len());
    let b_len = nc_panels * kc_max * NR;
    with_scratch(&PRIVATE, b_len + MC * kc_max, |scratch| {
        let (packed_b, packed_a) = scratch.split_at_mut(b_len);
        for jb in cols.clone().step_by(NC / NR) {
            let block_cols = jb..(jb + NC / NR).min(cols.end);
            for (p0, kc) in depth_blocks(p.k) {
                let acc = p.accumulate || p0 > 0;
                for (q, jp) in block_cols.clone().enumerate() {
                    let j0 = jp * NR;
                    let panel = &mut packed_b[q * kc * NR..][..kc * NR];
                    pack_b(panel, p.b, p.mb, p0, kc, j0, NR.min(p.n - j0));
                }
                let mut ip0 = rows.start;
                while ip0 < rows.end {
                    let ip1 = (ip0 + MC / MR).min(rows.end);
                    let (r0, r1) = (ip0 * MR, (ip1 * MR).min(p.m));
                    let packed_a = &mut packed_a[..(ip1 - ip0) * MR * kc];
                    pack_a(packed_a, p.a, p.ma, r0..r1, p0, kc);
                    for (q, jp) in block_cols.clone().enumerate() {
                        let j0 = jp * NR;
                        let width = NR.min(p.n - j0);
                        let bp = packed_b[q * kc * NR..][..kc * NR].as_ptr();
                        for (s, ap) in packed_a.chunks_exact(MR * kc).enumerate() {
                            let i0 = r0 + s * MR;
                            let shape = (MR.min(p.m - i0), width);
                            // SAFETY: packed panels of MR x kc and kc x NR; the tile
                            // lies inside C.
                            unsafe {
                                tile_at(p, kc, ap.as_ptr(), bp, NR as isize, (i0, j0), shape, acc)
                            };
                        }
                    }
                    ip0 = ip1;
                }
            }
        }
    })
}
