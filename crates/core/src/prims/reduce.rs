//! Reductions: `ReduceSum`, `ReduceMax`, `ReduceMin` over any axes, `Argmax`/`Argmin`
//! along one axis; `mean` and `var` are built on them.
//!
//! ```
//! use spore_core::Tensor;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! assert_eq!(x.sum(&[0], false).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
//! assert_eq!(x.mean(&[], false).unwrap().item().unwrap(), 2.5);
//! ```

use std::panic::Location;

use spore_kernels::{ArgReduceFn, DType, Dims, ReduceFn, reduce as k};

use super::{normalize_axes, normalize_axis};
use crate::apply::{apply, op_error};
use crate::error::Result;
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

fn reduced_shape(shape: &[usize], axes: &[usize], keep_dims: bool) -> Dims {
    (0..shape.len())
        .filter_map(|i| {
            if axes.contains(&i) {
                keep_dims.then_some(1)
            } else {
                Some(shape[i])
            }
        })
        .collect()
}

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    let x = inputs[0];
    if x.dtype == DType::Bool {
        return Err("input must be numeric, got Bool".into());
    }
    match op {
        Op::Reduce {
            kind,
            axes,
            keep_dims,
        } => {
            if let Some(&a) = axes.iter().find(|&&a| a >= x.rank()) {
                return Err(format!("axis {a} is out of range for rank {}", x.rank()));
            }
            if *kind != ReduceFn::Sum && axes.iter().any(|&a| x.shape[a] == 0) {
                return Err("cannot take the max/min of an empty axis".into());
            }
            Ok(TensorType::new(
                &reduced_shape(&x.shape, axes, *keep_dims),
                x.dtype,
            ))
        }
        Op::ArgReduce {
            axis, keep_dims, ..
        } => {
            if *axis >= x.rank().max(1) || x.shape.get(*axis) == Some(&0) {
                return Err(format!(
                    "axis {axis} is out of range or empty for {:?}",
                    x.shape
                ));
            }
            let axes = if x.rank() == 0 { vec![] } else { vec![*axis] };
            Ok(TensorType::new(
                &reduced_shape(&x.shape, &axes, *keep_dims),
                DType::I32,
            ))
        }
        _ => Err(format!("{} is not a reduction", op.name())),
    }
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    let s = inputs[0].buf();
    let buffer = match op {
        Op::Reduce { kind, axes, .. } => k::reduce(*kind, &s.buffer, &s.layout, axes)?,
        Op::ArgReduce { kind, axis, .. } => {
            if inputs[0].rank() == 0 {
                spore_kernels::Buffer::I32(vec![0])
            } else {
                k::arg_reduce(*kind, &s.buffer, &s.layout, *axis)?
            }
        }
        _ => return Err(format!("{} is not a reduction", op.name())),
    };
    Ok(Storage::contiguous(buffer, &out.shape))
}

pub(crate) fn vjp(
    op: &Op,
    inputs: &[Tensor],
    out: &Tensor,
    g: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let x = &inputs[0];
    let Op::Reduce {
        kind,
        axes,
        keep_dims,
    } = op
    else {
        return Ok(vec![None]);
    };
    let kept = reduced_shape(x.shape(), axes, true);
    let gk = if *keep_dims {
        g.clone()
    } else {
        g.reshape(&kept)?
    };
    let dx = match kind {
        ReduceFn::Sum => gk.broadcast_to(x.shape())?,
        ReduceFn::Max | ReduceFn::Min => {
            // Ties share the gradient equally (MindSpore's ReduceMax rule).
            let ok = if *keep_dims {
                out.clone()
            } else {
                out.reshape(&kept)?
            };
            let hit = x.equal(&ok)?.cast(x.dtype())?;
            let axes_i: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let count = hit.sum(&axes_i, true)?;
            hit.mul(&gk.div(&count)?)?
        }
    };
    Ok(vec![Some(dx)])
}

impl Tensor {
    #[track_caller]
    fn reduce(&self, kind: ReduceFn, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
        let loc = Location::caller();
        let op = Op::Reduce {
            kind,
            axes: vec![],
            keep_dims,
        };
        let axes = normalize_axes(axes, self.rank()).map_err(|m| op_error(&op, m, &[self], loc))?;
        apply(
            Op::Reduce {
                kind,
                axes,
                keep_dims,
            },
            &[self],
            loc,
        )
    }

    /// Sum over `axes` (empty = all axes; negative axes count from the end).
    #[track_caller]
    pub fn sum(&self, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
        self.reduce(ReduceFn::Sum, axes, keep_dims)
    }

    /// Maximum over `axes` (empty = all axes).
    #[track_caller]
    pub fn max(&self, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
        self.reduce(ReduceFn::Max, axes, keep_dims)
    }

    /// Minimum over `axes` (empty = all axes).
    #[track_caller]
    pub fn min(&self, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
        self.reduce(ReduceFn::Min, axes, keep_dims)
    }

    /// Mean over `axes` (empty = all axes); floats only. Of 16-bit values (or under a
    /// 16-bit compute dtype), computed in float32 and rounded once: their sum, or the
    /// count, may not fit 16 bits.
    #[track_caller]
    pub fn mean(&self, axes: &[isize], keep_dims: bool) -> Result<Tensor> {
        if sums_in_16_bits(self) {
            return in_f32(self, |x| x.mean(axes, keep_dims));
        }
        let s = self.sum(axes, keep_dims)?;
        let count = (self.numel() / s.numel().max(1)).max(1);
        s.div_scalar(count as f64)
    }

    /// Variance over `axes`; `ddof = 1` gives the unbiased estimate.
    #[track_caller]
    pub fn var(&self, axes: &[isize], keep_dims: bool, ddof: usize) -> Result<Tensor> {
        if sums_in_16_bits(self) {
            return in_f32(self, |x| x.var(axes, keep_dims, ddof));
        }
        let m = self.mean(axes, true)?;
        let d = self.sub(&m)?;
        let s = d.mul(&d)?.sum(axes, keep_dims)?;
        let count = self.numel() / s.numel().max(1);
        s.div_scalar(count.saturating_sub(ddof).max(1) as f64)
    }

    #[track_caller]
    fn arg_reduce(&self, kind: ArgReduceFn, axis: isize, keep_dims: bool) -> Result<Tensor> {
        let loc = Location::caller();
        let op = Op::ArgReduce {
            kind,
            axis: 0,
            keep_dims,
        };
        let axis = normalize_axis(axis, self.rank()).map_err(|m| op_error(&op, m, &[self], loc))?;
        apply(
            Op::ArgReduce {
                kind,
                axis,
                keep_dims,
            },
            &[self],
            loc,
        )
    }

    /// Index (Int32) of the first maximum along `axis`.
    #[track_caller]
    pub fn argmax(&self, axis: isize, keep_dims: bool) -> Result<Tensor> {
        self.arg_reduce(ArgReduceFn::ArgMax, axis, keep_dims)
    }

    /// Index (Int32) of the first minimum along `axis`.
    #[track_caller]
    pub fn argmin(&self, axis: isize, keep_dims: bool) -> Result<Tensor> {
        self.arg_reduce(ArgReduceFn::ArgMin, axis, keep_dims)
    }
}

/// Whether a sum over `x` would run in 16 bits: `x` is 16-bit, or mixed precision casts
/// a float `x` to a 16-bit compute dtype.
fn sums_in_16_bits(x: &Tensor) -> bool {
    x.dtype().is_half()
        || (x.dtype().is_float() && crate::autocast::compute_dtype().is_some_and(|d| d.is_half()))
}

/// `f` of `x` computed in float32, the result rounded back to `x`'s type, or kept in
/// float32 where float32 is the compute dtype in force (a cell kept in float32 by mixed
/// precision, such as O2's BatchNorm, whose other ops cast `x` to float32 too). The
/// inner ops run with float32 as the compute dtype, so that mixed precision does not
/// cast them back to 16 bits.
fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let keep_f32 = crate::autocast::compute_dtype() == Some(DType::F32);
    let wide = crate::autocast::with_compute_dtype(Some(DType::F32), || f(&x.cast(DType::F32)?))?;
    match keep_f32 {
        true => Ok(wide),
        false => wide.cast(x.dtype()),
    }
}
