//! Dataset sources: [`MnistDataset`], [`Cifar10Dataset`], [`ImageFolderDataset`],
//! [`GeneratorDataset`], [`NumpySlicesDataset`]. Each is a builder with MindSpore's
//! options (`usage`, `num_samples`, `shuffle`, ...) whose `build()` checks the files or
//! arrays and returns a [`crate::Dataset`].
//!
//! Random-access sources share one sampler: per epoch, the indices `0..n` in order, or,
//! with `shuffle` (MindSpore's default for these sources), a permutation seeded from the
//! source's seed and the epoch key; `num_samples` keeps the first that many.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! spore_data::config::set_seed(58);
//! let x = Tensor::from_vec((0..10i32).collect(), &[10]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().num_samples(4).build().unwrap();
//! assert_eq!(ds.get_dataset_size().unwrap(), 4);
//! ```

pub mod cifar;
pub mod folder;
pub mod generator;
pub mod mnist;
pub mod numpy;

use std::sync::Arc;

use spore_core::Result;

use crate::config::node_seed;
use crate::node::{Node, Row, Rows, Size};
use crate::rng::{Rng, mix};

pub use cifar::Cifar10Dataset;
pub use folder::ImageFolderDataset;
pub use generator::GeneratorDataset;
pub use mnist::MnistDataset;
pub use numpy::NumpySlicesDataset;

/// A source whose rows can be read by index.
pub(crate) trait RandomAccess: Send + Sync + 'static {
    fn len(&self) -> usize;
    fn row(&self, index: usize) -> Result<Row>;
}

/// The sampler options every random-access source takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sampling {
    pub shuffle: bool,
    pub num_samples: Option<usize>,
}

impl Default for Sampling {
    fn default() -> Self {
        // MindSpore shuffles these sources unless told otherwise.
        Sampling {
            shuffle: true,
            num_samples: None,
        }
    }
}

/// A random-access source with its sampler, as a pipeline node.
pub(crate) struct SourceNode<S: RandomAccess> {
    name: String,
    source: Arc<S>,
    columns: Vec<String>,
    sampling: Sampling,
    seed: u64,
}

impl<S: RandomAccess> SourceNode<S> {
    pub(crate) fn new(name: String, source: S, columns: Vec<String>, sampling: Sampling) -> Self {
        SourceNode {
            name,
            source: Arc::new(source),
            columns,
            sampling,
            seed: node_seed(mix(0x50c, 1)),
        }
    }

    fn count(&self) -> usize {
        let n = self.source.len();
        self.sampling.num_samples.map_or(n, |k| k.min(n))
    }
}

impl<S: RandomAccess> Node for SourceNode<S> {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn columns(&self) -> &[String] {
        &self.columns
    }
    fn size(&self) -> Size {
        Size::Known(self.count())
    }
    fn depth(&self) -> usize {
        1
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let count = self.count();
        let indices: Vec<usize> = if self.sampling.shuffle {
            let mut all: Vec<usize> = (0..self.source.len()).collect();
            Rng::new(mix(self.seed, key)).shuffle(&mut all);
            all.truncate(count);
            all
        } else {
            (0..count).collect()
        };
        let source = self.source.clone();
        Ok(Box::new(indices.into_iter().map(move |i| source.row(i))))
    }
}
