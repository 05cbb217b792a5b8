//! The data crate's integration tests (one binary): MNIST reading and corrupted files,
//! the pipeline operations, transforms against OpenCV's outputs, the other sources,
//! prefetch, and the download helper against a local HTTP server.

mod download;
mod mnist;
mod pipeline;
mod shards;
mod sources;
mod transforms;

use std::path::PathBuf;

use spore_core::Tensor;
use spore_data::{Dataset, NumpySlicesDataset};

/// Every test that needs determinism sets this same seed, so tests running in parallel
/// never see each other's seed.
pub const SEED: u64 = 58;

pub fn seeded() {
    spore_data::config::set_seed(SEED);
}

pub fn bundled(split: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/mnist")
        .join(split)
}

/// A fresh, empty temporary folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore-data-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `0..n` as an Int32 column "x", in order.
pub fn range_ds(n: i32) -> Dataset {
    let x = Tensor::from_vec((0..n).collect(), &[n as usize]).unwrap();
    NumpySlicesDataset::new(vec![("x", x)])
        .unwrap()
        .shuffle(false)
        .build()
        .unwrap()
}

/// The first column of each row of one epoch, as f64 scalars.
pub fn scalars(ds: &Dataset) -> Vec<f64> {
    ds.create_tuple_iterator(1)
        .map(|r| r.unwrap()[0].item().unwrap())
        .collect()
}

/// Every row of one epoch, each column flattened to f64.
pub fn rows(ds: &Dataset) -> Vec<Vec<Vec<f64>>> {
    ds.create_tuple_iterator(1)
        .map(|r| r.unwrap().iter().map(f64s).collect())
        .collect()
}

/// FNV-1a, 64 bits (the fingerprint the OpenCV reference values were recorded with).
pub fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A tensor's elements as f64, whatever its dtype.
pub fn f64s(t: &Tensor) -> Vec<f64> {
    spore_data::tensors::cast(t, spore_core::DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}
