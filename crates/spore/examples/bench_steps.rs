//! Compile time of the LeNet5 (batch 32) and seed 004 MLP (batch 64) training steps
//! through the nn API (`TrainOneStepCell`), and the profiler's overhead on a Graph-mode
//! step. Step times in both modes, against the peers, come from the `bench` example;
//! no test asserts these figures.
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

/// Trace + passes + plan of the training step, and the first Graph step including them.
fn compile_time(name: &str, build: fn() -> Arc<dyn Cell>, x_shape: &[usize]) {
    let (x, y) = batch(x_shape);
    set_context(ContextUpdate::new().mode(Mode::Graph)).unwrap();
    let graph = trainer(build());
    let t = Instant::now();
    graph.step(&x, &y).unwrap();
    let first = t.elapsed().as_secs_f64() * 1e3;
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    // The cell compiled in training mode.
    let compile_ms = graph
        .base()
        .compiled(true)
        .map(|j| j.last_compile_ms())
        .unwrap_or(f64::NAN);
    println!("{name:<10} train step: compile {compile_ms:5.1} ms, first Graph step {first:6.1} ms");
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
    // The main thread is one of the kernel pool's workers (see `spore::core::threads`).
    if let Err(e) = spore::core::threads::join_kernel_pool(Some(2)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    compile_time("lenet b32", || LeNet5::new(10).unwrap(), &[32, 1, 32, 32]);
    compile_time("mlp b64", || Mlp::new().unwrap(), &[64, 1, 28, 28]);
    profiler_overhead();
}
