//! Padding with every mode MindSpore's `ops.pad` and ONNX's `Pad` offer: a constant,
//! `reflect` (mirror without the edge), `replicate` (repeat the edge; ONNX's `edge`) and
//! `circular` (wrap around; ONNX's `wrap`), with negative amounts cropping. Reflect,
//! replicate and circular are slices and a concatenation of the input, so their
//! gradients are those ops' gradients.
//!
//! ```
//! use spore_core::{Tensor, prims::padding::PaddingMode};
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
//! let r = x.pad_with(&[(2, 1)], PaddingMode::Reflect).unwrap();
//! assert_eq!(r.to_vec::<f32>().unwrap(), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
//! let e = x.pad_with(&[(1, -1)], PaddingMode::Replicate).unwrap();
//! assert_eq!(e.to_vec::<f32>().unwrap(), vec![1.0, 1.0, 2.0]);
//! ```

use std::panic::Location;

use crate::apply::{apply, op_error};
use crate::error::{Result, SourceLocation};
use crate::op::Op;
use crate::tensor::Tensor;

/// How [`Tensor::pad_with`] fills the new cells.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PaddingMode {
    /// Every new cell holds this value.
    Constant(f64),
    /// Mirrored about the edge cell, which is not repeated: `[1 2 3]` padded by 2 on the
    /// left reads `3 2 | 1 2 3`. Each amount must be smaller than its axis.
    Reflect,
    /// The edge cell repeated (ONNX's `edge`).
    Replicate,
    /// The other end of the axis (ONNX's `wrap`). Each amount must be at most its axis.
    Circular,
}

impl Tensor {
    /// Pads (positive amounts) or crops (negative amounts) each axis by `(before, after)`.
    /// Cropping happens first, so a mode reads the cropped tensor.
    #[track_caller]
    pub fn pad_with(&self, pads: &[(isize, isize)], mode: PaddingMode) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::Pad {
            pads: vec![],
            value_bits: 0,
        };
        let fail = |m: String| op_error(&probe, m, &[self], loc);
        if pads.len() != self.rank() {
            return Err(fail(format!(
                "expected {} (before, after) pairs, one per axis, got {}",
                self.rank(),
                pads.len()
            )));
        }
        let mut x = self.clone();
        for (axis, &(before, after)) in pads.iter().enumerate() {
            let n = x.shape()[axis];
            let cut = |v: isize| v.min(0).unsigned_abs();
            let (cut_front, cut_back) = (cut(before), cut(after));
            if cut_front.saturating_add(cut_back) > n {
                return Err(fail(format!(
                    "cropping {} and {} from axis {axis} of length {n} leaves less than nothing",
                    cut_front, cut_back
                )));
            }
            if cut_front + cut_back > 0 {
                x = axis_slice(&x, axis, cut_front, 1, n - cut_front - cut_back, loc)?;
            }
        }
        let grow: Vec<(usize, usize)> = pads
            .iter()
            .map(|&(b, a)| (b.max(0) as usize, a.max(0) as usize))
            .collect();
        if grow.iter().all(|&(b, a)| b == 0 && a == 0) {
            return Ok(x);
        }
        if let PaddingMode::Constant(value) = mode {
            return apply(
                Op::Pad {
                    pads: grow,
                    value_bits: value.to_bits(),
                },
                &[&x],
                loc,
            );
        }
        for (axis, &(before, after)) in grow.iter().enumerate() {
            if before == 0 && after == 0 {
                continue;
            }
            let n = x.shape()[axis];
            let (front, back) = match mode {
                PaddingMode::Reflect => {
                    if before >= n || after >= n {
                        return Err(fail(format!(
                            "reflect padding ({before}, {after}) on axis {axis} must be smaller than its length {n}"
                        )));
                    }
                    (
                        axis_slice(&x, axis, before, -1, before, loc)?,
                        axis_slice(&x, axis, n.saturating_sub(2), -1, after, loc)?,
                    )
                }
                PaddingMode::Replicate => {
                    if n == 0 {
                        return Err(fail(format!(
                            "replicate padding needs a non-empty axis {axis}"
                        )));
                    }
                    let edge = |at: usize, count: usize| -> Result<Tensor> {
                        let mut shape = x.shape().to_vec();
                        shape[axis] = count;
                        axis_slice(&x, axis, at, 1, 1, loc)?.broadcast_to(&shape)
                    };
                    (edge(0, before)?, edge(n - 1, after)?)
                }
                PaddingMode::Circular => {
                    if before > n || after > n {
                        return Err(fail(format!(
                            "circular padding ({before}, {after}) on axis {axis} must be at most its length {n}"
                        )));
                    }
                    (
                        axis_slice(&x, axis, n - before, 1, before, loc)?,
                        axis_slice(&x, axis, 0, 1, after, loc)?,
                    )
                }
                // Padded in one op above.
                PaddingMode::Constant(_) => continue,
            };
            let parts: Vec<&Tensor> = [&front, &x, &back]
                .into_iter()
                .filter(|t| t.shape()[axis] > 0)
                .collect();
            x = Tensor::concat(&parts, axis as isize)?;
        }
        Ok(x)
    }
}

/// `count` elements of `axis` from `start` in steps of `step`; every other axis whole.
fn axis_slice(
    x: &Tensor,
    axis: usize,
    start: usize,
    step: isize,
    count: usize,
    loc: SourceLocation,
) -> Result<Tensor> {
    let mut begin = vec![0; x.rank()];
    let mut steps = vec![1; x.rank()];
    let mut len = x.shape().to_vec();
    begin[axis] = if count == 0 { 0 } else { start };
    steps[axis] = step;
    len[axis] = count;
    apply(
        Op::StridedSlice {
            begin,
            step: steps,
            len,
        },
        &[x],
        loc,
    )
}
