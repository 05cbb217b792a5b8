//! Times one LeNet5 training step (batch 32, Momentum) in PyNative mode and as one compiled
//! graph (forward + backward + update), and checks both give the same losses.
//!
//! ```sh
//! cargo run --release -p spore-nn --example lenet_step -- [steps]
//! ```

use std::sync::Arc;
use std::time::Instant;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Result, Tensor, rng};
use spore_nn::prelude::*;

fn trainer() -> Result<Arc<TrainOneStepCell>> {
    rng::set_seed(0);
    let net = LeNet5::new(10)?;
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
    Ok(TrainOneStepCell::new(WithLossCell::new(net, loss), opt))
}

fn batches(n: usize) -> Result<Vec<(Tensor, Tensor)>> {
    (0..n)
        .map(|s| {
            let x = Tensor::randn(&[32, 1, 32, 32], DType::F32, Some(s as u64))?;
            let y: Vec<i32> = (0..32).map(|i| ((i * 7 + s * 3) % 10) as i32).collect();
            Ok((x, Tensor::from_vec(y, &[32])?))
        })
        .collect()
}

/// Runs every batch; returns the losses and the mean milliseconds per step after the
/// first (warm-up / compile) step.
fn run(mode: Mode, data: &[(Tensor, Tensor)]) -> Result<(Vec<f64>, f64, f64)> {
    set_context(ContextUpdate::new().mode(Mode::PyNative))?;
    let train = trainer()?;
    set_context(ContextUpdate::new().mode(mode))?;
    let t0 = Instant::now();
    let mut losses = vec![train.step(&data[0].0, &data[0].1)?.item()?];
    let first_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    for (x, y) in &data[1..] {
        losses.push(train.step(x, y)?.item()?);
    }
    let per_step = t1.elapsed().as_secs_f64() * 1e3 / (data.len() - 1).max(1) as f64;
    set_context(ContextUpdate::new().mode(Mode::PyNative))?;
    Ok((losses, first_ms, per_step))
}

fn main() -> Result<()> {
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
        .max(2);
    let data = batches(steps)?;
    let (eager, eager_first, eager_ms) = run(Mode::PyNative, &data)?;
    let (graph, graph_first, graph_ms) = run(Mode::Graph, &data)?;
    let max_diff = eager
        .iter()
        .zip(&graph)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!(
        "LeNet5, batch 32, Momentum(0.01, 0.9), {steps} steps, {} threads",
        rayon_threads()
    );
    println!("PyNative: first step {eager_first:8.2} ms, then {eager_ms:7.3} ms/step");
    println!("Graph:    first step {graph_first:8.2} ms (compile), then {graph_ms:7.3} ms/step");
    println!(
        "speed-up {:.2}x; losses {:.4} -> {:.4}; max |eager - graph| loss difference {max_diff:.2e}",
        eager_ms / graph_ms,
        eager[0],
        eager[steps - 1]
    );
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
