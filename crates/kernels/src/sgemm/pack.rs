//! Packing: copies blocks of A and B into the order the microkernel reads them, so the
//! hot loop walks memory contiguously whatever the operands' strides. Panels at the edge
//! are padded with zeros (their products are computed and then discarded).

use std::ops::Range;

use super::{MR, NR};
use crate::matmul::MatRef;

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
    let one = |(ip, panel): (usize, &mut [f32])| {
        let i0 = rows.start + ip * MR;
        let height = MR.min(rows.end - i0);
        if height == MR
            && ma.row_stride != 1
            && super::kernel::transpose_pack_a(panel, a, ma, i0, p0, kc)
        {
            return;
        }
        for r in 0..MR {
            if r >= height {
                (0..kc).for_each(|p| panel[p * MR + r] = 0.0);
                continue;
            }
            if ma.row_stride == 1 {
                continue; // packed below, depth-major
            }
            if ma.col_stride == 1 {
                let src = &a[at(ma, i0 + r, p0)..][..kc];
                for (p, &v) in src.iter().enumerate() {
                    panel[p * MR + r] = v;
                }
            } else {
                (0..kc).for_each(|p| panel[p * MR + r] = a[at(ma, i0 + r, p0 + p)]);
            }
        }
        // A transposed (column-major): the MR values of one depth step are adjacent.
        if ma.row_stride == 1 && height > 0 {
            for p in 0..kc {
                let src = &a[at(ma, i0, p0 + p)..][..height];
                let dst = &mut panel[p * MR..][..height];
                // A fixed-size copy of a full panel's six values compiles to two moves;
                // `copy_from_slice` of a runtime length called `memmove` for each step
                // (2 % of the MLP's training step).
                match (<&mut [f32; MR]>::try_from(dst), <&[f32; MR]>::try_from(src)) {
                    (Ok(d), Ok(s)) => *d = *s,
                    (Err(_), _) | (_, Err(_)) => {
                        panel[p * MR..][..height].copy_from_slice(src);
                    }
                }
            }
        }
    };
    dst.chunks_mut(MR * kc).enumerate().for_each(one);
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
