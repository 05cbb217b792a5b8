//! The cost model against the clock: a Megatron-split MLP (784-2048-2048-10, batch 64)
//! trained in Graph mode on every rank, its step time predicted from the job's measured
//! rates (`Cluster::measure`) and then measured. Rank 0 prints both.
//!
//! ```text
//! cargo build --release -p spore-parallel --features mpi --example sharding_predict
//! RAYON_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -n 2 target/release/examples/sharding_predict
//! ```

use std::sync::Arc;
use std::time::Instant;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Result, Tensor, TensorType};
use spore_nn::prelude::*;
use spore_parallel::context::{AutoParallelUpdate, ParallelMode, set_auto_parallel_context};
use spore_parallel::sharding::{Cluster, ShardedCell, Strategies, plan_cost};

const BATCH: usize = 64;
const STEPS: usize = 20;

fn main() -> Result<()> {
    spore_parallel::init()?;
    let rank = spore_parallel::get_rank(None)?;
    let n = spore_parallel::get_group_size(None)?;
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .full_batch(true),
    )?;
    set_context(ContextUpdate::new().mode(Mode::Graph))?;
    let net: Arc<dyn Cell> = SequentialCell::new(vec![
        Dense::new(784, 2048)?,
        ReLU::new(),
        Dense::new(2048, 2048)?,
        ReLU::new(),
        Dense::new(2048, 10)?,
    ]);
    let net = WithLossCell::new_dyn(
        net,
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    );
    let mut s = Strategies::new();
    s.shard("0/MatMul", &format!("((1, 1), (1, {n}))"))?;
    s.shard("2/MatMul", &format!("((1, {n}), ({n}, 1))"))?;
    let types = [
        TensorType::new(&[BATCH, 784], DType::F32),
        TensorType::new(&[BATCH], DType::I32),
    ];
    let sharded = ShardedCell::new(net, &types, &s)?;
    let cluster = Cluster::measure()?;
    let predicted = plan_cost(sharded.graph(), sharded.plan(), &cluster, 1.0);
    let opt = Momentum::new(sharded.trainable_params(), 0.01, 0.9)?;
    let step = TrainOneStepCell::new(sharded, opt);
    let x = Tensor::randn(&[BATCH, 784], DType::F32, Some(1))?;
    let y = Tensor::from_vec(
        (0..BATCH as i32).map(|i| i % 10).collect::<Vec<_>>(),
        &[BATCH],
    )?;
    for _ in 0..3 {
        step.step(&x, &y)?;
    }
    spore_parallel::barrier(None)?;
    let mut times = vec![];
    for _ in 0..STEPS {
        let t = Instant::now();
        step.step(&x, &y)?;
        times.push(spore_parallel::collective_max_f64(
            t.elapsed().as_secs_f64(),
        )?);
    }
    times.sort_by(f64::total_cmp);
    let measured = times[STEPS / 2];
    if rank == 0 {
        println!(
            "{n} ranks on {}: measured rates {:.1} GFLOP/s, {:.1} GB/s memory, latency {:.1} us, link {:.2} GB/s",
            spore_kernels::peak::cpu_model(),
            cluster.flops / 1e9,
            cluster.memory_bandwidth / 1e9,
            cluster.latency * 1e6,
            cluster.bandwidth / 1e9
        );
        println!(
            "predicted step {:.2} ms (compute {:.2}, communication {:.2}); measured median {:.2} ms; predicted / measured = {:.2}",
            predicted.step_time() * 1e3,
            predicted.compute * 1e3,
            predicted.communication * 1e3,
            measured * 1e3,
            predicted.step_time() / measured
        );
    }
    Ok(())
}
