//! The main job: seed 001's script on the bundled MNIST digits. LeNet5 in Graph mode,
//! trained with `Model.train(..., dataset_sink_mode=True, sink_size=1000)`, printing
//! LossMonitor lines in the seed's format, then the test accuracy.
//!
//! Run: `cargo run --release --example lenet [-- --epochs 10 --sink-size 1000 --mode graph --data DIR]`

use std::time::Instant;

use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;

struct Args {
    epochs: usize,
    sink_size: i64,
    mode: Mode,
    data: std::path::PathBuf,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        epochs: 10,
        sink_size: 1000,
        mode: Mode::Graph,
        data: bundled_mnist(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--epochs" => {
                a.epochs = value()?
                    .parse()
                    .map_err(|_| "--epochs expects a positive integer".to_string())?
            }
            "--sink-size" => {
                a.sink_size = value()?
                    .parse()
                    .map_err(|_| "--sink-size expects -1 or a positive integer".to_string())?
            }
            "--mode" => a.mode = Mode::parse(&value()?).map_err(|e| e.to_string())?,
            "--data" => a.data = value()?.into(),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --epochs N, --sink-size N, --mode graph|pynative, --data DIR"
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
    set_context(
        ContextUpdate::new()
            .mode(args.mode)
            .device_target("CPU")
            .seed(1),
    )?;
    let ds_train = create_dataset(args.data.join("train"), 32, 1, 1, true)?;
    let ds_test = create_dataset(args.data.join("test"), 32, 1, 1, false)?;
    let network = LeNet5::new(10)?;
    let net_loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let net_opt = Momentum::new(network.trainable_params(), 0.01, 0.9)?;
    let mut model = Model::new(network, net_loss, net_opt).metrics(vec![Box::new(Accuracy::new())]);
    println!("============== Starting Training ==============");
    let started = Instant::now();
    let config = if args.sink_size == 0 {
        TrainConfig::no_sink()
    } else {
        TrainConfig::sink(args.sink_size)
    };
    model.train(
        args.epochs,
        &ds_train,
        &mut [&mut LossMonitor::new()],
        config,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let steps = model.stats.steps;
    println!(
        "trained {steps} steps in {seconds:.1} s ({:.1} steps/s, {:?} mode)",
        steps as f64 / seconds,
        args.mode
    );
    let metrics = model.eval(&ds_test)?;
    println!("test accuracy: {:.2}%", 100.0 * metrics["accuracy"]);
    Ok(())
}
