//! Where one LeNet5 training step (batch 32) spends its time, op by op (Spore's own
//! profiler), in PyNative mode, or in Graph mode with `--graph`.
//! Run: `cargo run --release --example profile_lenet [-- --graph]`

use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

fn main() -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .ok();
    if std::env::args().any(|a| a == "--graph") {
        set_context(ContextUpdate::new().mode(Mode::Graph))?;
    }
    let net = LeNet5::new(10)?;
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
    let step = TrainOneStepCell::new(WithLossCell::new(net, loss), opt);
    let x = Tensor::randn(&[32, 1, 32, 32], DType::F32, Some(3))?;
    let y = Tensor::from_vec((0..32i32).map(|i| i % 10).collect(), &[32])?;
    for _ in 0..20 {
        step.step(&x, &y)?;
    }
    let p = Profiler::new(std::env::temp_dir().join("spore-profile-lenet"));
    p.start();
    for _ in 0..20 {
        step.step(&x, &y)?;
        p.step_end(std::time::Duration::ZERO);
    }
    p.stop();
    p.analyse()?;
    Ok(())
}
