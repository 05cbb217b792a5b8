//! Spore: a deep-learning framework in Rust implementing MindSpore's design. This facade
//! re-exports the workspace crates; most users only need the [`prelude`].
//!
//! ```
//! use spore::prelude::*;
//! let x = Tensor::from_vec(vec![1.0f32, -2.0], &[2]).unwrap();
//! assert_eq!(ops::relu(&x).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 0.0]);
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod cli;
pub mod datasets;

pub use spore_codegen as codegen;
pub use spore_compile as compile;
pub use spore_core as core;
pub use spore_core::{Error, Result, autodiff, ops, rng};
pub use spore_data as data;
pub use spore_kernels as kernels;
pub use spore_nn as nn;
pub use spore_onnx as onnx;
pub use spore_parallel as parallel;
pub use spore_summary as summary;
pub use spore_train as train;
pub use spore_xai as xai;

/// The formats [`export`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// ONNX at opset 17 (`spore_onnx::export`).
    Onnx,
}

/// MindSpore's `export(net, *inputs, file_name, file_format)`: writes `net`'s inference
/// graph for inputs like `inputs` (their shapes and dtypes; the values are not used).
///
/// ```no_run
/// use spore::prelude::*;
/// let net = LeNet5::new(10).unwrap();
/// let x = Tensor::zeros(&[1, 1, 32, 32], DType::F32).unwrap();
/// spore::export(&*net, &[x], "lenet.onnx", spore::Format::Onnx).unwrap();
/// ```
pub fn export<C: spore_nn::cell::Cell + ?Sized>(
    net: &C,
    inputs: &[spore_core::Tensor],
    path: impl AsRef<std::path::Path>,
    format: Format,
) -> Result<()> {
    let types: Vec<spore_core::TensorType> =
        inputs.iter().map(|t| t.tensor_type().clone()).collect();
    match format {
        Format::Onnx => spore_onnx::export(net, &types, path.as_ref()),
    }
}

/// The names a typical program uses.
pub mod prelude {
    pub use spore_compile::jit;
    pub use spore_core::context::{ContextUpdate, Mode, get_context, set_context};
    pub use spore_core::ops::{self, Conv2dOptions, PadMode, Pool2dOptions};
    pub use spore_core::{DType, Error, Parameter, Result, Tensor, grad, no_grad, value_and_grad};
    pub use spore_data::prelude::*;
    pub use spore_nn::prelude::*;
    pub use spore_parallel::context::{
        AutoParallelUpdate, ParallelMode, get_auto_parallel_context, reset_auto_parallel_context,
        set_auto_parallel_context,
    };
    pub use spore_parallel::{get_group_size, get_rank, init};
    pub use spore_train::callback::{
        Callback, CheckpointConfig, EarlyStopping, History, LossMonitor, ModelCheckpoint,
        ProgressBar, TimeMonitor,
    };
    pub use spore_train::metrics::{Accuracy, Metric};
    pub use spore_train::{Model, TrainConfig};
}
