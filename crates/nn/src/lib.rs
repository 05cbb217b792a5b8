//! Spore's `nn`: MindSpore's [`Cell`](cell::Cell) abstraction, [`layers`], initializers
//! ([`init`]), losses ([`loss`]), optimizers ([`optim`]), the training wrappers ([`wrap`]),
//! a model zoo ([`zoo`]) and safetensors [`checkpoint`]s.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
//! let step = TrainOneStepCell::new(WithLossCell::new(net, loss), opt);
//! let x = Tensor::ones(&[2, 1, 32, 32], DType::F32).unwrap();
//! let y = Tensor::from_vec(vec![1i32, 7], &[2]).unwrap();
//! let l0 = step.step(&x, &y).unwrap().item().unwrap();
//! let l1 = step.step(&x, &y).unwrap().item().unwrap();
//! assert!(l1 < l0);
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod amp;
pub mod call;
pub mod cell;
pub mod checkpoint;
mod compiled;
pub mod distributed;
pub mod init;
pub mod layers;
pub mod loss;
pub mod optim;
pub mod wrap;
pub mod zoo;

/// The names a typical program uses.
pub mod prelude {
    pub use crate::cell::{Cell, CellBase, CellCall, CellExt, child, param};
    pub use crate::checkpoint::{
        LoadOptions, LoadReport, ParamDict, SaveOptions, load_checkpoint, load_checkpoint_into,
        load_checkpoint_with, load_param_into_net, save_checkpoint, save_checkpoint_with,
    };
    pub use crate::init::Initializer;
    pub use crate::layers::*;
    pub use crate::loss::{
        BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss, Reduction,
        SoftmaxCrossEntropyWithLogits,
    };
    pub use crate::optim::{
        Adam, AdamW, AdamWeightDecay, DecayFilter, LearningRate, Momentum, Optimizer, RMSProp, SGD,
    };
    pub use crate::wrap::{TrainOneStepCell, WithLossCell};
    pub use crate::zoo::{BertClassifier, BertConfig, ImageNetResNet, LeNet5, Mlp, ResNet};
}
