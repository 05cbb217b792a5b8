//! Ready-made pipelines, written as seed 001 writes them.
//!
//! ```no_run
//! let train = spore::datasets::create_dataset("data/mnist/train", 32, 1, 1, true).unwrap();
//! assert_eq!(train.get_dataset_size().unwrap(), 250);
//! ```

use std::path::Path;

use spore_core::{DType, Error, Result};
use spore_data::prelude::*;

/// The bundled MNIST digits: `train/` (8,000) and `test/` (1,000), gzipped IDX.
pub fn bundled_mnist() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/mnist")
}

/// Seed 001's `create_dataset`: labels cast to Int32, images resized to 32x32 (bilinear),
/// rescaled by 1/255, normalised with MNIST's mean 0.1307 and std 0.3081, HWC to CHW,
/// shuffled with a 10,000 buffer, batched, repeated `repeat_size` times. Batches:
/// `[batch, 1, 32, 32]` Float32 and `[batch]` Int32. Training data (`shuffle`) drops the
/// last partial batch as the seed does; evaluation data keeps it, so every sample counts.
pub fn create_dataset(
    data_path: impl AsRef<Path>,
    batch_size: usize,
    repeat_size: usize,
    num_parallel_workers: usize,
    shuffle: bool,
) -> Result<Dataset> {
    mnist_pipeline(
        data_path.as_ref(),
        batch_size,
        repeat_size,
        num_parallel_workers,
        shuffle,
        None,
    )
}

/// [`create_dataset`] reading shard `shard_id` of `num_shards` (MindSpore's
/// `MnistDataset(path, num_shards=rank_size, shard_id=rank_id)` in its data-parallel
/// examples): each rank of a data-parallel job reads its own disjoint part.
///
/// ```no_run
/// let shard = spore::datasets::create_distributed_dataset("data/mnist/train", 32, 1, 1, true, 2, 0).unwrap();
/// assert_eq!(shard.get_dataset_size().unwrap(), 125);
/// ```
pub fn create_distributed_dataset(
    data_path: impl AsRef<Path>,
    batch_size: usize,
    repeat_size: usize,
    num_parallel_workers: usize,
    shuffle: bool,
    num_shards: usize,
    shard_id: usize,
) -> Result<Dataset> {
    mnist_pipeline(
        data_path.as_ref(),
        batch_size,
        repeat_size,
        num_parallel_workers,
        shuffle,
        Some((num_shards, shard_id)),
    )
}

fn mnist_pipeline(
    path: &Path,
    batch_size: usize,
    repeat_size: usize,
    num_parallel_workers: usize,
    shuffle: bool,
    shard: Option<(usize, usize)>,
) -> Result<Dataset> {
    if !path.is_dir() {
        return Err(Error::io(
            path,
            "MNIST folder does not exist (it should hold the IDX files, raw or .gz)",
        ));
    }
    let w = num_parallel_workers.max(1);
    let source = MnistDataset::new(path).shuffle(shuffle);
    let ds = match shard {
        Some((k, i)) => source.num_shards(k).shard_id(i),
        None => source,
    }
    .build()?;
    let ds = ds
        .map(["label"], vec![TypeCast::new(DType::I32).into()], w)?
        .map(
            ["image"],
            vec![Resize::new(32, 32).interpolation(Inter::Linear).into()],
            w,
        )?
        .map(["image"], vec![Rescale::new(1.0 / 255.0, 0.0).into()], w)?
        .map(
            ["image"],
            vec![Rescale::new(1.0 / 0.3081, -0.1307 / 0.3081).into()],
            w,
        )?
        .map(["image"], vec![HWC2CHW.into()], w)?;
    let ds = if shuffle { ds.shuffle(10_000)? } else { ds };
    ds.batch(batch_size, shuffle)?.repeat(repeat_size)
}
