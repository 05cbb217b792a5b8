//! MindSpore's (and TensorFlow's) `StridedSlice` with its five bit masks, resolved to a
//! plain [`Tensor::strided_slice`] over every axis and a reshape: bit `i` of a mask
//! speaks about entry `i` of `begin`/`end`/`strides`.
//!
//! - `begin_mask` / `end_mask`: ignore `begin[i]` / `end[i]` and start / stop at the
//!   end of the axis that the stride walks from / towards.
//! - `ellipsis_mask` (one bit at most): entry `i` stands for as many whole axes as the
//!   other entries leave.
//! - `new_axis_mask`: entry `i` inserts an axis of length 1 and reads no input axis.
//! - `shrink_axis_mask`: entry `i` takes the single index `begin[i]` and drops the axis.
//!
//! Axes after the last entry are taken whole. With `new_axis` and `shrink_axis` on one
//! entry the new axis wins, and an ellipsis bit overrides the others (TensorFlow's rules).
//!
//! ```
//! use spore_core::{Tensor, prims::strided_slice::StridedSliceMasks};
//! let x = Tensor::from_vec((0..24).map(|v| v as f32).collect(), &[2, 3, 4]).unwrap();
//! // x[..., 1, None]: an ellipsis, index 1 of the last axis, then a new axis.
//! let m = StridedSliceMasks { ellipsis_mask: 0b001, shrink_axis_mask: 0b010, new_axis_mask: 0b100, ..Default::default() };
//! let y = x.strided_slice_masked(&[0, 1, 0], &[0, 2, 0], &[1, 1, 1], &m).unwrap();
//! assert_eq!(y.shape(), &[2, 3, 1]);
//! assert_eq!(y.to_vec::<f32>().unwrap()[..3], [1.0, 5.0, 9.0]);
//! ```

use std::panic::Location;

use crate::apply::op_error;
use crate::error::Result;
use crate::op::Op;
use crate::tensor::Tensor;

/// The five masks of MindSpore's `ops.StridedSlice` (all 0 by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StridedSliceMasks {
    pub begin_mask: u64,
    pub end_mask: u64,
    pub ellipsis_mask: u64,
    pub new_axis_mask: u64,
    pub shrink_axis_mask: u64,
}

/// What one entry of the specification does to the output.
enum Entry {
    /// An input axis sliced, kept (`true`) or dropped after taking one index (`false`).
    Axis {
        keep: bool,
    },
    NewAxis,
}

impl Tensor {
    /// `StridedSlice(begin_mask, end_mask, ellipsis_mask, new_axis_mask,
    /// shrink_axis_mask)(x, begin, end, strides)`; see the module documentation.
    #[track_caller]
    pub fn strided_slice_masked(
        &self,
        begin: &[isize],
        end: &[isize],
        strides: &[isize],
        masks: &StridedSliceMasks,
    ) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::StridedSlice {
            begin: vec![],
            step: vec![],
            len: vec![],
        };
        let fail = |m: String| op_error(&probe, m, &[self], loc);
        let p = plan(self.shape(), begin, end, strides, masks).map_err(fail)?;
        let sliced = self.strided_slice(&p.begin, &p.end, &p.strides)?;
        let mut shape = vec![];
        let mut axis = 0;
        for entry in &p.entries {
            match entry {
                Entry::NewAxis => shape.push(1),
                Entry::Axis { keep } => {
                    if *keep {
                        shape.push(sliced.shape()[axis]);
                    }
                    axis += 1;
                }
            }
        }
        sliced.reshape(&shape)
    }
}

/// The plain slice over every axis and the entries that shape its result.
struct Plan {
    begin: Vec<isize>,
    end: Vec<isize>,
    strides: Vec<isize>,
    entries: Vec<Entry>,
}

/// Resolves the masks against an input of `shape`.
fn plan(
    shape: &[usize],
    begin: &[isize],
    end: &[isize],
    strides: &[isize],
    masks: &StridedSliceMasks,
) -> std::result::Result<Plan, String> {
    let m = begin.len();
    if end.len() != m || strides.len() != m {
        return Err(format!(
            "begin, end and strides must have one length, got {}, {} and {}",
            m,
            end.len(),
            strides.len()
        ));
    }
    if m > 64 {
        return Err(format!("at most 64 entries (the masks' bits), got {m}"));
    }
    let bit = |mask: u64, i: usize| mask >> i & 1 == 1;
    if masks.ellipsis_mask.count_ones() > 1 {
        return Err(format!(
            "ellipsis_mask {:#b} sets more than one bit",
            masks.ellipsis_mask
        ));
    }
    let is_ellipsis = |i: usize| bit(masks.ellipsis_mask, i);
    let is_new = |i: usize| !is_ellipsis(i) && bit(masks.new_axis_mask, i);
    let consumed = (0..m).filter(|&i| !is_ellipsis(i) && !is_new(i)).count();
    let rank = shape.len();
    if consumed > rank {
        return Err(format!(
            "the {m} entries index {consumed} axes of a rank-{rank} input"
        ));
    }
    let (mut b, mut e, mut s) = (vec![], vec![], vec![]);
    let mut entries = vec![];
    // A whole axis: from 0 to past the end (clamped), step 1.
    let whole = |b: &mut Vec<isize>, e: &mut Vec<isize>, s: &mut Vec<isize>| {
        b.push(0);
        e.push(isize::MAX / 2);
        s.push(1);
    };
    for i in 0..m {
        if is_ellipsis(i) {
            for _ in 0..rank - consumed {
                whole(&mut b, &mut e, &mut s);
                entries.push(Entry::Axis { keep: true });
            }
            continue;
        }
        if is_new(i) {
            entries.push(Entry::NewAxis);
            continue;
        }
        let axis = b.len();
        let n = shape[axis] as isize;
        if bit(masks.shrink_axis_mask, i) {
            let at = if begin[i] < 0 { begin[i] + n } else { begin[i] };
            if !(0..n).contains(&at) {
                return Err(format!(
                    "shrink_axis entry {i} takes index {} of axis {axis} of length {n}",
                    begin[i]
                ));
            }
            b.push(at);
            e.push(at + 1);
            s.push(1);
            entries.push(Entry::Axis { keep: false });
            continue;
        }
        let step = strides[i];
        // Out-of-range bounds clamp in `strided_slice`: these reach the end the stride
        // starts from (begin) or walks to (end).
        let (first, last) = if step > 0 {
            (isize::MIN / 2, isize::MAX / 2)
        } else {
            (isize::MAX / 2, isize::MIN / 2)
        };
        b.push(if bit(masks.begin_mask, i) {
            first
        } else {
            begin[i]
        });
        e.push(if bit(masks.end_mask, i) { last } else { end[i] });
        s.push(step);
        entries.push(Entry::Axis { keep: true });
    }
    while b.len() < rank {
        whole(&mut b, &mut e, &mut s);
        entries.push(Entry::Axis { keep: true });
    }
    Ok(Plan {
        begin: b,
        end: e,
        strides: s,
        entries,
    })
}
