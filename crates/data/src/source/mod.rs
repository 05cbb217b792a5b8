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
pub mod shard;

use std::sync::Arc;

use spore_core::Result;

use crate::config::{get_seed, node_seed};
use crate::node::{Node, Row, Rows, Size};
use crate::rng::{Rng, mix};

pub use cifar::Cifar10Dataset;
pub use folder::ImageFolderDataset;
pub use generator::GeneratorDataset;
pub use mnist::MnistDataset;
pub use numpy::NumpySlicesDataset;
pub use shard::DistributedSampler;

use shard::{check_shards, shard_len, take_shard};

/// A source whose rows can be read by index.
pub(crate) trait RandomAccess: Send + Sync + 'static {
    fn len(&self) -> usize;
    fn row(&self, index: usize) -> Result<Row>;
}

/// The sampler options every random-access source takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sampling {
    pub shuffle: bool,
    /// Per shard when sharded.
    pub num_samples: Option<usize>,
    pub num_shards: Option<usize>,
    pub shard_id: Option<usize>,
    /// A sampler's own seed (`DistributedSampler`).
    pub seed: Option<u64>,
}

impl Default for Sampling {
    fn default() -> Self {
        // MindSpore shuffles these sources unless told otherwise.
        Sampling {
            shuffle: true,
            num_samples: None,
            num_shards: None,
            shard_id: None,
            seed: None,
        }
    }
}

impl Sampling {
    pub(crate) fn use_sampler(&mut self, s: DistributedSampler) {
        self.shuffle = s.shuffle;
        self.num_samples = s.num_samples;
        self.num_shards = Some(s.num_shards);
        self.shard_id = Some(s.shard_id);
        self.seed = Some(s.seed);
    }

    /// The shard options, checked (a source's `build` calls this).
    pub(crate) fn check(&self, label: &str) -> Result<()> {
        check_shards(label, self.num_shards, self.shard_id).map(|_| ())
    }

    fn shard(&self) -> Option<(usize, usize)> {
        match (self.num_shards, self.shard_id) {
            (Some(k), Some(i)) if k > 0 && i < k => Some((k, i)),
            _ => None,
        }
    }
}

/// The builder options every random-access source shares: MindSpore's `num_shards`,
/// `shard_id` and `sampler=DistributedSampler(...)`.
macro_rules! shard_options {
    ($source:ty) => {
        impl $source {
            /// Splits the dataset into this many disjoint shards (one per rank); needs
            /// `shard_id`.
            pub fn num_shards(mut self, n: usize) -> Self {
                self.sampling.num_shards = Some(n);
                self
            }
            /// Which shard this process reads, in `[0, num_shards)`.
            pub fn shard_id(mut self, id: usize) -> Self {
                self.sampling.shard_id = Some(id);
                self
            }
            /// Samples with a [`crate::DistributedSampler`] (replaces `shuffle`,
            /// `num_samples`, `num_shards` and `shard_id`).
            pub fn sampler(mut self, sampler: crate::DistributedSampler) -> Self {
                self.sampling.use_sampler(sampler);
                self
            }
        }
    };
}
pub(crate) use shard_options;

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
            seed: Self::seed(&sampling),
            sampling,
        }
    }

    /// Shards must all draw the same permutation, so a sharded source never uses fresh
    /// entropy: the sampler's seed, else the pipeline's, else MindSpore's default 0.
    fn seed(sampling: &Sampling) -> u64 {
        let salt = mix(0x50c, 1);
        match (sampling.seed, sampling.shard()) {
            (Some(s), _) => mix(s, salt),
            (None, Some(_)) => mix(get_seed().unwrap_or(0), salt),
            (None, None) => node_seed(salt),
        }
    }

    fn count(&self) -> usize {
        let n = match self.sampling.shard() {
            Some((k, _)) => shard_len(self.source.len(), k),
            None => self.source.len(),
        };
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
    fn is_sharded(&self) -> bool {
        self.sampling.shard().is_some()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let count = self.count();
        let mut indices: Vec<usize> = (0..self.source.len()).collect();
        if self.sampling.shuffle {
            Rng::new(mix(self.seed, key)).shuffle(&mut indices);
        }
        if let Some((k, i)) = self.sampling.shard() {
            indices = take_shard(&indices, k, i);
        }
        indices.truncate(count);
        let source = self.source.clone();
        Ok(Box::new(indices.into_iter().map(move |i| source.row(i))))
    }
}
