//! The path that serves every convolution: im2col lowers a block of images into a column
//! matrix and a GEMM multiplies it by the filter (forward pass) or the output gradient
//! (weight gradient); the input gradient is a GEMM into columns that col2im adds back
//! into the image.
//!
//! ```text
//! forward:          Y[out][pos] = W[out][tap] · cols[tap][pos]
//! weight gradient:  dW[out][tap] = dY[out][pos] · cols[tap][pos]ᵀ
//! input gradient:   cols[tap][pos] = W[out][tap]ᵀ · dY[out][pos], then col2im
//! ```

use rayon::prelude::*;

use super::batch::{
    batch_blocks, group_output_gradient, scatter_image, split_products_pay, sum_partials,
};
use super::geometry::ConvGeometry;
use super::lowering::{col2im, col2im_parallel, im2col};
use super::panels;
use super::plan::{CACHED_COLUMNS_BYTES, GEMM_COLUMNS, MIN_CACHED_COLUMNS, inner_par};
use crate::arena;
use crate::buffer::Buffer;
use crate::elementwise::Num;
use crate::matmul::{MatRef, as_f32, as_f32_mut, gemm_into};
use crate::sgemm::{self, PanelsA};
use gemm::Parallelism;

/// Images per GEMM for a block of `per` images: about [`GEMM_COLUMNS`] columns, or fewer
/// when fewer (but at least [`MIN_CACHED_COLUMNS`] columns) keep the column matrix within
/// [`CACHED_COLUMNS_BYTES`]. Large layers, where one image already exceeds that
/// (ResNet's), keep the full width.
pub(super) fn images_per_gemm<T>(g: &ConvGeometry, per: usize) -> usize {
    let wide = GEMM_COLUMNS / g.ohw().max(1);
    let image_bytes = g.ckk() * g.ohw() * std::mem::size_of::<T>();
    let cached = CACHED_COLUMNS_BYTES / image_bytes.max(1);
    // Why the floor: ResNet's `layer4` stride-2 convolution (16 positions, a 147 KB column
    // matrix per image) would run one image per GEMM, a 16-column product at a low rate
    // (measured: BENCHMARKS.md, "Figures moved from code comments").
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
            par: inner_par(g),
        }
    }

    /// Scratch for every block, from the pool; each user overwrites it before reading.
    fn scratch<T: Num>(&self) -> Vec<T> {
        arena::for_overwrite::<T>(self.blocks * self.scratch_len)
    }
}

/// im2col of images `s0..s0 + k` side by side into `cols` ([ckk, k * ohw]).
pub(super) fn lower_images<T: Num>(
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

/// Forward pass into `y` ([N, O, OH, OW], every element written): each block of images
/// lowered by im2col, then one GEMM per group.
pub(super) fn forward<T: Num>(x: &[T], w: &[T], g: &ConvGeometry, y: &mut [T]) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let out_len = g.o * ohw;
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
                    for (s, image) in ys.chunks_mut(out_len).enumerate() {
                        scatter_image(tmp, ld, s, (group, og, ohw), image);
                    }
                }
            }
        });
    arena::recycle(T::into_buffer(scratch));
}

/// Input gradient: per block, `cols = Wᵀ · dY` by GEMM, then col2im adds the columns
/// into `dx`. With `pack_filters` (f32, `Panels`-sized layers), each group's `Wᵀ` is
/// packed once for the whole batch instead of being gathered again for every GEMM.
pub(super) fn input_gradient<T: Num>(
    dy: &[T],
    w: &[T],
    g: &ConvGeometry,
    pack_filters: bool,
) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let chw = g.c * g.h * g.w;
    let mut dx = arena::zeroed::<T>(g.n * chw);
    let threads = rayon::current_num_threads();
    let chunk = images_per_gemm::<T>(g, g.n) * ohw;
    if pack_filters
        && split_products_pay(g.n, ckk * chunk * og)
        && let (Some(wf), Some(dyf), Some(dxf)) = (as_f32(w), as_f32(dy), as_f32_mut(&mut dx))
    {
        input_gradient_split_products(dyf, wf, g, dxf, threads);
        return dx;
    }
    let l = Lowering::new::<T>(g);
    let (per, nb, par) = (l.per, l.nb, l.par);
    // Each group's Wᵀ packed once for the whole batch (f32 with the blocked GEMM):
    // packed per GEMM instead, it was re-gathered (576-value strides) for every image.
    let packed = as_f32(w)
        .filter(|_| pack_filters)
        .map(|wf| panels::packed_filters(wf, g, true));
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

/// [`input_gradient`] (f32, filters packed) where a block of the batch per thread would
/// leave threads idle (see [`split_products_pay`]): the images go one chunk after another,
/// each chunk's product `cols = Wᵀ · dY` split among the threads, and col2im one channel's
/// plane per thread.
fn input_gradient_split_products(
    dy: &[f32],
    w: &[f32],
    g: &ConvGeometry,
    dx: &mut [f32],
    threads: usize,
) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let chw = g.c * g.h * g.w;
    let nb = images_per_gemm::<f32>(g, g.n);
    let (filters, len) = panels::packed_filters(w, g, true);
    let dy_len = if nb > 1 { og * nb * ohw } else { 0 };
    let mut scratch = arena::for_overwrite::<f32>(ckk * nb * ohw + dy_len);
    let (cols, tmp) = scratch.split_at_mut(ckk * nb * ohw);
    for (c, dxs) in dx.chunks_mut(nb * chw).enumerate() {
        let (s0, k) = (c * nb, dxs.len() / chw);
        let ld = k * ohw;
        for group in 0..g.groups {
            let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, tmp);
            let panels = |dst: &mut [f32], p0, kc, j0, width| {
                sgemm::pack_b_panel(dst, dyg, dm, p0, kc, j0, width)
            };
            let a = PanelsA::Prepacked(&filters[group * len..][..len]);
            let cols = &mut cols[..ckk * ld];
            sgemm::blocked_with_threads(cols, false, (ckk, ld, og), a, &panels, threads);
            for s in 0..k {
                col2im_parallel(&cols[s * ohw..], ld, g, group, &mut dxs[s * chw..][..chw]);
            }
        }
    }
    arena::recycle(Buffer::F32(scratch));
    arena::recycle(Buffer::F32(filters));
}

/// Weight gradient: per block, im2col of its images and `dW += dY · colsᵀ` by GEMM into a
/// private partial; the partials are summed after.
pub(super) fn filter_gradient<T: Num>(dy: &[T], x: &[T], g: &ConvGeometry) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let dw_len = g.o * ckk;
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
