//! The main job, data parallel: LeNet5 on the bundled MNIST digits over the ranks that
//! `mpirun` starts, as MindSpore's data-parallel tutorial writes it (`init()`, then
//! `set_auto_parallel_context(parallel_mode=DATA_PARALLEL, gradients_mean=True)`, each
//! rank reading its shard with `num_shards`/`shard_id`). Rank 0 prints the LossMonitor
//! lines, writes the checkpoints and reports the test accuracy, which the ranks compute
//! together (each evaluates its shard of the test digits; the counts are summed).
//!
//! Build and run (the `mpi` feature needs libopenmpi-dev and libclang-dev):
//!
//! ```sh
//! cargo build --release --features mpi --example lenet_distributed
//! mpirun -n 2 target/release/examples/lenet_distributed [--epochs 10 --sink-size 1000 --mode graph]
//! ```
//!
//! As root Open MPI also wants `--allow-run-as-root`, and more ranks than cores
//! `--oversubscribe`. Started without `mpirun`, it trains on one process.

use std::time::Instant;

use spore::datasets::{bundled_mnist, create_distributed_dataset};
use spore::prelude::*;

struct Args {
    epochs: usize,
    sink_size: i64,
    mode: Mode,
    /// `None`: 0.01 per rank (see `run`).
    lr: Option<f64>,
    checkpoints: Option<std::path::PathBuf>,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        epochs: 10,
        sink_size: 1000,
        mode: Mode::Graph,
        lr: None,
        checkpoints: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--epochs" => {
                a.epochs = value()?
                    .parse()
                    .map_err(|_| "--epochs expects a positive integer")?
            }
            "--sink-size" => {
                a.sink_size = value()?
                    .parse()
                    .map_err(|_| "--sink-size expects -1, 0 (no sinking) or a positive integer")?
            }
            "--mode" => a.mode = Mode::parse(&value()?).map_err(|e| e.to_string())?,
            "--lr" => a.lr = Some(value()?.parse().map_err(|_| "--lr expects a number")?),
            "--checkpoints" => a.checkpoints = Some(value()?.into()),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --epochs N, --sink-size N, --mode graph|pynative, --lr X, --checkpoints DIR"
                ));
            }
        }
    }
    Ok(a)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    init()?;
    let (rank, size) = (get_rank(None)?, get_group_size(None)?);
    set_context(
        ContextUpdate::new()
            .mode(args.mode)
            .device_target("CPU")
            .seed(1),
    )?;
    // The same shuffles on every run (and the same shard permutation on every rank).
    spore::data::config::set_seed(1);
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::DataParallel)
            .gradients_mean(true)
            .device_num(size),
    )?;
    let data = bundled_mnist();
    let ds_train = create_distributed_dataset(data.join("train"), 32, 1, 1, true, size, rank)?;
    let ds_test = create_distributed_dataset(data.join("test"), 32, 1, 1, false, size, rank)?;
    let network = LeNet5::new(10)?;
    let net_loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    // The global batch is 32 per rank, so the learning rate scales with the ranks (the
    // linear scaling rule): the same progress per sample as the one-process main job.
    let lr = args.lr.unwrap_or(0.01 * size as f64);
    let net_opt = Momentum::new(network.trainable_params(), lr, 0.9)?;
    let mut model = Model::new(network, net_loss, net_opt).metrics(vec![Box::new(Accuracy::new())]);
    if rank == 0 {
        println!("============== Starting Training on {size} rank(s) ==============");
    }
    let config = if args.sink_size == 0 {
        TrainConfig::no_sink()
    } else {
        TrainConfig::sink(args.sink_size)
    };
    let mut monitor = LossMonitor::new();
    let mut checkpoint = match &args.checkpoints {
        Some(dir) => Some(ModelCheckpoint::new(
            "lenet",
            dir,
            CheckpointConfig::default(),
        )?),
        None => None,
    };
    let mut callbacks: Vec<&mut dyn Callback> = vec![&mut monitor];
    if let Some(c) = checkpoint.as_mut() {
        callbacks.push(c);
    }
    let started = Instant::now();
    model.train(args.epochs, &ds_train, &mut callbacks, config)?;
    let seconds = started.elapsed().as_secs_f64();
    let steps = model.stats.steps;
    let metrics = model.eval(&ds_test)?;
    if rank == 0 {
        println!(
            "trained {steps} steps per rank on {size} rank(s) in {seconds:.1} s ({:.1} steps/s per rank, {:?} mode)",
            steps as f64 / seconds,
            args.mode
        );
        println!("test accuracy: {:.2}%", 100.0 * metrics["accuracy"]);
    }
    Ok(())
}
