//! Transposed 2-D convolution (MindSpore's `Conv2dTranspose`, ONNX's `ConvTranspose`,
//! PyTorch's `conv_transpose2d`): the adjoint of [`Tensor::conv2d`], computed by the
//! `Conv2DBackpropInput` primitive, whose gradients it shares. The weight is laid out as
//! the forward convolution's: `[in_channels, out_channels / groups, kh, kw]`.
//!
//! ```
//! use spore_core::{Tensor, DType, prims::conv_transpose::ConvTranspose2dOptions};
//! let x = Tensor::ones(&[1, 2, 3, 3], DType::F32).unwrap();
//! let w = Tensor::ones(&[2, 4, 3, 3], DType::F32).unwrap();
//! let opts = ConvTranspose2dOptions { stride: [2, 2], output_padding: [1, 1], ..Default::default() };
//! // (3 - 1) * 2 + 3 + 1 = 8
//! assert_eq!(x.conv_transpose2d(&w, &opts).unwrap().shape(), &[1, 4, 8, 8]);
//! ```

use std::panic::Location;

use super::conv::PadMode;
use crate::apply::{apply, op_error};
use crate::error::Result;
use crate::op::{ConvAttrs, Op};
use crate::tensor::Tensor;

/// Options of [`Tensor::conv_transpose2d`] (defaults: stride 1, dilation 1, no padding,
/// one group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// `Pad` removes (top, bottom, left, right) cells from the full output; `Same`
    /// makes the output `input * stride` (extra removed cell at the bottom/right);
    /// `Valid` removes nothing.
    pub pad_mode: PadMode,
    /// Cells added at the bottom and right of the output: the ones the end padding would
    /// remove, then zeros (a strided convolution maps several output sizes to one input
    /// size; this picks one).
    pub output_padding: [usize; 2],
    pub groups: usize,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        ConvTranspose2dOptions {
            stride: [1, 1],
            dilation: [1, 1],
            pad_mode: PadMode::Valid,
            output_padding: [0, 0],
            groups: 1,
        }
    }
}

impl Tensor {
    /// Transposed convolution of an NCHW input with an `[C_in, C_out/groups, kh, kw]`
    /// weight (no bias; add it separately).
    #[track_caller]
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        opts: &ConvTranspose2dOptions,
    ) -> Result<Tensor> {
        let loc = Location::caller();
        let mut attrs = ConvAttrs {
            stride: opts.stride,
            dilation: opts.dilation,
            pads: [0; 4],
            groups: opts.groups,
        };
        let probe = Op::Conv2dBackpropInput {
            attrs,
            input_shape: [0; 4],
        };
        let fail = |m: String| op_error(&probe, m, &[self, weight], loc);
        if self.rank() != 4 || weight.rank() != 4 {
            return Err(fail(format!(
                "input and weight must be 4-d, got {:?} and {:?}",
                self.shape(),
                weight.shape()
            )));
        }
        if opts.stride.contains(&0) || opts.dilation.contains(&0) || opts.groups == 0 {
            return Err(fail(
                "stride, dilation and groups must be at least 1".into(),
            ));
        }
        let (x, w) = (self.shape(), weight.shape());
        let extent = |d: usize| {
            opts.dilation[d]
                .checked_mul(w[2 + d].saturating_sub(1))
                .and_then(|e| e.checked_add(1))
        };
        // Every cell some input cell reaches (before padding is removed), and with the
        // output padding after it.
        let reach = |d: usize| {
            (x[2 + d].max(1) - 1)
                .checked_mul(opts.stride[d])
                .and_then(|r| r.checked_add(extent(d)?))
        };
        let full = |d: usize| reach(d).and_then(|r| r.checked_add(opts.output_padding[d]));
        let overflow = || fail("the output size overflows (stride or dilation too large)".into());
        let pads = match opts.pad_mode {
            PadMode::Valid => [0; 4],
            PadMode::Pad(p) => p,
            PadMode::Same => {
                let mut p = [0; 4];
                for d in 0..2 {
                    let want = x[2 + d].checked_mul(opts.stride[d]).ok_or_else(overflow)?;
                    let total = full(d).ok_or_else(overflow)?.checked_sub(want).ok_or_else(|| {
                        fail(format!(
                            "`same` needs a kernel extent of at least the stride, got {:?} and {}",
                            extent(d),
                            opts.stride[d]
                        ))
                    })?;
                    (p[2 * d], p[2 * d + 1]) = (total / 2, total - total / 2);
                }
                p
            }
        };
        // The primitive computes rows `pads[top]..reach - end` of the full output. Output
        // padding first gives back rows the end padding removed; past `reach` its rows
        // hold zeros, appended afterwards.
        let mut out = [x[0], w[1] * opts.groups, 0, 0];
        let mut zeros = [0usize; 2];
        for d in 0..2 {
            let (before, after, extra) = (pads[2 * d], pads[2 * d + 1], opts.output_padding[d]);
            let end = after.saturating_sub(extra);
            zeros[d] = extra.saturating_sub(after);
            attrs.pads[2 * d] = before;
            attrs.pads[2 * d + 1] = end;
            let r = reach(d).ok_or_else(overflow)?;
            out[2 + d] = r
                .checked_sub(before + end)
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    fail(format!(
                        "padding {pads:?} removes the whole output ({r} cells on axis {})",
                        2 + d
                    ))
                })?;
        }
        let y = apply(
            Op::Conv2dBackpropInput {
                attrs,
                input_shape: out,
            },
            &[self, weight],
            loc,
        )?;
        if zeros == [0, 0] {
            return Ok(y);
        }
        y.pad(&[(0, 0), (0, 0), (0, zeros[0]), (0, zeros[1])], 0.0)
    }
}
