//! `Cifar10Dataset`: the binary version of CIFAR-10 (`data_batch_1.bin` ...
//! `data_batch_5.bin`, `test_batch.bin`; each record is 1 label byte and 3072 pixel bytes,
//! channel-major), as rows `image: [32, 32, 3] UInt8` (HWC, like MindSpore) and
//! `label: [] Int32`.
//!
//! ```no_run
//! use spore_data::{Cifar10Dataset, mnist::Usage};
//! let ds = Cifar10Dataset::new("cifar-10-batches-bin").usage(Usage::Test).build().unwrap();
//! assert_eq!(ds.get_dataset_size().unwrap(), 10_000);
//! ```

use std::path::{Path, PathBuf};

use spore_core::{Error, Result, Tensor};

use super::{RandomAccess, Sampling, SourceNode, shard_options};
use crate::Dataset;
use crate::mnist::Usage;
use crate::node::Row;

const SIDE: usize = 32;
const PIXELS: usize = SIDE * SIDE * 3;
const RECORD: usize = 1 + PIXELS;

/// Builder for a CIFAR-10 source (MindSpore's `Cifar10Dataset`).
#[derive(Clone, Debug)]
pub struct Cifar10Dataset {
    dir: PathBuf,
    usage: Usage,
    sampling: Sampling,
}

shard_options!(Cifar10Dataset);

impl Cifar10Dataset {
    /// Every batch file in `dataset_dir` (train and test), shuffled: MindSpore's defaults.
    pub fn new(dataset_dir: impl Into<PathBuf>) -> Cifar10Dataset {
        Cifar10Dataset {
            dir: dataset_dir.into(),
            usage: Usage::All,
            sampling: Sampling::default(),
        }
    }

    /// `Train`: the `data_batch_*` files; `Test`: `test_batch*`; `All`: both.
    pub fn usage(mut self, usage: Usage) -> Cifar10Dataset {
        self.usage = usage;
        self
    }

    pub fn num_samples(mut self, n: usize) -> Cifar10Dataset {
        self.sampling.num_samples = Some(n);
        self
    }

    pub fn shuffle(mut self, shuffle: bool) -> Cifar10Dataset {
        self.sampling.shuffle = shuffle;
        self
    }

    /// Reads every matching `.bin` file (in name order) and checks its records.
    pub fn build(self) -> Result<Dataset> {
        self.sampling
            .check(&format!("Cifar10Dataset({})", self.dir.display()))?;
        let files = batch_files(&self.dir, self.usage)?;
        let (mut images, mut labels) = (Vec::new(), Vec::new());
        for f in &files {
            read_batch(f, &mut images, &mut labels)?;
        }
        let name = format!("Cifar10Dataset({})", self.dir.display());
        let columns = vec!["image".to_string(), "label".to_string()];
        Ok(Dataset::from_node(SourceNode::new(
            name,
            CifarSource { images, labels },
            columns,
            self.sampling,
        )))
    }
}

fn batch_files(dir: &Path, usage: Usage) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Err(Error::io(dir, "CIFAR-10 folder does not exist"));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(dir, format!("cannot list: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| Error::io(dir, format!("cannot list: {e}")))?
            .path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let wanted = match usage {
            Usage::Train => name.starts_with("data_batch"),
            Usage::Test => name.starts_with("test_batch"),
            Usage::All => name.starts_with("data_batch") || name.starts_with("test_batch"),
        };
        if wanted && name.ends_with(".bin") && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(Error::io(
            dir,
            format!(
                "no CIFAR-10 binary files for usage {usage:?} (expected data_batch_*.bin / test_batch.bin)"
            ),
        ));
    }
    files.sort();
    Ok(files)
}

/// Appends a batch file's images (converted to HWC) and labels.
fn read_batch(path: &Path, images: &mut Vec<u8>, labels: &mut Vec<u8>) -> Result<()> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
    parse_batch(&bytes, &path.display().to_string(), images, labels)
}

/// Appends the images (converted to HWC) and labels of a batch file's bytes; `name` is
/// used in error messages. On error nothing is appended.
pub fn parse_batch(
    bytes: &[u8],
    name: &str,
    images: &mut Vec<u8>,
    labels: &mut Vec<u8>,
) -> Result<()> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD) {
        return Err(Error::io(
            name,
            format!(
                "truncated or not a CIFAR-10 batch: {} bytes is not a whole number of {RECORD}-byte records (1 label + 3072 pixels)",
                bytes.len()
            ),
        ));
    }
    if let Some((r, rec)) = bytes
        .chunks_exact(RECORD)
        .enumerate()
        .find(|(_, rec)| rec[0] > 9)
    {
        return Err(Error::io(
            name,
            format!("record {r}: label {} is outside 0..=9", rec[0]),
        ));
    }
    images.reserve(bytes.len() / RECORD * PIXELS);
    for rec in bytes.chunks_exact(RECORD) {
        labels.push(rec[0]);
        let planes = &rec[1..];
        for p in 0..SIDE * SIDE {
            images.extend_from_slice(&[
                planes[p],
                planes[SIDE * SIDE + p],
                planes[2 * SIDE * SIDE + p],
            ]);
        }
    }
    Ok(())
}

struct CifarSource {
    images: Vec<u8>,
    labels: Vec<u8>,
}

impl RandomAccess for CifarSource {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn row(&self, i: usize) -> Result<Row> {
        Ok(vec![
            Tensor::from_vec(
                self.images[i * PIXELS..(i + 1) * PIXELS].to_vec(),
                &[SIDE, SIDE, 3],
            )?,
            Tensor::scalar(self.labels[i] as i32),
        ])
    }
}
