//! Indexing kernels: gather along an axis, scatter-add along an axis, one-hot.
//! Tensors are seen as [outer, axis, inner] blocks of contiguous data.
//!
//! ```
//! use spore_kernels::index::gather;
//! // x = [[1, 2], [3, 4]], take rows [1, 0, 1] along axis 0.
//! let y = gather(&[1.0f32, 2.0, 3.0, 4.0], 1, 2, 2, &[1, 0, 1]).unwrap();
//! assert_eq!(y, vec![3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
//! ```

use crate::buffer::Element;
use crate::elementwise::{BinaryFn, Num};

/// Checks an index against the axis length; negative indices count from the end.
fn resolve(i: i64, len: usize) -> Result<usize, String> {
    let j = if i < 0 { i + len as i64 } else { i };
    if j < 0 || j >= len as i64 {
        Err(format!(
            "index {i} is out of range for an axis of length {len}"
        ))
    } else {
        Ok(j as usize)
    }
}

/// Checks every index before anything is written, so an error leaves no partial result.
fn check_all(indices: &[i64], len: usize) -> Result<(), String> {
    indices
        .iter()
        .try_for_each(|&i| resolve(i, len).map(|_| ()))
}

/// `x` is [outer, axis_len, inner]; the result is [outer, indices.len(), inner].
pub fn gather<T: Element>(
    x: &[T],
    outer: usize,
    axis_len: usize,
    inner: usize,
    indices: &[i64],
) -> Result<Vec<T>, String> {
    check_all(indices, axis_len)?;
    let mut out = crate::arena::for_overwrite::<T>(outer * indices.len() * inner);
    let mut rows = out.chunks_exact_mut(inner.max(1));
    for o in 0..outer {
        for &i in indices {
            let j = resolve(i, axis_len)?;
            if let Some(row) = rows.next() {
                row.copy_from_slice(&x[(o * axis_len + j) * inner..][..inner]);
            }
        }
    }
    Ok(out)
}

/// Adds `updates` ([outer, indices.len(), inner]) into a copy of `base` ([outer, axis_len,
/// inner]) at the indexed positions; repeated indices accumulate.
pub fn scatter_add<T: Num>(
    base: &[T],
    outer: usize,
    axis_len: usize,
    inner: usize,
    indices: &[i64],
    updates: &[T],
) -> Result<Vec<T>, String> {
    check_all(indices, axis_len)?;
    let mut out = crate::arena::for_overwrite::<T>(base.len());
    // The copy is most of the work where few rows are updated (an embedding table's
    // gradient: 7.8M values copied, 2048 rows added), so it runs on all threads.
    if base.len() >= crate::layout::PARALLEL_THRESHOLD {
        use rayon::prelude::*;
        let stretch = base.len().div_ceil(4 * rayon::current_num_threads().max(1));
        out.par_chunks_mut(stretch.next_multiple_of(16))
            .zip(base.par_chunks(stretch.next_multiple_of(16)))
            .for_each(|(d, s)| d.copy_from_slice(s));
    } else {
        out.copy_from_slice(base);
    }
    let k = indices.len();
    for o in 0..outer {
        for (p, &i) in indices.iter().enumerate() {
            let j = resolve(i, axis_len)?;
            let dst = &mut out[(o * axis_len + j) * inner..][..inner];
            let src = &updates[(o * k + p) * inner..][..inner];
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = d.binary(BinaryFn::Add, s);
            }
        }
    }
    Ok(out)
}

/// One-hot rows of length `depth`; an out-of-range index gives a row of zeros.
pub fn one_hot<T: Element>(indices: &[i64], depth: usize) -> Vec<T> {
    let mut out = crate::arena::zeroed::<T>(indices.len() * depth);
    for (r, &i) in indices.iter().enumerate() {
        if i >= 0 && (i as usize) < depth {
            out[r * depth + i as usize] = T::one();
        }
    }
    out
}
