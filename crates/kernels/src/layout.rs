//! [`Layout`]: how a tensor's logical indices map onto a flat buffer (shape, strides,
//! offset). Views (transpose, broadcast, slice) only change the layout, never the data.
//!
//! ```
//! use spore_kernels::Layout;
//! let l = Layout::contiguous(&[2, 3]).permute(&[1, 0]);
//! assert_eq!(l.shape.as_slice(), &[3, 2]);
//! assert_eq!(l.strides.as_slice(), &[1, 3]);
//! assert!(!l.is_contiguous());
//! ```

use rayon::prelude::*;
use smallvec::SmallVec;

/// A shape. Ranks up to 6 live inline, so creating, cloning and reshaping a tensor's
/// metadata touches no heap: a compiled step's ops then allocate nothing at all (larger
/// ranks spill to the heap and still work).
pub type Dims = SmallVec<[usize; 6]>;
/// Per-axis strides, inline like [`Dims`].
pub type Strides = SmallVec<[isize; 6]>;

/// Shape, per-axis strides (in elements, may be 0 for broadcast or negative for reversed
/// slices) and the offset of element `[0, 0, ...]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Dims,
    pub strides: Strides,
    pub offset: usize,
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = smallvec::smallvec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i].max(1) as isize;
    }
    strides
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Layout {
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: Dims::from_slice(shape),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// True when elements are stored row-major without gaps (axes of length 1 may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1isize;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != expected {
                return false;
            }
            expected *= self.shape[i] as isize;
        }
        true
    }

    /// Reorders axes: result axis `i` is input axis `perm[i]`. `perm` must be a permutation.
    pub fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Broadcasts to `shape` (NumPy rules; must be valid): new leading axes and axes of
    /// length 1 get stride 0.
    pub fn broadcast_to(&self, shape: &[usize]) -> Layout {
        let extra = shape.len() - self.shape.len();
        let mut strides: Strides = smallvec::smallvec![0isize; shape.len()];
        for i in 0..self.shape.len() {
            if self.shape[i] == shape[i + extra] {
                strides[i + extra] = self.strides[i];
            }
        }
        Layout {
            shape: Dims::from_slice(shape),
            strides,
            offset: self.offset,
        }
    }

    /// Takes `len[i]` elements starting at `start[i]` with step `step[i]` along every axis.
    /// The caller guarantees that every touched index is in range.
    pub fn slice(&self, start: &[usize], step: &[isize], len: &[usize]) -> Layout {
        let offset = self.offset as isize
            + start
                .iter()
                .zip(&self.strides)
                .map(|(&s, &st)| s as isize * st)
                .sum::<isize>();
        Layout {
            shape: Dims::from_slice(len),
            strides: (0..self.shape.len())
                .map(|i| self.strides[i] * step[i])
                .collect(),
            offset: offset as usize,
        }
    }

    /// A view with a new shape of the same size, possible without copying when the layout is
    /// contiguous.
    pub fn reshape_contiguous(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() {
            Some(Layout {
                shape: Dims::from_slice(shape),
                strides: contiguous_strides(shape),
                offset: self.offset,
            })
        } else {
            None
        }
    }
}

/// One innermost row of a strided walk: where the row starts in the output and in each
/// input, and the inputs' strides along it.
#[derive(Clone, Copy, Debug)]
pub struct Row<const K: usize> {
    pub out_start: usize,
    pub len: usize,
    pub starts: [isize; K],
    pub steps: [isize; K],
}

/// Visits the rows (innermost axis) of `shape` in row-major order, for rows in `rows`,
/// tracking the offsets of `K` strided operands. Scalars are one row of length 1.
pub fn walk_rows<const K: usize>(
    shape: &[usize],
    strides: [&[isize]; K],
    offsets: [usize; K],
    rows: std::ops::Range<usize>,
    mut f: impl FnMut(Row<K>),
) {
    let rank = shape.len();
    if rank == 0 {
        if rows.start == 0 && !rows.is_empty() {
            f(Row {
                out_start: 0,
                len: 1,
                starts: offsets.map(|o| o as isize),
                steps: [0; K],
            });
        }
        return;
    }
    let inner = shape[rank - 1];
    // An empty axis anywhere means no rows (and no division by its length below).
    if shape.contains(&0) {
        return;
    }
    let steps: [isize; K] = std::array::from_fn(|k| strides[k][rank - 1]);
    // Odometer over the outer axes, started at `rows.start`.
    let mut index: Dims = smallvec::smallvec![0usize; rank - 1];
    let mut rem = rows.start;
    for ax in (0..rank - 1).rev() {
        index[ax] = rem % shape[ax];
        rem /= shape[ax];
    }
    let mut starts: [isize; K] = std::array::from_fn(|k| {
        let mut o = offsets[k] as isize;
        for ax in 0..rank - 1 {
            o += index[ax] as isize * strides[k][ax];
        }
        o
    });
    for row in rows {
        f(Row {
            out_start: row * inner,
            len: inner,
            starts,
            steps,
        });
        // Advance the odometer.
        let mut ax = rank - 1;
        while ax > 0 {
            ax -= 1;
            index[ax] += 1;
            for k in 0..K {
                starts[k] += strides[k][ax];
            }
            if index[ax] < shape[ax] {
                break;
            }
            for k in 0..K {
                starts[k] -= strides[k][ax] * shape[ax] as isize;
            }
            index[ax] = 0;
        }
    }
}

/// Number of rows in a walk over `shape`.
pub fn row_count(shape: &[usize]) -> usize {
    match shape.split_last() {
        None => 1,
        Some((&last, outer)) if last > 0 => numel(outer),
        Some(_) => 0,
    }
}

/// Below this many elements kernels stay on the calling thread: a rayon fork costs more.
pub const PARALLEL_THRESHOLD: usize = 1 << 15;

/// Fills `out` (contiguous, `shape`) row by row, in parallel for large tensors. `fill` gets
/// the row description and the output row to write.
pub fn fill_rows<T: Send, const K: usize>(
    out: &mut [T],
    shape: &[usize],
    strides: [&[isize]; K],
    offsets: [usize; K],
    fill: impl Fn(Row<K>, &mut [T]) + Sync,
) {
    let rows = row_count(shape);
    if rows == 0 {
        return;
    }
    let inner = out.len() / rows;
    if rows == 1 && out.len() >= PARALLEL_THRESHOLD {
        return fill_one_long_row(out, shape, strides, offsets, fill);
    }
    if out.len() < PARALLEL_THRESHOLD || rows < 2 {
        walk_rows(shape, strides, offsets, 0..rows, |r| {
            fill(r, &mut out[r.out_start..r.out_start + r.len])
        });
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    let rows_per_chunk = rows.div_ceil(threads * 4).max(1);
    out.par_chunks_mut(rows_per_chunk * inner)
        .enumerate()
        .for_each(|(c, chunk)| {
            let first = c * rows_per_chunk;
            let last = (first + rows_per_chunk).min(rows);
            walk_rows(shape, strides, offsets, first..last, |r| {
                let s = r.out_start - first * inner;
                fill(r, &mut chunk[s..s + r.len])
            });
        });
}

/// [`fill_rows`] of a shape with one row (contiguous operands walk as one flat row): the
/// row cut into stretches, one task each. Why: as one row, the residual additions of the
/// BERT encoder ran on one thread of sixteen.
fn fill_one_long_row<T: Send, const K: usize>(
    out: &mut [T],
    shape: &[usize],
    strides: [&[isize]; K],
    offsets: [usize; K],
    fill: impl Fn(Row<K>, &mut [T]) + Sync,
) {
    let last = shape.len() - 1;
    let steps: [isize; K] = std::array::from_fn(|k| strides[k][last]);
    let threads = rayon::current_num_threads().max(1);
    // Stretches of a multiple of 16 values (whole cache lines for f32), several per
    // thread for balance.
    let stretch = out.len().div_ceil(threads * 4).next_multiple_of(16);
    out.par_chunks_mut(stretch)
        .enumerate()
        .for_each(|(c, dst)| {
            let first = c * stretch;
            let row = Row {
                out_start: first,
                len: dst.len(),
                starts: std::array::from_fn(|k| offsets[k] as isize + first as isize * steps[k]),
                steps,
            };
            fill(row, dst)
        });
}

/// Copies a strided view into a new contiguous vector.
pub fn to_contiguous<T: crate::buffer::Element>(src: &[T], layout: &Layout) -> Vec<T> {
    let n = layout.numel();
    let mut out = crate::arena::for_overwrite::<T>(n);
    if layout.is_contiguous() {
        out.copy_from_slice(&src[layout.offset..layout.offset + n]);
        return out;
    }
    // Row by row, split across threads for large views (each row lands at its place).
    fill_rows(
        &mut out,
        &layout.shape,
        [&layout.strides],
        [layout.offset],
        |r, dst| {
            let (s, st) = (r.starts[0], r.steps[0]);
            if st == 1 {
                dst.copy_from_slice(&src[s as usize..s as usize + r.len]);
            } else {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = src[(s + i as isize * st) as usize];
                }
            }
        },
    );
    out
}
