//! Indexing primitives: `Gather` (MindSpore's `Gather`/`index_select` along an axis),
//! `ScatterAdd` along an axis (its gradient), and `OneHot`.
//!
//! ```
//! use spore_core::{Tensor, DType};
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let idx = Tensor::from_vec(vec![1i32, 1], &[2]).unwrap();
//! assert_eq!(x.gather(&idx, 0).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 4.0, 3.0, 4.0]);
//! let oh = idx.one_hot(3, DType::F32).unwrap();
//! assert_eq!(oh.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 0.0, 0.0, 1.0, 0.0]);
//! ```

use std::panic::Location;

use spore_kernels::{Buffer, DType, Dims, Element, index as k};

use super::elementwise::when;
use super::normalize_axis;
use crate::apply::{apply, op_error};
use crate::error::Result;
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

fn require_index(t: &TensorType) -> Result<(), String> {
    if matches!(t.dtype, DType::I32 | DType::I64) {
        Ok(())
    } else {
        Err(format!("indices must be Int32 or Int64, got {}", t.dtype))
    }
}

fn gathered_shape(x: &[usize], idx: &[usize], axis: usize) -> Dims {
    x[..axis]
        .iter()
        .chain(idx)
        .chain(&x[axis + 1..])
        .copied()
        .collect()
}

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    match op {
        Op::Gather { axis } => {
            let (x, idx) = (inputs[0], inputs[1]);
            require_index(idx)?;
            if *axis >= x.rank() {
                return Err(format!("axis {axis} is out of range for rank {}", x.rank()));
            }
            Ok(TensorType::new(
                &gathered_shape(&x.shape, &idx.shape, *axis),
                x.dtype,
            ))
        }
        Op::ScatterAdd { axis } => {
            let (x, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            require_index(idx)?;
            super::require_same_dtype(x, upd)?;
            if x.dtype == DType::Bool {
                return Err("input must be numeric, got Bool".into());
            }
            if *axis >= x.rank() {
                return Err(format!("axis {axis} is out of range for rank {}", x.rank()));
            }
            let expect = gathered_shape(&x.shape, &idx.shape, *axis);
            if upd.shape != expect {
                return Err(format!(
                    "updates must have shape {expect:?}, got {:?}",
                    upd.shape
                ));
            }
            Ok(x.clone())
        }
        Op::OneHot { depth, dtype } => {
            require_index(inputs[0])?;
            let mut shape = inputs[0].shape.clone();
            shape.push(*depth);
            Ok(TensorType::new(&shape, *dtype))
        }
        _ => Err(format!("{} is not an indexing op", op.name())),
    }
}

/// Runs `f` on the indices in `t` as i64 (converted into a pooled buffer, given back
/// after: a compiled step's label gather allocates nothing).
fn with_indices<R>(t: &Tensor, f: impl FnOnce(&[i64]) -> R) -> R {
    let s = t.buf();
    let converted = spore_kernels::elementwise::cast(&s.buffer, &s.layout, DType::I64);
    let result = f(converted.as_slice::<i64>().unwrap_or_default());
    spore_kernels::arena::recycle(converted);
    result
}

/// (outer, axis length, inner) of `shape` around `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    let buf = match op {
        Op::Gather { axis } => {
            let (o, n, i) = split(inputs[0].shape(), *axis);
            let x = inputs[0].contiguous_buffer();
            with_indices(
                inputs[1],
                |idx| spore_kernels::with_buffer!(&*x, v => Ok::<_, String>(Buffer::from(k::gather(v, o, n, i, idx)?))),
            )?
        }
        Op::ScatterAdd { axis } => {
            let (o, n, i) = split(inputs[0].shape(), *axis);
            let (x, u) = (inputs[0].contiguous_buffer(), inputs[2].contiguous_buffer());
            with_indices(inputs[1], |idx| {
                Ok::<_, String>(match (&*x, &*u) {
                    (Buffer::F32(x), Buffer::F32(u)) => {
                        Buffer::F32(k::scatter_add(x, o, n, i, idx, u)?)
                    }
                    (Buffer::F64(x), Buffer::F64(u)) => {
                        Buffer::F64(k::scatter_add(x, o, n, i, idx, u)?)
                    }
                    (Buffer::I32(x), Buffer::I32(u)) => {
                        Buffer::I32(k::scatter_add(x, o, n, i, idx, u)?)
                    }
                    (Buffer::I64(x), Buffer::I64(u)) => {
                        Buffer::I64(k::scatter_add(x, o, n, i, idx, u)?)
                    }
                    (Buffer::U8(x), Buffer::U8(u)) => {
                        Buffer::U8(k::scatter_add(x, o, n, i, idx, u)?)
                    }
                    _ => return Err("unsupported dtypes".into()),
                })
            })?
        }
        Op::OneHot { depth, dtype } => {
            fn hot<T: Element>(idx: &[i64], d: usize) -> Buffer {
                T::into_buffer(k::one_hot::<T>(idx, d))
            }
            with_indices(inputs[0], |idx| match dtype {
                DType::F32 => hot::<f32>(idx, *depth),
                DType::F64 => hot::<f64>(idx, *depth),
                DType::F16 => hot::<spore_kernels::f16>(idx, *depth),
                DType::BF16 => hot::<spore_kernels::bf16>(idx, *depth),
                DType::I32 => hot::<i32>(idx, *depth),
                DType::I64 => hot::<i64>(idx, *depth),
                DType::U8 => hot::<u8>(idx, *depth),
                DType::Bool => hot::<bool>(idx, *depth),
            })
        }
        _ => return Err(format!("{} is not an indexing op", op.name())),
    };
    Ok(Storage::contiguous(buf, &out.shape))
}

pub(crate) fn vjp(op: &Op, inputs: &[Tensor], g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let loc = Location::caller();
    Ok(match op {
        Op::Gather { axis } => {
            let zeros = inputs[0].zeros_like();
            vec![
                Some(apply(
                    Op::ScatterAdd { axis: *axis },
                    &[&zeros, &inputs[1], g],
                    loc,
                )?),
                None,
            ]
        }
        Op::ScatterAdd { axis } => vec![
            inputs[0].requires_grad().then(|| g.clone()),
            None,
            when(inputs[2].requires_grad(), || {
                apply(Op::Gather { axis: *axis }, &[g, &inputs[1]], loc)
            })?,
        ],
        _ => vec![None; inputs.len()],
    })
}

impl Tensor {
    /// Takes the slices at `indices` along `axis` (MindSpore's `Gather`; out-of-range
    /// indices are an error).
    #[track_caller]
    pub fn gather(&self, indices: &Tensor, axis: isize) -> Result<Tensor> {
        let loc = Location::caller();
        let a = normalize_axis(axis, self.rank())
            .map_err(|m| op_error(&Op::Gather { axis: 0 }, m, &[self, indices], loc))?;
        apply(Op::Gather { axis: a }, &[self, indices], loc)
    }

    /// Same as [`Tensor::gather`] (PyTorch's name).
    #[track_caller]
    pub fn index_select(&self, axis: isize, indices: &Tensor) -> Result<Tensor> {
        self.gather(indices, axis)
    }

    /// Adds `updates` into a copy of `self` at `indices` along `axis`; repeats accumulate.
    #[track_caller]
    pub fn scatter_add(&self, indices: &Tensor, updates: &Tensor, axis: isize) -> Result<Tensor> {
        let loc = Location::caller();
        let a = normalize_axis(axis, self.rank()).map_err(|m| {
            op_error(
                &Op::ScatterAdd { axis: 0 },
                m,
                &[self, indices, updates],
                loc,
            )
        })?;
        apply(Op::ScatterAdd { axis: a }, &[self, indices, updates], loc)
    }

    /// One-hot encoding along a new last axis of length `depth`; out-of-range indices give
    /// all-zero rows (MindSpore's `off_value` everywhere).
    #[track_caller]
    pub fn one_hot(&self, depth: usize, dtype: DType) -> Result<Tensor> {
        apply(Op::OneHot { depth, dtype }, &[self], Location::caller())
    }

    /// MindSpore's `ops.one_hot(indices, depth, on_value, off_value, axis)`: `on_value`
    /// where the index matches, `off_value` elsewhere (both scalars of one dtype, which
    /// the result takes; gradients reach both), along a new axis at `axis` (-1: last).
    #[track_caller]
    pub fn one_hot_with(
        &self,
        depth: usize,
        on_value: &Tensor,
        off_value: &Tensor,
        axis: isize,
    ) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::OneHot {
            depth,
            dtype: on_value.dtype(),
        };
        let fail = |m: String| op_error(&probe, m, &[self, on_value, off_value], loc);
        if on_value.rank() != 0 || off_value.rank() != 0 {
            return Err(fail(format!(
                "on_value and off_value must be scalars, got shapes {:?} and {:?}",
                on_value.shape(),
                off_value.shape()
            )));
        }
        if on_value.dtype() != off_value.dtype() {
            return Err(fail(format!(
                "on_value and off_value must share a dtype, got {} and {}",
                on_value.dtype(),
                off_value.dtype()
            )));
        }
        let a = normalize_axis(axis, self.rank() + 1).map_err(fail)?;
        let hot = apply(
            Op::OneHot {
                depth,
                dtype: DType::Bool,
            },
            &[self],
            loc,
        )?;
        let y = Tensor::select(&hot, on_value, off_value)?;
        if a == self.rank() {
            return Ok(y);
        }
        // The new axis is last; move it to `a`.
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.insert(a, self.rank());
        y.permute(&perm)
    }
}
