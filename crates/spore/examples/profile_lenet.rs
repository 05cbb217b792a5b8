//! Where one LeNet5 training step (batch 32) spends its time, op by op (Spore's own
//! profiler), in PyNative mode, or in Graph mode with `--graph`; `--mlp` profiles the
//! seed 004 MLP (batch 64) instead, `--resnet` ResNet-18 (batch 32, 3 steps); `--infer`
//! profiles the network's inference (forward, no gradients) instead of a training step;
//! `--save-graphs` (with `--graph`) also writes the step's IR after every pass; `--o2` or
//! `--o3` trains at that mixed-precision level (bfloat16 with `--bf16`, else float16).
//! Run: `cargo run --release --example profile_lenet [-- --graph [--save-graphs]] [--mlp |
//! --resnet] [--infer] [--o2 | --o3 [--bf16]]`

use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

fn main() -> Result<()> {
    // The main thread is one of the kernel pool's workers (see `spore::core::threads`).
    spore::core::threads::join_kernel_pool(Some(2))?;
    let flag = |f: &str| std::env::args().any(|a| a == f);
    if flag("--graph") {
        let mut update = ContextUpdate::new().mode(Mode::Graph);
        if flag("--save-graphs") {
            // The step's IR after every pass, to read what the kernels were given.
            let dir = std::env::temp_dir()
                .join("spore-profile-lenet")
                .join("graphs");
            update = update.save_graphs(1).save_graphs_path(dir);
        }
        set_context(update)?;
    }
    let (net, x_shape, steps): (std::sync::Arc<dyn Cell>, [usize; 4], usize) = if flag("--mlp") {
        (Mlp::new()?, [64, 1, 28, 28], 20)
    } else if flag("--resnet") {
        (ResNet::resnet18(10)?, [32, 3, 32, 32], 3)
    } else {
        (LeNet5::new(10)?, [32, 1, 32, 32], 20)
    };
    let x = Tensor::randn(&x_shape, DType::F32, Some(3))?;
    let infer = flag("--infer");
    if infer {
        net.set_train(false);
    }
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
    let level = if flag("--o2") {
        spore::nn::amp::AmpLevel::O2
    } else if flag("--o3") {
        spore::nn::amp::AmpLevel::O3
    } else {
        spore::nn::amp::AmpLevel::O0
    };
    let options = spore::nn::amp::AmpOptions {
        dtype: Some(if flag("--bf16") {
            DType::BF16
        } else {
            DType::F16
        }),
        ..Default::default()
    };
    let step = spore::nn::amp::build_train_network(net.clone(), opt, Some(loss), level, options)?;
    let batch = x_shape[0] as i32;
    let y = Tensor::from_vec((0..batch).map(|i| i % 10).collect(), &[x_shape[0]])?;
    let run = || -> Result<()> {
        match infer {
            true => no_grad(|| net.call1(&x)).map(drop),
            false => step.call(&[x.clone(), y.clone()]).map(drop),
        }
    };
    for _ in 0..steps {
        run()?;
    }
    let p = Profiler::new(std::env::temp_dir().join("spore-profile-lenet"));
    p.start();
    for _ in 0..steps {
        run()?;
        p.step_end(std::time::Duration::ZERO);
    }
    p.stop();
    p.analyse()?;
    Ok(())
}
