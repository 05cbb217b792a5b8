//! Training-step speed of LeNet5 (batch 32) and the seed 004 MLP (batch 64) through the
//! nn API (`TrainOneStepCell`), PyNative vs Graph (one compiled graph per step), compile
//! time, inference, and the profiler's overhead. Figures for BENCHMARKS.md; no test
//! asserts them.
//!
//! Run: `cargo run --release --example bench_steps`

use std::sync::Arc;
use std::time::Instant;

use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

/// Median milliseconds per call of `f` over 5 repeats of about `seconds / 5` each.
fn median_ms(mut f: impl FnMut(), seconds: f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    let t = Instant::now();
    f();
    let n = ((seconds / 5.0) / t.elapsed().as_secs_f64().max(1e-6))
        .ceil()
        .max(1.0) as usize;
    let mut reps: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e3 / n as f64
        })
        .collect();
    reps.sort_by(|a, b| a.total_cmp(b));
    reps[2]
}

/// A training cell for `net` with sparse cross-entropy and Momentum(0.01, 0.9).
fn trainer(net: Arc<dyn Cell>) -> Arc<TrainOneStepCell> {
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    TrainOneStepCell::new_dyn(WithLossCell::new_dyn(net, loss), opt)
}

fn batch(x_shape: &[usize]) -> (Tensor, Tensor) {
    let x = Tensor::randn(x_shape, DType::F32, Some(9)).unwrap();
    let labels: Vec<i32> = (0..x_shape[0] as i32).map(|i| i % 10).collect();
    (x, Tensor::from_vec(labels, &[x_shape[0]]).unwrap())
}

fn bench(name: &str, build: fn() -> Arc<dyn Cell>, x_shape: &[usize]) {
    let (x, y) = batch(x_shape);
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    let eager = trainer(build());
    let pynative = median_ms(
        || {
            eager.step(&x, &y).unwrap();
        },
        2.0,
    );
    let net = build();
    let infer_eager = median_ms(
        || {
            no_grad(|| net.call1(&x)).unwrap();
        },
        1.0,
    );

    set_context(ContextUpdate::new().mode(Mode::Graph)).unwrap();
    let graph = trainer(build());
    let t = Instant::now();
    graph.step(&x, &y).unwrap();
    let first = t.elapsed().as_secs_f64() * 1e3;
    let steady = median_ms(
        || {
            graph.step(&x, &y).unwrap();
        },
        2.0,
    );
    let infer_graph = median_ms(
        || {
            no_grad(|| net.call1(&x)).unwrap();
        },
        1.0,
    );
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    // Trace + passes + plan of the training step (the cell compiled in training mode).
    let compile_ms = graph
        .base()
        .compiled(true)
        .map(|j| j.last_compile_ms())
        .unwrap_or(f64::NAN);
    println!(
        "{name:<10} train  PyNative {pynative:7.3} ms   Graph {steady:7.3} ms   compile {compile_ms:5.1} ms   first Graph step {first:6.1} ms"
    );
    println!("{name:<10} infer  PyNative {infer_eager:7.3} ms   Graph {infer_graph:7.3} ms");
}

/// A Graph-mode LeNet step with the profiler recording vs not, alternated so both see the
/// same machine conditions.
fn profiler_overhead() {
    let (x, y) = batch(&[32, 1, 32, 32]);
    set_context(ContextUpdate::new().mode(Mode::Graph)).unwrap();
    let step = trainer(LeNet5::new(10).unwrap());
    let profiler = Profiler::new(std::env::temp_dir().join("spore-bench-profile"));
    let (mut off, mut on) = (vec![], vec![]);
    for _ in 0..3 {
        off.push(median_ms(
            || {
                step.step(&x, &y).unwrap();
            },
            1.0,
        ));
        profiler.start();
        on.push(median_ms(
            || {
                step.step(&x, &y).unwrap();
            },
            1.0,
        ));
        profiler.stop();
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    off.sort_by(|a, b| a.total_cmp(b));
    on.sort_by(|a, b| a.total_cmp(b));
    println!(
        "lenet b32 Graph step: profiler off {:.3} ms, on {:.3} ms ({:+.1}%)",
        off[1],
        on[1],
        100.0 * (on[1] / off[1] - 1.0)
    );
}

fn main() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .ok();
    bench("lenet b32", || LeNet5::new(10).unwrap(), &[32, 1, 32, 32]);
    bench("mlp b64", || Mlp::new().unwrap(), &[64, 1, 28, 28]);
    profiler_overhead();
}
