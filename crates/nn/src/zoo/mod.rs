//! Networks used by the examples, tests and benchmarks: [`LeNet5`] (seed 001), the
//! 784-512-512-10 [`Mlp`] (seed 004's `Network`) and [`ResNet`]-18 for CIFAR-10.
//!
//! ```
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let n: usize = net.trainable_params().iter().map(|p| p.tensor_type().numel()).sum();
//! assert_eq!(n, 61_684);
//! ```

pub mod lenet;
pub mod mlp;
pub mod resnet;

pub use lenet::LeNet5;
pub use mlp::Mlp;
pub use resnet::{BasicBlock, ResNet};
