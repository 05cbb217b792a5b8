//! `MaxPool` and `AvgPool` over NCHW tensors with MindSpore's `pad_mode`, and their
//! gradient primitives.
//!
//! ```
//! use spore_core::{Tensor, DType, prims::{conv::PadMode, pool::Pool2dOptions}};
//! let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32).unwrap().reshape(&[1, 1, 4, 4]).unwrap();
//! let y = x.max_pool2d(&Pool2dOptions::new(2, 2)).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), vec![5.0, 7.0, 13.0, 15.0]);
//! ```

use std::panic::Location;

use spore_kernels::pool::{self as k, PoolGeometry};
use spore_kernels::{Buffer, Dims};

use super::conv::{PadMode, resolve_padding};
use crate::apply::{apply, op_error};
use crate::error::Result;
use crate::op::{Op, PoolAttrs};
use crate::tensor::{Storage, Tensor, TensorType};

/// Pooling options: kernel size, stride, MindSpore's `pad_mode` and `ceil_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dOptions {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pad_mode: PadMode,
    /// Round the output size up instead of down (MindSpore's and PyTorch's `ceil_mode`).
    pub ceil_mode: bool,
}

impl Pool2dOptions {
    /// Square kernel and stride, `valid` padding (MindSpore's default).
    pub fn new(kernel: usize, stride: usize) -> Self {
        Pool2dOptions {
            kernel: [kernel, kernel],
            stride: [stride, stride],
            pad_mode: PadMode::Valid,
            ceil_mode: false,
        }
    }
    pub fn pad_mode(mut self, p: PadMode) -> Self {
        self.pad_mode = p;
        self
    }
    pub fn ceil_mode(mut self, ceil: bool) -> Self {
        self.ceil_mode = ceil;
        self
    }
}

fn geometry(a: &PoolAttrs, input: [usize; 4]) -> PoolGeometry {
    PoolGeometry::with_ceil_mode(input, a.kernel, a.stride, a.pads, a.ceil_mode)
}

fn out_shape(a: &PoolAttrs, s: &[usize]) -> Result<Dims, String> {
    if s.len() != 4 {
        return Err(format!("input must be 4-d (NCHW), got {s:?}"));
    }
    if a.kernel.contains(&0) || a.stride.contains(&0) {
        return Err("kernel and stride must be at least 1".into());
    }
    let (ph, pw) = (s[2] + a.pads[0] + a.pads[1], s[3] + a.pads[2] + a.pads[3]);
    if ph < a.kernel[0] || pw < a.kernel[1] {
        return Err(format!(
            "kernel {:?} does not fit the padded input {ph}x{pw}",
            a.kernel
        ));
    }
    if a.pads[0].max(a.pads[1]) >= a.kernel[0] || a.pads[2].max(a.pads[3]) >= a.kernel[1] {
        return Err(format!(
            "padding {:?} must be smaller than the kernel {:?}",
            a.pads, a.kernel
        ));
    }
    let len = |d: usize| {
        k::pooled_len(
            s[2 + d],
            a.kernel[d],
            a.stride[d],
            (a.pads[2 * d], a.pads[2 * d + 1]),
            a.ceil_mode,
        )
        .unwrap_or(0)
    };
    Ok(Dims::from_slice(&[s[0], s[1], len(0), len(1)]))
}

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    let x = inputs[0];
    super::require_float(x, "input")?;
    match op {
        Op::MaxPool2d(a) | Op::AvgPool2d(a) => {
            Ok(TensorType::new(&out_shape(a, &x.shape)?, x.dtype))
        }
        Op::MaxPool2dGrad(a) | Op::MaxPool2dGradOfRelu(a) => {
            super::require_same_dtype(x, inputs[1])?;
            let expect = out_shape(a, &x.shape)?;
            if inputs[1].shape != expect {
                return Err(format!("dy must be {expect:?}, got {:?}", inputs[1].shape));
            }
            Ok(x.clone())
        }
        Op::AvgPool2dGrad { attrs, input_shape } => {
            let expect = out_shape(attrs, input_shape)?;
            if x.shape != expect {
                return Err(format!("dy must be {expect:?}, got {:?}", x.shape));
            }
            Ok(TensorType::new(input_shape, x.dtype))
        }
        _ => Err(format!("{} is not a pooling op", op.name())),
    }
}

fn dims(s: &[usize]) -> [usize; 4] {
    [s[0], s[1], s[2], s[3]]
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    let x = inputs[0].contiguous_buffer();
    let buf = match (op, &*x) {
        (Op::MaxPool2d(a), Buffer::F32(v)) => {
            Buffer::F32(k::max_pool2d(v, &geometry(a, dims(inputs[0].shape()))))
        }
        (Op::MaxPool2d(a), Buffer::F64(v)) => {
            Buffer::F64(k::max_pool2d(v, &geometry(a, dims(inputs[0].shape()))))
        }
        // The kernel widens 16-bit planes a few at a time, rounding each result once.
        (Op::MaxPool2d(a), Buffer::BF16(v)) => {
            Buffer::BF16(k::max_pool2d(v, &geometry(a, dims(inputs[0].shape()))))
        }
        (Op::MaxPool2d(a), Buffer::F16(v)) => {
            Buffer::F16(k::max_pool2d(v, &geometry(a, dims(inputs[0].shape()))))
        }
        (Op::AvgPool2d(a), Buffer::F32(v)) => Buffer::F32(k::avg_pool2d(
            v,
            &geometry(a, dims(inputs[0].shape())),
            a.count_include_pad,
        )),
        (Op::AvgPool2d(a), Buffer::F64(v)) => Buffer::F64(k::avg_pool2d(
            v,
            &geometry(a, dims(inputs[0].shape())),
            a.count_include_pad,
        )),
        (Op::MaxPool2dGrad(a) | Op::MaxPool2dGradOfRelu(a), _) => {
            let g = geometry(a, dims(inputs[0].shape()));
            let relu = matches!(op, Op::MaxPool2dGradOfRelu(_));
            match (&*x, &*inputs[1].contiguous_buffer()) {
                (Buffer::F32(v), Buffer::F32(d)) if relu => {
                    Buffer::F32(k::max_pool2d_backward_of_relu(v, d, &g))
                }
                (Buffer::F64(v), Buffer::F64(d)) if relu => {
                    Buffer::F64(k::max_pool2d_backward_of_relu(v, d, &g))
                }
                (Buffer::F32(v), Buffer::F32(d)) => Buffer::F32(k::max_pool2d_backward(v, d, &g)),
                (Buffer::F64(v), Buffer::F64(d)) => Buffer::F64(k::max_pool2d_backward(v, d, &g)),
                (Buffer::BF16(v), Buffer::BF16(d)) => {
                    Buffer::BF16(k::max_pool2d_backward_masked(v, d, &g, relu))
                }
                (Buffer::F16(v), Buffer::F16(d)) => {
                    Buffer::F16(k::max_pool2d_backward_masked(v, d, &g, relu))
                }
                _ => return Err("inputs must be floats of one dtype".into()),
            }
        }
        (Op::AvgPool2dGrad { attrs, input_shape }, d) => {
            let g = geometry(attrs, *input_shape);
            match d {
                Buffer::F32(d) => {
                    Buffer::F32(k::avg_pool2d_backward(d, &g, attrs.count_include_pad))
                }
                Buffer::F64(d) => {
                    Buffer::F64(k::avg_pool2d_backward(d, &g, attrs.count_include_pad))
                }
                _ => return Err("input must be Float32 or Float64".into()),
            }
        }
        _ => return Err(format!("{}: unsupported input", op.name())),
    };
    Ok(Storage::contiguous(buf, &out.shape))
}

pub(crate) fn vjp(op: &Op, inputs: &[Tensor], g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let loc = Location::caller();
    Ok(match op {
        Op::MaxPool2d(a) => vec![Some(apply(Op::MaxPool2dGrad(*a), &[&inputs[0], g], loc)?)],
        Op::AvgPool2d(a) => vec![Some(apply(
            Op::AvgPool2dGrad {
                attrs: *a,
                input_shape: dims(inputs[0].shape()),
            },
            &[g],
            loc,
        )?)],
        // AvgPoolGrad is linear in dy and is the adjoint of AvgPool.
        Op::AvgPool2dGrad { attrs, .. } => vec![Some(apply(Op::AvgPool2d(*attrs), &[g], loc)?)],
        Op::MaxPool2dGrad(_) | Op::MaxPool2dGradOfRelu(_) => {
            return Err(crate::error::Error::invalid(
                "MaxPoolGrad: gradients of order three or more through max pooling are not supported",
            ));
        }
        _ => vec![None; inputs.len()],
    })
}

impl Tensor {
    #[track_caller]
    fn pool_attrs(&self, opts: &Pool2dOptions, max: bool) -> Result<PoolAttrs> {
        if self.rank() != 4 {
            let probe = if max {
                Op::MaxPool2d(PoolAttrs {
                    kernel: opts.kernel,
                    stride: opts.stride,
                    pads: [0; 4],
                    count_include_pad: false,
                    ceil_mode: opts.ceil_mode,
                })
            } else {
                Op::AvgPool2d(PoolAttrs {
                    kernel: opts.kernel,
                    stride: opts.stride,
                    pads: [0; 4],
                    count_include_pad: false,
                    ceil_mode: opts.ceil_mode,
                })
            };
            return Err(op_error(
                &probe,
                format!("input must be 4-d (NCHW), got {:?}", self.shape()),
                &[self],
                Location::caller(),
            ));
        }
        let pads = resolve_padding(
            opts.pad_mode,
            [self.shape()[2], self.shape()[3]],
            opts.kernel,
            opts.stride,
        );
        // `same` leaves padding out of the average (MindSpore); explicit padding counts it.
        let count_include_pad = matches!(opts.pad_mode, PadMode::Pad(_));
        Ok(PoolAttrs {
            kernel: opts.kernel,
            stride: opts.stride,
            pads,
            count_include_pad,
            ceil_mode: opts.ceil_mode,
        })
    }

    /// Max pooling over NCHW windows (padding counts as -inf).
    #[track_caller]
    pub fn max_pool2d(&self, opts: &Pool2dOptions) -> Result<Tensor> {
        let a = self.pool_attrs(opts, true)?;
        apply(Op::MaxPool2d(a), &[self], Location::caller())
    }

    /// Average pooling over NCHW windows.
    #[track_caller]
    pub fn avg_pool2d(&self, opts: &Pool2dOptions) -> Result<Tensor> {
        let a = self.pool_attrs(opts, false)?;
        apply(Op::AvgPool2d(a), &[self], Location::caller())
    }
}
