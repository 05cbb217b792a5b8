//! `spore train`, `spore eval` and `spore predict`.

use std::path::PathBuf;
use std::time::Instant;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Error, Result};
use spore_data::mnist::Usage;
use spore_nn::cell::{CellCall, CellExt};
use spore_nn::checkpoint::{load_checkpoint, load_param_into_net};
use spore_nn::loss::{Reduction, SoftmaxCrossEntropyWithLogits};
use spore_nn::optim::Momentum;
use spore_parallel::context::{AutoParallelUpdate, ParallelMode, set_auto_parallel_context};
use spore_train::callback::{
    Callback, CheckpointConfig, LossMonitor, ModelCheckpoint, ProgressBar,
};
use spore_train::metrics::Accuracy;
use spore_train::{Model, TrainConfig};

use super::ZooModel;
use super::data::{dataset, image_input};
use crate::datasets::bundled_mnist;

/// Options of `spore train`.
#[derive(Clone, Debug)]
pub struct TrainArgs {
    pub model: ZooModel,
    pub mode: Mode,
    pub epochs: usize,
    pub batch_size: usize,
    /// `None`: no sinking; `Some(-1)`: the whole dataset per epoch; `Some(n)`: n steps.
    pub sink_size: Option<i64>,
    pub checkpoint_dir: PathBuf,
    pub data: Option<PathBuf>,
    pub learning_rate: f64,
    pub momentum: f64,
    pub seed: u64,
}

impl Default for TrainArgs {
    fn default() -> Self {
        TrainArgs {
            model: ZooModel::LeNet,
            mode: Mode::Graph,
            epochs: 10,
            batch_size: 32,
            sink_size: None,
            checkpoint_dir: PathBuf::from("checkpoints"),
            data: None,
            learning_rate: 0.01,
            momentum: 0.9,
            seed: 1,
        }
    }
}

fn data_root(model: ZooModel, data: &Option<PathBuf>) -> Result<PathBuf> {
    match (data, model) {
        (Some(d), _) => Ok(d.clone()),
        (None, ZooModel::ResNet18) => Err(Error::invalid(
            "resnet18 trains on CIFAR-10, which is not bundled: pass --data DIR with the binary CIFAR-10 files (data_batch_1.bin ... test_batch.bin)",
        )),
        (None, _) => Ok(bundled_mnist()),
    }
}

/// Joins the job `mpirun` started, if any: with several ranks, training is data
/// parallel (gradients averaged), each rank reading its shard. Returns `(rank, size)`.
fn join_job() -> Result<(usize, usize)> {
    spore_parallel::init()?;
    let (rank, size) = (
        spore_parallel::get_rank(None)?,
        spore_parallel::get_group_size(None)?,
    );
    if size > 1 {
        set_auto_parallel_context(
            AutoParallelUpdate::new()
                .parallel_mode(ParallelMode::DataParallel)
                .gradients_mean(true),
        )?;
    }
    Ok((rank, size))
}

/// Trains, writes checkpoints each epoch into `checkpoint_dir`, and reports the test
/// accuracy when test data is present. Returns a summary (under `mpirun`: data parallel
/// over the ranks, rank 0 reporting for the job and the others returning nothing).
pub fn train(args: &TrainArgs) -> Result<String> {
    if args.epochs == 0 {
        return Err(Error::invalid("--epochs must be at least 1"));
    }
    let (rank, size) = join_job()?;
    let shard = (size > 1).then_some((size, rank));
    set_context(ContextUpdate::new().mode(args.mode).seed(args.seed))?;
    spore_data::config::set_seed(args.seed);
    let root = data_root(args.model, &args.data)?;
    let train_ds = dataset(args.model, &root, Usage::Train, args.batch_size, shard)?;
    let steps_per_epoch = match args.sink_size {
        Some(n) if n > 0 => n as usize,
        _ => train_ds.get_dataset_size()?,
    };
    let net = args.model.build()?;
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), args.learning_rate, args.momentum)?;
    let mut model =
        Model::new_dyn(net, Some(loss), Some(opt)).metrics(vec![Box::new(Accuracy::new())]);
    let config = CheckpointConfig {
        save_checkpoint_steps: steps_per_epoch.max(1),
        keep_checkpoint_max: 5,
    };
    let mut ckpt = ModelCheckpoint::new(args.model.name(), &args.checkpoint_dir, config)?;
    let mut monitor = LossMonitor::new();
    let mut progress = ProgressBar::new();
    let mut callbacks: Vec<&mut dyn Callback> = vec![&mut monitor, &mut ckpt];
    if rank == 0 {
        callbacks.push(&mut progress);
    }
    let train_config = match args.sink_size {
        Some(n) => TrainConfig::sink(n),
        None => TrainConfig::no_sink(),
    };
    let started = Instant::now();
    model.train(args.epochs, &train_ds, &mut callbacks, train_config)?;
    let secs = started.elapsed().as_secs_f64();
    let ranks = if size > 1 {
        format!(" on {size} ranks (data parallel, steps per rank)")
    } else {
        String::new()
    };
    let mut summary = format!(
        "trained {} for {} epochs ({} steps){ranks} in {secs:.1} s, {:.1} steps/s, {:?} mode\n",
        args.model.name(),
        args.epochs,
        model.stats.steps,
        model.stats.steps as f64 / secs.max(1e-9),
        args.mode
    );
    if let Some(last) = ckpt.latest() {
        summary.push_str(&format!("checkpoint: {}\n", last.display()));
    }
    if let Ok(test_ds) = dataset(args.model, &root, Usage::Test, args.batch_size, shard) {
        let metrics = model.eval(&test_ds)?;
        summary.push_str(&format!(
            "test accuracy: {:.2}%\n",
            100.0 * metrics.get("accuracy").copied().unwrap_or(0.0)
        ));
    }
    Ok(if rank == 0 { summary } else { String::new() })
}

/// Options of `spore eval`.
#[derive(Clone, Debug)]
pub struct EvalArgs {
    pub model: ZooModel,
    pub checkpoint: PathBuf,
    pub data: Option<PathBuf>,
    pub batch_size: usize,
}

/// A zoo network with the weights of `checkpoint` (optimizer state in the file is
/// ignored; a checkpoint of another network is an error naming what does not fit).
pub(super) fn load_network(
    model: ZooModel,
    checkpoint: &std::path::Path,
) -> Result<std::sync::Arc<dyn spore_nn::cell::Cell>> {
    let net = model.build()?;
    let dict = load_checkpoint(checkpoint)?;
    let report = load_param_into_net(&*net, &dict).map_err(|e| Error::io(checkpoint, e))?;
    if !report.missing.is_empty() {
        return Err(Error::io(
            checkpoint,
            format!(
                "this is not a {} checkpoint: it lacks {} of the network's parameters (e.g. {}); it holds {}",
                model.name(),
                report.missing.len(),
                report
                    .missing
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                dict.keys().take(3).cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(net)
}

/// Evaluates a checkpoint on a folder of test data; returns the accuracy line.
pub fn eval(args: &EvalArgs) -> Result<String> {
    let net = load_network(args.model, &args.checkpoint)?;
    let root = data_root(args.model, &args.data)?;
    let root = if args.data.is_none() {
        root.join("test")
    } else {
        root
    };
    let ds = dataset(args.model, &root, Usage::Test, args.batch_size, None)?;
    let mut model = Model::new_dyn(net, None, None).metrics(vec![Box::new(Accuracy::new())]);
    let m = model.eval(&ds)?;
    Ok(format!(
        "accuracy: {:.2}% on {} samples\n",
        100.0 * m["accuracy"],
        model.eval_samples
    ))
}

/// Options of `spore predict`.
#[derive(Clone, Debug)]
pub struct PredictArgs {
    pub model: ZooModel,
    pub checkpoint: PathBuf,
    pub images: Vec<PathBuf>,
}

/// Classifies image files; one line per image with the class and its probability.
pub fn predict(args: &PredictArgs) -> Result<String> {
    if args.images.is_empty() {
        return Err(Error::invalid(
            "spore predict: give at least one image file",
        ));
    }
    let net = load_network(args.model, &args.checkpoint)?;
    net.set_train(false);
    let mut out = String::new();
    for path in &args.images {
        let x = image_input(args.model, path)?;
        let probs = spore_core::no_grad(|| net.call1(&x))?
            .softmax(-1)?
            .to_f64_vec()?;
        let (class, p) = probs
            .iter()
            .enumerate()
            .fold((0, f64::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        out.push_str(&format!(
            "{}: class {class} ({:.1}%)\n",
            path.display(),
            100.0 * p
        ));
    }
    Ok(out)
}
