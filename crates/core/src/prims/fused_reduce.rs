//! `FusedReduceSum`: the sum over some axes of an elementwise program's result, computed
//! chunk by chunk so that the full-size result never reaches memory. The graph compiler
//! builds it where a `ReduceSum` is the only reader of an elementwise chain: BatchNorm's
//! variance `Σ (x - μ)²`, the `Σ dy · x̂` of its backward pass, a masked bias gradient.
//!
//! ```
//! use spore_core::prims::fused::{FusedInstr, FusedProgram};
//! use spore_core::op::Op;
//! use spore_core::{apply::apply, DType, Tensor};
//! use spore_kernels::BinaryFn;
//! // Σ over axis 0 of a * b
//! let program = FusedProgram {
//!     num_inputs: 2,
//!     instrs: vec![FusedInstr::Binary(BinaryFn::Mul, 0, 1)],
//!     compute: DType::F32,
//!     out_dtype: DType::F32,
//! };
//! let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let b = Tensor::from_vec(vec![10.0f32, 100.0], &[2]).unwrap();
//! let op = Op::FusedReduceSum { program, axes: vec![0], keep_dims: false };
//! let s = apply(op, &[&a, &b], std::panic::Location::caller()).unwrap();
//! assert_eq!(s.to_vec::<f32>().unwrap(), vec![40.0, 600.0]);
//! ```

use rayon::prelude::*;
use smallvec::SmallVec;
use spore_kernels::reduce::sum_row;
use spore_kernels::{Buffer, DType, Dims, Num, arena};

use super::broadcast_shapes;
use super::fused::{CHUNK, FusedProgram, Operands, thread_blocks};
use crate::tensor::{Storage, Tensor, TensorType};

/// How a sum of `shape` over `axes` walks memory, as (outer, kept, inner) sizes: the
/// reduced axes form a leading block (`outer` elements) and a trailing block (`inner`)
/// around one block of kept axes (NCHW over N, H and W: 32, 64, 1024; a bias gradient,
/// [64, 512] over axis 0: 64, 512, 1). `None` for other patterns (kept axes separated by
/// a reduced one), which stay unfused.
pub fn sum_split(shape: &[usize], axes: &[usize]) -> Option<(usize, usize, usize)> {
    let reduced = |a: usize| axes.contains(&a);
    let rank = shape.len();
    let size = |r: std::ops::Range<usize>| -> usize { shape[r].iter().product() };
    let Some(first_kept) = (0..rank).find(|&a| !reduced(a)) else {
        // A full sum: one long run, summed with partial sums like any row.
        return Some((1, 1, size(0..rank)));
    };
    let end_kept = (first_kept..rank).find(|&a| reduced(a)).unwrap_or(rank);
    if (end_kept..rank).any(|a| !reduced(a)) {
        return None;
    }
    Some((
        size(0..first_kept),
        size(first_kept..end_kept),
        size(end_kept..rank),
    ))
}

impl FusedProgram {
    /// The result type of the sum of this program's result over `axes`.
    pub(crate) fn infer_sum(
        &self,
        inputs: &[&TensorType],
        axes: &[usize],
        keep_dims: bool,
    ) -> Result<TensorType, String> {
        let full = self.infer(inputs)?;
        if full.dtype != self.compute {
            return Err(format!(
                "a summed program must produce its compute dtype {}, not {}",
                self.compute, full.dtype
            ));
        }
        if let Some(&a) = axes.iter().find(|&&a| a >= full.rank()) {
            return Err(format!(
                "axis {a} out of range for the program's result of shape {:?}",
                full.shape
            ));
        }
        if sum_split(&full.shape, axes).is_none() {
            return Err(format!(
                "axes {axes:?} of shape {:?}: the kept axes must be adjacent",
                full.shape
            ));
        }
        let shape: Dims = (0..full.rank())
            .filter_map(|i| {
                if axes.contains(&i) {
                    keep_dims.then_some(1)
                } else {
                    Some(full.shape[i])
                }
            })
            .collect();
        Ok(TensorType {
            shape,
            dtype: full.dtype,
        })
    }

    pub(crate) fn eval_sum(
        &self,
        inputs: &[&Tensor],
        axes: &[usize],
        out: &TensorType,
    ) -> Result<Storage, String> {
        let mut full = Dims::new();
        for t in inputs {
            full = broadcast_shapes(&full, t.shape())?;
        }
        let split = sum_split(&full, axes)
            .ok_or_else(|| format!("axes {axes:?} of shape {full:?} cannot be fused"))?;
        let buf = match self.compute {
            DType::F32 => Buffer::F32(self.sum::<f32>(inputs, &full, split)),
            DType::F64 => Buffer::F64(self.sum::<f64>(inputs, &full, split)),
            d => return Err(format!("compute dtype {d} is not a float")),
        };
        Ok(Storage::contiguous(buf, &out.shape))
    }

    /// Splits the flat result into one block per thread; each evaluates its chunks into
    /// L1-resident scratch and folds them into its own `kept` partial sums, which are
    /// added at the end (threads never share an accumulator).
    fn sum<T: Num>(
        &self,
        inputs: &[&Tensor],
        full: &[usize],
        (outer, kept, inner): (usize, usize, usize),
    ) -> Vec<T> {
        let n = outer * kept * inner;
        let mut out = arena::zeroed::<T>(kept);
        if n == 0 {
            return out;
        }
        let operands = Operands::<T>::load(inputs, full, None);
        let (_, per_block) = thread_blocks(n);
        let blocks = n.div_ceil(per_block);
        // Scratch and partial sums are taken here, before forking, so that a compiled
        // graph's buffer pool serves them (see `spore_kernels::arena`).
        let scratch_len = (self.registers() + 1) * CHUNK;
        let mut scratch = arena::for_overwrite::<T>(blocks * scratch_len);
        let mut partials = arena::zeroed::<T>(blocks * kept);
        let run_block = |(b, (scratch, acc)): (usize, (&mut [T], &mut [T]))| {
            let (regs, values) = scratch.split_at_mut(self.registers() * CHUNK);
            let mut regs: SmallVec<[&mut [T]; 32]> = regs.chunks_mut(CHUNK).collect();
            let end = ((b + 1) * per_block).min(n);
            let mut start = b * per_block;
            while start < end {
                let chunk = &mut values[..CHUNK.min(end - start)];
                self.eval_chunk(&operands, &mut regs, start, chunk);
                fold(acc, chunk, start, kept, inner);
                start += chunk.len();
            }
        };
        if blocks > 1 {
            scratch
                .par_chunks_mut(scratch_len)
                .zip(partials.par_chunks_mut(kept))
                .enumerate()
                .for_each(run_block);
        } else {
            run_block((0, (&mut scratch[..], &mut partials[..])));
        }
        for partial in partials.chunks_exact(kept) {
            for (o, &p) in out.iter_mut().zip(partial) {
                *o = o.binary(spore_kernels::BinaryFn::Add, p);
            }
        }
        arena::recycle(T::into_buffer(scratch));
        arena::recycle(T::into_buffer(partials));
        operands.recycle();
        out
    }
}

/// Adds result elements `start..start + values.len()` to their kept positions' sums:
/// element `i` belongs to position `(i / inner) % kept`.
fn fold<T: Num>(acc: &mut [T], values: &[T], start: usize, kept: usize, inner: usize) {
    let add = spore_kernels::BinaryFn::Add;
    let mut done = 0;
    if kept == 1 {
        // Every element to one sum (a full sum, or sums over all axes but size-1 ones).
        acc[0] = acc[0].binary(add, sum_row(values));
        return;
    }
    if inner == 1 {
        // Consecutive elements go to consecutive positions: add whole runs.
        let mut k = start % kept;
        while done < values.len() {
            let run = (kept - k).min(values.len() - done);
            for (a, &v) in acc[k..k + run].iter_mut().zip(&values[done..done + run]) {
                *a = a.binary(add, v);
            }
            done += run;
            k = 0;
        }
        return;
    }
    let mut i = start;
    while done < values.len() {
        let k = (i / inner) % kept;
        let run = (inner - i % inner).min(values.len() - done);
        acc[k] = acc[k].binary(add, sum_row(&values[done..done + run]));
        done += run;
        i += run;
    }
}
