//! `Model` under data parallelism, unchanged user code: sharded training, metrics
//! reduced across ranks, LossMonitor on rank 0, checkpoints from rank 0 (or per rank),
//! and a resume under mpirun that is bit-exact.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spore_core::Tensor;
use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_data::{Dataset, NumpySlicesDataset};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_train::callback::{CheckpointConfig, LossMonitor, ModelCheckpoint};
use spore_train::metrics::{Accuracy, Loss};
use spore_train::{Model, TrainConfig};

use crate::launch::{mpirun, world};

#[test]
fn model_training_evaluation_checkpoints_and_resume_on_2_ranks() {
    let dir = std::env::temp_dir().join(format!("spore-dp-model-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let job = mpirun(
        2,
        "model::rank_model",
        &[("SPORE_TEST_DIR", dir.to_str().unwrap())],
    );
    assert!(job.status.success(), "{}", job.text);
    assert_eq!(
        job.text.matches("spore-inner-test-passed").count(),
        2,
        "{}",
        job.text
    );
    // Rank 0 wrote the shared checkpoints, each rank its own folder when asked.
    assert!(dir.join("shared").read_dir().unwrap().count() > 0);
    for r in 0..2 {
        assert!(
            dir.join("per_rank")
                .join(format!("rank_{r}"))
                .read_dir()
                .unwrap()
                .count()
                > 0
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// 48 rows of 4 features in 3 classes (learnable: the class is the largest feature).
fn rows(n: usize, offset: usize) -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..n)
        .flat_map(|i| {
            let c = (i + offset) % 3;
            (0..4).map(move |j| {
                if j == c {
                    1.0
                } else {
                    ((i * 7 + j * 3 + offset) % 5) as f32 * 0.1
                }
            })
        })
        .collect();
    let y: Vec<i32> = (0..n).map(|i| ((i + offset) % 3) as i32).collect();
    (
        Tensor::from_vec(x, &[n, 4]).unwrap(),
        Tensor::from_vec(y, &[n]).unwrap(),
    )
}

/// The training (shuffled) or test data, sharded when `shard` is given.
fn data(train: bool, shard: Option<(usize, usize)>) -> Dataset {
    let (x, y) = if train { rows(48, 0) } else { rows(30, 1) };
    let source = NumpySlicesDataset::new(vec![("x", x), ("y", y)])
        .unwrap()
        .shuffle(train);
    let source = match shard {
        Some((k, i)) => source.num_shards(k).shard_id(i),
        None => source,
    };
    // Evaluation keeps partial batches, so that every test row counts once.
    source.build().unwrap().batch(4, train).unwrap()
}

fn fresh() -> (Arc<SequentialCell>, Model) {
    spore_core::rng::set_seed(11);
    spore_data::config::set_seed(5);
    let net = SequentialCell::new(vec![
        Dense::new(4, 8).unwrap(),
        ReLU::new(),
        Dense::new(8, 3).unwrap(),
    ]);
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.05, 0.9).unwrap();
    let model = Model::new(net.clone(), loss, opt)
        .metrics(vec![Box::new(Accuracy::new()), Box::new(Loss::new())]);
    (net, model)
}

fn params(net: &Arc<SequentialCell>) -> Vec<Vec<f32>> {
    net.trainable_params()
        .iter()
        .map(|p| p.stored().to_vec::<f32>().unwrap())
        .collect()
}

fn data_parallel() {
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::DataParallel)
            .gradients_mean(true),
    )
    .unwrap();
}

/// A fresh model loaded from `saved` (written after epoch 2) and trained to epoch 4:
/// its parameters.
fn resumed(saved: &Path, shard: Option<(usize, usize)>) -> Vec<Vec<f32>> {
    let (net, mut model) = fresh();
    let train_net = model.train_network().unwrap();
    spore_nn::checkpoint::load_checkpoint_into(&*train_net, saved)
        .unwrap()
        .ensure_complete()
        .unwrap();
    model
        .train(
            4,
            &data(true, shard),
            &mut [],
            TrainConfig::no_sink().initial_epoch(2),
        )
        .unwrap();
    params(&net)
}

fn newest(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = dir.read_dir().unwrap().map(|e| e.unwrap().path()).collect();
    files.sort_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap());
    files.pop().unwrap()
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_model() {
    let (r, n) = world();
    let shard = Some((n, r));
    let dir = PathBuf::from(std::env::var("SPORE_TEST_DIR").unwrap());
    set_context(ContextUpdate::new().mode(Mode::Graph)).unwrap();
    data_parallel();

    // Four epochs straight, printing the loss.
    let (net_a, mut a) = fresh();
    let (mut monitor, printed) = LossMonitor::capturing(1);
    a.train(
        4,
        &data(true, shard),
        &mut [&mut monitor],
        TrainConfig::no_sink(),
    )
    .unwrap();
    let printed = printed.lock().unwrap().clone();
    if r == 0 {
        assert_eq!(printed.lines().count(), 4 * 48 / n / 4, "{printed}");
    } else {
        assert!(printed.is_empty(), "rank {r} printed: {printed}");
    }

    // Evaluation over the shards equals one process evaluating everything; an unsharded
    // evaluation is not a collective, so rank 0 may run it alone.
    let together = a.eval(&data(false, shard)).unwrap();
    if r == 0 {
        let alone = a.eval(&data(false, None)).unwrap();
        assert_eq!(together["accuracy"], alone["accuracy"]);
    }
    spore_parallel::barrier(None).unwrap();
    reset_auto_parallel_context();
    let alone = a.eval(&data(false, None)).unwrap();
    data_parallel();
    assert_eq!(together["accuracy"], alone["accuracy"], "rank {r}");
    // Batch losses are f32 means over differently grouped rows.
    assert!(
        (together["loss"] - alone["loss"]).abs() < 1e-6 * (1.0 + alone["loss"].abs()),
        "{together:?} vs {alone:?}"
    );

    // Two epochs with checkpoints (rank 0 writes), then every rank resumes from the file.
    let shared = dir.join("shared");
    let config = CheckpointConfig {
        save_checkpoint_steps: 48 / n / 4,
        keep_checkpoint_max: 1,
    };
    let (_, mut b) = fresh();
    let mut ckpt = ModelCheckpoint::new("mlp", &shared, config).unwrap();
    let mut own = ModelCheckpoint::new("mlp", dir.join("per_rank"), config)
        .unwrap()
        .per_rank(true);
    b.train(
        2,
        &data(true, shard),
        &mut [&mut ckpt, &mut own],
        TrainConfig::no_sink(),
    )
    .unwrap();
    assert_eq!(
        ckpt.latest().is_some(),
        r == 0,
        "rank {r}: only rank 0 writes shared checkpoints"
    );
    assert!(own.latest().is_some(), "rank {r}: per-rank checkpoints");
    spore_parallel::barrier(None).unwrap();
    let saved = newest(&shared);
    assert_eq!(
        resumed(&saved, shard),
        params(&net_a),
        "rank {r}: the resumed run differs"
    );
    parallel_optimizer_checkpoints(&dir, r, shard);
    reset_auto_parallel_context();
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    crate::launch::passed(r);
}

/// With the parallel optimizer each rank holds its own block of the optimizer state: a
/// checkpoint asked of rank 0 alone is written by every rank into `rank_<id>/`, and a
/// fresh run resumed on every rank from its own file ends where four epochs straight do.
fn parallel_optimizer_checkpoints(dir: &Path, r: usize, shard: Option<(usize, usize)>) {
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::DataParallel)
            .gradients_mean(true)
            .enable_parallel_optimizer(true),
    )
    .unwrap();
    let (net_a, mut a) = fresh();
    a.train(4, &data(true, shard), &mut [], TrainConfig::no_sink())
        .unwrap();
    let config = CheckpointConfig {
        save_checkpoint_steps: 1,
        keep_checkpoint_max: 1,
    };
    let (_, mut b) = fresh();
    let mut ckpt = ModelCheckpoint::new("zero", dir.join("zero"), config).unwrap();
    b.train(
        2,
        &data(true, shard),
        &mut [&mut ckpt],
        TrainConfig::no_sink(),
    )
    .unwrap();
    assert!(
        ckpt.directory().ends_with(format!("rank_{r}")),
        "rank {r} saved into {}",
        ckpt.directory().display()
    );
    let saved = ckpt
        .latest()
        .unwrap_or_else(|| panic!("rank {r} wrote no checkpoint of its block of the state"))
        .clone();
    assert_eq!(
        resumed(&saved, shard),
        params(&net_a),
        "rank {r}: the run resumed from its own checkpoint differs"
    );
}
