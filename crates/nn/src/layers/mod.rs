//! The layers (MindSpore's `mindspore.nn` cells): dense and convolution, pooling,
//! normalisation, activations, dropout, embedding and containers.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = SequentialCell::new(vec![
//!     Flatten::new() as std::sync::Arc<dyn Cell>,
//!     Dense::new(12, 4).unwrap(),
//!     ReLU::new(),
//! ]);
//! let y = net.call1(&Tensor::ones(&[2, 3, 2, 2], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.shape(), &[2, 4]);
//! ```

pub mod activation;
pub mod container;
pub mod conv;
pub mod conv_transpose;
pub mod dense;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod norm;
mod norm_eager;
pub mod pool;

pub use activation::{GELU, ReLU, ReLU6, Sigmoid, Softmax, Tanh};
pub use container::{CellList, SequentialCell};
pub use conv::{Conv2d, Conv2dConfig};
pub use conv_transpose::{Conv2dTranspose, Conv2dTransposeConfig};
pub use dense::{Dense, DenseConfig};
pub use dropout::Dropout;
pub use embedding::{Embedding, EmbeddingConfig};
pub use flatten::Flatten;
pub use norm::{BatchNorm1d, BatchNorm2d, BatchNormConfig, LayerNorm};
pub use pool::{AvgPool2d, MaxPool2d};

use spore_core::{Error, Result, Tensor};

use crate::cell::CellBase;

/// `Conv2d 'conv1'`: the class and, once registered, the attribute name, for errors.
pub(crate) fn label(base: &CellBase, class: &str) -> String {
    match base.scope_name() {
        Some(s) => format!("{class} '{s}'"),
        None => class.to_string(),
    }
}

/// The single input of a one-input layer.
pub(crate) fn single<'a>(base: &CellBase, class: &str, inputs: &'a [Tensor]) -> Result<&'a Tensor> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::invalid(format!(
            "{}: expected 1 input, got {}",
            label(base, class),
            inputs.len()
        ))),
    }
}

/// Checks that a layer's size arguments are positive.
pub(crate) fn positive(class: &str, what: &[(&str, usize)]) -> Result<()> {
    for (name, v) in what {
        if *v == 0 {
            return Err(Error::invalid(format!(
                "{class}: {name} must be at least 1, got 0"
            )));
        }
    }
    Ok(())
}

/// What a convolution layer's configuration must satisfy: positive sizes, and channels
/// that divide by the group count.
pub(crate) fn check_conv_args(
    class: &str,
    channels: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    group: usize,
) -> Result<()> {
    let [in_channels, out_channels] = channels;
    positive(
        class,
        &[
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("kernel height", kernel[0]),
            ("kernel width", kernel[1]),
            ("stride", stride[0].min(stride[1])),
            ("dilation", dilation[0].min(dilation[1])),
            ("group", group),
        ],
    )?;
    if !in_channels.is_multiple_of(group) || !out_channels.is_multiple_of(group) {
        return Err(Error::invalid(format!(
            "{class}: in_channels={in_channels} and out_channels={out_channels} must both be divisible by group={group}"
        )));
    }
    Ok(())
}

/// The single NCHW input of a convolution layer, with `channels` channels.
pub(crate) fn nchw_input<'a>(
    base: &CellBase,
    class: &str,
    inputs: &'a [Tensor],
    channels: usize,
) -> Result<&'a Tensor> {
    let x = single(base, class, inputs)?;
    if x.rank() != 4 || x.shape()[1] != channels {
        return Err(Error::invalid(format!(
            "{}: expected an NCHW input with C = in_channels = {channels}, got shape {:?}",
            label(base, class),
            x.shape()
        )));
    }
    Ok(x)
}

/// `y` plus the per-channel `bias` (axis 1), when the layer has one.
pub(crate) fn add_channel_bias(y: Tensor, bias: Option<&spore_core::Parameter>) -> Result<Tensor> {
    match bias {
        Some(b) => {
            let b = b.value();
            y.add(&b.reshape(&[1, b.numel(), 1, 1])?)
        }
        None => Ok(y),
    }
}

/// `weight` and, when present, `bias`, under those names.
pub(crate) fn weight_and_bias_params(
    weight: &spore_core::Parameter,
    bias: Option<&spore_core::Parameter>,
) -> Vec<(String, spore_core::Parameter)> {
    let mut v = vec![crate::cell::param("weight", weight)];
    if let Some(b) = bias {
        v.push(crate::cell::param("bias", b));
    }
    v
}

/// A layer's `weight` of `shape` and, with `has_bias`, its `bias` of `[out]`: from the
/// given initializers, or MindSpore's defaults (HeUniform(sqrt 5) weight, Uniform bias
/// bounded by `1 / sqrt(fan_in)`). Shared by Dense and Conv2d.
pub(crate) fn weight_and_bias(
    shape: &[usize],
    out: usize,
    weight_init: Option<crate::init::Initializer>,
    bias_init: Option<crate::init::Initializer>,
    has_bias: bool,
    dtype: spore_core::DType,
) -> Result<(spore_core::Parameter, Option<spore_core::Parameter>)> {
    let w_init = weight_init.unwrap_or_else(crate::init::Initializer::default_weight);
    let weight = spore_core::Parameter::new(w_init.init(shape, dtype)?, "weight");
    let bias = if has_bias {
        let b_init = match bias_init {
            Some(i) => i,
            None => crate::init::Initializer::default_bias(shape)?,
        };
        Some(spore_core::Parameter::new(
            b_init.init(&[out], dtype)?,
            "bias",
        ))
    } else {
        None
    };
    Ok((weight, bias))
}
