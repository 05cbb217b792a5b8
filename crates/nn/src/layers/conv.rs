//! `Conv2d`: 2-D convolution over NCHW inputs with MindSpore's arguments and defaults
//! (`pad_mode` `same`, no bias, weight `HeUniform(sqrt 5)`, bias `Uniform(1/sqrt(fan_in))`).
//! The weight is `(out, in/group, kh, kw)`.
//!
//! ```
//! use spore_core::{DType, Tensor, ops::PadMode};
//! use spore_nn::prelude::*;
//! let conv = Conv2d::config(1, 6, 5).pad_mode(PadMode::Valid).build().unwrap();
//! assert_eq!(conv.weight.tensor_type().shape.as_slice(), &[6, 1, 5, 5]);
//! assert!(conv.bias.is_none()); // has_bias defaults to false
//! let y = conv.call1(&Tensor::ones(&[2, 1, 32, 32], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.shape(), &[2, 6, 28, 28]);
//! ```

use std::sync::Arc;

use spore_core::ops::{Conv2dOptions, PadMode};
use spore_core::{DType, Parameter, Result, Tensor};

use super::{add_channel_bias, check_conv_args, nchw_input, weight_and_bias_params};
use crate::cell::{Cell, CellBase};
use crate::init::Initializer;

/// A 2-D convolution layer.
pub struct Conv2d {
    base: CellBase,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
    pub in_channels: usize,
    pub out_channels: usize,
    options: Conv2dOptions,
}

/// `Conv2d`'s arguments with MindSpore's defaults.
#[derive(Clone, Debug)]
pub struct Conv2dConfig {
    in_channels: usize,
    out_channels: usize,
    kernel_size: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    pad_mode: PadMode,
    group: usize,
    has_bias: bool,
    weight_init: Option<Initializer>,
    bias_init: Option<Initializer>,
    dtype: DType,
}

impl Conv2dConfig {
    /// A rectangular kernel `(kh, kw)`.
    pub fn kernel_size_hw(mut self, kh: usize, kw: usize) -> Self {
        self.kernel_size = [kh, kw];
        self
    }
    pub fn stride(mut self, s: usize) -> Self {
        self.stride = [s, s];
        self
    }
    pub fn stride_hw(mut self, sh: usize, sw: usize) -> Self {
        self.stride = [sh, sw];
        self
    }
    pub fn dilation(mut self, d: usize) -> Self {
        self.dilation = [d, d];
        self
    }
    /// `valid`, `same` (the default) or `pad` with explicit (top, bottom, left, right).
    pub fn pad_mode(mut self, mode: PadMode) -> Self {
        self.pad_mode = mode;
        self
    }
    /// `pad_mode="pad", padding=p`: the same padding on all four sides.
    pub fn padding(mut self, p: usize) -> Self {
        self.pad_mode = PadMode::Pad([p; 4]);
        self
    }
    pub fn group(mut self, g: usize) -> Self {
        self.group = g;
        self
    }
    pub fn has_bias(mut self, on: bool) -> Self {
        self.has_bias = on;
        self
    }
    pub fn weight_init(mut self, init: Initializer) -> Self {
        self.weight_init = Some(init);
        self
    }
    pub fn bias_init(mut self, init: Initializer) -> Self {
        self.bias_init = Some(init);
        self
    }
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    pub fn build(self) -> Result<Arc<Conv2d>> {
        check_conv_args(
            "Conv2d",
            [self.in_channels, self.out_channels],
            self.kernel_size,
            self.stride,
            self.dilation,
            self.group,
        )?;
        let shape = [
            self.out_channels,
            self.in_channels / self.group,
            self.kernel_size[0],
            self.kernel_size[1],
        ];
        let (weight, bias) = super::weight_and_bias(
            &shape,
            self.out_channels,
            self.weight_init,
            self.bias_init,
            self.has_bias,
            self.dtype,
        )?;
        Ok(Arc::new(Conv2d {
            base: CellBase::new(),
            weight,
            bias,
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            options: Conv2dOptions {
                stride: self.stride,
                dilation: self.dilation,
                pad_mode: self.pad_mode,
                groups: self.group,
            },
        }))
    }
}

impl Conv2d {
    /// `Conv2d(in, out, kernel_size)` with MindSpore's defaults (`same`, no bias).
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Result<Arc<Conv2d>> {
        Conv2d::config(in_channels, out_channels, kernel_size).build()
    }

    pub fn config(in_channels: usize, out_channels: usize, kernel_size: usize) -> Conv2dConfig {
        Conv2dConfig {
            in_channels,
            out_channels,
            kernel_size: [kernel_size; 2],
            stride: [1; 2],
            dilation: [1; 2],
            pad_mode: PadMode::Same,
            group: 1,
            has_bias: false,
            weight_init: None,
            bias_init: None,
            dtype: DType::F32,
        }
    }

    pub fn options(&self) -> &Conv2dOptions {
        &self.options
    }
}

impl Cell for Conv2d {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = nchw_input(&self.base, "Conv2d", inputs, self.in_channels)?;
        let y = x.conv2d(&self.weight.value(), &self.options)?;
        Ok(vec![add_channel_bias(y, self.bias.as_ref())?])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        weight_and_bias_params(&self.weight, self.bias.as_ref())
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Conv2d"
    }
}
