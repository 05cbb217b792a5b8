//! Memory of a sharded network: the wide MLP of issue 35 (784-8192-8192-10) split
//! Megatron-style holds about 1/n of the parameter and optimizer-state bytes on each of
//! n ranks. Each rank prints its measured figures (the closing note reports them).

use spore_core::{DType, Tensor, TensorType};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_parallel::sharding::{ShardedCell, Strategies};

use crate::launch::{expect_success, passed, world};
use crate::sharding_nets::mlp_of;

#[test]
fn wide_mlp_memory_falls_with_ranks_on_2_ranks() {
    expect_success(2, "sharding_memory::rank_wide_mlp_memory");
}

#[test]
fn wide_mlp_memory_falls_with_ranks_on_4_ranks() {
    expect_success(4, "sharding_memory::rank_wide_mlp_memory");
}

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn bytes(params: &[spore_core::Parameter]) -> usize {
    params.iter().map(|p| p.stored().numel() * 4).sum()
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_wide_mlp_memory() {
    let (rank, n) = world();
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .full_batch(true),
    )
    .unwrap();
    let mut s = Strategies::new();
    s.shard("0/MatMul", &format!("((1, 1), (1, {n}))")).unwrap();
    s.shard("2/MatMul", &format!("((1, {n}), ({n}, 1))"))
        .unwrap();
    let types = [
        TensorType::new(&[16, 784], DType::F32),
        TensorType::new(&[16], DType::I32),
    ];
    let whole = mlp_of([784, 8192, 8192, 10]);
    let whole_bytes = bytes(&whole.trainable_params());
    let sharded = ShardedCell::new(whole, &types, &s).unwrap();
    let local = sharded.trainable_params();
    let opt = Momentum::new(local.clone(), 0.01, 0.9).unwrap();
    let step = TrainOneStepCell::new(sharded, opt.clone());
    let x = Tensor::randn(&[16, 784], DType::F32, Some(1)).unwrap();
    let y = Tensor::from_vec((0..16).map(|i| i % 10).collect::<Vec<i32>>(), &[16]).unwrap();
    for _ in 0..2 {
        assert!(step.step(&x, &y).unwrap().item().unwrap().is_finite());
    }
    let param_bytes = bytes(&local);
    let state: Vec<spore_core::Parameter> = opt.state().into_iter().map(|(_, p)| p).collect();
    let state_bytes = bytes(&state);
    println!(
        "rank {rank} of {n}: parameters {:.1} MB of {:.1} MB whole ({:.3}), momentum {:.1} MB; resident {:.0} MB, peak {:.0} MB (the peak includes the whole network built before splitting)",
        param_bytes as f64 / 1e6,
        whole_bytes as f64 / 1e6,
        param_bytes as f64 / whole_bytes as f64,
        state_bytes as f64 / 1e6,
        status_kib("VmRSS:") as f64 / 1024.0,
        status_kib("VmHWM:") as f64 / 1024.0,
    );
    // 1/n of the split matrices plus the small pieces kept whole (biases, the last layer).
    let bound = whole_bytes / n + whole_bytes / 100;
    assert!(
        param_bytes <= bound && state_bytes <= bound,
        "rank {rank}: {param_bytes} parameter and {state_bytes} state bytes, expected at most {bound} (whole: {whole_bytes})"
    );
    reset_auto_parallel_context();
    passed(rank);
}
