//! Convolutions of small images without a column matrix (the planner's `Implicit`,
//! `PaddedGathered`, `Wide`, `ScatterAdd` and `PaddedScatterAdd` paths).
//!
//! ```text
//! forward (Implicit):        Yᵀ[pos][out]  = Σ_tap x[pos + tap] · W[tap][out]
//! filter gradient (Implicit): dWᵀ[tap][out] = Σ_pos x[tap + pos] · dYᵀ[pos][out]
//! ```
//!
//! The forward pass is an implicit GEMM whose A operand is read from the image through
//! offset tables (`crate::sgemm`'s gathered product): output positions are the rows,
//! taps (input channel, filter row, filter column) the depth, and the packed filter is
//! B, so each step broadcasts six image values and loads 16 output channels of the
//! filter. The weight gradient swaps the roles, with the output gradient packed as B.
//! Both results come out transposed and are turned around once, which costs far less
//! than writing and reading back `KH * KW` copies of the image.
//!
//! Layers with fewer output channels (`Wide`, LeNet's `conv1`) run on wide positions:
//! both passes read the image shifted by each tap's offset in place, the forward pass as
//! B of a shifted product, the weight gradient as the columns of dot products
//! (`filter_gradient_wide`). The input gradient's scatter-add product (`ScatterAdd`)
//! adds each row of `Wᵀ · dY` at its tap's offset in the image gradient, for padded
//! stride-1 layers into a zero-bordered copy (`PaddedScatterAdd`). The gathered weight
//! gradient also serves larger padded layers (`PaddedGathered`, ResNet's first two
//! stages), read from zero-bordered copies of the images: there its depth is the output
//! positions, so each of a tile's six rows streams through one run of the image.

use rayon::prelude::*;

use super::batch::{batch_blocks, sum_partials};
use super::geometry::ConvGeometry;
use super::lowering::{border_plane, copy_short};
use super::plan;
use crate::UnaryFn;
use crate::arena;
use crate::elementwise::Num;
use crate::matmul::MatRef;
use crate::sgemm::dot::{Columns, dot_columns};
use crate::sgemm::gather::{Gathered, gather_gemm, packed_b_index, packed_b_len};
use crate::sgemm::scatter::{packed_a_index, packed_a_len, scatter_add_gemm};
use crate::sgemm::shifted::{Shifted, shifted_gemm};
use crate::sgemm::{self, NR};

/// Offset of each tap (input channel of the group, filter row, filter column) from a
/// window's corner, in one image's group planes of `plane` (height, width): the image's
/// own, or a zero-bordered copy's (`ConvGeometry::padded_size`).
fn tap_offsets(g: &ConvGeometry, plane: (usize, usize)) -> Vec<i32> {
    let mut taps = arena::for_overwrite::<i32>(g.ckk());
    let mut t = taps.iter_mut();
    for c in 0..g.cg() {
        for i in 0..g.kh {
            for j in 0..g.kw {
                if let Some(v) = t.next() {
                    *v = tap_offset(g, plane, c, i, j);
                }
            }
        }
    }
    taps
}

/// Offset of tap (channel `c`, filter row `i`, filter column `j`) from a window's corner,
/// in planes of `h x w` values (the image's, or a zero-bordered copy's).
fn tap_offset(g: &ConvGeometry, (h, w): (usize, usize), c: usize, i: usize, j: usize) -> i32 {
    let [dy, dx] = g.dilation;
    ((c * h + i * dy) * w + j * dx) as i32
}

/// Runs `f(image, out, scratch)` for every image of the batch, with `out` that image's
/// `image_len` values of `out_all`: one block of consecutive images per thread, each with
/// `scratch_len` values of scratch (taken from the pool on this thread, and given back).
fn for_each_image(
    out_all: &mut [f32],
    image_len: usize,
    scratch_len: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    // Chunk sizes must be positive; the callers' geometries make both so anyway.
    let (image_len, scratch_len) = (image_len.max(1), scratch_len.max(1));
    let (blocks, per) = batch_blocks(out_all.len() / image_len);
    let mut scratch = arena::for_overwrite::<f32>(blocks * scratch_len);
    out_all
        .par_chunks_mut(per * image_len)
        .zip(scratch.par_chunks_mut(scratch_len))
        .enumerate()
        .for_each(|(b, (outs, scratch))| {
            for (s, out) in outs.chunks_mut(image_len).enumerate() {
                f(b * per + s, out, scratch);
            }
        });
    arena::recycle(crate::Buffer::F32(scratch));
}

/// Offset of each output position's window corner, for `images` consecutive images:
/// image-major, then row, then column. `(image_len, row_len)`: the values between images
/// and between rows (the batch's `C·H·W` and `W`, or zero-bordered copies').
fn position_offsets(
    g: &ConvGeometry,
    images: usize,
    (image_len, row_len): (usize, usize),
) -> Vec<i32> {
    let [sy, sx] = g.stride;
    let mut positions = arena::for_overwrite::<i32>(images * g.ohw());
    let mut p = positions.iter_mut();
    for s in 0..images {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                if let Some(v) = p.next() {
                    *v = (s * image_len + oy * sy * row_len + ox * sx) as i32;
                }
            }
        }
    }
    positions
}

/// Forward pass into `y` ([N, O, OH, OW]); the planner chose `Implicit` for it.
pub(crate) fn forward(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32]) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let (hw, out_len) = (g.h * g.w, g.o * ohw);
    let taps = tap_offsets(g, (g.h, g.w));
    let positions = position_offsets(g, 1, (g.c * g.h * g.w, g.w));
    // B: the filter of each group with taps as rows and output channels as columns.
    let filter_len = packed_b_len(ckk, og);
    let mut filters = arena::zeroed::<f32>(g.groups * filter_len);
    for (group, packed) in filters.chunks_mut(filter_len).enumerate() {
        for co in 0..og {
            let row = &w[(group * og + co) * ckk..][..ckk];
            for (tap, &v) in row.iter().enumerate() {
                packed[packed_b_index(ckk, tap, co)] = v;
            }
        }
    }
    for_each_image(y, out_len, ohw * og, |image, ys, yt| {
        for group in 0..g.groups {
            let a = Gathered {
                src: &x[(image * g.c + group * cg) * hw..][..cg * hw],
                rows: &positions,
                depth: &taps,
            };
            gather_gemm(yt, og, og, false, a, &filters[group * filter_len..]);
            // Yᵀ [positions x og] -> this group's channels of the image.
            let yg = &mut ys[group * og * ohw..][..og * ohw];
            for (co, plane) in yg.chunks_exact_mut(ohw).enumerate() {
                for (pos, v) in plane.iter_mut().enumerate() {
                    *v = yt[pos * og + co];
                }
            }
        }
    });
    arena::recycle(crate::Buffer::F32(filters));
    for v in [taps, positions] {
        arena::recycle(crate::Buffer::I32(v));
    }
}

/// Forward pass into `y` on wide positions; the planner chose `Wide` for it.
///
/// Per image and group, `Y_wide [og x wide] = W [og x taps] * B`, where row `tap` of B is
/// the image read from the tap's offset (see [`crate::sgemm`]'s shifted product), then
/// the `OW` real outputs of each row are copied out.
///
/// With `relu`, each output is written as `relu(y)`, while its row is still in L1.
pub(crate) fn forward_wide(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32], relu: bool) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let (hw, out_len, wide) = (g.h * g.w, g.o * ohw, g.wide_len());
    let taps = tap_offsets(g, (g.h, g.w));
    for_each_image(y, out_len, og * wide, |image, ys, yw| {
        for group in 0..g.groups {
            let src = &x[(image * g.c + group * cg) * hw..][..cg * hw];
            let filter = &w[group * og * ckk..][..og * ckk];
            let b = Shifted { src, depth: &taps };
            shifted_gemm(yw, wide, (og, wide), false, (filter, ckk), b);
            let yg = &mut ys[group * og * ohw..][..og * ohw];
            for (plane, rows) in yg.chunks_exact_mut(ohw).zip(yw.chunks_exact(wide)) {
                for (oy, out) in plane.chunks_exact_mut(g.ow).enumerate() {
                    let row = &rows[oy * g.w..][..g.ow];
                    if relu {
                        for (o, &v) in out.iter_mut().zip(row) {
                            *o = v.unary(UnaryFn::Relu);
                        }
                    } else {
                        copy_short(out, row);
                    }
                }
            }
        }
    });
    arena::recycle(crate::Buffer::I32(taps));
}

/// Input gradient written into `dx` (whatever it held before); the caller checked
/// `ScatterAdd` or `PaddedScatterAdd`.
///
/// Per image and group, `cols [taps x wide] = Wᵀ [taps x og] * dY_wide [og x wide]`, where
/// `dY_wide` is the output gradient spread over wide positions (zeros in the columns no
/// window starts at), and each row of `cols` is added at its tap's offset in the image
/// gradient inside the GEMM's tile epilogue: col2im without the column matrix, one
/// contiguous run per tap instead of `OH` short ones. A padded layer's rows are added
/// into a zero-bordered image gradient (every window then lies inside it), whose
/// interior is copied into `dx` after each image.
pub(crate) fn input_gradient(dy: &[f32], w: &[f32], g: &ConvGeometry, dx: &mut [f32]) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let (hw, chw, wide) = (g.h * g.w, g.c * g.h * g.w, g.wide_len());
    let (hp, wp) = g.padded_size();
    let bordered = g.pads != [0; 4];
    let padded = wide.div_ceil(NR) * NR;
    // Taps ordered (filter row, filter column, channel): the six rows of a tile are then
    // six channels at one offset, whose targets lie in different planes, so no row reloads
    // what the row before it just stored.
    let order = |t: usize| {
        let (c, ij) = (t % cg, t / cg);
        let (i, j) = (ij / g.kw, ij % g.kw);
        (c, i, j)
    };
    let mut rows = arena::for_overwrite::<i32>(ckk);
    for (t, row) in rows.iter_mut().enumerate() {
        let (c, i, j) = order(t);
        *row = tap_offset(g, (hp, wp), c, i, j);
    }
    // A: Wᵀ of each group, rows in that order, depth = output channels.
    let a_len = packed_a_len(ckk, og);
    let mut filters = arena::zeroed::<f32>(g.groups * a_len);
    for (group, packed) in filters.chunks_mut(a_len).enumerate() {
        for t in 0..ckk {
            let (c, i, j) = order(t);
            let tap = (c * g.kh + i) * g.kw + j;
            for co in 0..og {
                packed[packed_a_index(og, t, co)] = w[(group * og + co) * ckk + tap];
            }
        }
    }
    let border_len = if bordered { cg * hp * wp } else { 0 };
    for_each_image(dx, chw, og * padded + border_len, |image, dxs, scratch| {
        let (spread, border) = scratch.split_at_mut(og * padded);
        for group in 0..g.groups {
            // dY_wide: row oy of each output channel at oy * (padded width), zeros elsewhere
            // (each gap written with its row: filling the whole buffer first, and zeroing
            // `dx` up front on one thread, showed up in `memset` under `perf` in
            // LeNet's `conv2` input gradient; measured: BENCHMARKS.md, "Figures moved
            // from code comments").
            for co in 0..og {
                let plane = &dy[(image * g.o + group * og + co) * ohw..][..ohw];
                let row = &mut spread[co * padded..][..padded];
                for (oy, src) in plane.chunks_exact(g.ow).enumerate() {
                    let end = if oy + 1 == g.oh {
                        padded
                    } else {
                        (oy + 1) * wp
                    };
                    let (values, gap) = row[oy * wp..end].split_at_mut(g.ow);
                    copy_short(values, src);
                    gap.fill(0.0);
                }
            }
            // The image gradient is zeroed here, group by group, on the thread that adds
            // into it next (the caller hands it over unset).
            let target = &mut dxs[group * cg * hw..][..cg * hw];
            let a = (&filters[group * a_len..][..a_len], og);
            if !bordered {
                target.fill(0.0);
                scatter_add_gemm(target, &rows, wide, a, (spread, padded));
                continue;
            }
            border.fill(0.0);
            scatter_add_gemm(border, &rows, wide, a, (spread, padded));
            // The border collected the taps that fell into the padding: dropped.
            let [top, _, left, _] = g.pads;
            for (plane, bordered_plane) in target
                .chunks_exact_mut(hw)
                .zip(border.chunks_exact(hp * wp))
            {
                for (y, out) in plane.chunks_exact_mut(g.w).enumerate() {
                    copy_short(out, &bordered_plane[(y + top) * wp + left..][..g.w]);
                }
            }
        }
    });
    arena::recycle(crate::Buffer::F32(filters));
    arena::recycle(crate::Buffer::I32(rows));
}

/// Weight gradient into `dw` ([O, C/groups, KH, KW]); the planner chose `Implicit` or
/// `PaddedGathered`. A padded layer's images are first copied into
/// zero-bordered planes (those of one product's images at a time), so that every window
/// lies inside them.
pub(crate) fn filter_gradient(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let hw = g.h * g.w;
    let bordered = g.pads != [0; 4];
    let (hp, wp) = g.padded_size();
    let (blocks, per) = batch_blocks(g.n);
    let chunk = plan::chunk_images(g, per);
    // A padded layer's images are read from zero-bordered copies of their group's planes.
    let (plane, image_len, row_len) = if bordered {
        ((hp, wp), cg * hp * wp, wp)
    } else {
        ((g.h, g.w), g.c * hw, g.w)
    };
    let taps = tap_offsets(g, plane);
    let positions = position_offsets(g, chunk, (image_len, row_len));
    // Per block of the batch: its dWᵀ ([groups][taps x og]), room for one packed dYᵀ and
    // for one zero-bordered image.
    let part_len = g.groups * ckk * og;
    let packed_len = packed_b_len(chunk * ohw, og);
    let border_len = if bordered { chunk * cg * hp * wp } else { 0 };
    let scratch_len = packed_len + border_len;
    let mut partials = arena::for_overwrite::<f32>(blocks * part_len);
    // Columns past `og` in the last panel are never written: their products are dropped.
    let mut scratch = arena::for_overwrite::<f32>(blocks * scratch_len);
    partials
        .par_chunks_mut(part_len)
        .zip(scratch.par_chunks_mut(scratch_len))
        .enumerate()
        .for_each(|(b, (part, scratch))| {
            let (packed, border) = scratch.split_at_mut(packed_len);
            let end = ((b + 1) * per).min(g.n);
            let mut s0 = b * per;
            let mut first = true;
            while s0 < end {
                let images = chunk.min(end - s0);
                let depth = images * ohw;
                for group in 0..g.groups {
                    // B = dYᵀ of these images: positions as rows, output channels as columns.
                    for s in 0..images {
                        pack_output_gradient(dy, g, (s0 + s, group), (s * ohw, depth), packed);
                    }
                    let src = if bordered {
                        let planes = border.chunks_exact_mut(hp * wp).take(images * cg);
                        for (plane, dst) in planes.enumerate() {
                            let (s, c) = (plane / cg, plane % cg);
                            border_plane(
                                &x[((s0 + s) * g.c + group * cg + c) * hw..][..hw],
                                g,
                                dst,
                            );
                        }
                        &border[..]
                    } else {
                        &x[(s0 * g.c + group * cg) * hw..]
                    };
                    let a = Gathered {
                        src,
                        rows: &taps,
                        depth: &positions[..depth],
                    };
                    let dwt = &mut part[group * ckk * og..][..ckk * og];
                    gather_gemm(dwt, og, og, !first, a, packed);
                }
                first = false;
                s0 += images;
            }
        });
    // dW [out][tap] = Σ over blocks of dWᵀ [tap][out].
    for group in 0..g.groups {
        for co in 0..og {
            let row = &mut dw[(group * og + co) * ckk..][..ckk];
            for (tap, d) in row.iter_mut().enumerate() {
                let at = (group * ckk + tap) * og + co;
                *d = partials.chunks_exact(part_len).map(|p| p[at]).sum();
            }
        }
    }
    arena::recycle(crate::Buffer::F32(partials));
    arena::recycle(crate::Buffer::F32(scratch));
    for v in [taps, positions] {
        arena::recycle(crate::Buffer::I32(v));
    }
}

/// Packs `dYᵀ` of image `image`'s group `group` (positions as rows, output channels as
/// columns) into rows `first..first + OH·OW` of `packed`, a packed B of depth `depth`:
/// panels of 16 channels by 8x8 register transposes, a last narrower panel value by
/// value. Why the transposes: packed one value at a time, it and the border copies were
/// a visible share of ResNet's first-stage weight gradient under `perf`, and with them
/// LeNet's `conv2` weight gradient took less time in most interleaved runs (measured:
/// BENCHMARKS.md, "Figures moved from code comments").
fn pack_output_gradient(
    dy: &[f32],
    g: &ConvGeometry,
    (image, group): (usize, usize),
    (first, depth): (usize, usize),
    packed: &mut [f32],
) {
    let (ohw, og) = (g.ohw(), g.og());
    let channels = MatRef {
        offset: (image * g.o + group * og) * ohw,
        row_stride: 1,
        col_stride: ohw as isize,
    };
    for j0 in (0..og).step_by(NR) {
        let dst = &mut packed[((j0 / NR) * depth + first) * NR..][..ohw * NR];
        if og - j0 >= NR && sgemm::transpose_pack(dst, dy, channels, 0, ohw, j0) {
            continue;
        }
        for co in j0..og.min(j0 + NR) {
            let plane = &dy[channels.offset + co * ohw..][..ohw];
            for (pos, &v) in plane.iter().enumerate() {
                packed[packed_b_index(depth, first + pos, co)] = v;
            }
        }
    }
}

/// Weight gradient into `dw` on wide positions; the planner chose `Wide` (the
/// layers whose forward pass runs on wide positions too).
///
/// Per image and group, `dW [og x taps] += dY_wide [og x wide] · B`, where column `tap` of
/// B is the image read from the tap's offset: every output is a dot product of two
/// contiguous runs, and nothing is copied but the output gradient, spread over the wide
/// positions (zeros in the `KW - 1` columns per row that no window starts at). Why: with
/// fewer than 16 output channels, the gathered product of [`filter_gradient`] wastes most
/// of each panel, and im2col wrote 25 copies of LeNet's `conv1` images (2.5 MB per step)
/// that took a large share of its weight gradient under `perf` (measured: BENCHMARKS.md,
/// "Figures moved from code comments").
///
/// The zero columns meet real image values (the next row's first ones), so an infinite
/// or NaN value there would turn the gradient NaN where im2col would not see it: the
/// forward pass of that image is then not finite either.
pub(crate) fn filter_gradient_wide(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let (hw, wide) = (g.h * g.w, g.wide_len());
    let (blocks, per) = batch_blocks(g.n);
    let taps = tap_offsets(g, (g.h, g.w));
    let part_len = g.groups * og * ckk;
    let spread_len = og * wide;
    let mut partials = arena::for_overwrite::<f32>(blocks * part_len);
    // Zeroed once: the columns no window starts at are never written, so they stay zero.
    let mut spread = arena::zeroed::<f32>(blocks * spread_len);
    partials
        .par_chunks_mut(part_len)
        .zip(spread.par_chunks_mut(spread_len))
        .enumerate()
        .for_each(|(b, (part, dy_wide))| {
            let images = b * per..((b + 1) * per).min(g.n);
            for (s, image) in images.enumerate() {
                for group in 0..g.groups {
                    for (co, row) in dy_wide.chunks_exact_mut(wide).enumerate() {
                        let plane = &dy[(image * g.o + group * og + co) * ohw..][..ohw];
                        for (oy, out) in plane.chunks_exact(g.ow).enumerate() {
                            copy_short(&mut row[oy * g.w..][..g.ow], out);
                        }
                    }
                    let src = &x[(image * g.c + group * cg) * hw..][..cg * hw];
                    let dwg = &mut part[group * og * ckk..][..og * ckk];
                    let columns = Columns { src, starts: &taps };
                    dot_columns(dwg, ckk, (og, wide), s > 0, (dy_wide, wide), columns);
                }
            }
        });
    sum_partials(dw, &partials);
    arena::recycle(crate::Buffer::F32(partials));
    arena::recycle(crate::Buffer::F32(spread));
    arena::recycle(crate::Buffer::I32(taps));
}
