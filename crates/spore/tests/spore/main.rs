//! The facade's integration tests: the main job's accuracy bar in both modes, and the
//! `spore` command line.

mod accuracy;
mod amp;
mod bench_harness;
mod cli;
mod codegen;
mod distributed;
mod explain;
mod onnx;
mod summary;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;

/// A fresh, empty temporary folder `spore_cli_<kind>_<name>_<pid>`.
pub fn temp_dir(kind: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_cli_{kind}_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// LeNet5 trained `epochs` epochs on the bundled digits (seed 001's recipe, shortened;
/// Graph mode, seed 1), left in PyNative mode and saved as `dir/lenet.ckpt`.
pub fn trained_lenet(epochs: usize, dir: &Path) -> (Arc<LeNet5>, PathBuf) {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1)).unwrap();
    spore_data::config::set_seed(1);
    let train = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let mut model = Model::new(net.clone(), loss, opt);
    model
        .train(epochs, &train, &mut [], TrainConfig::sink(1000))
        .unwrap();
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    let ckpt = dir.join("lenet.ckpt");
    spore::nn::checkpoint::save_checkpoint(&*net, &ckpt).unwrap();
    (net, ckpt)
}
