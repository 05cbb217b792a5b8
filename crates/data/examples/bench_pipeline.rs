//! Throughput of seed 001's LeNet input pipeline (MnistDataset -> TypeCast label ->
//! Resize(32, 32) -> Rescale(1/255) -> Rescale(1/0.3081, -0.1307/0.3081) -> HWC2CHW ->
//! shuffle(10000) -> batch(32, drop_remainder) -> repeat(1)) on the bundled digits, with 1
//! and 2 workers per map. Compare with `bench/peers/pipeline_torch.py` and
//! `bench/peers/pipeline_mindspore.py`, which run the same transforms on the same files.
//!
//! ```text
//! cargo run --release -p spore-data --example bench_pipeline -- [--epochs 5] [--trials 3] [--workers 1,2] [--data DIR]
//! ```

use std::time::Instant;

use spore_core::{DType, Result};
use spore_data::prelude::*;

fn pipeline(dir: &str, workers: usize) -> Result<Dataset> {
    MnistDataset::new(dir)
        .build()?
        .map(["label"], vec![TypeCast::new(DType::I32).into()], workers)?
        .map(
            ["image"],
            vec![Resize::new(32, 32).interpolation(Inter::Linear).into()],
            workers,
        )?
        .map(
            ["image"],
            vec![Rescale::new(1.0 / 255.0, 0.0).into()],
            workers,
        )?
        .map(
            ["image"],
            vec![Rescale::new(1.0 / 0.3081, -0.1307 / 0.3081).into()],
            workers,
        )?
        .map(["image"], vec![HWC2CHW.into()], workers)?
        .shuffle(10_000)?
        .batch(32, true)?
        .repeat(1)
}

/// Samples per second over `epochs` epochs, after one warm-up epoch.
fn run(dir: &str, workers: usize, epochs: usize) -> Result<f64> {
    let ds = pipeline(dir, workers)?;
    let mut it = ds.create_tuple_iterator(epochs + 1);
    for row in &mut it {
        row?;
    }
    let start = Instant::now();
    let mut samples = 0usize;
    for _ in 0..epochs {
        for row in &mut it {
            let row = row?;
            samples += row[0].shape()[0];
        }
    }
    Ok(samples as f64 / start.elapsed().as_secs_f64())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let default_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist/train");
    let dir = arg("--data").unwrap_or_else(|| default_dir.to_string());
    let epochs: usize = arg("--epochs").and_then(|s| s.parse().ok()).unwrap_or(5);
    let workers: Vec<usize> = arg("--workers")
        .unwrap_or_else(|| "1,2".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let trials: usize = arg("--trials")
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    config::set_seed(58);
    println!(
        "seed 001 pipeline on {dir}: {trials} trials of {epochs} epochs (after 1 warm-up epoch) per worker count, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // Trials alternate between worker counts so that a burst of other load on the
    // machine does not land on one configuration only; the median is reported.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); workers.len()];
    for _ in 0..trials {
        for (k, &w) in workers.iter().enumerate() {
            rates[k].push(run(&dir, w, epochs)?);
        }
    }
    for (k, &w) in workers.iter().enumerate() {
        let mut r = rates[k].clone();
        r.sort_by(f64::total_cmp);
        let list: Vec<String> = rates[k].iter().map(|x| format!("{x:.0}")).collect();
        println!(
            "workers={w}: {:.0} samples/s (median; trials: {})",
            r[r.len() / 2],
            list.join(", ")
        );
    }
    Ok(())
}
