//! LeNet5 training steps at each mixed-precision level against float32, in alternating
//! rounds on the bundled digits (BENCHMARKS.md, "Mixed precision"). Each level's loss
//! after its timed steps is printed beside its time, so a fast wrong step shows. For the
//! levels whose whole step compiles (O0, O1, O3), the peak bytes of values live in the
//! step's graph (parameters, their 16-bit copies, activations, gradients) are printed
//! too, from the graph's memory plan.
//!
//! ```sh
//! cargo run --release -p spore --example bench_amp -- --steps 100 --rounds 3
//! ```

use std::time::Instant;

use spore::datasets::{bundled_mnist, create_dataset};
use spore::nn::amp::{AmpLevel, AmpOptions, build_train_network};
use spore::prelude::*;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Milliseconds per step over `steps` steps of a fresh LeNet5 at `level`, the mean loss
/// of the last ten, and the peak live bytes of the compiled step (when it compiles).
fn time_level(level: AmpLevel, dtype: DType, steps: usize) -> (f64, f64, Option<usize>) {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1)).unwrap();
    let data = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let rows: Vec<Vec<Tensor>> = data
        .create_tuple_iterator(1)
        .take(steps + 5)
        .map(|r| r.unwrap())
        .collect();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let options = AmpOptions {
        dtype: Some(dtype),
        ..AmpOptions::default()
    };
    let step = build_train_network(net, opt, Some(loss), level, options).unwrap();
    for row in &rows[..5] {
        step.call(row).unwrap();
    }
    let start = Instant::now();
    let mut last = vec![];
    for row in &rows[5..] {
        last.push(step.call(row).unwrap()[0].item().unwrap());
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let tail = &last[last.len().saturating_sub(10)..];
    let types: Vec<spore::core::TensorType> =
        rows[0].iter().map(|t| t.tensor_type().clone()).collect();
    let peak = step
        .base()
        .compiled(true)
        .and_then(|jit| jit.graph_for(&types))
        .map(|g| spore::compile::plan::MemoryPlan::new(&g).peak_bytes);
    (
        ms,
        tail.iter().sum::<f64>() / tail.len().max(1) as f64,
        peak,
    )
}

fn main() {
    let (steps, rounds) = (arg("--steps", 100), arg("--rounds", 3));
    // One pass over the 8,000 bundled digits: 250 batches, 5 of them warm-up.
    if !(1..=245).contains(&steps) || rounds == 0 {
        eprintln!(
            "--steps must be 1 to 245 (one pass over the bundled digits) and --rounds at least 1"
        );
        std::process::exit(2);
    }
    println!(
        "LeNet5 train step, batch 32, Graph mode: ms per step (mean loss of the last ten steps), peak live bytes of the compiled step"
    );
    let levels = [
        ("O0", AmpLevel::O0, DType::F16),
        ("O1 f16", AmpLevel::O1, DType::F16),
        ("O2 f16", AmpLevel::O2, DType::F16),
        ("O2 bf16", AmpLevel::O2, DType::BF16),
        ("O3 f16", AmpLevel::O3, DType::F16),
    ];
    for round in 1..=rounds {
        let cells: Vec<String> = levels
            .iter()
            .map(|&(name, level, dtype)| {
                let (ms, loss, peak) = time_level(level, dtype, steps);
                let peak = peak.map_or(String::new(), |b| format!(" {:.0} KiB", b as f64 / 1024.0));
                format!("{name} {ms:.2} ({loss:.3}){peak}")
            })
            .collect();
        println!("round {round}: {}", cells.join("   "));
    }
}
