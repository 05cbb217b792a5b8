//! Reductions over any set of axes (sum, max, min) and arg-reductions along one axis.
//!
//! ```
//! use spore_kernels::{reduce, Buffer, Layout, ReduceFn};
//! let x = Buffer::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
//! let s = reduce::reduce(ReduceFn::Sum, &x, &Layout::contiguous(&[2, 3]), &[1]).unwrap();
//! assert_eq!(s, Buffer::F32(vec![6.0, 15.0]));
//! ```

use rayon::prelude::*;

use crate::buffer::Buffer;
use crate::buffer::Element;
use crate::elementwise::{BinaryFn, Num};
use crate::layout::{Dims, Layout, PARALLEL_THRESHOLD, to_contiguous};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceFn {
    Sum,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgReduceFn {
    ArgMax,
    ArgMin,
}

/// Moves the `axes` to the end and materialises, so that each output element reduces one
/// contiguous row. Returns the rows and the row length.
fn rows_last<T: Element>(src: &[T], layout: &Layout, axes: &[usize]) -> (Vec<T>, usize) {
    let mut perm: Dims = (0..layout.rank()).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let permuted = layout.permute(&perm);
    let row: usize = axes.iter().map(|&a| layout.shape[a]).product();
    (to_contiguous(src, &permuted), row)
}

/// The binary op that merges two partial results of `f`.
fn combining(f: ReduceFn) -> BinaryFn {
    match f {
        ReduceFn::Sum => BinaryFn::Add,
        ReduceFn::Max => BinaryFn::Maximum,
        ReduceFn::Min => BinaryFn::Minimum,
    }
}

/// Reduction over the leading axes of a contiguous tensor whose kept part is a wide row
/// (a bias gradient: the sum over the batch), done by folding whole rows into the output
/// instead of first copying the data into reduction order; the fold vectorises across the
/// row. `None` when the case does not apply, including narrow rows and full reductions,
/// which `reduce_row` sums with independent partial sums (faster, and more precise for
/// long sums).
/// Narrowest kept row [`reduce_leading`] takes.
const MIN_FOLDED_ROW: usize = 64;

/// Fewest rows per block of a parallel [`reduce_leading`], and most blocks.
const FOLD_BLOCK_ROWS: usize = 64;
const MAX_FOLD_BLOCKS: usize = 16;

fn reduce_leading<T: Num>(f: ReduceFn, s: &[T], l: &Layout, axes: &[usize]) -> Option<Vec<T>> {
    let mut sorted = Dims::from_slice(axes);
    sorted.sort_unstable();
    if !l.is_contiguous() || sorted.is_empty() || sorted.iter().enumerate().any(|(k, &a)| k != a) {
        return None;
    }
    let rows: usize = sorted.iter().map(|&a| l.shape[a]).product();
    let inner: usize = l.shape[sorted.len()..].iter().product();
    if rows == 0 || inner < MIN_FOLDED_ROW {
        return None;
    }
    let data = &s[l.offset..][..rows * inner];
    let op = combining(f);
    // Rows `range` folded into `acc`, in order.
    let fold = |range: std::ops::Range<usize>, acc: &mut [T]| {
        acc.copy_from_slice(&data[range.start * inner..][..inner]);
        for row in data[(range.start + 1) * inner..range.end * inner].chunks_exact(inner) {
            // One loop per function, which vectorises; a match inside the loop did not.
            crate::elementwise::binary_slice_over(op, row, true, acc);
        }
    };
    let mut out = crate::arena::for_overwrite::<T>(inner);
    // Large folds go in blocks of consecutive rows, each into its own partial, the
    // partials then combined in block order. The blocks follow from the shape alone, so
    // every thread count gives the same bits. Why rows, not columns: a thread per stripe
    // of columns read a few cache lines of every row, a new page each row, and BERT's
    // bias gradients ran slower on 16 threads than serially (BENCHMARKS.md, "16-core host").
    let blocks = if data.len() >= PARALLEL_THRESHOLD {
        (rows / FOLD_BLOCK_ROWS).clamp(1, MAX_FOLD_BLOCKS)
    } else {
        1
    };
    let per = rows.div_ceil(blocks);
    let blocks = rows.div_ceil(per);
    if blocks == 1 {
        fold(0..rows, &mut out);
        return Some(out);
    }
    let mut partials = crate::arena::for_overwrite::<T>(blocks * inner);
    partials
        .par_chunks_mut(inner)
        .enumerate()
        .for_each(|(b, acc)| fold(b * per..((b + 1) * per).min(rows), acc));
    out.copy_from_slice(&partials[..inner]);
    for partial in partials.chunks_exact(inner).skip(1) {
        crate::elementwise::binary_slice_over(op, partial, true, &mut out);
    }
    crate::arena::recycle(T::into_buffer(partials));
    Some(out)
}

/// Shortest contiguous run [`reduce_around`] sums in place; shorter runs are cheaper to
/// gather into rows first.
const MIN_AROUND_RUN: usize = 16;

/// Reduction of a contiguous tensor whose axes are, in order, reduced ones, then kept
/// ones, then reduced ones (BatchNorm's statistics: NCHW over N, H and W), done in place:
/// each kept element reduces `outer` runs of `inner` contiguous values, so nothing is
/// copied into reduction order first (that copy was most of a ResNet step's reduction
/// time). `None` when the axes do not have that shape or the runs are short.
fn reduce_around<T: Num>(f: ReduceFn, s: &[T], l: &Layout, axes: &[usize]) -> Option<Vec<T>> {
    if !l.is_contiguous() || axes.is_empty() {
        return None;
    }
    let reduced = |a: usize| axes.contains(&a);
    let rank = l.rank();
    let first_kept = (0..rank).find(|&a| !reduced(a))?;
    let end_kept = (first_kept..rank).find(|&a| reduced(a)).unwrap_or(rank);
    if (end_kept..rank).any(|a| !reduced(a)) {
        return None;
    }
    let size = |r: std::ops::Range<usize>| -> usize { l.shape[r].iter().product() };
    let (outer, kept, inner) = (
        size(0..first_kept),
        size(first_kept..end_kept),
        size(end_kept..rank),
    );
    if inner < MIN_AROUND_RUN || outer * kept == 0 {
        return None;
    }
    let data = &s[l.offset..][..outer * kept * inner];
    let combine = combining(f);
    let one = |c: usize| -> T {
        let mut acc = reduce_row(f, &data[c * inner..][..inner]);
        for o in 1..outer {
            acc = acc.binary(
                combine,
                reduce_row(f, &data[(o * kept + c) * inner..][..inner]),
            );
        }
        acc
    };
    let mut out = crate::arena::for_overwrite::<T>(kept);
    if data.len() >= PARALLEL_THRESHOLD && kept > 1 {
        out.par_iter_mut()
            .enumerate()
            .for_each(|(c, o)| *o = one(c));
    } else {
        out.iter_mut().enumerate().for_each(|(c, o)| *o = one(c));
    }
    Some(out)
}

/// The sum of a row with eight independent partial sums, as every sum here is taken
/// (fused reductions use it for their runs, so fused and unfused sums agree closely).
pub fn sum_row<T: Num>(row: &[T]) -> T {
    reduce_row(ReduceFn::Sum, row)
}

fn reduce_row<T: Num>(f: ReduceFn, row: &[T]) -> T {
    match f {
        ReduceFn::Sum => {
            // Eight independent partial sums: vectorises and loses less precision.
            let mut acc = [T::zero(); 8];
            let chunks = row.chunks_exact(8);
            let rest = chunks.remainder();
            for c in chunks {
                for i in 0..8 {
                    acc[i] = acc[i].binary(BinaryFn::Add, c[i]);
                }
            }
            let mut s = T::zero();
            for a in acc {
                s = s.binary(BinaryFn::Add, a);
            }
            for &x in rest {
                s = s.binary(BinaryFn::Add, x);
            }
            s
        }
        ReduceFn::Max => row[1..]
            .iter()
            .fold(row[0], |m, &x| m.binary(BinaryFn::Maximum, x)),
        ReduceFn::Min => row[1..]
            .iter()
            .fold(row[0], |m, &x| m.binary(BinaryFn::Minimum, x)),
    }
}

/// Reduces `axes` (distinct, in range) away; the output is contiguous over the kept axes.
/// Max/Min of an empty axis is an error; Sum of one is 0.
pub fn reduce(
    f: ReduceFn,
    src: &Buffer,
    layout: &Layout,
    axes: &[usize],
) -> Result<Buffer, String> {
    fn go<T: Num>(f: ReduceFn, s: &[T], l: &Layout, axes: &[usize]) -> Result<Vec<T>, String> {
        if let Some(out) = reduce_leading(f, s, l, axes) {
            return Ok(out);
        }
        if let Some(out) = reduce_around(f, s, l, axes) {
            return Ok(out);
        }
        let (data, row) = rows_last(s, l, axes);
        let out_n: usize = (0..l.rank())
            .filter(|a| !axes.contains(a))
            .map(|a| l.shape[a])
            .product();
        if row == 0 {
            return match f {
                ReduceFn::Sum => Ok(crate::arena::zeroed::<T>(out_n)),
                _ => Err(format!("{f:?} over an empty axis has no identity")),
            };
        }
        // Every output is written below.
        let mut out = crate::arena::for_overwrite::<T>(out_n);
        if data.len() >= PARALLEL_THRESHOLD && out_n > 1 {
            out.par_iter_mut()
                .zip(data.par_chunks(row))
                .for_each(|(o, r)| *o = reduce_row(f, r));
        } else {
            for (o, r) in out.iter_mut().zip(data.chunks(row)) {
                *o = reduce_row(f, r);
            }
        }
        crate::arena::recycle(T::into_buffer(data));
        Ok(out)
    }
    Ok(match src {
        Buffer::F32(s) => Buffer::F32(go(f, s, layout, axes)?),
        Buffer::F64(s) => Buffer::F64(go(f, s, layout, axes)?),
        // Sums of 16-bit values accumulate in float32.
        Buffer::F16(_) | Buffer::BF16(_) => {
            return crate::half_float::through_f32(src, layout, |w, l| reduce(f, w, l, axes));
        }
        Buffer::I32(s) => Buffer::I32(go(f, s, layout, axes)?),
        Buffer::I64(s) => Buffer::I64(go(f, s, layout, axes)?),
        Buffer::U8(s) => Buffer::U8(go(f, s, layout, axes)?),
        Buffer::Bool(_) => return Err(format!("{f:?}: Bool input is not numeric")),
    })
}

/// Index (Int32) of the first maximum/minimum along `axis`; NaN counts as the extreme.
pub fn arg_reduce(
    f: ArgReduceFn,
    src: &Buffer,
    layout: &Layout,
    axis: usize,
) -> Result<Buffer, String> {
    fn go<T: Element>(
        f: ArgReduceFn,
        s: &[T],
        l: &Layout,
        axis: usize,
    ) -> Result<Vec<i32>, String> {
        let (data, row) = rows_last(s, l, &[axis]);
        if row == 0 {
            crate::arena::recycle(T::into_buffer(data));
            return Err(format!("{f:?} over an empty axis"));
        }
        let best = crate::arena::collect_exact(
            data.len() / row,
            data.chunks(row).map(|r| {
                let mut best = 0usize;
                for (i, &x) in r.iter().enumerate().skip(1) {
                    let b = r[best];
                    #[allow(clippy::eq_op)]
                    let (x_nan, b_nan) = (x != x, b != b);
                    let better = match f {
                        ArgReduceFn::ArgMax => !b_nan && (x_nan || x > b),
                        ArgReduceFn::ArgMin => !b_nan && (x_nan || x < b),
                    };
                    if better {
                        best = i;
                    }
                }
                best as i32
            }),
        );
        crate::arena::recycle(T::into_buffer(data));
        Ok(best)
    }
    Ok(Buffer::I32(
        crate::with_buffer!(src, s => go(f, s, layout, axis)?),
    ))
}
