//! Spore's dataset pipeline, after `mindspore.dataset`: sources ([`MnistDataset`],
//! [`Cifar10Dataset`], [`ImageFolderDataset`], [`GeneratorDataset`],
//! [`NumpySlicesDataset`]), pipeline operations on [`Dataset`] (`map` with parallel
//! workers that keep the order, `shuffle`, `batch`, `repeat`, `take`, `skip`, `project`,
//! `rename`, `zip`, `concat`), [`transforms`] (vision ops bit-exact with OpenCV where
//! MindSpore uses it), tuple/dict iterators over epochs, a [`prefetch`] queue, and an
//! MNIST [`download`] helper. With [`config::set_seed`] a pipeline yields the same rows
//! in the same order on every run, whatever the number of workers.
//!
//! ```no_run
//! use spore_core::DType;
//! use spore_data::prelude::*;
//! // The LeNet input pipeline of MindSpore's tutorials.
//! let ds = MnistDataset::new("data/mnist/train").build()?
//!     .map(["label"], vec![TypeCast::new(DType::I32).into()], 2)?
//!     .map(["image"], vec![Resize::new(32, 32).interpolation(Inter::Linear).into()], 2)?
//!     .map(["image"], vec![Rescale::new(1.0 / 255.0, 0.0).into()], 2)?
//!     .map(["image"], vec![Rescale::new(1.0 / 0.3081, -0.1307 / 0.3081).into()], 2)?
//!     .map(["image"], vec![HWC2CHW.into()], 2)?
//!     .shuffle(10_000)?
//!     .batch(32, true)?
//!     .repeat(1)?;
//! for row in ds.create_dict_iterator(1) {
//!     let row = row?;
//!     assert_eq!(row["image"].shape(), &[32, 1, 32, 32]);
//! }
//! # Ok::<(), spore_core::Error>(())
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod config;
mod dataset;
pub mod download;
pub mod idx;
pub mod iterator;
pub mod mnist;
mod node;
pub mod pipeline;
pub mod prefetch;
pub mod rng;
pub mod source;
pub mod tensors;
pub mod transforms;
pub mod vision;

pub use dataset::{Dataset, Row};
pub use iterator::{DictIterator, TupleIterator};
pub use pipeline::map::Map;
pub use prefetch::PrefetchQueue;
pub use source::generator::IntoRow;
pub use source::{
    Cifar10Dataset, DistributedSampler, GeneratorDataset, ImageFolderDataset, MnistDataset,
    NumpySlicesDataset,
};
pub use transforms::{TensorOp, Transform};

/// Everything a pipeline script uses.
pub mod prelude {
    pub use crate::mnist::Usage;
    pub use crate::transforms::vision::{
        Border, CenterCrop, Decode, HWC2CHW, Inter, Normalize, RandomCrop, RandomHorizontalFlip,
        Rescale, Resize,
    };
    pub use crate::transforms::{Compose, OneHot, TensorOp, Transform, TypeCast};
    pub use crate::{
        Cifar10Dataset, Dataset, GeneratorDataset, ImageFolderDataset, Map, MnistDataset,
        NumpySlicesDataset, config,
    };
}
