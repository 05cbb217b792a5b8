//! Automatic mixed precision (MindSpore's `mindspore.amp`): [`auto_mixed_precision`]
//! sets the compute dtype of a network's cells by level, [`build_train_network`] wraps
//! network, loss and optimizer into a training step with the level's loss scaling, and
//! the [`loss_scale`] managers decide each step's scale.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::amp::{build_train_network, AmpLevel, AmpOptions};
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
//! let step = build_train_network(net, opt, Some(loss), AmpLevel::O2, AmpOptions::default()).unwrap();
//! let x = Tensor::ones(&[2, 1, 32, 32], DType::F32).unwrap();
//! let y = Tensor::from_vec(vec![1i32, 7], &[2]).unwrap();
//! let out = step.call(&[x, y]).unwrap();
//! assert_eq!(out[0].dtype(), DType::F32); // the loss is computed in float32
//! ```
//!
//! The levels, as MindSpore defines them:
//!
//! | level | compute dtype | kept in float32 | loss scaling |
//! |---|---|---|---|
//! | `O0` | float32 | everything | none |
//! | `O1` | 16-bit for the white list: Conv1d/2d/3d and their transposes, Dense, LSTMCell, RNNCell, GRUCell, PReLU, ReLU (and MatMul, BatchMatMul inside them) | the rest | none |
//! | `O2` | 16-bit for the network | BatchNorm, LayerNorm (`keep_batchnorm_fp32`) and the loss | dynamic |
//! | `O3` | 16-bit for the network, BatchNorm included | the loss | none |
//! | `auto` | as `O0` on CPUs | | |
//!
//! The 16-bit type is float16 by default (MindSpore's), or bfloat16 (`AmpOptions::dtype`).
//! Parameters stay float32 (master weights): each op casts them to the compute dtype,
//! and their gradients come back through the casts as float32. `auto` is `O0` on CPUs:
//! MindSpore picks O2 for GPUs and O3 for Ascend, and names no CPU level.

mod all_finite_op;
mod fused_step;
pub mod loss_scale;
mod scale_params;
mod scaled_grads;
mod train_step;

use std::sync::Arc;

use spore_core::{DType, Error, Result};

use crate::cell::Cell;
use crate::optim::Optimizer;
use crate::wrap::{TrainOneStepCell, WithLossCell};
pub use all_finite_op::all_finite_tensor;
pub use loss_scale::{
    DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager, LossScaleState, all_finite,
};
pub use train_step::TrainOneStepWithLossScaleCell;

/// MindSpore's `amp_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmpLevel {
    O0,
    O1,
    O2,
    O3,
    Auto,
}

impl std::str::FromStr for AmpLevel {
    type Err = Error;
    fn from_str(s: &str) -> Result<AmpLevel> {
        Ok(match s {
            "O0" => AmpLevel::O0,
            "O1" => AmpLevel::O1,
            "O2" => AmpLevel::O2,
            "O3" => AmpLevel::O3,
            "auto" => AmpLevel::Auto,
            other => {
                return Err(Error::invalid(format!(
                    "amp_level: expected one of 'O0', 'O1', 'O2', 'O3', 'auto', got {other:?}"
                )));
            }
        })
    }
}

/// The cells O1 computes in 16 bits (MindSpore's white list, by class name).
pub const O1_WHITE_LIST: [&str; 12] = [
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "Conv1dTranspose",
    "Conv2dTranspose",
    "Conv3dTranspose",
    "Dense",
    "LSTMCell",
    "RNNCell",
    "GRUCell",
    "PReLU",
    "ReLU",
];

/// The normalisation cells O2 keeps in float32.
pub const KEPT_FP32: [&str; 3] = ["BatchNorm1d", "BatchNorm2d", "LayerNorm"];

/// What [`build_train_network`] takes besides the level; `None` fields follow the level.
#[derive(Clone, Default)]
pub struct AmpOptions {
    /// The 16-bit type: float16 (the default) or bfloat16.
    pub dtype: Option<DType>,
    /// MindSpore's `cast_model_type`: the network's compute dtype, overriding the level's.
    pub cast_model_type: Option<DType>,
    /// MindSpore's `keep_batchnorm_fp32`, overriding the level's.
    pub keep_batchnorm_fp32: Option<bool>,
    /// MindSpore's `loss_scale_manager`, overriding the level's.
    pub loss_scale_manager: Option<Arc<dyn LossScaleManager>>,
}

/// Sets the compute dtypes of `network`'s cells for `level` (MindSpore's
/// `amp.auto_mixed_precision(network, amp_level, dtype)`); `dtype` is float16 or
/// bfloat16. Call it before the network's first call.
pub fn auto_mixed_precision(network: &Arc<dyn Cell>, level: AmpLevel, dtype: DType) -> Result<()> {
    check_half(dtype)?;
    match level {
        AmpLevel::O0 | AmpLevel::Auto => Ok(()),
        AmpLevel::O1 => {
            // Everything in float32, the white list in 16 bits.
            network.base().to_float(DType::F32)?;
            for_each_cell(
                network,
                &mut |c| match O1_WHITE_LIST.contains(&c.class_name()) {
                    true => c.base().to_float(dtype),
                    false => Ok(()),
                },
            )
        }
        AmpLevel::O2 => cast_network(network, dtype, true),
        AmpLevel::O3 => cast_network(network, dtype, false),
    }
}

/// The network computing in `dtype`, with its normalisation layers in float32 when
/// `keep_batchnorm_fp32`.
fn cast_network(network: &Arc<dyn Cell>, dtype: DType, keep_batchnorm_fp32: bool) -> Result<()> {
    network.base().to_float(dtype)?;
    if keep_batchnorm_fp32 {
        for_each_cell(
            network,
            &mut |c| match KEPT_FP32.contains(&c.class_name()) {
                true => c.base().to_float(DType::F32),
                false => Ok(()),
            },
        )?;
    }
    Ok(())
}

fn for_each_cell(
    cell: &Arc<dyn Cell>,
    f: &mut dyn FnMut(&Arc<dyn Cell>) -> Result<()>,
) -> Result<()> {
    for (_, child) in cell.cells() {
        f(&child)?;
        for_each_cell(&child, f)?;
    }
    Ok(())
}

fn check_half(dtype: DType) -> Result<()> {
    match dtype.is_half() {
        true => Ok(()),
        false => Err(Error::invalid(format!(
            "mixed precision: the 16-bit type must be Float16 or BFloat16, got {dtype}"
        ))),
    }
}

/// MindSpore's `amp.build_train_network`: `network` (with `loss_fn`, in float32) set to
/// `level`'s compute dtypes and wrapped into a training step; with a loss-scale manager
/// (O2's dynamic one by default) a [`TrainOneStepWithLossScaleCell`], else a
/// [`TrainOneStepCell`]. `call(&[data, label])` runs one step; its first output is the
/// loss.
pub fn build_train_network(
    network: Arc<dyn Cell>,
    optimizer: Arc<dyn Optimizer>,
    loss_fn: Option<Arc<dyn Cell>>,
    level: AmpLevel,
    options: AmpOptions,
) -> Result<Arc<dyn Cell>> {
    let half = options.dtype.unwrap_or(DType::F16);
    check_half(half)?;
    let (keep_bn, cast, manager): (bool, DType, Option<Arc<dyn LossScaleManager>>) = match level {
        AmpLevel::O0 | AmpLevel::Auto => (false, DType::F32, None),
        AmpLevel::O1 => (false, DType::F32, None),
        AmpLevel::O2 => (
            true,
            half,
            Some(Arc::new(DynamicLossScaleManager::default_mindspore())),
        ),
        AmpLevel::O3 => (false, half, None),
    };
    let keep_bn = options.keep_batchnorm_fp32.unwrap_or(keep_bn);
    let cast = options.cast_model_type.unwrap_or(cast);
    let manager = options.loss_scale_manager.or(manager);
    if level == AmpLevel::O1 && options.cast_model_type.is_none() {
        auto_mixed_precision(&network, AmpLevel::O1, half)?;
    } else if cast.is_half() {
        cast_network(&network, cast, keep_bn)?;
    } else if cast != DType::F32 {
        network.base().to_float(cast)?;
    }
    let with_loss: Arc<dyn Cell> = match loss_fn {
        Some(loss) => {
            // MindSpore casts the network's output and the label to float32 for the loss.
            loss.base().to_float(DType::F32)?;
            WithLossCell::new_dyn(network, loss)
        }
        None => network,
    };
    Ok(match manager {
        Some(m) => TrainOneStepWithLossScaleCell::new_dyn(with_loss, optimizer, m),
        None => TrainOneStepCell::new_dyn(with_loss, optimizer),
    })
}
