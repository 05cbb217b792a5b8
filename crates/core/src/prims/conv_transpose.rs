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
    /// Cells added at the bottom and right of the output (each less than its stride),
    /// choosing among the output sizes that a strided convolution maps to one input size.
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
        if (0..2).any(|d| opts.output_padding[d] >= opts.stride[d]) {
            return Err(fail(format!(
                "output_padding {:?} must be smaller than the stride {:?}",
                opts.output_padding, opts.stride
            )));
        }
        let (x, w) = (self.shape(), weight.shape());
        let extent = |d: usize| opts.dilation[d] * w[2 + d].saturating_sub(1) + 1;
        // The output before padding is removed: every cell some input cell reaches.
        let full =
            |d: usize| (x[2 + d].max(1) - 1) * opts.stride[d] + extent(d) + opts.output_padding[d];
        attrs.pads = match opts.pad_mode {
            PadMode::Valid => [0; 4],
            PadMode::Pad(p) => p,
            PadMode::Same => {
                let mut p = [0; 4];
                for d in 0..2 {
                    let total = full(d).checked_sub(x[2 + d] * opts.stride[d]).ok_or_else(|| {
                        fail(format!(
                            "`same` needs a kernel extent of at least the stride, got {} and {}",
                            extent(d),
                            opts.stride[d]
                        ))
                    })?;
                    (p[2 * d], p[2 * d + 1]) = (total / 2, total - total / 2);
                }
                p
            }
        };
        let mut out = [x[0], w[1] * opts.groups, 0, 0];
        for d in 0..2 {
            let cut = attrs.pads[2 * d] + attrs.pads[2 * d + 1];
            out[2 + d] = full(d).checked_sub(cut).filter(|&n| n > 0).ok_or_else(|| {
                fail(format!(
                    "padding {:?} removes the whole output ({} cells on axis {})",
                    attrs.pads,
                    full(d),
                    2 + d
                ))
            })?;
        }
        apply(
            Op::Conv2dBackpropInput {
                attrs,
                input_shape: out,
            },
            &[self, weight],
            loc,
        )
    }
}
