//! 2-D max and average pooling over NCHW tensors, and their gradients. float16 and
//! bfloat16 max pooling widens a few planes at a time to float32 (`pool_half`).
//!
//! ```
//! use spore_kernels::pool::{max_pool2d, PoolGeometry};
//! let g = PoolGeometry::new([1, 1, 2, 2], [2, 2], [2, 2], [0, 0, 0, 0]);
//! assert_eq!(max_pool2d(&[1.0f32, 5.0, 3.0, 2.0], &g), vec![5.0]);
//! ```

use rayon::prelude::*;

use crate::elementwise::{BinaryFn, Num};
use crate::layout::PARALLEL_THRESHOLD;
use crate::matmul::{as_f32, as_f32_mut};
use crate::{pool_half, pool2x2};

/// Sizes of a pooling window over [N, C, H, W]; pads are top, bottom, left, right.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolGeometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pads: [usize; 4],
    /// Rows and columns that ceil mode's last windows reach past the bottom and right
    /// padding: read by no window and counted by no divisor.
    pub overhang: [usize; 2],
    pub oh: usize,
    pub ow: usize,
}

/// Output length of one pooled axis: `floor` (the default) or `ceil` of the window count,
/// where ceil mode keeps a last, partial window only if it starts inside the image or the
/// leading padding (PyTorch's and ONNX's rule). `None` when the kernel does not fit.
pub fn pooled_len(
    size: usize,
    kernel: usize,
    stride: usize,
    pads: (usize, usize),
    ceil_mode: bool,
) -> Option<usize> {
    let span = (size + pads.0 + pads.1).checked_sub(kernel)?;
    if stride == 0 {
        return None;
    }
    if !ceil_mode {
        return Some(span / stride + 1);
    }
    let mut out = span.div_ceil(stride) + 1;
    if (out - 1) * stride >= size + pads.0 {
        out -= 1;
    }
    Some(out)
}

impl PoolGeometry {
    pub fn new(
        input: [usize; 4],
        kernel: [usize; 2],
        stride: [usize; 2],
        pads: [usize; 4],
    ) -> Self {
        Self::with_ceil_mode(input, kernel, stride, pads, false)
    }

    /// [`PoolGeometry::new`] with the output size rounded up when `ceil_mode` (see
    /// [`pooled_len`]). The kernel must fit the padded input and strides be non-zero.
    pub fn with_ceil_mode(
        input: [usize; 4],
        kernel: [usize; 2],
        stride: [usize; 2],
        pads: [usize; 4],
        ceil_mode: bool,
    ) -> Self {
        let [n, c, h, w] = input;
        let len = |d: usize, size: usize| {
            pooled_len(
                size,
                kernel[d],
                stride[d],
                (pads[2 * d], pads[2 * d + 1]),
                ceil_mode,
            )
            .unwrap_or(0)
        };
        let (oh, ow) = (len(0, h), len(1, w));
        let overhang = |d: usize, size: usize, o: usize| {
            let reach = o.saturating_sub(1) * stride[d] + kernel[d];
            reach.saturating_sub(size + pads[2 * d] + pads[2 * d + 1])
        };
        PoolGeometry {
            n,
            c,
            h,
            w,
            kernel,
            stride,
            pads,
            overhang: [overhang(0, h, oh), overhang(1, w, ow)],
            oh,
            ow,
        }
    }

    /// Every window lies inside the image (no padding, no overhang).
    fn unpadded(&self) -> bool {
        self.pads == [0; 4] && self.overhang == [0; 2]
    }

    /// The input rows and columns (clipped to the image) under output position (oy, ox).
    fn window(&self, oy: usize, ox: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let y0 = (oy * self.stride[0]) as isize - self.pads[0] as isize;
        let x0 = (ox * self.stride[1]) as isize - self.pads[2] as isize;
        let ys = y0.max(0) as usize
            ..((y0 + self.kernel[0] as isize).min(self.h as isize)).max(0) as usize;
        let xs = x0.max(0) as usize
            ..((x0 + self.kernel[1] as isize).min(self.w as isize)).max(0) as usize;
        (ys, xs)
    }

    fn planes(&self) -> usize {
        self.n * self.c
    }

    /// 2x2 windows, stride 2, no padding: the shape [`pool2x2`]'s vector kernels take.
    pub(crate) fn is_2x2(&self) -> bool {
        self.kernel == [2, 2] && self.stride == [2, 2] && self.unpadded()
    }

    /// Whether [`pool2x2`]'s backward kernel takes these planes: 2x2 windows that cover
    /// each plane whole (no row or column left over), so it writes every cell and the
    /// gradient need not be cleared first.
    pub(crate) fn covered_by_2x2_vectors(&self) -> bool {
        self.is_2x2() && self.h == 2 * self.oh && self.w == 2 * self.ow && pool2x2::applies(self.ow)
    }
}

/// The window scan's step: `(position, value)` of the first maximum so far, replaced by
/// (`at`, `e`) only if `e` is strictly greater (a NaN never replaces, `>` is false for
/// it). Selects, not a branch: in a ReLU's output (half zeros, the rest random) the
/// comparison is unpredictable, and mispredicted branches made a direct scan of ResNet-50's
/// pool slower than the clipped one it replaced (BENCHMARKS.md, "Where the time goes:
/// ResNet-50 training"). The other scans keep their branches: on LeNet's unpadded 2x2
/// pools of such data the selects measured no faster.
#[inline(always)]
fn keep_first_max<T: Num>((best, v): (usize, T), at: usize, e: T) -> (usize, T) {
    let greater = e > v;
    (
        std::hint::select_unpredictable(greater, at, best),
        std::hint::select_unpredictable(greater, e, v),
    )
}

/// Position (within the plane) of the first maximum of the window, in row-major order.
/// A NaN never replaces an earlier value (`>` is false for it).
#[inline]
fn argmax_in<T: Num>(plane: &[T], g: &PoolGeometry, oy: usize, ox: usize) -> Option<usize> {
    let (ys, xs) = g.window(oy, ox);
    if ys.is_empty() || xs.is_empty() {
        return None;
    }
    let mut best = ys.start * g.w + xs.start;
    let mut best_v = plane[best];
    for y in ys {
        let row = &plane[y * g.w..][..g.w];
        for x in xs.clone() {
            if row[x] > best_v {
                best_v = row[x];
                best = y * g.w + x;
            }
        }
    }
    Some(best)
}

/// [`argmax_in`] for a geometry without padding, where every window lies inside the
/// image: direct indexing, and the common 2x2 window unrolled (LeNet's pools).
#[inline(always)]
fn argmax_unpadded<T: Num>(plane: &[T], g: &PoolGeometry, oy: usize, ox: usize) -> usize {
    let (y0, x0) = (oy * g.stride[0], ox * g.stride[1]);
    let first = y0 * g.w + x0;
    if g.kernel == [2, 2] {
        let (r0, r1) = (&plane[first..][..2], &plane[first + g.w..][..2]);
        let (mut best, mut v) = (first, r0[0]);
        if r0[1] > v {
            (best, v) = (first + 1, r0[1]);
        }
        if r1[0] > v {
            (best, v) = (first + g.w, r1[0]);
        }
        if r1[1] > v {
            best = first + g.w + 1;
        }
        return best;
    }
    let (mut best, mut v) = (first, plane[first]);
    for ky in 0..g.kernel[0] {
        let start = (y0 + ky) * g.w + x0;
        for (kx, &e) in plane[start..][..g.kernel[1]].iter().enumerate() {
            if e > v {
                (best, v) = (start + kx, e);
            }
        }
    }
    best
}

/// Output rows (`.0`) and columns (`.1`) whose windows lie wholly inside the image:
/// there the window's cells are read without clipping.
pub(crate) fn interior(g: &PoolGeometry) -> Inside {
    let inside = |d: usize, size: usize, outputs: usize| {
        let (k, s, pad) = (g.kernel[d], g.stride[d], g.pads[2 * d]);
        let first = pad.div_ceil(s);
        // The last start `o·s - pad` with `o·s - pad + k <= size`.
        let end = match (size + pad).checked_sub(k) {
            Some(reach) => (reach / s + 1).min(outputs),
            None => 0,
        };
        first.min(end)..end
    };
    (inside(0, g.h, g.oh), inside(1, g.w, g.ow))
}

/// Position of the first maximum (row-major) of the `KH` x `KW` window whose top-left
/// cell is `first`, all inside the plane (rows `w` apart). Sizes known at compile time
/// unroll the window (2x2 and 3x3, the common pools).
#[inline(always)]
fn argmax_window<T: Num, const KH: usize, const KW: usize>(
    plane: &[T],
    w: usize,
    first: usize,
) -> usize {
    let window = &plane[first..first + (KH - 1) * w + KW];
    let mut state = (0, window[0]);
    for ky in 0..KH {
        for kx in 0..KW {
            state = keep_first_max(state, ky * w + kx, window[ky * w + kx]);
        }
    }
    first + state.0
}

/// Calls `f(output_index, first_max)` for every output of one plane, in row-major
/// order, for a padded geometry (unpadded ones take [`argmax_unpadded`]): the position
/// (within the plane) of its window's first maximum, `None` for a window wholly in
/// padding. Windows inside the image are read directly; only those that touch the
/// padding are clipped ([`argmax_in`]). Why: clipping every window made
/// ResNet-50's 3x3 stride-2 pool several times slower than reading its input
/// (BENCHMARKS.md, "Where the time goes: ResNet-50 training").
/// `inside` is [`interior`]'s, computed once per call (its divisions cost a visible
/// share of LeNet's small planes).
#[inline(always)]
fn for_each_first_max<T: Num>(
    plane: &[T],
    g: &PoolGeometry,
    inside: &Inside,
    mut f: impl FnMut(usize, Option<usize>),
) {
    match g.kernel {
        [2, 2] => walk_windows::<T, 2, 2>(plane, g, inside, f),
        [3, 3] => walk_windows::<T, 3, 3>(plane, g, inside, f),
        // Other sizes: every window clipped.
        _ => {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    f(oy * g.ow + ox, argmax_in(plane, g, oy, ox));
                }
            }
        }
    }
}

/// Output rows and columns whose windows lie inside the image ([`interior`]).
pub(crate) type Inside = (std::ops::Range<usize>, std::ops::Range<usize>);

/// [`for_each_first_max`] for a `KH` x `KW` kernel.
#[inline(always)]
fn walk_windows<T: Num, const KH: usize, const KW: usize>(
    plane: &[T],
    g: &PoolGeometry,
    (rows, cols): &Inside,
    mut f: impl FnMut(usize, Option<usize>),
) {
    let [sy, sx] = g.stride;
    for oy in 0..g.oh {
        let at = oy * g.ow;
        if !rows.contains(&oy) || cols.is_empty() {
            for ox in 0..g.ow {
                f(at + ox, argmax_in(plane, g, oy, ox));
            }
            continue;
        }
        for ox in 0..cols.start {
            f(at + ox, argmax_in(plane, g, oy, ox));
        }
        // Both non-negative inside: `oy·sy >= top pad` and `ox·sx >= left pad`.
        let row0 = (oy * sy - g.pads[0]) * g.w;
        for ox in cols.clone() {
            let first = row0 + (ox * sx - g.pads[2]);
            f(at + ox, Some(argmax_window::<T, KH, KW>(plane, g.w, first)));
        }
        for ox in cols.end..g.ow {
            f(at + ox, argmax_in(plane, g, oy, ox));
        }
    }
}

/// Runs `f(plane_index, out_plane)` over the `plane_len`-sized planes of `out`, spread
/// over the thread pool in a few large blocks when the work (`work_per_plane` elements
/// each) is big enough to pay for the fork, else on the calling thread.
fn for_each_plane<T: Send>(
    out: &mut [T],
    plane_len: usize,
    work_per_plane: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    for_each_plane_run(out, plane_len, work_per_plane, |first, run| {
        for (k, o) in run.chunks_mut(plane_len).enumerate() {
            f(first + k, o);
        }
    });
}

/// [`for_each_plane`] handing `f` whole runs of consecutive planes: `f(first_plane,
/// out_planes)`.
fn for_each_plane_run<T: Send>(
    out: &mut [T],
    plane_len: usize,
    work_per_plane: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let planes = out.len() / plane_len.max(1);
    if planes == 0 {
        return;
    }
    if planes * work_per_plane < PARALLEL_THRESHOLD || planes < 2 {
        f(0, &mut out[..planes * plane_len]);
        return;
    }
    let per_block = planes.div_ceil(rayon::current_num_threads().max(1) * 2);
    out.par_chunks_mut(per_block * plane_len)
        .enumerate()
        .for_each(|(b, block)| f(b * per_block, block));
}

pub fn max_pool2d<T: Num>(x: &[T], g: &PoolGeometry) -> Vec<T> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    // Every output is written below.
    let mut y = crate::arena::for_overwrite::<T>(g.planes() * ohw);
    if ohw == 0 {
        return y;
    }
    if g.is_2x2()
        && pool2x2::applies(g.ow)
        && let (Some(x), Some(yf)) = (as_f32(x), as_f32_mut(&mut y))
    {
        for_each_plane(yf, ohw, hw, |p, yp| {
            pool2x2::forward(&x[p * hw..][..hw], g.w, g.oh, g.ow, yp)
        });
        return y;
    }
    let inside = interior(g);
    // (A plane of no cells, all padding, gets -inf from the scalar kernel below.)
    if crate::half_float::is_half::<T>() && hw > 0 {
        for_each_plane_run(&mut y, ohw, hw, |p, run| {
            let planes = run.len() / ohw;
            pool_half::forward_planes(&x[p * hw..][..planes * hw], g, &inside, run)
        });
        return y;
    }
    for_each_plane(&mut y, ohw, hw, |p, yp| {
        max_pool_plane(&x[p * hw..][..hw], g, &inside, yp)
    });
    y
}

/// Pools one plane into `yp` with the scalar kernel.
pub(crate) fn max_pool_plane<T: Num>(plane: &[T], g: &PoolGeometry, inside: &Inside, yp: &mut [T]) {
    if g.unpadded() {
        for (oy, row) in yp.chunks_mut(g.ow).enumerate() {
            for (ox, o) in row.iter_mut().enumerate() {
                *o = plane[argmax_unpadded(plane, g, oy, ox)];
            }
        }
        return;
    }
    for_each_first_max(plane, g, inside, |o, best| {
        // A window entirely in padding sees only -inf (MindSpore's padding value).
        yp[o] = match best {
            Some(i) => plane[i],
            None => T::from_f64(f64::NEG_INFINITY),
        };
    });
}

/// Sends each output gradient to the first maximum of its window.
pub fn max_pool2d_backward<T: Num>(x: &[T], dy: &[T], g: &PoolGeometry) -> Vec<T> {
    max_pool2d_backward_masked(x, dy, g, false)
}

/// [`max_pool2d_backward`] where `x` is a ReLU's output, followed by that ReLU's gradient:
/// every cell whose `x` is not positive gets 0. Each plane is masked right after its
/// gradient is written, while it is still in L1, instead of in a second pass over memory.
pub fn max_pool2d_backward_of_relu<T: Num>(x: &[T], dy: &[T], g: &PoolGeometry) -> Vec<T> {
    max_pool2d_backward_masked(x, dy, g, true)
}

/// Zeroes the gradient where the ReLU's output is not positive (NaN included).
pub(crate) fn mask_not_positive<T: Num>(plane: &[T], dxp: &mut [T]) {
    for (d, &v) in dxp.iter_mut().zip(plane) {
        *d = if v > T::zero() { *d } else { T::zero() };
    }
}

/// [`max_pool2d_backward`], or [`max_pool2d_backward_of_relu`] where `relu`.
pub fn max_pool2d_backward_masked<T: Num>(
    x: &[T],
    dy: &[T],
    g: &PoolGeometry,
    relu: bool,
) -> Vec<T> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    if g.covered_by_2x2_vectors()
        && let (Some(xf), Some(dyf)) = (as_f32(x), as_f32(dy))
    {
        let mut dx = crate::arena::for_overwrite::<T>(g.planes() * hw);
        if let Some(dxf) = as_f32_mut(&mut dx) {
            for_each_plane(dxf, hw, hw, |p, dxp| {
                let plane = &xf[p * hw..][..hw];
                pool2x2::backward(plane, &dyf[p * ohw..][..ohw], g.oh, g.ow, dxp);
                if relu {
                    mask_not_positive(plane, dxp);
                }
            });
            return dx;
        }
    }
    if hw == 0 || ohw == 0 {
        return crate::arena::zeroed::<T>(g.planes() * hw);
    }
    // Each plane is cleared by the thread that scatters into it, while it is in cache:
    // clearing the whole gradient first was one serial pass over memory.
    let mut dx = crate::arena::for_overwrite::<T>(g.planes() * hw);
    let inside = interior(g);
    if crate::half_float::is_half::<T>() {
        for_each_plane_run(&mut dx, hw, hw, |p, run| {
            let planes = run.len() / hw;
            let (xs, dys) = (&x[p * hw..][..planes * hw], &dy[p * ohw..][..planes * ohw]);
            pool_half::backward_planes(xs, dys, g, &inside, relu, run);
        });
        return dx;
    }
    for_each_plane(&mut dx, hw, hw, |p, dxp| {
        let (plane, dyp) = (&x[p * hw..][..hw], &dy[p * ohw..][..ohw]);
        max_pool_grad_plane(plane, dyp, g, &inside, relu, dxp);
    });
    dx
}

/// Writes one plane's gradient into `dxp` with the scalar kernel: each output gradient
/// added at the first maximum of its window, then the ReLU's mask where `relu`.
pub(crate) fn max_pool_grad_plane<T: Num>(
    plane: &[T],
    dyp: &[T],
    g: &PoolGeometry,
    inside: &Inside,
    relu: bool,
    dxp: &mut [T],
) {
    dxp.fill(T::zero());
    if g.unpadded() {
        for (oy, row) in dyp.chunks(g.ow).enumerate() {
            for (ox, &d) in row.iter().enumerate() {
                let i = argmax_unpadded(plane, g, oy, ox);
                dxp[i] = dxp[i].binary(BinaryFn::Add, d);
            }
        }
    } else {
        for_each_first_max(plane, g, inside, |o, best| {
            if let Some(i) = best {
                dxp[i] = dxp[i].binary(BinaryFn::Add, dyp[o]);
            }
        });
    }
    if relu {
        mask_not_positive(plane, dxp);
    }
}

/// Divisor of window (oy, ox): the cells inside the padded image (the full kernel area
/// unless ceil mode's overhang clips it), or only the cells inside the image.
fn divisor(g: &PoolGeometry, oy: usize, ox: usize, count_include_pad: bool) -> usize {
    if count_include_pad {
        let inside = |o: usize, d: usize, size: usize| {
            let start = o * g.stride[d];
            let end = (start + g.kernel[d]).min(size + g.pads[2 * d] + g.pads[2 * d + 1]);
            end.saturating_sub(start)
        };
        (inside(oy, 0, g.h) * inside(ox, 1, g.w)).max(1)
    } else {
        let (ys, xs) = g.window(oy, ox);
        (ys.len() * xs.len()).max(1)
    }
}

pub fn avg_pool2d<T: Num>(x: &[T], g: &PoolGeometry, count_include_pad: bool) -> Vec<T> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    // Every output is written below.
    let mut y = crate::arena::for_overwrite::<T>(g.planes() * ohw);
    if ohw == 0 {
        return y;
    }
    for_each_plane(&mut y, ohw, hw, |p, yp| {
        let plane = &x[p * hw..][..hw];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let (ys, xs) = g.window(oy, ox);
                let mut s = 0.0f64;
                for yy in ys {
                    for xx in xs.clone() {
                        s += plane[yy * g.w + xx].to_f64();
                    }
                }
                yp[oy * g.ow + ox] = T::from_f64(s / divisor(g, oy, ox, count_include_pad) as f64);
            }
        }
    });
    y
}

pub fn avg_pool2d_backward<T: Num>(dy: &[T], g: &PoolGeometry, count_include_pad: bool) -> Vec<T> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let mut dx = crate::arena::zeroed::<T>(g.planes() * hw);
    if hw == 0 || ohw == 0 {
        return dx;
    }
    for_each_plane(&mut dx, hw, hw, |p, dxp| {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let share = dy[p * ohw + oy * g.ow + ox].to_f64()
                    / divisor(g, oy, ox, count_include_pad) as f64;
                let (ys, xs) = g.window(oy, ox);
                for yy in ys {
                    for xx in xs.clone() {
                        let d = &mut dxp[yy * g.w + xx];
                        *d = T::from_f64(d.to_f64() + share);
                    }
                }
            }
        }
    });
    dx
}
