//! Memory of the parallel optimizer: the wide MLP of issue 35 (784-8192-8192-10), data
//! parallel with Adam (two state tensors per parameter), two training steps of batch 16
//! per rank in Graph mode; each rank prints its parameter bytes, optimizer-state bytes and
//! peak resident memory, with and without `enable_parallel_optimizer`.
//!
//! ```text
//! cargo build --release -p spore-parallel --features mpi --example parallel_optimizer_memory
//! mpirun --allow-run-as-root -n 2 target/release/examples/parallel_optimizer_memory
//! mpirun --allow-run-as-root -n 2 target/release/examples/parallel_optimizer_memory --parallel-optimizer
//! ```

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Result, Tensor};
use spore_nn::optim::Adam;
use spore_nn::prelude::*;
use spore_parallel::context::{AutoParallelUpdate, ParallelMode, set_auto_parallel_context};

/// A `/proc/self/status` field in MiB.
fn status_mib(field: &str) -> f64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() -> Result<()> {
    let sharded = std::env::args().any(|a| a == "--parallel-optimizer");
    spore_parallel::init()?;
    let rank = spore_parallel::get_rank(None)?;
    let n = spore_parallel::get_group_size(None)?;
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::DataParallel)
            .gradients_mean(true)
            .enable_parallel_optimizer(sharded),
    )?;
    set_context(ContextUpdate::new().mode(Mode::Graph))?;
    let net = SequentialCell::new(vec![
        Dense::new(784, 8192)?,
        ReLU::new(),
        Dense::new(8192, 8192)?,
        ReLU::new(),
        Dense::new(8192, 10)?,
    ]);
    let net = WithLossCell::new(
        net,
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    );
    let opt = Adam::new(net.trainable_params(), 1e-3)?;
    let step = TrainOneStepCell::new(net.clone(), opt);
    let x = Tensor::ones(&[16, 784], DType::F32)?;
    let y = Tensor::from_vec((0..16).map(|i| i % 10).collect::<Vec<i32>>(), &[16])?;
    for _ in 0..2 {
        step.call(&[x.clone(), y.clone()])?;
    }
    let mib = |elements: usize| elements as f64 * 4.0 / (1 << 20) as f64;
    let params: usize = net
        .trainable_params()
        .iter()
        .map(|p| p.tensor_type().numel())
        .sum();
    let state: usize = step
        .optimizer()
        .state()
        .iter()
        .filter(|(name, _)| name.starts_with("moment"))
        .map(|(_, p)| p.tensor_type().numel())
        .sum();
    println!(
        "rank {rank} of {n} ({}): parameters {:.1} MiB, Adam state {:.1} MiB, peak resident {:.1} MiB",
        if sharded {
            "parallel optimizer"
        } else {
            "replicated optimizer"
        },
        mib(params),
        mib(state),
        status_mib("VmHWM:")
    );
    Ok(())
}
