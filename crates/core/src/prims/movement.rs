//! Movement primitives: `Reshape`, `Transpose`, `BroadcastTo` and `StridedSlice` are views
//! (no copy when the layout allows); `Pad`, `Concat` and `StridedSliceGrad` write new
//! buffers. Squeeze, unsqueeze, flatten and stack are built on them.
//!
//! ```
//! use spore_core::Tensor;
//! let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3]).unwrap();
//! let s = x.strided_slice(&[0, 2], &[2, -4], &[1, -2]).unwrap(); // x[:, 2::-2]
//! assert_eq!(s.to_vec::<f32>().unwrap(), vec![2.0, 0.0, 5.0, 3.0]);
//! ```

use std::panic::Location;

use spore_kernels::layout::{row_count, walk_rows};
use spore_kernels::{Buffer, Dims, Element, Layout};

use super::{normalize_axis, sum_to_shape};
use crate::apply::{apply, op_error};
use crate::error::{Error, Result};
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    let x = inputs[0];
    let shape: Dims = match op {
        Op::Reshape(shape) => {
            let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
            if n != Some(x.numel()) {
                let n = n.map_or("more than 2^64".to_string(), |n| n.to_string());
                return Err(format!(
                    "cannot reshape {:?} ({} elements) to {shape:?} ({n} elements)",
                    x.shape,
                    x.numel()
                ));
            }
            Dims::from_slice(shape)
        }
        Op::Transpose(perm) => {
            let mut seen: smallvec::SmallVec<[bool; 8]> = smallvec::smallvec![false; x.rank()];
            if perm.len() != x.rank()
                || perm
                    .iter()
                    .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
            {
                return Err(format!(
                    "{perm:?} is not a permutation of the {} axes",
                    x.rank()
                ));
            }
            perm.iter().map(|&p| x.shape[p]).collect()
        }
        Op::BroadcastTo(shape) => {
            let b = super::broadcast_shapes(&x.shape, shape)?;
            if b.as_slice() != shape.as_slice() {
                return Err(format!("cannot broadcast {:?} to {shape:?}", x.shape));
            }
            Dims::from_slice(shape)
        }
        Op::StridedSlice { begin, step, len } => {
            check_slice(&x.shape, begin, step, len)?;
            Dims::from_slice(len)
        }
        Op::StridedSliceGrad {
            input_shape,
            begin,
            step,
        } => {
            check_slice(input_shape, begin, step, &x.shape)?;
            Dims::from_slice(input_shape)
        }
        Op::Pad { pads, .. } => {
            if pads.len() != x.rank() {
                return Err(format!(
                    "expected {} (before, after) pairs, got {}",
                    x.rank(),
                    pads.len()
                ));
            }
            let padded: Option<Dims> = x
                .shape
                .iter()
                .zip(pads)
                .map(|(&d, &(a, b))| d.checked_add(a)?.checked_add(b))
                .collect();
            padded.ok_or_else(|| format!("padding {pads:?} of {:?} overflows", x.shape))?
        }
        Op::Concat { axis } => {
            if inputs.is_empty() {
                return Err("expected at least one input".into());
            }
            if *axis >= x.rank() {
                return Err(format!("axis {axis} is out of range for rank {}", x.rank()));
            }
            let mut shape = x.shape.clone();
            shape[*axis] = 0;
            for t in inputs {
                super::require_same_dtype(x, t)?;
                let same_rest = t.rank() == x.rank()
                    && (0..x.rank()).all(|i| i == *axis || t.shape[i] == x.shape[i]);
                if !same_rest {
                    return Err(format!(
                        "all inputs must match except along axis {axis}: {:?} vs {:?}",
                        x.shape, t.shape
                    ));
                }
                shape[*axis] += t.shape[*axis];
            }
            shape
        }
        _ => return Err(format!("{} is not a movement op", op.name())),
    };
    Ok(TensorType {
        shape,
        dtype: x.dtype,
    })
}

fn check_slice(
    shape: &[usize],
    begin: &[usize],
    step: &[isize],
    len: &[usize],
) -> Result<(), String> {
    if begin.len() != shape.len() || step.len() != shape.len() || len.len() != shape.len() {
        return Err(format!(
            "slice spec must have one entry per axis ({})",
            shape.len()
        ));
    }
    for i in 0..shape.len() {
        if len[i] == 0 {
            continue;
        }
        let last = begin[i] as isize + (len[i] as isize - 1) * step[i];
        if step[i] == 0 || begin[i] >= shape[i] || last < 0 || last >= shape[i] as isize {
            return Err(format!(
                "axis {i}: start {} step {} count {} leaves the axis of length {}",
                begin[i], step[i], len[i], shape[i]
            ));
        }
    }
    Ok(())
}

/// Copies `src` (seen through `src_layout`) into the positions of `dst` that `dst_layout`
/// addresses; both layouts have the same shape.
fn write_view(
    dst: &mut Buffer,
    dst_layout: &Layout,
    src: &Buffer,
    src_layout: &Layout,
) -> Result<(), String> {
    fn go<T: Element>(dst: &mut [T], dl: &Layout, src: &[T], sl: &Layout) {
        walk_rows(
            &dl.shape,
            [&dl.strides, &sl.strides],
            [dl.offset, sl.offset],
            0..row_count(&dl.shape),
            |r| {
                for i in 0..r.len as isize {
                    dst[(r.starts[0] + i * r.steps[0]) as usize] =
                        src[(r.starts[1] + i * r.steps[1]) as usize];
                }
            },
        );
    }
    match (dst, src) {
        (Buffer::F32(d), Buffer::F32(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::F64(d), Buffer::F64(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::F16(d), Buffer::F16(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::BF16(d), Buffer::BF16(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::I32(d), Buffer::I32(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::I64(d), Buffer::I64(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::U8(d), Buffer::U8(s)) => go(d, dst_layout, s, src_layout),
        (Buffer::Bool(d), Buffer::Bool(s)) => go(d, dst_layout, s, src_layout),
        (d, s) => return Err(format!("dtype mismatch: {} vs {}", d.dtype(), s.dtype())),
    }
    Ok(())
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    let s = inputs[0].buf();
    let view = |layout: Layout| Storage {
        buffer: s.buffer.clone(),
        layout,
    };
    Ok(match op {
        Op::Reshape(shape) => match s.layout.reshape_contiguous(shape) {
            Some(l) => view(l),
            None => Storage::contiguous(
                spore_kernels::elementwise::copy(&s.buffer, &s.layout),
                shape,
            ),
        },
        Op::Transpose(perm) => view(s.layout.permute(perm)),
        Op::BroadcastTo(shape) => view(s.layout.broadcast_to(shape)),
        Op::StridedSlice { begin, step, len } => view(s.layout.slice(begin, step, len)),
        Op::StridedSliceGrad { begin, step, .. } => {
            let mut buf = spore_kernels::arena::filled_buffer(out.dtype, out.numel(), 0.0);
            let target = Layout::contiguous(&out.shape).slice(begin, step, &s.layout.shape);
            write_view(&mut buf, &target, &s.buffer, &s.layout)?;
            Storage::contiguous(buf, &out.shape)
        }
        Op::Pad { pads, value_bits } => {
            let mut buf = spore_kernels::arena::filled_buffer(
                out.dtype,
                out.numel(),
                f64::from_bits(*value_bits),
            );
            let begin: Vec<usize> = pads.iter().map(|p| p.0).collect();
            let target = Layout::contiguous(&out.shape).slice(
                &begin,
                &vec![1; begin.len()],
                &s.layout.shape,
            );
            write_view(&mut buf, &target, &s.buffer, &s.layout)?;
            Storage::contiguous(buf, &out.shape)
        }
        Op::Concat { axis } => {
            // The inputs cover every position of the output.
            let mut buf = spore_kernels::arena::buffer_for_overwrite(out.dtype, out.numel());
            let full = Layout::contiguous(&out.shape);
            let mut at = 0;
            for t in inputs {
                let mut begin = vec![0; out.rank()];
                begin[*axis] = at;
                let target = full.slice(&begin, &vec![1; begin.len()], t.shape());
                write_view(&mut buf, &target, &t.buf().buffer, &t.buf().layout)?;
                at += t.shape()[*axis];
            }
            Storage::contiguous(buf, &out.shape)
        }
        _ => return Err(format!("{} is not a movement op", op.name())),
    })
}

pub(crate) fn vjp(
    op: &Op,
    inputs: &[Tensor],
    _out: &Tensor,
    g: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let x = &inputs[0];
    let loc = Location::caller();
    Ok(match op {
        Op::Reshape(_) => vec![Some(g.reshape(x.shape())?)],
        Op::Transpose(perm) => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(g.permute(&inv)?)]
        }
        Op::BroadcastTo(_) => vec![Some(sum_to_shape(g, x.shape())?)],
        Op::StridedSlice { begin, step, .. } => vec![Some(apply(
            Op::StridedSliceGrad {
                input_shape: x.shape().to_vec(),
                begin: begin.clone(),
                step: step.clone(),
            },
            &[g],
            loc,
        )?)],
        Op::StridedSliceGrad { begin, step, .. } => vec![Some(apply(
            Op::StridedSlice {
                begin: begin.clone(),
                step: step.clone(),
                len: x.shape().to_vec(),
            },
            &[g],
            loc,
        )?)],
        Op::Pad { pads, .. } => vec![Some(apply(
            Op::StridedSlice {
                begin: pads.iter().map(|p| p.0).collect(),
                step: vec![1; pads.len()],
                len: x.shape().to_vec(),
            },
            &[g],
            loc,
        )?)],
        Op::Concat { axis } => {
            let mut at = 0;
            let mut grads = Vec::with_capacity(inputs.len());
            for t in inputs {
                let mut begin = vec![0; t.rank()];
                begin[*axis] = at;
                if !t.requires_grad() {
                    grads.push(None);
                    at += t.shape()[*axis];
                    continue;
                }
                grads.push(Some(apply(
                    Op::StridedSlice {
                        begin,
                        step: vec![1; t.rank()],
                        len: t.shape().to_vec(),
                    },
                    &[g],
                    loc,
                )?));
                at += t.shape()[*axis];
            }
            grads
        }
        _ => vec![None; inputs.len()],
    })
}

impl Tensor {
    /// A tensor with the same elements and a new shape of the same size.
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        apply(Op::Reshape(shape.to_vec()), &[self], Location::caller())
    }

    /// [`Tensor::reshape`] where one entry may be -1, inferred from the element count
    /// (MindSpore's `ops.reshape(x, (-1, 4))`, PyTorch's `x.reshape(-1, 4)`).
    #[track_caller]
    pub fn reshape_infer(&self, shape: &[isize]) -> Result<Tensor> {
        let loc = Location::caller();
        let fail = |m: String| op_error(&Op::Reshape(vec![]), m, &[self], loc);
        let mut inferred = None;
        let mut known = 1usize;
        for (i, &d) in shape.iter().enumerate() {
            match d {
                -1 if inferred.is_none() => inferred = Some(i),
                -1 => return Err(fail(format!("shape {shape:?} has more than one -1"))),
                d if d < 0 => {
                    return Err(fail(format!(
                        "shape {shape:?} has {d} at axis {i}; only -1 (inferred) may be negative"
                    )));
                }
                d => known = known.saturating_mul(d as usize),
            }
        }
        let mut dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        if let Some(i) = inferred {
            if known == 0 || !self.numel().is_multiple_of(known) {
                return Err(fail(format!(
                    "cannot infer the -1 in {shape:?}: {} elements are not a multiple of {known}",
                    self.numel()
                )));
            }
            dims[i] = self.numel() / known;
        }
        if dims == self.shape() {
            return Ok(self.clone());
        }
        apply(Op::Reshape(dims), &[self], loc)
    }

    /// Reorders axes: result axis `i` is input axis `perm[i]` (MindSpore's `Transpose`).
    #[track_caller]
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        apply(Op::Transpose(perm.to_vec()), &[self], Location::caller())
    }

    /// Swaps the last two axes (a matrix transpose; a 1-d tensor is returned as is).
    #[track_caller]
    pub fn transpose(&self) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Ok(self.clone());
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.permute(&perm)
    }

    /// Broadcasts to `shape` (NumPy rules), as a view.
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        apply(Op::BroadcastTo(shape.to_vec()), &[self], Location::caller())
    }

    /// NumPy-style `x[begin:end:stride]` on every axis (negative indices count from the end,
    /// out-of-range bounds are clamped, negative strides walk backwards).
    #[track_caller]
    pub fn strided_slice(
        &self,
        begin: &[isize],
        end: &[isize],
        strides: &[isize],
    ) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::StridedSlice {
            begin: vec![],
            step: vec![],
            len: vec![],
        };
        let r = self.rank();
        if begin.len() != r || end.len() != r || strides.len() != r {
            return Err(op_error(
                &probe,
                format!("begin, end and strides need {r} entries each"),
                &[self],
                loc,
            ));
        }
        let (mut b, mut l) = (Vec::with_capacity(r), Vec::with_capacity(r));
        for i in 0..r {
            let (n, st) = (self.shape()[i] as isize, strides[i]);
            if st == 0 {
                return Err(op_error(
                    &probe,
                    format!("stride on axis {i} is 0"),
                    &[self],
                    loc,
                ));
            }
            let norm = |v: isize| if v < 0 { v + n } else { v };
            let (start, stop) = if st > 0 {
                (norm(begin[i]).clamp(0, n), norm(end[i]).clamp(0, n))
            } else {
                (
                    norm(begin[i]).clamp(-1, n - 1),
                    norm(end[i]).clamp(-1, n - 1),
                )
            };
            // In i128: a stride near isize's range (from a file) cannot overflow.
            let (span, step) = if st > 0 {
                ((stop - start).max(0) as i128, st as i128)
            } else {
                ((start - stop).max(0) as i128, -(st as i128))
            };
            let count = ((span + step - 1) / step) as usize;
            b.push(if count > 0 { start as usize } else { 0 });
            l.push(count);
        }
        apply(
            Op::StridedSlice {
                begin: b,
                step: strides.to_vec(),
                len: l,
            },
            &[self],
            loc,
        )
    }

    /// Elements `start..end` along `axis` (MindSpore's `narrow`/`Slice` on one axis).
    #[track_caller]
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::StridedSlice {
            begin: vec![],
            step: vec![],
            len: vec![],
        };
        let a = normalize_axis(axis, self.rank()).map_err(|m| op_error(&probe, m, &[self], loc))?;
        let mut begin = vec![0; self.rank()];
        let mut lens = self.shape().to_vec();
        begin[a] = start;
        lens[a] = len;
        apply(
            Op::StridedSlice {
                begin,
                step: vec![1; self.rank()],
                len: lens,
            },
            &[self],
            loc,
        )
    }

    /// Constant padding with `(before, after)` amounts per axis.
    #[track_caller]
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Result<Tensor> {
        apply(
            Op::Pad {
                pads: pads.to_vec(),
                value_bits: value.to_bits(),
            },
            &[self],
            Location::caller(),
        )
    }

    /// Joins tensors along `axis`.
    #[track_caller]
    pub fn concat(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        let loc = Location::caller();
        let Some(first) = tensors.first() else {
            return Err(Error::invalid_here("Concat: expected at least one tensor"));
        };
        let probe = Op::Concat { axis: 0 };
        let a =
            normalize_axis(axis, first.rank()).map_err(|m| op_error(&probe, m, tensors, loc))?;
        apply(Op::Concat { axis: a }, tensors, loc)
    }

    /// Joins tensors along a new axis.
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::invalid_here("Stack: expected at least one tensor"));
        };
        let expanded: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.unsqueeze(axis))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = expanded.iter().collect();
        let a = if axis < 0 {
            axis + first.rank() as isize + 1
        } else {
            axis
        };
        Tensor::concat(&refs, a)
    }

    /// Inserts an axis of length 1 at `axis` (MindSpore's `expand_dims`).
    #[track_caller]
    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        let loc = Location::caller();
        let a = normalize_axis(axis, self.rank() + 1)
            .map_err(|m| op_error(&Op::Reshape(vec![]), m, &[self], loc))?;
        let mut shape = self.shape().to_vec();
        shape.insert(a, 1);
        apply(Op::Reshape(shape), &[self], loc)
    }

    /// Removes the given axes of length 1 (all of them when `axes` is empty).
    #[track_caller]
    pub fn squeeze(&self, axes: &[isize]) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::Reshape(vec![]);
        let axes: Vec<usize> = if axes.is_empty() {
            (0..self.rank()).filter(|&i| self.shape()[i] == 1).collect()
        } else {
            let mut v = Vec::new();
            for &a in axes {
                let n = normalize_axis(a, self.rank())
                    .map_err(|m| op_error(&probe, m, &[self], loc))?;
                if self.shape()[n] != 1 {
                    return Err(op_error(
                        &probe,
                        format!("cannot squeeze axis {a} of length {}", self.shape()[n]),
                        &[self],
                        loc,
                    ));
                }
                v.push(n);
            }
            v
        };
        let shape: Vec<usize> = (0..self.rank())
            .filter(|i| !axes.contains(i))
            .map(|i| self.shape()[i])
            .collect();
        apply(Op::Reshape(shape), &[self], loc)
    }

    /// Collapses axes `start_axis..` into one (`flatten(1)` turns NCHW into N x CHW).
    #[track_caller]
    pub fn flatten(&self, start_axis: usize) -> Result<Tensor> {
        let loc = Location::caller();
        if start_axis > self.rank() {
            return Err(op_error(
                &Op::Reshape(vec![]),
                format!("start axis {start_axis} exceeds rank {}", self.rank()),
                &[self],
                loc,
            ));
        }
        let mut shape = self.shape()[..start_axis].to_vec();
        shape.push(self.shape()[start_axis..].iter().product());
        apply(Op::Reshape(shape), &[self], loc)
    }
}
