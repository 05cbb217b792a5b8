//! Where one LeNet5 training step (batch 32) spends its time, op by op (Spore's own
//! profiler), in PyNative mode, or in Graph mode with `--graph`; `--mlp` profiles the
//! seed 004 MLP (batch 64) instead, `--resnet` ResNet-18 (batch 32, 3 steps), `--resnet50`
//! ResNet-50 (batch 8, 224x224), `--bert` the BERT-style encoder (batch 16, AdamW); `--infer`
//! profiles the network's inference (forward, no gradients) instead of a training step;
//! `--save-graphs` (with `--graph`) also writes the step's IR after every pass; `--o2` or
//! `--o3` trains at that mixed-precision level (bfloat16 with `--bf16`, else float16);
//! `--threads N` sizes the kernel pool (default 2); `--batch N` replaces the batch size.
//! Run: `cargo run --release --example profile_lenet [-- --graph [--save-graphs]] [--mlp |
//! --resnet | --resnet50 | --bert] [--infer] [--o2 | --o3 [--bf16]] [--threads N] [--batch N]`

use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let threads = match args.iter().position(|a| a == "--threads") {
        Some(i) => args
            .get(i + 1)
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| Error::invalid("profile_lenet: --threads needs a positive integer"))?,
        None => 2,
    };
    // The main thread is one of the kernel pool's workers (see `spore::core::threads`).
    spore::core::threads::join_kernel_pool(Some(threads))?;
    // glibc tuned as the `spore` command and the benchmark harness tune it.
    spore::kernels::arena::set_malloc_tuning(true);
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
    let (net, mut x_shape, mut steps): (std::sync::Arc<dyn Cell>, Vec<usize>, usize) =
        if flag("--mlp") {
            (Mlp::new()?, vec![64, 1, 28, 28], 20)
        } else if flag("--resnet") {
            (ResNet::resnet18(10)?, vec![32, 3, 32, 32], 3)
        } else if flag("--resnet50") {
            (ImageNetResNet::resnet50(1000)?, vec![8, 3, 224, 224], 2)
        } else if flag("--bert") {
            (BertClassifier::new(&BertConfig::small())?, vec![16, 128], 3)
        } else {
            (LeNet5::new(10)?, vec![32, 1, 32, 32], 20)
        };
    if let Some(i) = args.iter().position(|a| a == "--batch") {
        let batch = args
            .get(i + 1)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::invalid("profile_lenet: --batch needs a positive integer"))?;
        // The same work per profile: more steps for a smaller batch.
        steps = (steps * x_shape[0]).div_ceil(batch).max(steps);
        x_shape[0] = batch;
    }
    let x = if flag("--bert") {
        // Token ids in 1..1000 (no padding): what matters here is the time per op.
        let ids = (0..x_shape[0] as i32 * 128)
            .map(|i| 1 + (i * 7919 + 13) % 999)
            .collect();
        Tensor::from_vec(ids, &x_shape)?
    } else {
        Tensor::randn(&x_shape, DType::F32, Some(3))?
    };
    let infer = flag("--infer");
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt: std::sync::Arc<dyn Optimizer> = if flag("--bert") {
        AdamW::config(net.trainable_params(), 1e-4)
            .weight_decay(0.01)
            .build()?
    } else {
        Momentum::new(net.trainable_params(), 0.01, 0.9)?
    };
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
    if infer {
        // After building the step, which puts the network in training mode.
        net.set_train(false);
    }
    let batch = x_shape[0] as i32;
    let classes = if flag("--bert") { 2 } else { 10 };
    let y = Tensor::from_vec((0..batch).map(|i| i % classes).collect(), &[x_shape[0]])?;
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
