//! `MnistDataset`: MNIST's IDX files (raw or `.gz`) from a folder, as rows
//! `image: [28, 28, 1] UInt8` and `label: [] Int32`. (MindSpore's label is UInt32; Spore
//! has no unsigned 32-bit dtype, and Int32 is what the models take.)
//!
//! ```no_run
//! use spore_data::{MnistDataset, mnist::Usage};
//! let ds = MnistDataset::new("data/mnist/train").usage(Usage::Train).shuffle(false).build().unwrap();
//! assert_eq!(ds.get_col_names(), vec!["image", "label"]);
//! assert_eq!(ds.get_dataset_size().unwrap(), 8000);
//! ```

use std::path::PathBuf;

use spore_core::{Result, Tensor};

use super::{RandomAccess, Sampling, SourceNode, shard_options};
use crate::Dataset;
use crate::mnist::{Mnist, Usage};
use crate::node::Row;

/// Builder for an MNIST source (MindSpore's `MnistDataset(dataset_dir, usage, num_samples,
/// shuffle)`). The files are read and checked by [`MnistDataset::build`].
#[derive(Clone, Debug)]
pub struct MnistDataset {
    dir: PathBuf,
    usage: Usage,
    sampling: Sampling,
}

shard_options!(MnistDataset);

impl MnistDataset {
    /// All splits found in `dataset_dir`, shuffled (MindSpore's defaults).
    pub fn new(dataset_dir: impl Into<PathBuf>) -> MnistDataset {
        MnistDataset {
            dir: dataset_dir.into(),
            usage: Usage::All,
            sampling: Sampling::default(),
        }
    }

    pub fn usage(mut self, usage: Usage) -> MnistDataset {
        self.usage = usage;
        self
    }

    /// At most this many rows per epoch (a random subset when shuffling).
    pub fn num_samples(mut self, n: usize) -> MnistDataset {
        self.sampling.num_samples = Some(n);
        self
    }

    /// Whether each epoch visits the images in a new random order (default: true).
    pub fn shuffle(mut self, shuffle: bool) -> MnistDataset {
        self.sampling.shuffle = shuffle;
        self
    }

    /// Reads the IDX files; errors name the file and what is wrong with it.
    pub fn build(self) -> Result<Dataset> {
        self.sampling
            .check(&format!("MnistDataset({})", self.dir.display()))?;
        let data = Mnist::load(&self.dir, self.usage)?;
        let name = format!("MnistDataset({})", self.dir.display());
        let columns = vec!["image".to_string(), "label".to_string()];
        Ok(Dataset::from_node(SourceNode::new(
            name,
            MnistSource { data },
            columns,
            self.sampling,
        )))
    }
}

struct MnistSource {
    data: Mnist,
}

impl RandomAccess for MnistSource {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn row(&self, i: usize) -> Result<Row> {
        let [h, w] = self.data.image_shape();
        Ok(vec![
            Tensor::from_vec(self.data.image(i).to_vec(), &[h, w, 1])?,
            Tensor::scalar(self.data.labels[i] as i32),
        ])
    }
}
