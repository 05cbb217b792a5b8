//! Convolutions of small images without a column matrix: the forward pass and the weight
//! gradient as implicit GEMMs, whose A operand is read from the image through offset
//! tables (`crate::sgemm`'s gathered product). The input gradient's scatter-add
//! product also serves padded stride-1 layers of any size
//! ([`padded_input_gradient_applies`]).
//!
//! ```
//! use spore_kernels::conv::ConvGeometry;
//! use spore_kernels::implicit_conv;
//! // LeNet's conv2 (6 -> 16 channels, 14x14 images, 5x5 filters): small, unpadded.
//! let lenet = ConvGeometry::new([32, 6, 14, 14], [16, 6, 5, 5], [1, 1], [1, 1], [0; 4], 1);
//! // ResNet's 3x3 convolutions are padded and their images large: im2col + GEMM.
//! let resnet = ConvGeometry::new([32, 64, 32, 32], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! assert!(!implicit_conv::applies(&resnet));
//! # let _ = implicit_conv::applies(&lenet); // true where the CPU has AVX2 and FMA
//! ```
//!
//! The forward pass is `Yᵀ[position][out channel] = Σ_tap x[position + tap] · W[tap][out]`:
//! output positions are the rows, taps (input channel, filter row, filter column) the
//! depth, and the packed filter is B, so each step broadcasts six image values and loads
//! 16 output channels of the filter. The weight gradient swaps the roles:
//! `dWᵀ[tap][out] = Σ_position x[tap + position] · dYᵀ[position][out]`, with the output
//! gradient packed as B. Both results come out transposed and are turned around once
//! (a [positions x 16] tile per image, the [taps x out] gradient per step), which costs
//! far less than writing and reading back `KH * KW` copies of the image.
//!
//! Where it applies ([`applies`]): f32 on AVX2/FMA, no padding (every tap of every window
//! lies inside the image), at least 16 output channels per group (B's panels are 16
//! wide), and one image's channels of a group within [`MAX_IMAGE_BYTES`], so that the
//! gathers hit L1. LeNet's `conv2` qualifies; its forward pass and weight gradient went
//! from 0.171 and 0.165 ms to 0.104 and 0.100 ms (batch 32, 2 threads,
//! `cargo run --release -p spore-kernels --example conv_micro lenet`).
//!
//! Layers with fewer output channels ([`wide_applies`], LeNet's `conv1`) run on wide
//! positions: both passes read the image shifted by each tap's offset in place, the
//! forward pass as B of a shifted product, the weight gradient as the columns of dot
//! products (`filter_gradient_wide`).
//!
//! The gathered weight gradient also serves larger padded layers
//! ([`padded_filter_gradient_applies`], ResNet's first two stages), read from
//! zero-bordered copies of the images: there its depth is the output positions, so each
//! of a tile's six rows streams through one run of the image.

use rayon::prelude::*;

use crate::UnaryFn;
use crate::arena;
use crate::conv::{ConvGeometry, batch_blocks, sum_partials};
use crate::elementwise::Num;
use crate::im2col::{border_plane, copy_short};
use crate::matmul::MatRef;
use crate::sgemm::dot::{Columns, dot_columns};
use crate::sgemm::gather::{Gathered, gather_gemm, packed_b_index, packed_b_len};
use crate::sgemm::scatter::{packed_a_index, packed_a_len, scatter_add_gemm};
use crate::sgemm::shifted::{Shifted, shifted_gemm};
use crate::sgemm::{self, NR};

/// Largest image (the channels of one group) read by gathers: L1 holds it while the
/// tables sweep it.
pub const MAX_IMAGE_BYTES: usize = 32 << 10;

/// Positions the weight gradient aims to sum per gathered product: the images of a chunk
/// together form its depth, one block of the GEMM's depth blocking.
const GRADIENT_DEPTH: usize = 320;

/// Whether [`crate::conv`] computes `g`'s forward pass and weight gradient (f32) here.
pub fn applies(g: &ConvGeometry) -> bool {
    let (_, per) = batch_blocks(g.n);
    let chunk_reach = g.c * g.h * g.w * chunk_images(g, per);
    small_unpadded(g) && g.og() >= NR && chunk_reach < i32::MAX as usize
}

/// What every path here needs: the AVX2 GEMM, no padding (every tap of every window lies
/// inside the image), something to compute, and one image's channels of a group within
/// [`MAX_IMAGE_BYTES`].
fn small_unpadded(g: &ConvGeometry) -> bool {
    let image = g.cg() * g.h * g.w;
    sgemm::available()
        && g.pads == [0; 4]
        && g.n > 0
        && g.og() > 0
        && g.ckk() > 0
        && g.ohw() > 0
        && image * std::mem::size_of::<f32>() <= MAX_IMAGE_BYTES
}

/// Whether [`crate::conv`] computes `g`'s forward pass and weight gradient (f32) on wide
/// positions here: the small, unpadded, stride-1 layers with fewer than 16 output
/// channels per group, which [`applies`] leaves out, as long as the wide positions add at
/// most a quarter.
pub fn wide_applies(g: &ConvGeometry) -> bool {
    small_unpadded(g) && g.stride == [1, 1] && g.og() < NR && 4 * wide_len(g) <= 5 * g.ohw()
}

/// Whether [`crate::conv`] computes `g`'s input gradient (f32) here: small, unpadded,
/// stride-1 layers whose wide positions add at most half (LeNet's `conv2`: 136 for 100),
/// with at least six input channels per group. Why six: a tile's six rows then add into
/// six different planes; with fewer, neighbouring taps of one plane overlap, and each
/// row waits for the store of the row before it (LeNet's one-channel `conv1`: 0.214 ms,
/// against 0.174 with col2im).
pub fn input_gradient_applies(g: &ConvGeometry) -> bool {
    small_unpadded(g) && g.cg() >= sgemm::MR && g.stride == [1, 1] && 2 * wide_len(g) <= 3 * g.ohw()
}

/// Whether [`crate::conv`] can compute a padded layer's input gradient (f32) here, into
/// a zero-bordered copy of each image gradient: stride 1, at least six input channels per
/// group (as [`input_gradient_applies`]), at least 16 output channels (the product's
/// depth), and wide positions adding at most an eighth (ResNet's 32x32 and 16x16 stages:
/// 1,086 for 1,024 and 286 for 256; its 8x8 and 4x4 stages add 22 % and 37 %). Layers
/// with more than 18 input channels per group run their input gradient as a forward
/// convolution instead ([`crate::conv::input_gradient_runs_forward`]), which was faster
/// on ResNet's; the rest use this path.
///
/// Why: the column matrix it replaces is `C·KH·KW x OH·OW` per image (2.4 MB in
/// ResNet's first stage), written out by the GEMM and read back by col2im, which was
/// 16 % (first stage) and 27 % (second) of the input gradient under `perf`.
pub fn padded_input_gradient_applies(g: &ConvGeometry) -> bool {
    let (hp, wp) = padded_size(g);
    sgemm::available()
        && g.pads != [0; 4]
        && g.stride == [1, 1]
        && g.n > 0
        && g.cg() >= sgemm::MR
        && g.og() >= NR
        && g.ohw() > 0
        && 8 * wide_len(g) <= 9 * g.ohw()
        && g.cg() * hp * wp <= MAX_PADDED_IMAGE
        && g.c * hp * wp < i32::MAX as usize
}

/// Values of one group's zero-bordered image gradient that a thread may hold (2 MB):
/// ResNet's first stage needs 74k.
const MAX_PADDED_IMAGE: usize = 1 << 19;

/// Height and width of a (zero-bordered) input plane.
fn padded_size(g: &ConvGeometry) -> (usize, usize) {
    (g.h + g.pads[0] + g.pads[1], g.w + g.pads[2] + g.pads[3])
}

/// Wide positions of one image: from the first window's corner to the last one's,
/// counting whole (zero-bordered) image rows (`OH - 1` rows of the padded width, then
/// `OW`).
fn wide_len(g: &ConvGeometry) -> usize {
    (g.oh - 1) * padded_size(g).1 + g.ow
}

/// Images whose positions form one depth of the weight gradient's product.
fn chunk_images(g: &ConvGeometry, per: usize) -> usize {
    (GRADIENT_DEPTH / g.ohw().max(1)).clamp(1, per.max(1))
}

/// Offset of each tap (input channel of the group, filter row, filter column) from a
/// window's corner, in one image's group planes of `plane` (height, width): the image's
/// own, or a zero-bordered copy's ([`padded_size`]).
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

/// Forward pass into `y` ([N, O, OH, OW]); the caller checked [`applies`] and the sizes.
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

/// Forward pass into `y` on wide positions; the caller checked [`wide_applies`].
///
/// Per image and group, `Y_wide [og x wide] = W [og x taps] * B`, where row `tap` of B is
/// the image read from the tap's offset (see [`crate::sgemm`]'s shifted product), then
/// the `OW` real outputs of each row are copied out.
///
/// With `relu`, each output is written as `relu(y)`, while its row is still in L1.
pub(crate) fn forward_wide(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32], relu: bool) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let (hw, out_len, wide) = (g.h * g.w, g.o * ohw, wide_len(g));
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
/// [`input_gradient_applies`] or [`padded_input_gradient_applies`].
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
    let (hw, chw, wide) = (g.h * g.w, g.c * g.h * g.w, wide_len(g));
    let (hp, wp) = padded_size(g);
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
            // `dx` up front on one thread, took 7 % of LeNet's `conv2` input gradient
            // under `perf`, in `memset`).
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

/// Weight gradient into `dw` ([O, C/groups, KH, KW]); the caller checked [`applies`] or
/// [`padded_filter_gradient_applies`]. A padded layer's images are first copied into
/// zero-bordered planes (those of one product's images at a time), so that every window
/// lies inside them.
pub(crate) fn filter_gradient(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let hw = g.h * g.w;
    let bordered = g.pads != [0; 4];
    let (hp, wp) = padded_size(g);
    let (blocks, per) = batch_blocks(g.n);
    let chunk = chunk_images(g, per);
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
/// value. (Packed one value at a time, it and the border copies took 10 % of ResNet's
/// first-stage weight gradient under `perf`; with the transposes LeNet's `conv2` weight
/// gradient took 7-37 % less time in 8 of 10 interleaved runs.)
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

/// Whether [`crate::conv`] computes a padded layer's weight gradient (f32) here, with
/// `filter_gradient`'s gathered product over zero-bordered copies of the images: at
/// least 16 output channels per group (B's panels), at least 144 taps (24 row tiles share
/// each packed panel of `dYᵀ`), at least 256 output positions per image, and a `dWᵀ` of
/// at most 160k values (640 KB). That is ResNet-18's first two stages (its 32x32 and
/// 16x16 outputs).
///
/// Why: the gathered product reads A straight from the bordered image, where the panel
/// path ([`crate::conv_panels`]) copies every tap's run of positions into panels and
/// transposes them (19 % of ResNet's first-stage weight gradient under `perf`). Alternating
/// both paths call by call in one process (median of 20 calls each, three runs): the
/// first stage's 3x3 layers took 8-10 % less time, the 64->128 stride-2 layer 15-17 %
/// less, the second stage's 3x3 layers 2-9 % less. The third stage's took 9 % (stride 2)
/// and 30 % more: its `dWᵀ` (295k and 590k values) no longer stays in L2 while every depth
/// block adds into it.
pub fn padded_filter_gradient_applies(g: &ConvGeometry) -> bool {
    let (hp, wp) = padded_size(g);
    sgemm::available()
        && g.pads != [0; 4]
        && g.n > 0
        && g.og() >= NR
        && g.ckk() >= 24 * sgemm::MR
        && g.ohw() >= 256
        && g.ckk() * g.og() <= MAX_GATHERED_GRADIENT
        && g.cg() * hp * wp * chunk_images(g, batch_blocks(g.n).1) < i32::MAX as usize
}

/// Largest `dWᵀ` (taps x output channels of a group) of [`padded_filter_gradient_applies`]:
/// 640 KB, ResNet's second stage (1,152 x 128).
const MAX_GATHERED_GRADIENT: usize = 160 << 10;

/// Weight gradient into `dw` on wide positions; the caller checked [`wide_applies`] (the
/// layers whose forward pass runs on wide positions too).
///
/// Per image and group, `dW [og x taps] += dY_wide [og x wide] · B`, where column `tap` of
/// B is the image read from the tap's offset: every output is a dot product of two
/// contiguous runs, and nothing is copied but the output gradient, spread over the wide
/// positions (zeros in the `KW - 1` columns per row that no window starts at). Why: with
/// fewer than 16 output channels, the gathered product of [`filter_gradient`] wastes most
/// of each panel, and im2col wrote 25 copies of LeNet's `conv1` images (2.5 MB per step)
/// that took 44 % of its weight gradient under `perf`.
///
/// The zero columns meet real image values (the next row's first ones), so an infinite
/// or NaN value there would turn the gradient NaN where im2col would not see it: the
/// forward pass of that image is then not finite either.
pub(crate) fn filter_gradient_wide(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    let (ohw, og, ckk, cg) = (g.ohw(), g.og(), g.ckk(), g.cg());
    let (hw, wide) = (g.h * g.w, wide_len(g));
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
