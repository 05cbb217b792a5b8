//! The operands the matrix-product code passes around, below both the public product
//! API (`matmul`, `matmul_epilogue`) and Spore's GEMM (`sgemm`), so that neither imports
//! the other's types: a strided matrix ([`MatRef`]), what a product does to its values
//! before storing them ([`Epilogue`]), and the f32 views of generic slices.
//!
//! ```
//! use spore_kernels::matmul::MatRef;
//! // Row-major 3x4 matrix: rows 4 apart, columns adjacent; its transpose swaps them.
//! let a = MatRef { offset: 0, row_stride: 4, col_stride: 1 };
//! let at = MatRef { offset: 0, row_stride: 1, col_stride: 4 };
//! assert_eq!((a.row_stride, at.col_stride), (4, 4));
//! ```

use crate::elementwise::{BinaryFn, Num, UnaryFn};
use crate::layout::Layout;

/// One strided matrix operand: pointer offset, row stride, column stride.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatRef {
    pub offset: usize,
    pub row_stride: isize,
    pub col_stride: isize,
}

impl MatRef {
    /// The matrix of `l`'s last two axes, starting at `offset`.
    pub(crate) fn of_last_two(l: &Layout, offset: usize) -> MatRef {
        let r = l.rank();
        MatRef {
            offset,
            row_stride: l.strides[r - 2],
            col_stride: l.strides[r - 1],
        }
    }
}

/// `s` as `f32` values when `T` is `f32`.
pub(crate) fn as_f32<T: Num>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: only `f32` implements `Element` with dtype F32, so `T` is `f32` here.
    (T::DTYPE == crate::DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// `s` as mutable `f32` values when `T` is `f32`.
pub(crate) fn as_f32_mut<T: Num>(s: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: as in `as_f32`.
    (T::DTYPE == crate::DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
}

/// What a product does to each value before storing it, in this order: add
/// `beta * addend` (laid out as C), add `bias[j]` in column `j`, apply ReLU, and keep the
/// value only where `mask` (laid out as C) is greater than zero (`+0` elsewhere, NaN
/// included).
#[derive(Clone, Copy)]
pub struct Epilogue<'a, T> {
    pub addend: Option<(&'a [T], T)>,
    pub bias: Option<&'a [T]>,
    pub relu: bool,
    pub mask: Option<&'a [T]>,
}

impl<T: Num> Epilogue<'_, T> {
    /// The epilogue as a pass over a finished `m x n` product `c` (rows `n` apart).
    pub(crate) fn apply_after(&self, c: &mut [T], n: usize) {
        if let Some((d, beta)) = self.addend {
            for (c, &d) in c.iter_mut().zip(d) {
                *c = c.binary(BinaryFn::Add, beta.binary(BinaryFn::Mul, d));
            }
        }
        if let Some(bias) = self.bias {
            for row in c.chunks_exact_mut(n) {
                for (c, &b) in row.iter_mut().zip(bias) {
                    *c = c.binary(BinaryFn::Add, b);
                }
            }
        }
        if self.relu {
            c.iter_mut().for_each(|c| *c = c.unary(UnaryFn::Relu));
        }
        if let Some(mask) = self.mask {
            for (c, &y) in c.iter_mut().zip(mask) {
                // Not positive, NaN included: the value becomes +0.
                if y.partial_cmp(&T::zero()) != Some(std::cmp::Ordering::Greater) {
                    *c = T::zero();
                }
            }
        }
    }

    /// The same epilogue over `f32` values when `T` is `f32`.
    pub(crate) fn as_f32(&self) -> Option<Epilogue<'_, f32>> {
        let addend = match self.addend {
            Some((d, beta)) => Some((as_f32(d)?, as_f32(std::slice::from_ref(&beta))?[0])),
            None => None,
        };
        let bias = match self.bias {
            Some(b) => Some(as_f32(b)?),
            None => None,
        };
        let mask = match self.mask {
            Some(y) => Some(as_f32(y)?),
            None => None,
        };
        Some(Epilogue {
            addend,
            bias,
            relu: self.relu,
            mask,
        })
    }
}
