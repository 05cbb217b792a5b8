//! `Conv2dTranspose`: the transposed 2-D convolution layer (MindSpore's
//! `nn.Conv2dTranspose`, PyTorch's `nn.ConvTranspose2d`), the upsampling layer of
//! decoders and generators. The weight is `(in, out/group, kh, kw)`; `pad_mode` `same`
//! (the default) makes the output `input * stride`, `valid` keeps every cell the input
//! reaches, `pad` removes the given cells; `output_padding` adds cells at the bottom and
//! right.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let up = Conv2dTranspose::config(8, 4, 3).stride(2).has_bias(true).build().unwrap();
//! assert_eq!(up.weight.tensor_type().shape.as_slice(), &[8, 4, 3, 3]);
//! let y = up.call1(&Tensor::ones(&[2, 8, 5, 5], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.shape(), &[2, 4, 10, 10]);
//! ```

use std::sync::Arc;

use spore_core::ops::{ConvTranspose2dOptions, PadMode};
use spore_core::{DType, Parameter, Result, Tensor};

use super::{add_channel_bias, check_conv_args, nchw_input, weight_and_bias_params};
use crate::cell::{Cell, CellBase};
use crate::init::Initializer;

/// A transposed 2-D convolution layer.
pub struct Conv2dTranspose {
    base: CellBase,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
    pub in_channels: usize,
    pub out_channels: usize,
    options: ConvTranspose2dOptions,
}

/// `Conv2dTranspose`'s arguments with MindSpore's defaults.
#[derive(Clone, Debug)]
pub struct Conv2dTransposeConfig {
    in_channels: usize,
    out_channels: usize,
    kernel_size: [usize; 2],
    options: ConvTranspose2dOptions,
    has_bias: bool,
    weight_init: Option<Initializer>,
    bias_init: Option<Initializer>,
    dtype: DType,
}

impl Conv2dTransposeConfig {
    pub fn kernel_size_hw(mut self, kh: usize, kw: usize) -> Self {
        self.kernel_size = [kh, kw];
        self
    }
    pub fn stride(mut self, s: usize) -> Self {
        self.options.stride = [s, s];
        self
    }
    pub fn dilation(mut self, d: usize) -> Self {
        self.options.dilation = [d, d];
        self
    }
    /// `same` (the default), `valid`, or `pad` with (top, bottom, left, right) removed.
    pub fn pad_mode(mut self, mode: PadMode) -> Self {
        self.options.pad_mode = mode;
        self
    }
    pub fn output_padding(mut self, p: usize) -> Self {
        self.options.output_padding = [p, p];
        self
    }
    pub fn group(mut self, g: usize) -> Self {
        self.options.groups = g;
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

    pub fn build(self) -> Result<Arc<Conv2dTranspose>> {
        let o = &self.options;
        check_conv_args(
            "Conv2dTranspose",
            [self.in_channels, self.out_channels],
            self.kernel_size,
            o.stride,
            o.dilation,
            o.groups,
        )?;
        let shape = [
            self.in_channels,
            self.out_channels / o.groups,
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
        Ok(Arc::new(Conv2dTranspose {
            base: CellBase::new(),
            weight,
            bias,
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            options: self.options,
        }))
    }
}

impl Conv2dTranspose {
    /// `Conv2dTranspose(in, out, kernel_size)` with MindSpore's defaults (`same`, no bias).
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
    ) -> Result<Arc<Conv2dTranspose>> {
        Conv2dTranspose::config(in_channels, out_channels, kernel_size).build()
    }

    pub fn config(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
    ) -> Conv2dTransposeConfig {
        Conv2dTransposeConfig {
            in_channels,
            out_channels,
            kernel_size: [kernel_size; 2],
            options: ConvTranspose2dOptions {
                pad_mode: PadMode::Same,
                ..Default::default()
            },
            has_bias: false,
            weight_init: None,
            bias_init: None,
            dtype: DType::F32,
        }
    }

    pub fn options(&self) -> &ConvTranspose2dOptions {
        &self.options
    }
}

impl Cell for Conv2dTranspose {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = nchw_input(&self.base, "Conv2dTranspose", inputs, self.in_channels)?;
        let y = x.conv_transpose2d(&self.weight.value(), &self.options)?;
        Ok(vec![add_channel_bias(y, self.bias.as_ref())?])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        weight_and_bias_params(&self.weight, self.bias.as_ref())
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Conv2dTranspose"
    }
}
