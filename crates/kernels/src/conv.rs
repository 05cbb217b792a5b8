//! 2-D convolution (NCHW input, OIHW weight) as im2col + GEMM, with its two gradients.
//!
//! ```
//! use spore_kernels::conv::{conv2d, ConvGeometry};
//! // One 3x3 image, one 2x2 filter of ones, stride 1, no padding.
//! let g = ConvGeometry::new([1, 1, 3, 3], [1, 1, 2, 2], [1, 1], [1, 1], [0, 0, 0, 0], 1);
//! let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
//! assert_eq!(conv2d(&x, &[1.0; 4], &g), vec![12.0, 16.0, 24.0, 28.0]);
//! ```

use rayon::prelude::*;

use crate::arena;
use crate::buffer::Buffer;
use crate::conv_panels;
use crate::elementwise::{BinaryFn, Num, UnaryFn};
use crate::im2col::{col2im, im2col};
use crate::implicit_conv;
use crate::matmul::{MatRef, as_f32, as_f32_mut, gemm_into, parallelism_for};
use crate::sgemm::{self, PanelsA};
use crate::winograd;
use gemm::Parallelism;

/// Every size a convolution needs, resolved once (pads are explicit: top, bottom, left, right).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pads: [usize; 4],
    pub groups: usize,
    pub oh: usize,
    pub ow: usize,
}

impl ConvGeometry {
    /// `input` = [N, C, H, W], `weight` = [O, C/groups, KH, KW]. The caller validated that
    /// the window fits (output sizes are at least 1).
    pub fn new(
        input: [usize; 4],
        weight: [usize; 4],
        stride: [usize; 2],
        dilation: [usize; 2],
        pads: [usize; 4],
        groups: usize,
    ) -> ConvGeometry {
        let [n, c, h, w] = input;
        let [o, _, kh, kw] = weight;
        let oh = (h + pads[0] + pads[1] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
        let ow = (w + pads[2] + pads[3] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
        ConvGeometry {
            n,
            c,
            h,
            w,
            o,
            kh,
            kw,
            stride,
            dilation,
            pads,
            groups,
            oh,
            ow,
        }
    }

    pub(crate) fn cg(&self) -> usize {
        self.c / self.groups
    }
    pub(crate) fn og(&self) -> usize {
        self.o / self.groups
    }
    /// Rows of the im2col matrix of one group.
    pub(crate) fn ckk(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    pub(crate) fn ohw(&self) -> usize {
        self.oh * self.ow
    }
}

/// Inner GEMMs run single-threaded when the batch is split across threads.
fn inner_par(g: &ConvGeometry, work: usize) -> Parallelism {
    if g.n > 1 {
        Parallelism::None
    } else {
        parallelism_for(work)
    }
}

/// The batch split into one block of consecutive samples per thread: (blocks, per block).
/// Scratch is taken once per block, on the calling thread, so that a graph's buffer pool
/// (see [`crate::arena`]) serves it.
pub(crate) fn batch_blocks(n: usize) -> (usize, usize) {
    let blocks = rayon::current_num_threads().max(1).min(n.max(1));
    let per = n.div_ceil(blocks).max(1);
    (n.div_ceil(per).max(1), per)
}

/// Columns one GEMM should have at least: the images of a block are lowered side by side
/// until the product has about this many. Why: deep layers have 4x4 or 8x8 outputs, and a
/// GEMM with 16 or 64 columns runs far below the machine's rate; batching costs copying
/// the output (or output gradient) between the sample-major layout and the GEMM's.
pub(crate) const GEMM_COLUMNS: usize = 1024;

/// Bytes of column matrix that one GEMM should stay within when one image's columns are
/// small: half of a 512 KiB L2, so that im2col writes and the GEMM reads them in L2.
/// (LeNet's `conv2`: 10 images per GEMM made a 600 KB matrix, 4 make 240 KB; its
/// forward, filter and input gradients ran 14-17 % faster.)
const CACHED_COLUMNS_BYTES: usize = 256 << 10;

/// Fewest columns the L2 rule above may leave a GEMM with; below this the product's
/// width costs more than the column matrix's trip through L3.
const MIN_CACHED_COLUMNS: usize = 256;

/// Images per GEMM for a block of `per` images: about [`GEMM_COLUMNS`] columns, or fewer
/// when fewer (but at least [`MIN_CACHED_COLUMNS`] columns) keep the column matrix within
/// [`CACHED_COLUMNS_BYTES`]. Large layers, where one image already exceeds that
/// (ResNet's), keep the full width.
fn images_per_gemm<T>(g: &ConvGeometry, per: usize) -> usize {
    let wide = GEMM_COLUMNS / g.ohw().max(1);
    let image_bytes = g.ckk() * g.ohw() * std::mem::size_of::<T>();
    let cached = CACHED_COLUMNS_BYTES / image_bytes.max(1);
    // Why the floor: ResNet's `layer4` stride-2 convolution (16 positions, a 147 KB column
    // matrix per image) would run one image per GEMM, a 16-column product at 59 GFLOP/s.
    let nb = if cached * g.ohw() >= MIN_CACHED_COLUMNS {
        wide.min(cached)
    } else {
        wide
    };
    nb.clamp(1, per.max(1))
}

/// How one convolution kernel splits the batch: a block of `per` consecutive images per
/// thread (`blocks` of them), `nb` images side by side per GEMM, and the scratch each block
/// needs: the column matrix of `nb` images, plus (when `nb > 1`) a [og, nb * ohw] matrix
/// that holds the GEMM's product or the gathered output gradient.
struct Lowering {
    blocks: usize,
    per: usize,
    nb: usize,
    cols_len: usize,
    scratch_len: usize,
    par: Parallelism,
}

impl Lowering {
    fn new<T>(g: &ConvGeometry) -> Lowering {
        let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
        let (blocks, per) = batch_blocks(g.n);
        let nb = images_per_gemm::<T>(g, per);
        let cols_len = ckk * nb * ohw;
        Lowering {
            blocks,
            per,
            nb,
            cols_len,
            scratch_len: cols_len + if nb > 1 { og * nb * ohw } else { 0 },
            par: inner_par(g, og * ohw * ckk),
        }
    }

    /// Scratch for every block, from the pool; each user overwrites it before reading.
    fn scratch<T: Num>(&self) -> Vec<T> {
        arena::for_overwrite::<T>(self.blocks * self.scratch_len)
    }
}

/// im2col of images `s0..s0 + k` side by side into `cols` ([ckk, k * ohw]).
fn lower_images<T: Num>(
    x: &[T],
    g: &ConvGeometry,
    group: usize,
    s0: usize,
    k: usize,
    cols: &mut [T],
) {
    let (chw, ohw) = (g.c * g.h * g.w, g.ohw());
    for s in 0..k {
        im2col(
            &x[(s0 + s) * chw..][..chw],
            g,
            group,
            &mut cols[s * ohw..],
            k * ohw,
        );
    }
}

/// `dY` of images `s0..s0 + k`, group `group`, as one [og, k * ohw] matrix (image `s` at
/// column `s * ohw`): read in place for one image, else gathered into `tmp` first.
pub(crate) fn group_output_gradient<'a, T: Num>(
    dy: &'a [T],
    g: &ConvGeometry,
    (s0, k): (usize, usize),
    group: usize,
    tmp: &'a mut [T],
) -> (&'a [T], MatRef) {
    let ohw = g.ohw();
    if k == 1 {
        let in_place = MatRef {
            offset: (s0 * g.o + group * g.og()) * ohw,
            row_stride: ohw as isize,
            col_stride: 1,
        };
        return (dy, in_place);
    }
    gather_dy(dy, g, s0, k, group, tmp);
    let gathered = MatRef {
        offset: 0,
        row_stride: (k * ohw) as isize,
        col_stride: 1,
    };
    (tmp, gathered)
}

/// Copies `dy` of images `s0..s0 + k`, group `group`, into `tmp` as one [og, k * ohw]
/// matrix (image `s` at column `s * ohw`).
fn gather_dy<T: Num>(dy: &[T], g: &ConvGeometry, s0: usize, k: usize, group: usize, tmp: &mut [T]) {
    let (ohw, og) = (g.ohw(), g.og());
    let ld = k * ohw;
    for s in 0..k {
        for o in 0..og {
            tmp[o * ld + s * ohw..][..ohw]
                .copy_from_slice(&dy[((s0 + s) * g.o + group * og + o) * ohw..][..ohw]);
        }
    }
}

/// `relu(conv2d(x, w))`, for a convolution whose only reader is a ReLU (the graph
/// compiler folds the two). On wide positions (LeNet's `conv1`) the ReLU is applied as
/// the output rows are copied out of the product, in L1; elsewhere it is a pass over the
/// output right after the convolution, while it is still in cache. Why: a separate ReLU
/// op read and wrote `conv1`'s 602 KB output once more per step (about 3 % of LeNet's
/// step under `perf`).
pub fn conv2d_relu<T: Num>(x: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    let (mut y, applied) = convolve(x, w, g, true);
    if applied {
        return y;
    }
    let relu = |chunk: &mut [T]| chunk.iter_mut().for_each(|v| *v = v.unary(UnaryFn::Relu));
    if y.len() < crate::layout::PARALLEL_THRESHOLD {
        relu(&mut y);
    } else {
        y.par_chunks_mut(crate::layout::PARALLEL_THRESHOLD / 4)
            .for_each(relu);
    }
    y
}

/// Forward convolution: x [N, C, H, W] contiguous, w [O, C/g, KH, KW] contiguous ->
/// y [N, O, OH, OW].
pub fn conv2d<T: Num>(x: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    convolve(x, w, g, false).0
}

/// The forward pass on the path that suits `g`. With `relu`, the path that copies its
/// output row by row (wide positions) applies the ReLU as it copies; the second value
/// says whether it did.
fn convolve<T: Num>(x: &[T], w: &[T], g: &ConvGeometry, relu: bool) -> (Vec<T>, bool) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let out_len = g.o * ohw;
    // No input channels per group (ckk = 0): every output is an empty sum, zero.
    if g.n * out_len == 0 || ckk == 0 {
        return (arena::zeroed::<T>(g.n * out_len), false);
    }
    // Not zeroed: every element is written below (a GEMM overwrites, or a copy from one).
    let mut y = arena::for_overwrite::<T>(g.n * out_len);
    if let (Some(xf), Some(wf), Some(yf)) = (as_f32(x), as_f32(w), as_f32_mut(&mut y)) {
        if winograd::applies(g) {
            winograd::forward(xf, wf, g, yf);
            return (y, false);
        }
        if implicit_conv::applies(g) {
            implicit_conv::forward(xf, wf, g, yf);
            return (y, false);
        }
        if implicit_conv::wide_applies(g) {
            implicit_conv::forward_wide(xf, wf, g, yf, relu);
            return (y, relu);
        }
        if conv_panels::applies(g) {
            conv_panels::forward(xf, wf, g, yf);
            return (y, false);
        }
    }
    let l = Lowering::new::<T>(g);
    let (per, nb, par) = (l.per, l.nb, l.par);
    let mut scratch = l.scratch::<T>();
    y.par_chunks_mut(per * out_len)
        .zip(scratch.par_chunks_mut(l.scratch_len.max(1)))
        .enumerate()
        .for_each(|(b, (yb, scratch))| {
            let (cols, tmp) = scratch.split_at_mut(l.cols_len);
            for (c, ys) in yb.chunks_mut(nb * out_len).enumerate() {
                let (s0, k) = (b * per + c * nb, ys.len() / out_len);
                let ld = k * ohw;
                for group in 0..g.groups {
                    lower_images(x, g, group, s0, k, cols);
                    let wg = MatRef {
                        offset: group * og * ckk,
                        row_stride: ckk as isize,
                        col_stride: 1,
                    };
                    let cm = MatRef {
                        offset: 0,
                        row_stride: ld as isize,
                        col_stride: 1,
                    };
                    if k == 1 {
                        let yg = &mut ys[group * og * ohw..][..og * ohw];
                        gemm_into(yg, false, og, ohw, ckk, w, wg, cols, cm, par);
                        continue;
                    }
                    gemm_into(
                        &mut tmp[..og * ld],
                        false,
                        og,
                        ld,
                        ckk,
                        w,
                        wg,
                        cols,
                        cm,
                        par,
                    );
                    for s in 0..k {
                        for o in 0..og {
                            ys[s * out_len + (group * og + o) * ohw..][..ohw]
                                .copy_from_slice(&tmp[o * ld + s * ohw..][..ohw]);
                        }
                    }
                }
            }
        });
    arena::recycle(T::into_buffer(scratch));
    (y, false)
}

/// Gradient with respect to the input: dy [N, O, OH, OW], w -> dx [N, C, H, W].
pub fn conv2d_backward_input<T: Num>(dy: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let chw = g.c * g.h * g.w;
    if let (Some(dyf), Some(wf)) = (as_f32(dy), as_f32(w))
        && let Some(gt) = transposed_geometry(g)
    {
        let wt = transposed_filter(wf, g);
        let (dx, _) = convolve(dyf, &wt, &gt, false);
        arena::recycle(Buffer::F32(wt));
        // `as_f32` matched, so T is f32 and this cast is the identity.
        if let Some(dx) = T::vec_of(Buffer::F32(dx)) {
            return dx;
        }
    }
    if g.n * chw == 0 {
        return arena::zeroed::<T>(0);
    }
    if let (Some(dyf), Some(wf)) = (as_f32(dy), as_f32(w))
        && (implicit_conv::input_gradient_applies(g)
            || implicit_conv::padded_input_gradient_applies(g))
    {
        // Zeroed image by image inside, in parallel, just before it is added into.
        let mut dx = arena::for_overwrite::<T>(g.n * chw);
        if let Some(dxf) = as_f32_mut(&mut dx) {
            implicit_conv::input_gradient(dyf, wf, g, dxf);
            return dx;
        }
    }
    let mut dx = arena::zeroed::<T>(g.n * chw);
    let l = Lowering::new::<T>(g);
    let (per, nb, par) = (l.per, l.nb, l.par);
    // Each group's Wᵀ packed once for the whole batch (f32 with the blocked GEMM):
    // packed per GEMM instead, it was re-gathered (576-value strides) for every image.
    let packed = as_f32(w)
        .filter(|_| matches!(par, Parallelism::None) && conv_panels::applies(g))
        .map(|wf| conv_panels::packed_filters(wf, g, true));
    let mut scratch = l.scratch::<T>();
    dx.par_chunks_mut(per * chw)
        .zip(scratch.par_chunks_mut(l.scratch_len.max(1)))
        .enumerate()
        .for_each(|(b, (dxb, scratch))| {
            let (cols, tmp) = scratch.split_at_mut(l.cols_len);
            for (c, dxs) in dxb.chunks_mut(nb * chw).enumerate() {
                let (s0, k) = (b * per + c * nb, dxs.len() / chw);
                let ld = k * ohw;
                for group in 0..g.groups {
                    // cols (ckk x k*ohw) = W_g^T (ckk x og) * dY_g (og x k*ohw)
                    let wt = MatRef {
                        offset: group * og * ckk,
                        row_stride: 1,
                        col_stride: ckk as isize,
                    };
                    let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, tmp);
                    let cols = &mut cols[..ckk * ld];
                    if let (Some((filters, len)), Some(dyf)) = (&packed, as_f32(dyg))
                        && let Some(colsf) = as_f32_mut(cols)
                    {
                        let a = PanelsA::Prepacked(&filters[group * len..][..*len]);
                        let mut panels = |dst: &mut [f32], p0, kc, j0, width| {
                            sgemm::pack_b_panel(dst, dyf, dm, p0, kc, j0, width)
                        };
                        sgemm::blocked_with(colsf, false, ckk, ld, og, a, &mut panels);
                    } else {
                        gemm_into(cols, false, ckk, ld, og, w, wt, dyg, dm, par);
                    }
                    for s in 0..k {
                        col2im(&cols[s * ohw..], ld, g, group, &mut dxs[s * chw..][..chw]);
                    }
                }
            }
        });
    arena::recycle(T::into_buffer(scratch));
    if let Some((filters, _)) = packed {
        arena::recycle(Buffer::F32(filters));
    }
    dx
}

/// The geometry of a stride-1 convolution's input gradient computed as a forward
/// convolution of the output gradient with [`transposed_filter`]: `dY` [N, O, OH, OW] is
/// its input, and each side's padding becomes `dilation·(K-1) - pad`, so that its output
/// is [N, C, H, W] again. `None` unless that forward pass reads its column panels from
/// the image ([`conv_panels`]: more than 18 input channels per group) and computes at
/// most an eighth more than the gradient needs (`H·W` outputs for `OH·OW` inputs; a
/// "same" convolution computes nothing extra).
///
/// Why: each of the forward pass's tiles runs over the whole depth (`O·KH·KW`), where
/// the scatter-add product stores a tile after `O` steps and col2im adds a column matrix
/// back into the image. ResNet-18's stride-1 3x3 input gradients took 8-20 % less time
/// (interleaved in one process). Unpadded layers gain nothing: their full padding makes
/// the forward pass compute on zeros (LeNet's `conv2`: 196 outputs from 100 inputs,
/// 0.36 ms against 0.61 ms).
fn transposed_geometry(g: &ConvGeometry) -> Option<ConvGeometry> {
    if g.stride != [1, 1] {
        return None;
    }
    let reach = [
        g.dilation[0] * g.kh.saturating_sub(1),
        g.dilation[1] * g.kw.saturating_sub(1),
    ];
    let mut pads = [0; 4];
    for (side, pad) in pads.iter_mut().enumerate() {
        *pad = reach[side / 2].checked_sub(g.pads[side])?;
    }
    let gt = ConvGeometry::new(
        [g.n, g.o, g.oh, g.ow],
        [g.c, g.og(), g.kh, g.kw],
        [1, 1],
        g.dilation,
        pads,
        g.groups,
    );
    let extra_ok = 8 * g.h * g.w <= 9 * g.ohw();
    (extra_ok && conv_panels::applies(&gt) && (gt.oh, gt.ow) == (g.h, g.w)).then_some(gt)
}

/// Whether [`conv2d_backward_input`] computes `g`'s input gradient (f32) as a forward
/// convolution of the output gradient (see `transposed_geometry`): ResNet's stride-1
/// 3x3 layers.
pub fn input_gradient_runs_forward(g: &ConvGeometry) -> bool {
    transposed_geometry(g).is_some()
}

/// Each group's filter transposed and turned by 180°: `W'[c][o][i][j] = W[o][c][KH-1-i]
/// [KW-1-j]` ([C, O/groups, KH, KW]), the filter of [`transposed_geometry`]'s convolution.
fn transposed_filter(w: &[f32], g: &ConvGeometry) -> Vec<f32> {
    let (og, cg, kk) = (g.og(), g.cg(), g.kh * g.kw);
    let mut wt = arena::for_overwrite::<f32>(w.len());
    for group in 0..g.groups {
        for o in 0..og {
            for c in 0..cg {
                let src = &w[((group * og + o) * cg + c) * kk..][..kk];
                let dst = &mut wt[((group * cg + c) * og + o) * kk..][..kk];
                for (d, &v) in dst.iter_mut().zip(src.iter().rev()) {
                    *d = v;
                }
            }
        }
    }
    wt
}

/// Gradient with respect to the weight: dy [N, O, OH, OW], x -> dw [O, C/g, KH, KW].
pub fn conv2d_backward_filter<T: Num>(dy: &[T], x: &[T], g: &ConvGeometry) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let dw_len = g.o * ckk;
    if g.n == 0 || ohw == 0 || dw_len == 0 {
        return arena::zeroed::<T>(dw_len);
    }
    if let (Some(dyf), Some(xf)) = (as_f32(dy), as_f32(x))
        && winograd::applies(g)
    {
        let mut dw = arena::for_overwrite::<T>(dw_len);
        if let Some(dwf) = as_f32_mut(&mut dw) {
            winograd::filter_gradient(dyf, xf, g, dwf);
            return dw;
        }
    }
    let gathered = implicit_conv::applies(g) || implicit_conv::padded_filter_gradient_applies(g);
    if let (Some(dyf), Some(xf)) = (as_f32(dy), as_f32(x))
        && (gathered || implicit_conv::wide_applies(g) || conv_panels::applies(g))
    {
        let mut dw = arena::for_overwrite::<T>(dw_len);
        if let Some(dwf) = as_f32_mut(&mut dw) {
            if gathered {
                implicit_conv::filter_gradient(dyf, xf, g, dwf);
            } else if conv_panels::applies(g) {
                conv_panels::filter_gradient(dyf, xf, g, dwf);
            } else {
                implicit_conv::filter_gradient_wide(dyf, xf, g, dwf);
            }
            return dw;
        }
    }
    // Each block of the batch accumulates a private dW; the partials are summed after.
    // The first GEMM of each block overwrites its partial.
    let l = Lowering::new::<T>(g);
    let (per, nb, par) = (l.per, l.nb, l.par);
    let mut partials = arena::for_overwrite::<T>(l.blocks * dw_len);
    let mut scratch = l.scratch::<T>();
    partials
        .par_chunks_mut(dw_len)
        .zip(scratch.par_chunks_mut(l.scratch_len))
        .enumerate()
        .for_each(|(b, (dw, scratch))| {
            let (cols, tmp) = scratch.split_at_mut(l.cols_len);
            let end = ((b + 1) * per).min(g.n);
            let mut s0 = b * per;
            let mut first = true;
            while s0 < end {
                let k = nb.min(end - s0);
                let ld = k * ohw;
                for group in 0..g.groups {
                    lower_images(x, g, group, s0, k, cols);
                    // dW_g (og x ckk) += dY_g (og x k*ohw) * cols^T (k*ohw x ckk)
                    let ct = MatRef {
                        offset: 0,
                        row_stride: 1,
                        col_stride: ld as isize,
                    };
                    let dw_g = &mut dw[group * og * ckk..][..og * ckk];
                    let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, tmp);
                    gemm_into(dw_g, !first, og, ckk, ld, dyg, dm, cols, ct, par);
                }
                first = false;
                s0 += k;
            }
        });
    let mut dw = arena::for_overwrite::<T>(dw_len);
    sum_partials(&mut dw, &partials);
    arena::recycle(T::into_buffer(partials));
    arena::recycle(T::into_buffer(scratch));
    dw
}

/// `dw` = the sum of the `dw.len()`-long partial gradients in `partials` (one per block of
/// the batch).
pub(crate) fn sum_partials<T: Num>(dw: &mut [T], partials: &[T]) {
    let len = dw.len();
    dw.copy_from_slice(&partials[..len]);
    for p in partials.chunks(len.max(1)).skip(1) {
        for (d, &v) in dw.iter_mut().zip(p) {
            *d = d.binary(BinaryFn::Add, v);
        }
    }
}
