//! The datasets each zoo model trains and evaluates on.

use std::path::Path;

use spore_core::{DType, Error, Result};
use spore_data::mnist::Usage;
use spore_data::prelude::*;

use super::ZooModel;

/// Whether `dir` holds the IDX files of `usage`'s split (raw or gzipped).
fn has_mnist_split(dir: &Path, usage: Usage) -> bool {
    let prefix = if usage == Usage::Train {
        "train"
    } else {
        "t10k"
    };
    ["images-idx3-ubyte", "labels-idx1-ubyte"].iter().all(|f| {
        dir.join(format!("{prefix}-{f}")).is_file()
            || dir.join(format!("{prefix}-{f}.gz")).is_file()
    })
}

/// The folder of a split: `root` itself if it holds the split's files, else `root/train`
/// or `root/test`.
fn mnist_split_dir(root: &Path, usage: Usage) -> Result<std::path::PathBuf> {
    if !root.is_dir() {
        return Err(Error::io(root, "data folder does not exist"));
    }
    let sub = root.join(if usage == Usage::Train {
        "train"
    } else {
        "test"
    });
    for d in [root.to_path_buf(), sub] {
        if has_mnist_split(&d, usage) {
            return Ok(d);
        }
    }
    let which = if usage == Usage::Train {
        "train-images-idx3-ubyte and train-labels-idx1-ubyte"
    } else {
        "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte"
    };
    Err(Error::io(
        root,
        format!(
            "no MNIST {which} (raw or .gz) here or in its {} subfolder",
            if usage == Usage::Train {
                "train"
            } else {
                "test"
            }
        ),
    ))
}

/// The batched dataset `model` uses for `usage` (shuffled for training); with `shard`
/// `(num_shards, shard_id)`, only that shard (a data-parallel rank's part).
pub fn dataset(
    model: ZooModel,
    root: &Path,
    usage: Usage,
    batch_size: usize,
    shard: Option<(usize, usize)>,
) -> Result<Dataset> {
    if batch_size == 0 {
        return Err(Error::invalid("--batch-size must be at least 1"));
    }
    let train = usage == Usage::Train;
    match model {
        ZooModel::LeNet => {
            let dir = mnist_split_dir(root, usage)?;
            match shard {
                Some((k, i)) => {
                    crate::datasets::create_distributed_dataset(dir, batch_size, 1, 2, train, k, i)
                }
                None => crate::datasets::create_dataset(dir, batch_size, 1, 2, train),
            }
        }
        ZooModel::Mlp => {
            let source = MnistDataset::new(mnist_split_dir(root, usage)?)
                .usage(usage)
                .shuffle(train);
            let ds = match shard {
                Some((k, i)) => source.num_shards(k).shard_id(i),
                None => source,
            }
            .build()?;
            let ds = ds
                .map(["label"], vec![TypeCast::new(DType::I32).into()], 2)?
                .map(
                    ["image"],
                    vec![
                        Rescale::new(1.0 / 255.0, 0.0).into(),
                        Rescale::new(1.0 / 0.3081, -0.1307 / 0.3081).into(),
                        HWC2CHW.into(),
                    ],
                    2,
                )?;
            let ds = if train { ds.shuffle(10_000)? } else { ds };
            ds.batch(batch_size, train)
        }
        ZooModel::ResNet18 => {
            let source = Cifar10Dataset::new(root).usage(usage).shuffle(train);
            let ds = match shard {
                Some((k, i)) => source.num_shards(k).shard_id(i),
                None => source,
            }
            .build()?;
            let mut ops: Vec<Transform> = vec![];
            if train {
                ops.push(RandomCrop::new(32, 32).padding(4).into());
                ops.push(RandomHorizontalFlip::new(0.5).into());
            }
            ops.push(Rescale::new(1.0 / 255.0, 0.0).into());
            ops.push(Normalize::new(&[0.4914, 0.4822, 0.4465], &[0.2470, 0.2435, 0.2616]).into());
            ops.push(HWC2CHW.into());
            let ds = ds
                .map(["label"], vec![TypeCast::new(DType::I32).into()], 2)?
                .map(["image"], ops, 2)?;
            let ds = if train { ds.shuffle(10_000)? } else { ds };
            ds.batch(batch_size, train)
        }
    }
}

/// An image file prepared as `model`'s input: `[1, C, H, W]` Float32.
pub fn image_input(model: ZooModel, path: &Path) -> Result<spore_core::Tensor> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read the image: {e}")))?;
    let img = image::load_from_memory(&bytes)
        .map_err(|e| Error::io(path, format!("not a PNG/JPEG image: {e}")))?;
    let (size, gray) = match model {
        ZooModel::LeNet => (32, true),
        ZooModel::Mlp => (28, true),
        ZooModel::ResNet18 => (32, false),
    };
    let img = img.resize_exact(size, size, image::imageops::FilterType::Triangle);
    let (values, channels): (Vec<f32>, usize) = if gray {
        (
            img.to_luma8()
                .pixels()
                .map(|p| (p.0[0] as f32 / 255.0 - 0.1307) / 0.3081)
                .collect(),
            1,
        )
    } else {
        let mean = [0.4914f32, 0.4822, 0.4465];
        let std = [0.2470f32, 0.2435, 0.2616];
        let rgb = img.to_rgb8();
        let mut chw = vec![0f32; 3 * (size * size) as usize];
        for (i, p) in rgb.pixels().enumerate() {
            for c in 0..3 {
                chw[c * (size * size) as usize + i] = (p.0[c] as f32 / 255.0 - mean[c]) / std[c];
            }
        }
        (chw, 3)
    };
    spore_core::Tensor::from_vec(values, &[1, channels, size as usize, size as usize])
}
