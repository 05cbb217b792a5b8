//! Packing: copies blocks of A and B into the order the microkernel reads them, so the
//! hot loop walks memory contiguously whatever the operands' strides. Panels at the edge
//! are padded with zeros (their products are computed and then discarded).

use std::ops::Range;

use super::{MR, NR};
use crate::operand::MatRef;

/// Index of element (i, j) of a strided operand (the caller checked the bounds).
#[inline(always)]
fn at(m: MatRef, i: usize, j: usize) -> usize {
    (m.offset as isize + i as isize * m.row_stride + j as isize * m.col_stride) as usize
}

/// Packs rows `rows` and depth `p0..p0 + kc` of A into `dst` as consecutive MR-row
/// panels, each depth-major (`dst[panel][p][r]`).
pub(super) fn pack_a(
    dst: &mut [f32],
    a: &[f32],
    ma: MatRef,
    rows: Range<usize>,
    p0: usize,
    kc: usize,
) {
    if ma.row_stride == 1 {
        pack_a_transposed(dst, a, ma, rows, p0, kc);
        return;
    }
    let one = |(ip, panel): (usize, &mut [f32])| {
        let i0 = rows.start + ip * MR;
        let height = MR.min(rows.end - i0);
        if height == MR && super::kernel::transpose_pack_a(panel, a, ma, i0, p0, kc) {
            return;
        }
        for r in 0..MR {
            if r >= height {
                (0..kc).for_each(|p| panel[p * MR + r] = 0.0);
            } else if ma.col_stride == 1 {
                let src = &a[at(ma, i0 + r, p0)..][..kc];
                for (p, &v) in src.iter().enumerate() {
                    panel[p * MR + r] = v;
                }
            } else {
                (0..kc).for_each(|p| panel[p * MR + r] = a[at(ma, i0 + r, p0 + p)]);
            }
        }
    };
    dst.chunks_mut(MR * kc).enumerate().for_each(one);
}

/// Panels [`pack_a_transposed`] fills at once: 48 rows, whose values of one depth step
/// are three cache lines.
const PANELS_AT_ONCE: usize = 8;

/// [`pack_a`] for a transposed A (`ma.row_stride == 1`, an optimizer's `dYᵀ`): the rows'
/// values of one depth step are adjacent, so each step is read as one contiguous run and
/// dealt out six at a time to [`PANELS_AT_ONCE`] panels.
///
/// Why not panel by panel: a panel reads six values from each of `kc` depth steps, which
/// lie a whole row of the untransposed matrix apart. For the MLP's 512-wide `dY` that is
/// 2 KiB, so the steps' lines fall into two L1 sets and evict each other before the next
/// panel reuses them: packing the 512x64 `dYᵀ` took a visible share of its
/// weight-gradient product, and far less this way (measured: BENCHMARKS.md, "Figures
/// moved from code comments").
fn pack_a_transposed(
    dst: &mut [f32],
    a: &[f32],
    ma: MatRef,
    rows: Range<usize>,
    p0: usize,
    kc: usize,
) {
    let panels = rows.len().div_ceil(MR);
    for g0 in (0..panels).step_by(PANELS_AT_ONCE) {
        let first = rows.start + g0 * MR;
        let len = (rows.end - first).min(PANELS_AT_ONCE * MR);
        let (full, tail) = (len / MR, len % MR);
        for p in 0..kc {
            let src = &a[at(ma, first, p0 + p)..][..len];
            let slot = |panel: usize| (g0 + panel) * MR * kc + p * MR;
            for (q, six) in src.chunks_exact(MR).enumerate() {
                // Fixed-size copies: two moves, where a slice copy of a runtime length
                // called `memmove` for each step.
                // Both slices hold exactly MR values (`[..MR]`, `chunks_exact(MR)`), so
                // the conversions cannot fail.
                #[allow(clippy::expect_used)]
                let d: &mut [f32; MR] = (&mut dst[slot(q)..][..MR]).try_into().expect("MR values");
                #[allow(clippy::expect_used)]
                let values: [f32; MR] = six.try_into().expect("MR values");
                *d = values;
            }
            if tail > 0 {
                let d = &mut dst[slot(full)..][..MR];
                d[..tail].copy_from_slice(&src[full * MR..]);
                d[tail..].fill(0.0);
            }
        }
    }
}

/// Packs depth `p0..p0 + kc` of columns `j0..j0 + width` of B into `dst` (`kc` rows of
/// NR values; columns past `width` are zero).
pub(crate) fn pack_b(
    dst: &mut [f32],
    b: &[f32],
    mb: MatRef,
    p0: usize,
    kc: usize,
    j0: usize,
    width: usize,
) {
    if mb.col_stride == 1 && width == NR {
        for (p, row) in dst.chunks_exact_mut(NR).enumerate() {
            row.copy_from_slice(&b[at(mb, p0 + p, j0)..][..NR]);
        }
        return;
    }
    if mb.row_stride == 1 && width == NR && super::kernel::transpose_pack(dst, b, mb, p0, kc, j0) {
        return;
    }
    if width < NR {
        dst.fill(0.0);
    }
    // Column by column: a transposed B (row stride 1) is then read contiguously.
    for q in 0..width {
        for p in 0..kc {
            dst[p * NR + q] = b[at(mb, p0 + p, j0 + q)];
        }
    }
}
