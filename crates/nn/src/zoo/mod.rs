//! Networks used by the examples, tests and benchmarks: [`LeNet5`] (seed 001), the
//! 784-512-512-10 [`Mlp`] (seed 004's `Network`), [`ResNet`]-18 for CIFAR-10, ResNet-50 for
//! ImageNet ([`ImageNetResNet`]) and a BERT-style encoder ([`BertClassifier`]).
//!
//! ```
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let n: usize = net.trainable_params().iter().map(|p| p.tensor_type().numel()).sum();
//! assert_eq!(n, 61_684);
//! ```

pub mod bert;
pub mod lenet;
pub mod mlp;
pub mod resnet;
pub mod resnet50;

pub use bert::{BertClassifier, BertConfig, EncoderLayer, SelfAttention};
pub use lenet::LeNet5;
pub use mlp::Mlp;
pub use resnet::{BasicBlock, ResNet};
pub use resnet50::{Bottleneck, ImageNetResNet};
