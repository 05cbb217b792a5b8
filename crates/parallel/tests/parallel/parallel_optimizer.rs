//! The parallel optimizer (`enable_parallel_optimizer`) against replicated data
//! parallelism: 20 steps of an MLP whose parameter sizes do not divide by the rank count
//! (so blocks are padded), with Momentum, AdamW and SGD with weight decay, on 2 and 4
//! ranks, in PyNative and Graph mode, must give the same losses and parameters within
//! 1e-5; each rank's optimizer state must be its `1/N` share.

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Parameter, Tensor};
use spore_nn::optim::{AdamW, Momentum, Optimizer, SGD};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};

use crate::launch::{expect_success, passed, world};

#[test]
fn parallel_optimizer_equals_replicated_update_on_2_ranks() {
    expect_success(2, "parallel_optimizer::rank_parallel_optimizer");
}

#[test]
fn parallel_optimizer_equals_replicated_update_on_4_ranks() {
    expect_success(4, "parallel_optimizer::rank_parallel_optimizer");
}

const STEPS: usize = 20;
const TOLERANCE: f32 = 1e-5;

fn build() -> Arc<WithLossCell> {
    let net = SequentialCell::new(vec![
        Dense::new(10, 33).unwrap(),
        ReLU::new(),
        Dense::new(33, 7).unwrap(),
    ]);
    WithLossCell::new(net, MSELoss::new(Reduction::Mean))
}

/// Rank `rank`'s batch of step `step`.
fn batch(step: usize, rank: usize) -> [Tensor; 2] {
    let x: Vec<f32> = (0..8 * 10)
        .map(|i| ((i * 3 + step * 11 + rank * 17) as f32 * 0.29).sin())
        .collect();
    let y: Vec<f32> = (0..8 * 7)
        .map(|i| ((i + step * 5 + rank * 7) as f32 * 0.41).cos())
        .collect();
    [
        Tensor::from_vec(x, &[8, 10]).unwrap(),
        Tensor::from_vec(y, &[8, 7]).unwrap(),
    ]
}

type MakeOptimizer = fn(Vec<Parameter>) -> Arc<dyn Optimizer>;

fn optimizers() -> Vec<(&'static str, MakeOptimizer)> {
    vec![
        ("Momentum", |p| Momentum::new(p, 0.05, 0.9).unwrap()),
        ("AdamW", |p| AdamW::config(p, 0.01).build().unwrap()),
        ("SGD", |p| {
            SGD::config(p, 0.05)
                .momentum(0.5)
                .weight_decay(0.01)
                .build()
                .unwrap()
        }),
    ]
}

fn state_elements(opt: &Arc<dyn Optimizer>) -> usize {
    opt.state()
        .iter()
        .filter(|(n, _)| {
            n != "global_step"
                && n != "learning_rate"
                && !n.ends_with("_power")
                && !n.starts_with("stat.")
        })
        .map(|(_, p)| p.tensor_type().numel())
        .sum()
}

/// 20 steps; returns the losses, the final parameters and the optimizer's state size.
fn train(
    mode: Mode,
    sharded: bool,
    make: MakeOptimizer,
    rank: usize,
) -> (Vec<f32>, Vec<Tensor>, usize) {
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::DataParallel)
            .gradients_mean(true)
            .enable_parallel_optimizer(sharded),
    )
    .unwrap();
    set_context(ContextUpdate::new().mode(mode)).unwrap();
    spore_core::rng::set_seed(3);
    let net = build();
    let params = net.trainable_params();
    let step = TrainOneStepCell::new_dyn(net, make(params.clone()));
    let losses = (0..STEPS)
        .map(|s| {
            step.call(&batch(s, rank)).unwrap()[0]
                .to_vec::<f32>()
                .unwrap()[0]
        })
        .collect();
    let state = state_elements(step.optimizer());
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    (losses, params.iter().map(|p| p.stored()).collect(), state)
}

fn max_difference(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_parallel_optimizer() {
    let (rank, n) = world();
    for (name, make) in optimizers() {
        for mode in [Mode::PyNative, Mode::Graph] {
            let (l_rep, p_rep, s_rep) = train(mode, false, make, rank);
            let (l_par, p_par, s_par) = train(mode, true, make, rank);
            for (s, (a, b)) in l_rep.iter().zip(&l_par).enumerate() {
                assert!(
                    (a - b).abs() <= TOLERANCE,
                    "{name} {mode:?}: step {s}'s loss {b} differs from the replicated {a} on rank {rank}"
                );
            }
            for (k, (a, b)) in p_rep.iter().zip(&p_par).enumerate() {
                let d = max_difference(a, b);
                assert!(
                    d <= TOLERANCE,
                    "{name} {mode:?}: parameter {k} differs by {d} on rank {rank}"
                );
            }
            // The state of each parameter of n elements is ceil(n / N) per rank.
            let per_param = [10 * 33, 33, 33 * 7, 7];
            let slots = s_rep / per_param.iter().sum::<usize>();
            let expected: usize = per_param.iter().map(|&e| e.div_ceil(n)).sum::<usize>() * slots;
            assert_eq!(
                s_par, expected,
                "{name}: state elements on rank {rank} (replicated: {s_rep})"
            );
        }
    }
    reset_auto_parallel_context();
    passed(rank);
}
