//! The parallel optimizer in sharded and pipelined jobs (`semi_auto_parallel`): a
//! sharded network's ranks that hold the same block of a parameter share its optimizer
//! state and update, and a pipeline stage's data-parallel replicas share theirs. On 2
//! and 4 ranks, in PyNative and Graph mode, 20 steps must give the losses and (gathered)
//! parameters of the same job with the replicated optimizer within 1e-5, and each
//! rank's state must be its share. On 4 ranks the same holds for a 2-stage pipeline of
//! replicated stages and of stages sharded over their 2 ranks.

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Parameter, Tensor, TensorType};
use spore_nn::optim::{AdamW, Momentum, Optimizer};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_parallel::pipeline::PipelineCell;
use spore_parallel::sharding::{ShardedCell, Strategies, block_holders};

use crate::launch::{expect_success, passed, world};
use crate::pipeline::max_difference;

#[test]
fn sharded_parallel_optimizer_equals_replicated_update_on_2_ranks() {
    expect_success(
        2,
        "parallel_optimizer_sharded::rank_sharded_parallel_optimizer",
    );
}

#[test]
fn sharded_parallel_optimizer_equals_replicated_update_on_4_ranks() {
    expect_success(
        4,
        "parallel_optimizer_sharded::rank_sharded_parallel_optimizer",
    );
}

const STEPS: usize = 20;
const TOLERANCE: f32 = 1e-5;

fn build() -> Arc<WithLossCell> {
    let net = SequentialCell::new(vec![
        Dense::new(10, 32).unwrap(),
        ReLU::new(),
        Dense::new(32, 7).unwrap(),
    ]);
    WithLossCell::new(net, MSELoss::new(Reduction::Mean))
}

/// The whole batch of step `step` (every rank is given it: full_batch).
fn batch(step: usize) -> [Tensor; 2] {
    let x: Vec<f32> = (0..8 * 10)
        .map(|i| ((i * 3 + step * 11) as f32 * 0.29).sin())
        .collect();
    let y: Vec<f32> = (0..8 * 7)
        .map(|i| ((i + step * 5) as f32 * 0.41).cos())
        .collect();
    [
        Tensor::from_vec(x, &[8, 10]).unwrap(),
        Tensor::from_vec(y, &[8, 7]).unwrap(),
    ]
}

/// On 2 ranks: the first layer data parallel (its weights held by both ranks), the
/// second split by rows (each rank alone with its block). On 4: both layers also cut the
/// batch in 2, so every block of a weight is held by 2 ranks.
fn strategies(n: usize) -> Strategies {
    let (dp, mp) = if n == 4 { (2, 2) } else { (n, 1) };
    let mut s = Strategies::new();
    s.shard("0/MatMul", &format!("(({dp}, 1), (1, {mp}))"))
        .unwrap();
    let rows = if n == 4 { (2, 2) } else { (1, n) };
    s.shard(
        "2/MatMul",
        &format!("(({}, {}), ({}, 1))", rows.0, rows.1, rows.1),
    )
    .unwrap();
    s
}

type MakeOptimizer = fn(Vec<Parameter>) -> Arc<dyn Optimizer>;

fn optimizers() -> Vec<(&'static str, MakeOptimizer)> {
    vec![
        ("Momentum", |p| Momentum::new(p, 0.05, 0.9).unwrap()),
        ("AdamW", |p| AdamW::config(p, 0.01).build().unwrap()),
    ]
}

/// Elements of per-parameter state (moments, velocities), not counters.
fn state_elements(opt: &Arc<dyn Optimizer>) -> usize {
    opt.state()
        .iter()
        .filter(|(n, _)| n != "global_step" && n != "learning_rate" && !n.ends_with("_power"))
        .map(|(_, p)| p.tensor_type().numel())
        .sum()
}

fn context(parallel_optimizer: bool, stages: usize) {
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .full_batch(true)
            .pipeline_stages(stages)
            .enable_parallel_optimizer(parallel_optimizer),
    )
    .unwrap();
}

/// 20 steps of the sharded MLP: the losses, the whole parameters, the state size and
/// what the state would be if each held block's state were split among its holders.
fn train_sharded(
    mode: Mode,
    parallel_optimizer: bool,
    make: MakeOptimizer,
    rank: usize,
    n: usize,
) -> (Vec<f32>, Vec<Tensor>, usize, usize) {
    context(parallel_optimizer, 1);
    spore_core::rng::set_seed(3);
    let types = [
        TensorType::new(&[8, 10], DType::F32),
        TensorType::new(&[8, 7], DType::F32),
    ];
    let sharded = ShardedCell::new(build(), &types, &strategies(n)).unwrap();
    let named = sharded.params();
    let params: Vec<Parameter> = named.iter().map(|(_, p)| p.clone()).collect();
    // The weights' holders, as the strategies put them: on 2 ranks the data-parallel
    // first layer's weight is held by both and the row-split second by one; on 4 each
    // block of both is held by the 2 ranks of its batch axis.
    for (name, want) in [
        ("0.weight", if n == 4 { 2 } else { n }),
        ("2.weight", if n == 4 { 2 } else { 1 }),
    ] {
        let (layout, _) = sharded.parameter_layout(name).unwrap();
        assert_eq!(
            block_holders(layout, rank).len(),
            want,
            "holders of {name} on rank {rank}"
        );
    }
    // Per parameter: its block, divided among the ranks that hold it.
    let shares: usize = named
        .iter()
        .map(|(name, p)| {
            let (layout, _) = sharded.parameter_layout(name).unwrap();
            let holders = block_holders(layout, rank).len();
            p.tensor_type().numel().div_ceil(holders)
        })
        .sum();
    set_context(ContextUpdate::new().mode(mode)).unwrap();
    let step = TrainOneStepCell::new_dyn(sharded.clone(), make(params.clone()));
    let losses = (0..STEPS)
        .map(|s| step.call(&batch(s)).unwrap()[0].to_vec::<f32>().unwrap()[0])
        .collect();
    let state = state_elements(step.optimizer());
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    let whole = named
        .iter()
        .map(|(name, p)| sharded.gather_parameter(name, &p.stored()).unwrap())
        .collect();
    (losses, whole, state, shares)
}

/// 20 steps of a 2-stage pipeline on 4 ranks: each stage's 2 ranks its data-parallel
/// replicas, or (`sharded`) the ranks its layers are split over.
fn train_pipeline(
    mode: Mode,
    parallel_optimizer: bool,
    sharded: bool,
    make: MakeOptimizer,
) -> (Vec<f32>, Vec<Tensor>) {
    context(parallel_optimizer, 2);
    spore_core::rng::set_seed(3);
    let net = crate::pipeline::build(2);
    let micro = crate::pipeline::MICRO;
    let pipeline = match sharded {
        false => PipelineCell::new(net, micro).unwrap(),
        true => {
            let types = crate::pipeline_sharded::types();
            let strategies = crate::pipeline_sharded::strategies(2);
            PipelineCell::sharded(net, micro, &types, &strategies).unwrap()
        }
    };
    let params = pipeline.trainable_params();
    set_context(ContextUpdate::new().mode(mode)).unwrap();
    let step = TrainOneStepCell::new_dyn(pipeline, make(params.clone()));
    let losses = (0..STEPS)
        .map(|s| {
            step.call(&crate::pipeline::batch(s)).unwrap()[0]
                .to_vec::<f32>()
                .unwrap()[0]
        })
        .collect();
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    (losses, params.iter().map(|p| p.stored()).collect())
}

fn compare(what: &str, rank: usize, a: (&[f32], &[Tensor]), b: (&[f32], &[Tensor])) {
    assert_eq!((a.0.len(), a.1.len()), (b.0.len(), b.1.len()), "{what}");
    for (s, (x, y)) in a.0.iter().zip(b.0).enumerate() {
        assert!(
            (x - y).abs() <= TOLERANCE,
            "{what}: step {s}'s loss {y} differs from the replicated {x} on rank {rank}"
        );
    }
    for (k, (x, y)) in a.1.iter().zip(b.1).enumerate() {
        let d = max_difference(x, y);
        assert!(
            d <= TOLERANCE,
            "{what}: parameter {k} differs by {d} on rank {rank}"
        );
    }
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_sharded_parallel_optimizer() {
    let (rank, n) = world();
    for (name, make) in optimizers() {
        for mode in [Mode::PyNative, Mode::Graph] {
            let what = format!("sharded {name} {mode:?}");
            let (l_rep, p_rep, s_rep, _) = train_sharded(mode, false, make, rank, n);
            let (l_par, p_par, s_par, shares) = train_sharded(mode, true, make, rank, n);
            compare(&what, rank, (&l_rep, &p_rep), (&l_par, &p_par));
            // Momentum keeps one value per element, AdamW two.
            let slots = if name == "AdamW" { 2 } else { 1 };
            assert_eq!(s_par, shares * slots, "{what}: state on rank {rank}");
            assert!(
                s_par < s_rep,
                "{what}: the state did not shrink on rank {rank}"
            );
            if n == 4 {
                for sharded in [false, true] {
                    let what = format!("pipeline (sharded stages: {sharded}) {name} {mode:?}");
                    let (l_rep, p_rep) = train_pipeline(mode, false, sharded, make);
                    let (l_par, p_par) = train_pipeline(mode, true, sharded, make);
                    compare(&what, rank, (&l_rep, &p_rep), (&l_par, &p_par));
                }
            }
        }
    }
    reset_auto_parallel_context();
    passed(rank);
}
