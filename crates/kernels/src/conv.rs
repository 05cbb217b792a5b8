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
use crate::elementwise::{BinaryFn, Num};
use crate::matmul::{MatRef, gemm_into, parallelism_for};
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

    fn cg(&self) -> usize {
        self.c / self.groups
    }
    fn og(&self) -> usize {
        self.o / self.groups
    }
    /// Rows of the im2col matrix of one group.
    fn ckk(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    fn ohw(&self) -> usize {
        self.oh * self.ow
    }
}

/// Writes the im2col matrix (ckk x ohw) of group `g` of one image `x` ([C, H, W]).
fn im2col<T: Num>(x: &[T], g: &ConvGeometry, group: usize, cols: &mut [T]) {
    let (ohw, ow) = (g.ohw(), g.ow);
    for cl in 0..g.cg() {
        let plane = &x[(group * g.cg() + cl) * g.h * g.w..][..g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &mut cols[((cl * g.kh + i) * g.kw + j) * ohw..][..ohw];
                for oy in 0..g.oh {
                    let iy = (oy * g.stride[0] + i * g.dilation[0]) as isize - g.pads[0] as isize;
                    let dst = &mut row[oy * ow..][..ow];
                    if iy < 0 || iy >= g.h as isize {
                        dst.iter_mut().for_each(|v| *v = T::zero());
                        continue;
                    }
                    let src = &plane[iy as usize * g.w..][..g.w];
                    let x0 = (j * g.dilation[1]) as isize - g.pads[2] as isize;
                    // Unit stride with the whole row inside the image (every valid conv):
                    // a plain copy, which is most of im2col's work.
                    if g.stride[1] == 1 && x0 >= 0 && x0 as usize + ow <= g.w {
                        copy_short(dst, &src[x0 as usize..][..ow]);
                        continue;
                    }
                    for (ox, d) in dst.iter_mut().enumerate() {
                        let ix = x0 + (ox * g.stride[1]) as isize;
                        *d = if ix >= 0 && ix < g.w as isize {
                            src[ix as usize]
                        } else {
                            T::zero()
                        };
                    }
                }
            }
        }
    }
}

/// `dst.copy_from_slice(src)` for the short rows of small images: fixed 8-element blocks
/// (the last one overlapping) compile to inline vector moves, where a `memmove` call per
/// row of 10-30 elements costs more than the copy (it was most of LeNet's im2col time).
#[inline]
fn copy_short<T: Copy>(dst: &mut [T], src: &[T]) {
    let n = dst.len();
    if !(8..=64).contains(&n) {
        dst.copy_from_slice(src);
        return;
    }
    let mut i = 0;
    while i + 8 <= n {
        copy8(&mut dst[i..i + 8], &src[i..i + 8]);
        i += 8;
    }
    if i < n {
        copy8(&mut dst[n - 8..], &src[n - 8..]);
    }
}

#[inline(always)]
fn copy8<T: Copy>(dst: &mut [T], src: &[T]) {
    if let (Ok(d), Ok(s)) = (<&mut [T; 8]>::try_from(dst), <&[T; 8]>::try_from(src)) {
        *d = *s;
    }
}

/// Adds the im2col-shaped gradient `cols` of group `g` back into image gradient `dx`.
fn col2im<T: Num>(cols: &[T], g: &ConvGeometry, group: usize, dx: &mut [T]) {
    let (ohw, ow) = (g.ohw(), g.ow);
    for cl in 0..g.cg() {
        let plane = &mut dx[(group * g.cg() + cl) * g.h * g.w..][..g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &cols[((cl * g.kh + i) * g.kw + j) * ohw..][..ohw];
                for oy in 0..g.oh {
                    let iy = (oy * g.stride[0] + i * g.dilation[0]) as isize - g.pads[0] as isize;
                    if iy < 0 || iy >= g.h as isize {
                        continue;
                    }
                    let dst = &mut plane[iy as usize * g.w..][..g.w];
                    let x0 = (j * g.dilation[1]) as isize - g.pads[2] as isize;
                    let src = &row[oy * ow..][..ow];
                    if g.stride[1] == 1 && x0 >= 0 && x0 as usize + ow <= g.w {
                        for (d, &v) in dst[x0 as usize..][..ow].iter_mut().zip(src) {
                            *d = d.binary(BinaryFn::Add, v);
                        }
                        continue;
                    }
                    for (ox, &v) in src.iter().enumerate() {
                        let ix = x0 + (ox * g.stride[1]) as isize;
                        if ix >= 0 && ix < g.w as isize {
                            let d = &mut dst[ix as usize];
                            *d = d.binary(BinaryFn::Add, v);
                        }
                    }
                }
            }
        }
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
fn batch_blocks(n: usize) -> (usize, usize) {
    let blocks = rayon::current_num_threads().max(1).min(n.max(1));
    let per = n.div_ceil(blocks).max(1);
    (n.div_ceil(per).max(1), per)
}

/// Forward convolution: x [N, C, H, W] contiguous, w [O, C/g, KH, KW] contiguous ->
/// y [N, O, OH, OW].
pub fn conv2d<T: Num>(x: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let mut y = arena::zeroed::<T>(g.n * g.o * ohw);
    if y.is_empty() {
        return y;
    }
    let par = inner_par(g, og * ohw * ckk);
    let (blocks, per) = batch_blocks(g.n);
    // im2col writes every element of its block's columns. (With an empty window, ckk = 0,
    // there are no column blocks, the zip is empty and y stays zero: the right sum.)
    let mut scratch = arena::for_overwrite::<T>(blocks * ckk * ohw);
    y.par_chunks_mut(per * g.o * ohw)
        .zip(scratch.par_chunks_mut((ckk * ohw).max(1)))
        .enumerate()
        .for_each(|(b, (yb, cols))| {
            for (k, yn) in yb.chunks_mut(g.o * ohw).enumerate() {
                let n = b * per + k;
                let xn = &x[n * g.c * g.h * g.w..][..g.c * g.h * g.w];
                for group in 0..g.groups {
                    im2col(xn, g, group, cols);
                    let wg = MatRef {
                        offset: group * og * ckk,
                        row_stride: ckk as isize,
                        col_stride: 1,
                    };
                    let cm = MatRef {
                        offset: 0,
                        row_stride: ohw as isize,
                        col_stride: 1,
                    };
                    gemm_into(
                        &mut yn[group * og * ohw..][..og * ohw],
                        false,
                        og,
                        ohw,
                        ckk,
                        w,
                        wg,
                        cols,
                        cm,
                        par,
                    );
                }
            }
        });
    arena::recycle(T::into_buffer(scratch));
    y
}

/// Gradient with respect to the input: dy [N, O, OH, OW], w -> dx [N, C, H, W].
pub fn conv2d_backward_input<T: Num>(dy: &[T], w: &[T], g: &ConvGeometry) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let chw = g.c * g.h * g.w;
    let mut dx = arena::zeroed::<T>(g.n * chw);
    if dx.is_empty() {
        return dx;
    }
    let par = inner_par(g, og * ohw * ckk);
    let (blocks, per) = batch_blocks(g.n);
    // The GEMM overwrites the columns (no accumulation).
    let mut scratch = arena::for_overwrite::<T>(blocks * ckk * ohw);
    dx.par_chunks_mut(per * chw)
        .zip(scratch.par_chunks_mut((ckk * ohw).max(1)))
        .enumerate()
        .for_each(|(b, (dxb, cols))| {
            for (k, dxn) in dxb.chunks_mut(chw).enumerate() {
                let n = b * per + k;
                for group in 0..g.groups {
                    // cols (ckk x ohw) = W_g^T (ckk x og) * dY_g (og x ohw)
                    let wt = MatRef {
                        offset: group * og * ckk,
                        row_stride: 1,
                        col_stride: ckk as isize,
                    };
                    let dyg = MatRef {
                        offset: (n * g.o + group * og) * ohw,
                        row_stride: ohw as isize,
                        col_stride: 1,
                    };
                    gemm_into(cols, false, ckk, ohw, og, w, wt, dy, dyg, par);
                    col2im(cols, g, group, dxn);
                }
            }
        });
    arena::recycle(T::into_buffer(scratch));
    dx
}

/// Gradient with respect to the weight: dy [N, O, OH, OW], x -> dw [O, C/g, KH, KW].
pub fn conv2d_backward_filter<T: Num>(dy: &[T], x: &[T], g: &ConvGeometry) -> Vec<T> {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let dw_len = g.o * ckk;
    if g.n == 0 || ohw == 0 || dw_len == 0 {
        return arena::zeroed::<T>(dw_len);
    }
    // Each block of the batch accumulates a private dW; the partials are summed after.
    let (blocks, per) = batch_blocks(g.n);
    let par = inner_par(g, og * ohw * ckk);
    // The first GEMM of each block overwrites its partial; im2col overwrites the columns.
    let mut partials = arena::for_overwrite::<T>(blocks * dw_len);
    let mut scratch = arena::for_overwrite::<T>(blocks * ckk * ohw);
    partials
        .par_chunks_mut(dw_len)
        .zip(scratch.par_chunks_mut((ckk * ohw).max(1)))
        .enumerate()
        .for_each(|(b, (dw, cols))| {
            let mut first = true;
            for n in b * per..((b + 1) * per).min(g.n) {
                let xn = &x[n * g.c * g.h * g.w..][..g.c * g.h * g.w];
                for group in 0..g.groups {
                    im2col(xn, g, group, cols);
                    // dW_g (og x ckk) += dY_g (og x ohw) * cols^T (ohw x ckk)
                    let dyg = MatRef {
                        offset: (n * g.o + group * og) * ohw,
                        row_stride: ohw as isize,
                        col_stride: 1,
                    };
                    let ct = MatRef {
                        offset: 0,
                        row_stride: 1,
                        col_stride: ohw as isize,
                    };
                    gemm_into(
                        &mut dw[group * og * ckk..][..og * ckk],
                        !first,
                        og,
                        ckk,
                        ohw,
                        dy,
                        dyg,
                        cols,
                        ct,
                        par,
                    );
                }
                first = false;
            }
        });
    let mut dw = arena::for_overwrite::<T>(dw_len);
    dw.copy_from_slice(&partials[..dw_len]);
    for p in partials.chunks(dw_len).skip(1) {
        for (d, &v) in dw.iter_mut().zip(p) {
            *d = d.binary(BinaryFn::Add, v);
        }
    }
    arena::recycle(T::into_buffer(partials));
    arena::recycle(T::into_buffer(scratch));
    dw
}
