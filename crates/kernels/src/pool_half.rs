//! Max pooling of float16 and bfloat16 planes on the float32 kernels (the vector ones of
//! [`crate::pool2x2`] where they apply): each plane is widened into this thread's scratch
//! while it is in cache, pooled, and its result rounded back. The same bits as pooling
//! the widened tensor and rounding it once (max pooling only selects values; its
//! gradient sums in float32 where windows overlap), without the two whole-tensor
//! conversions, and their buffers, that costs.
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

use crate::DType;
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

/// Whether `T` is float16 or bfloat16, whose planes this module pools.
pub(crate) fn is_16_bit<T: Num>() -> bool {
    matches!(T::DTYPE, DType::BF16 | DType::F16)
}

/// Pools one plane (`g.h x g.w` values) into `out` (`g.oh x g.ow`).
pub(crate) fn forward_plane<T: Num>(plane: &[T], g: &PoolGeometry, inside: &Inside, out: &mut [T]) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    with_scratch(&PLANES, hw + ohw, KEEP, |s| {
        let (wide, pooled) = s.split_at_mut(hw);
        widen_slice(plane, wide);
        if g.is_2x2() && pool2x2::applies(g.ow) {
            pool2x2::forward(wide, g.w, g.oh, g.ow, pooled);
        } else {
            max_pool_plane(wide, g, inside, pooled);
        }
        narrow_slice(pooled, out);
    });
}

/// Writes the gradient of one plane into `dx`, zeroed where `relu` and the input is not
/// positive. Where windows overlap, a cell's gradients are summed in float32 and rounded
/// once.
pub(crate) fn backward_plane<T: Num>(
    plane: &[T],
    dy: &[T],
    g: &PoolGeometry,
    inside: &Inside,
    relu: bool,
    dx: &mut [T],
) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    with_scratch(&PLANES, 2 * hw + ohw, KEEP, |s| {
        let (wide, rest) = s.split_at_mut(hw);
        let (grad, wide_dx) = rest.split_at_mut(ohw);
        widen_slice(plane, wide);
        widen_slice(dy, grad);
        if g.covered_by_2x2_vectors() {
            pool2x2::backward(wide, grad, g.oh, g.ow, wide_dx);
            if relu {
                mask_not_positive(wide, wide_dx);
            }
        } else {
            max_pool_grad_plane(wide, grad, g, inside, relu, wide_dx);
        }
        narrow_slice(wide_dx, dx);
    });
}
