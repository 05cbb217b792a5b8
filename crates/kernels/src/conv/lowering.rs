//! Lowering a convolution to GEMMs: `im2col` copies the input windows of one image into
//! the columns of a matrix, `col2im` adds such columns back into an image gradient.
//!
//! The column matrix of an image has `C/groups * KH * KW` rows and `OH * OW` columns; rows
//! are `ld` elements apart, so the columns of several images can sit side by side in one
//! matrix (image `s` starting at column `s * OH * OW`) and share one GEMM.

use rayon::prelude::*;

use super::geometry::ConvGeometry;
use crate::elementwise::{BinaryFn, Num};

/// Writes the im2col matrix (ckk x ohw, rows `ld` apart) of group `group` of one image
/// `x` ([C, H, W]).
pub(crate) fn im2col<T: Num>(x: &[T], g: &ConvGeometry, group: usize, cols: &mut [T], ld: usize) {
    let (ohw, ow) = (g.ohw(), g.ow);
    for cl in 0..g.cg() {
        let plane = &x[(group * g.cg() + cl) * g.h * g.w..][..g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &mut cols[((cl * g.kh + i) * g.kw + j) * ld..][..ohw];
                if is_plain(g) && ow > 0 {
                    // Row oy of the window is image row oy + i from column j: nothing to
                    // clip, so only the copies remain (LeNet's convolutions).
                    for (oy, dst) in row.chunks_exact_mut(ow).enumerate() {
                        copy_short(dst, &plane[(oy + i) * g.w + j..][..ow]);
                    }
                    continue;
                }
                for oy in 0..g.oh {
                    let iy = (oy * g.stride[0] + i * g.dilation[0]) as isize - g.pads[0] as isize;
                    let dst = &mut row[oy * ow..][..ow];
                    if iy < 0 || iy >= g.h as isize {
                        dst.iter_mut().for_each(|v| *v = T::zero());
                        continue;
                    }
                    let src = &plane[iy as usize * g.w..][..g.w];
                    let x0 = (j * g.dilation[1]) as isize - g.pads[2] as isize;
                    // Unit stride: the part of the row inside the image is a plain copy
                    // (all of it for a valid conv), the padding on either side zeros.
                    if g.stride[1] == 1 {
                        let (lo, hi) = inside_strided(x0, 1, ow, g.w);
                        dst[..lo].fill(T::zero());
                        if lo < hi {
                            copy_short(
                                &mut dst[lo..hi],
                                &src[(x0 + lo as isize) as usize..][..hi - lo],
                            );
                        }
                        dst[hi..].fill(T::zero());
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

/// Unit strides and dilations, no padding: every window lies inside the image.
#[inline]
fn is_plain(g: &ConvGeometry) -> bool {
    g.stride == [1, 1] && g.dilation == [1, 1] && g.pads == [0; 4]
}

/// The outputs `lo..hi` (of `count`) whose input `x0 + o * stride` lies in `0..len`;
/// `lo == hi` when none does.
#[inline]
fn inside_strided(x0: isize, stride: usize, count: usize, len: usize) -> (usize, usize) {
    let s = stride.max(1) as isize;
    // First o with x0 + o * s >= 0, and first o with x0 + o * s >= len.
    let lo = if x0 >= 0 { 0 } else { (-x0 + s - 1) / s };
    let hi = if (len as isize) <= x0 {
        0
    } else {
        (len as isize - x0 + s - 1) / s
    };
    let (lo, hi) = (
        lo.clamp(0, count as isize) as usize,
        hi.clamp(0, count as isize) as usize,
    );
    (lo, hi.max(lo))
}

/// Copies one `H x W` plane into `dst`, a zero-bordered plane of `(H + top + bottom) x
/// (W + left + right)` values (`g.pads`), writing the border's zeros too: every window
/// of a padded convolution then lies inside it.
pub(crate) fn border_plane(src: &[f32], g: &ConvGeometry, dst: &mut [f32]) {
    let [top, bottom, left, right] = g.pads;
    let wp = g.w + left + right;
    let dst = &mut dst[..(g.h + top + bottom) * wp];
    dst[..top * wp].fill(0.0);
    dst[(top + g.h) * wp..].fill(0.0);
    for (row, src) in dst[top * wp..]
        .chunks_exact_mut(wp)
        .zip(src.chunks_exact(g.w))
    {
        row[..left].fill(0.0);
        // Inline moves for rows up to 64 values, not a `memmove` call per row.
        copy_short(&mut row[left..left + g.w], src);
        row[left + g.w..].fill(0.0);
    }
}

/// `dst.copy_from_slice(src)` for the short rows of small images: fixed 8-element blocks
/// (the last one overlapping) compile to inline vector moves, where a `memmove` call per
/// row of 10-30 elements costs more than the copy (it was most of LeNet's im2col time).
/// Rows of 4-7 elements take two overlapping 4-element blocks: ResNet's 4x4 layer4
/// panels, whose `memmove` calls showed up in the forward pass (measured: BENCHMARKS.md,
/// "Figures moved from code comments").
#[inline]
pub(crate) fn copy_short<T: Copy>(dst: &mut [T], src: &[T]) {
    let n = dst.len();
    if !(4..=64).contains(&n) || src.len() != n {
        dst.copy_from_slice(src);
        return;
    }
    if n < 8 {
        copy4(&mut dst[..4], &src[..4]);
        copy4(&mut dst[n - 4..], &src[n - 4..]);
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
fn copy4<T: Copy>(dst: &mut [T], src: &[T]) {
    if let (Ok(d), Ok(s)) = (<&mut [T; 4]>::try_from(dst), <&[T; 4]>::try_from(src)) {
        *d = *s;
    }
}

#[inline(always)]
fn copy8<T: Copy>(dst: &mut [T], src: &[T]) {
    if let (Ok(d), Ok(s)) = (<&mut [T; 8]>::try_from(dst), <&[T; 8]>::try_from(src)) {
        *d = *s;
    }
}

/// Adds the im2col-shaped gradient `cols` (rows `ld` apart) of group `group` back into
/// the image gradient `dx`.
pub(crate) fn col2im<T: Num>(cols: &[T], ld: usize, g: &ConvGeometry, group: usize, dx: &mut [T]) {
    for cl in 0..g.cg() {
        let plane = &mut dx[(group * g.cg() + cl) * g.h * g.w..][..g.h * g.w];
        col2im_plane(cols, ld, g, cl, plane);
    }
}

/// [`col2im`] on all threads, one channel's plane per task (each plane's sums are its own).
pub(crate) fn col2im_parallel<T: Num>(
    cols: &[T],
    ld: usize,
    g: &ConvGeometry,
    group: usize,
    dx: &mut [T],
) {
    let hw = g.h * g.w;
    dx[group * g.cg() * hw..][..g.cg() * hw]
        .par_chunks_mut(hw.max(1))
        .enumerate()
        .for_each(|(cl, plane)| col2im_plane(cols, ld, g, cl, plane));
}

/// The taps of channel `cl` (of its group) in `cols`, added into its plane of `dx`.
fn col2im_plane<T: Num>(cols: &[T], ld: usize, g: &ConvGeometry, cl: usize, plane: &mut [T]) {
    let (ohw, ow) = (g.ohw(), g.ow);
    for i in 0..g.kh {
        for j in 0..g.kw {
            let row = &cols[((cl * g.kh + i) * g.kw + j) * ld..][..ohw];
            if is_plain(g) && ow > 0 {
                for (oy, src) in row.chunks_exact(ow).enumerate() {
                    let dst = &mut plane[(oy + i) * g.w + j..][..ow];
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = d.binary(BinaryFn::Add, v);
                    }
                }
                continue;
            }
            // Output row oy lands on input row oy * sy + y0, column ox on ox * sx + x0:
            // the rows and columns that fall inside the image are found once per tap,
            // not per row or value. ResNet's 8x8 and 4x4 layers have runs of 4-8
            // values, and its stride-2 layers were added value by value with a bounds
            // check each, a large share of their input gradient under `perf` (measured:
            // BENCHMARKS.md, "Figures moved from code comments").
            let [sy, sx] = g.stride;
            let y0 = (i * g.dilation[0]) as isize - g.pads[0] as isize;
            let x0 = (j * g.dilation[1]) as isize - g.pads[2] as isize;
            let (oy_lo, oy_hi) = inside_strided(y0, sy, g.oh, g.h);
            let (lo, hi) = inside_strided(x0, sx, ow, g.w);
            if lo == hi {
                continue;
            }
            let first = (x0 + (lo * sx) as isize) as usize;
            for oy in oy_lo..oy_hi {
                let iy = (y0 + (oy * sy) as isize) as usize;
                let src = &row[oy * ow + lo..][..hi - lo];
                if sx == 1 {
                    let dst = &mut plane[iy * g.w + first..][..hi - lo];
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = d.binary(BinaryFn::Add, v);
                    }
                } else {
                    let dst = &mut plane[iy * g.w + first..][..(hi - lo - 1) * sx + 1];
                    for (d, &v) in dst.iter_mut().step_by(sx).zip(src) {
                        *d = d.binary(BinaryFn::Add, v);
                    }
                }
            }
        }
    }
}
