//! Max pooling of float16 and bfloat16 planes on the float32 kernels (the vector ones of
//! [`crate::pool2x2`] where they apply): a few planes at a time (up to 16K values, so
//! that small planes do not pay a conversion call each) are widened into this thread's
//! scratch, pooled while they are in cache, and their results rounded back. The same
//! bits as pooling the widened tensor and rounding it once (max pooling only selects
//! values; its gradient sums in float32 where windows overlap), without the two
//! whole-tensor conversions, and their buffers, of that route.
//!
//! ```
//! use spore_kernels::bf16;
//! use spore_kernels::pool::{max_pool2d, PoolGeometry};
//! let g = PoolGeometry::new([1, 1, 2, 16], [2, 2], [2, 2], [0; 4]);
//! let x: Vec<bf16> = (0..32).map(|i| bf16::from_f32(((i * 7) % 11) as f32 - 0.5)).collect();
//! let y: Vec<f32> = max_pool2d(&x, &g).iter().map(|v| v.to_f32()).collect();
//! assert_eq!(y, vec![8.5, 9.5, 7.5, 8.5, 9.5, 5.5, 8.5, 9.5]);
//! ```
//!
//! Why not per value in the 16-bit type: each comparison and sum would convert its
//! operands, and a sum of overlapping windows' gradients would round at every step.

use std::cell::RefCell;

use crate::elementwise::Num;
use crate::half_float::{narrow_slice, widen_slice};
use crate::pool::{Inside, PoolGeometry, mask_not_positive, max_pool_grad_plane, max_pool_plane};
use crate::pool2x2;
use crate::scratch::{Keep, with_scratch};

thread_local! {
    static PLANES: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// A scratch vector holds a few planes; one larger than this goes back to the allocator.
const KEEP: Keep = Keep {
    min: 1 << 10,
    max: 1 << 20,
};

/// Input values widened at once: a few planes, which stay in L1 and L2 between the
/// conversions and the pooling.
const WIDE_VALUES: usize = 1 << 14;

/// Planes of `plane_len` input values that [`WIDE_VALUES`] holds (at least one).
fn planes_per_batch(plane_len: usize) -> usize {
    (WIDE_VALUES / plane_len.max(1)).max(1)
}

/// Pools consecutive planes (`g.h x g.w` values each) into `out` (`g.oh x g.ow` each).
pub(crate) fn forward_planes<T: Num>(x: &[T], g: &PoolGeometry, inside: &Inside, out: &mut [T]) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let batch = planes_per_batch(hw);
    let vector = g.is_2x2() && pool2x2::applies(g.ow);
    with_scratch(&PLANES, batch * (hw + ohw), KEEP, |s| {
        for (xs, ys) in x.chunks(batch * hw).zip(out.chunks_mut(batch * ohw)) {
            let (wide, pooled) = s.split_at_mut(xs.len());
            let pooled = &mut pooled[..ys.len()];
            widen_slice(xs, wide);
            for (plane, yp) in wide.chunks(hw).zip(pooled.chunks_mut(ohw)) {
                if vector {
                    pool2x2::forward(plane, g.w, g.oh, g.ow, yp);
                } else {
                    max_pool_plane(plane, g, inside, yp);
                }
            }
            narrow_slice(pooled, ys);
        }
    });
}

/// Writes the gradients of consecutive planes into `dx`, zeroed where `relu` and the
/// input is not positive. Where windows overlap, a cell's gradients are summed in
/// float32 and rounded once.
pub(crate) fn backward_planes<T: Num>(
    x: &[T],
    dy: &[T],
    g: &PoolGeometry,
    inside: &Inside,
    relu: bool,
    dx: &mut [T],
) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let batch = planes_per_batch(hw);
    let vector = g.covered_by_2x2_vectors();
    with_scratch(&PLANES, batch * (2 * hw + ohw), KEEP, |s| {
        let runs = x.chunks(batch * hw).zip(dy.chunks(batch * ohw));
        for ((xs, dys), dxs) in runs.zip(dx.chunks_mut(batch * hw)) {
            let (wide, rest) = s.split_at_mut(xs.len());
            let (grad, rest) = rest.split_at_mut(dys.len());
            let wide_dx = &mut rest[..dxs.len()];
            widen_slice(xs, wide);
            widen_slice(dys, grad);
            let planes = wide.chunks(hw).zip(grad.chunks(ohw));
            for ((plane, gp), dxp) in planes.zip(wide_dx.chunks_mut(hw)) {
                if vector {
                    pool2x2::backward(plane, gp, g.oh, g.ow, dxp);
                    if relu {
                        mask_not_positive(plane, dxp);
                    }
                } else {
                    max_pool_grad_plane(plane, gp, g, inside, relu, dxp);
                }
            }
            narrow_slice(wide_dx, dxs);
        }
    });
}
