//! Loss-scaled data parallelism (amp O2's step) against one process: the ranks reduce
//! their gradients before the overflow check, so an infinity in one rank's slice of the
//! batch makes every rank drop that step, as one process on the whole batch drops it;
//! the loss scales and the parameters then follow the one process's. The same holds with
//! the parallel optimizer, whose ranks check their own unreduced gradients and agree,
//! and for a 2-stage pipeline, whose stages agree.

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Tensor};
use spore_nn::amp::{DynamicLossScaleManager, TrainOneStepWithLossScaleCell};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_parallel::pipeline::PipelineCell;

use crate::launch::{expect_success, world};

#[test]
fn loss_scaled_data_parallel_training_equals_one_process_on_2_ranks() {
    expect_success(2, "loss_scaled::rank_loss_scaled_training");
}

const STEPS: usize = 12;
const PER_RANK: usize = 16;
/// The step whose batch holds an infinity (in the last rank's rows).
const POISONED: usize = 5;

/// Step `s`'s global batch for `n` ranks; at [`POISONED`] its last image holds an infinity.
fn global_batch(s: usize, n: usize) -> (Tensor, Tensor) {
    let rows = n * PER_RANK;
    let x = Tensor::randn(&[rows, 1, 32, 32], DType::F32, Some(500 + s as u64)).unwrap();
    let mut values = x.to_vec::<f32>().unwrap();
    if s == POISONED {
        *values.last_mut().unwrap() = f32::INFINITY;
    }
    let x = Tensor::from_vec(values, &[rows, 1, 32, 32]).unwrap();
    let y: Vec<i32> = (0..rows).map(|i| ((i * 3 + s) % 10) as i32).collect();
    (x, Tensor::from_vec(y, &[rows]).unwrap())
}

/// Trains on rows `rows` of each global batch; returns each step's (overflow, scale), the
/// parameters, and whether the step's state holds the parallel optimizer's blocks.
fn train(
    mode: Mode,
    n: usize,
    rows: std::ops::Range<usize>,
) -> (Vec<(bool, f32)>, Vec<Vec<f32>>, bool) {
    spore_core::rng::set_seed(3);
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    let params = net.trainable_params();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(params.clone(), 0.01, 0.9).unwrap();
    // Grows every 3 clean steps, from 2^10: powers of two, so scaling is exact.
    let manager = DynamicLossScaleManager::new(1024.0, 2.0, 3).unwrap();
    let step = TrainOneStepWithLossScaleCell::new(WithLossCell::new_dyn(net, loss), opt, manager);
    set_context(ContextUpdate::new().mode(mode)).unwrap();
    let mut seen = vec![];
    for s in 0..STEPS {
        let (x, y) = global_batch(s, n);
        let x = x.narrow(0, rows.start, rows.len()).unwrap();
        let y = y.narrow(0, rows.start, rows.len()).unwrap();
        let out = step.call(&[x, y]).unwrap();
        let flag = out[1].item().unwrap() == 1.0;
        seen.push((flag, out[2].item().unwrap() as f32));
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    let values = params
        .iter()
        .map(|p| p.stored().to_vec::<f32>().unwrap())
        .collect();
    let blocks = step
        .parameters_and_names()
        .iter()
        .any(|(name, _)| name.contains(".block"));
    (seen, values, blocks)
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_loss_scaled_training() {
    let (r, n) = world();
    reset_auto_parallel_context();
    let (one_seen, one_params, _) = train(Mode::PyNative, n, 0..n * PER_RANK);
    assert!(
        one_seen[POISONED].0,
        "one process: the poisoned step overflows"
    );
    assert_eq!(one_seen.iter().filter(|s| s.0).count(), 1, "{one_seen:?}");
    // With the parallel optimizer each rank checks its own unreduced gradients: only
    // the last rank sees the infinity, and the job's agreement makes every rank drop the
    // step.
    for (mode, zero) in [
        (Mode::PyNative, false),
        (Mode::Graph, false),
        (Mode::PyNative, true),
        (Mode::Graph, true),
    ] {
        set_auto_parallel_context(
            AutoParallelUpdate::new()
                .parallel_mode(ParallelMode::DataParallel)
                .gradients_mean(true)
                .enable_parallel_optimizer(zero),
        )
        .unwrap();
        let (seen, params, blocks) = train(mode, n, r * PER_RANK..(r + 1) * PER_RANK);
        reset_auto_parallel_context();
        assert_eq!(
            blocks, zero,
            "rank {r}: the parallel optimizer is on exactly when asked"
        );
        let mode = format!("{mode:?}{}", if zero { ", parallel optimizer" } else { "" });
        assert_eq!(
            seen, one_seen,
            "rank {r} ({mode}): overflows and loss scales"
        );
        let d = params
            .iter()
            .flatten()
            .zip(one_params.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        println!("rank {r} of {n} ({mode}): largest difference from one process {d:.3e}");
        assert!(
            d <= 1e-5,
            "rank {r} ({mode}): differs from one process by {d}"
        );
    }
    ranks_at_different_steps_are_an_error(r, n);
    crate::launch::passed(r);
}

/// Two ranks at different steps of loss-scaled training (one failed or skipped a step)
/// are an error on both, not a silent pairing of their decisions.
fn ranks_at_different_steps_are_an_error(r: usize, n: usize) {
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::DataParallel)
            .gradients_mean(true),
    )
    .unwrap();
    let make = || {
        spore_core::rng::set_seed(3);
        let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
        let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let manager = DynamicLossScaleManager::new(1024.0, 2.0, 3).unwrap();
        TrainOneStepWithLossScaleCell::new(WithLossCell::new_dyn(net, loss), opt, manager)
    };
    let (x, y) = global_batch(0, n);
    let mine = [
        x.narrow(0, r * PER_RANK, PER_RANK).unwrap(),
        y.narrow(0, r * PER_RANK, PER_RANK).unwrap(),
    ];
    // Every rank: two steps of `ahead`, one of `behind`.
    let (ahead, behind) = (make(), make());
    for step in [&ahead, &ahead, &behind] {
        step.call(&mine).unwrap();
    }
    let lagging = if r == 0 { &ahead } else { &behind };
    let err = lagging.call(&mine).unwrap_err().to_string();
    assert!(err.contains("other ranks at steps"), "rank {r}: {err}");
    reset_auto_parallel_context();
}

#[test]
fn loss_scaled_pipeline_equals_one_process_on_2_ranks() {
    expect_success(2, "loss_scaled::rank_loss_scaled_pipeline");
}

/// The pipeline tests' batch of step `s`, with an infinity in its data at [`POISONED`].
fn pipeline_batch(s: usize) -> [Tensor; 2] {
    let [x, y] = crate::pipeline::batch(s);
    if s != POISONED {
        return [x, y];
    }
    let mut values = x.to_vec::<f32>().unwrap();
    values[0] = f32::INFINITY;
    [Tensor::from_vec(values, x.shape()).unwrap(), y]
}

/// Trains `net` (all of it, or a pipeline's stage) with a dynamic loss scale; returns
/// each step's (overflow, scale) and the values of `params`.
fn train_scaled(
    mode: Mode,
    net: Arc<dyn Cell>,
    params: Vec<spore_core::Parameter>,
) -> (Vec<(bool, f32)>, Vec<Vec<f32>>) {
    let opt = Momentum::new(params.clone(), 0.05, 0.9).unwrap();
    let manager = DynamicLossScaleManager::new(1024.0, 2.0, 3).unwrap();
    let step = TrainOneStepWithLossScaleCell::new_dyn(net, opt, Arc::new(manager));
    set_context(ContextUpdate::new().mode(mode)).unwrap();
    let seen = (0..STEPS)
        .map(|s| {
            let out = step.call(&pipeline_batch(s)).unwrap();
            (out[1].item().unwrap() == 1.0, out[2].item().unwrap() as f32)
        })
        .collect();
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    let values = params
        .iter()
        .map(|p| p.stored().to_vec::<f32>().unwrap())
        .collect();
    (seen, values)
}

/// A 2-stage pipeline trained with loss scaling: the stages agree on every overflow, so
/// their loss scales, and each stage's parameters, follow one process training the
/// whole network on the whole batch.
#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_loss_scaled_pipeline() {
    let (r, n) = world();
    for mode in [Mode::PyNative, Mode::Graph] {
        reset_auto_parallel_context();
        spore_core::rng::set_seed(5);
        let whole = crate::pipeline::build(n);
        let named: std::collections::HashMap<String, spore_core::Parameter> =
            crate::pipeline::named(whole.as_ref()).into_iter().collect();
        set_auto_parallel_context(
            AutoParallelUpdate::new()
                .parallel_mode(ParallelMode::SemiAutoParallel)
                .pipeline_stages(n),
        )
        .unwrap();
        spore_core::rng::set_seed(5);
        let pipeline =
            PipelineCell::new(crate::pipeline::build(n), crate::pipeline::MICRO).unwrap();
        let local = crate::pipeline::named(pipeline.as_ref());
        let (seen, mine) = train_scaled(
            mode,
            pipeline,
            local.iter().map(|(_, p)| p.clone()).collect(),
        );
        reset_auto_parallel_context();
        let all = whole.trainable_params();
        let (one_seen, _) = train_scaled(mode, whole, all);
        assert!(
            one_seen[POISONED].0,
            "one process: the poisoned step overflows"
        );
        assert_eq!(
            seen, one_seen,
            "rank {r} ({mode:?}): overflows and loss scales"
        );
        for ((name, _), values) in local.iter().zip(&mine) {
            let reference = named[name].stored().to_vec::<f32>().unwrap();
            let d = values
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                d <= 1e-5,
                "rank {r} ({mode:?}): {name} differs from one process by {d}"
            );
        }
    }
    crate::launch::passed(r);
}
