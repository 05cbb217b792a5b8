//! Pipeline parallelism against one process: an MLP cut into 2 stages (on 2 ranks), 4
//! stages (on 4 ranks), 2 stages of 2 data-parallel ranks (on 4 ranks) and one stage of
//! all ranks, 4 micro-batches, must give the loss of the whole network on the whole batch (within
//! 1e-6), its gradients, and the same 20 training steps, in PyNative and Graph mode
//! (every rank runs that reference itself).

use std::collections::HashMap;
use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Parameter, Tensor};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_parallel::pipeline::PipelineCell;

use crate::launch::{expect_success, passed, read_all, world};

#[test]
fn two_stage_pipeline_equals_one_process() {
    expect_success(2, "pipeline::rank_pipeline");
}

#[test]
fn four_stage_pipeline_equals_one_process() {
    expect_success(4, "pipeline::rank_pipeline");
}

pub(crate) const MICRO: usize = 4;
pub(crate) const BATCH: usize = 16;
pub(crate) const STEPS: usize = 20;
pub(crate) const LOSS_TOLERANCE: f32 = 1e-6;
pub(crate) const TOLERANCE: f32 = 1e-5;

/// Dense 12-32-32-32-6 with ReLUs; Dense layer k (with the ReLU after it) in stage
/// `k * stages / 4`.
pub(crate) fn build(stages: usize) -> Arc<WithLossCell> {
    let widths = [12, 32, 32, 32, 6];
    let mut cells: Vec<Arc<dyn Cell>> = Vec::new();
    for k in 0..4 {
        let dense = Dense::new(widths[k], widths[k + 1]).unwrap();
        dense.base().set_pipeline_stage(k * stages / 4);
        cells.push(dense);
        if k < 3 {
            cells.push(ReLU::new());
        }
    }
    WithLossCell::new(SequentialCell::new(cells), MSELoss::new(Reduction::Mean))
}

pub(crate) fn batch(step: usize) -> [Tensor; 2] {
    let x: Vec<f32> = (0..BATCH * 12)
        .map(|i| ((i * 7 + step * 13) as f32 * 0.37).sin())
        .collect();
    let y: Vec<f32> = (0..BATCH * 6)
        .map(|i| ((i * 5 + step * 3) as f32 * 0.21).cos())
        .collect();
    [
        Tensor::from_vec(x, &[BATCH, 12]).unwrap(),
        Tensor::from_vec(y, &[BATCH, 6]).unwrap(),
    ]
}

pub(crate) fn max_difference(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub(crate) fn loss_and_grads(
    net: Arc<dyn Cell>,
    params: &[Parameter],
    inputs: &[Tensor],
) -> (Tensor, Vec<Tensor>) {
    let values: Vec<Tensor> = params.iter().map(|p| p.value()).collect();
    let f = move |x: &[Tensor]| net.call(x).map(|mut o| o.remove(0));
    let out = spore_core::autodiff::value_and_grad(f, None, &values, false)(inputs).unwrap();
    (out.value, out.weight_grads)
}

pub(crate) fn named(cell: &dyn Cell) -> Vec<(String, Parameter)> {
    cell.parameters_and_names()
        .into_iter()
        .filter(|(_, p)| p.requires_grad())
        .collect()
}

fn check(mode: Mode, rank: usize, n: usize, stages: usize) {
    let stage = rank / (n / stages);
    let graphs = std::env::temp_dir().join(format!("spore-pipe-{}-{rank}", std::process::id()));
    let _ = std::fs::remove_dir_all(&graphs);
    set_context(
        ContextUpdate::new()
            .mode(Mode::PyNative)
            .save_graphs(u8::from(mode == Mode::Graph))
            .save_graphs_path(&graphs),
    )
    .unwrap();
    spore_core::rng::set_seed(5);
    let reference = build(stages);
    spore_core::rng::set_seed(5);
    let pipeline = PipelineCell::new(build(stages), MICRO).unwrap();
    let whole: HashMap<String, Parameter> = named(reference.as_ref()).into_iter().collect();
    let local = named(pipeline.as_ref());
    assert!(
        !local.is_empty(),
        "stage {} holds no parameters",
        pipeline.stage()
    );
    let ref_params: Vec<Parameter> = local.iter().map(|(n, _)| whole[n].clone()).collect();
    let local_params: Vec<Parameter> = local.iter().map(|(_, p)| p.clone()).collect();

    // Forward and gradients (PyNative): the stage's parameters get the whole batch's
    // gradients, summed over the micro-batches.
    let first = batch(0);
    let (l_ref, g_ref) = loss_and_grads(reference.clone(), &ref_params, &first);
    let (l_pipe, g_pipe) = loss_and_grads(pipeline.clone(), &local_params, &first);
    let dl = max_difference(&l_ref, &l_pipe);
    assert!(dl <= LOSS_TOLERANCE, "loss differs by {dl} on rank {rank}");
    if n == stages {
        // (With data-parallel stages each rank's gradient is its block's; the training
        // steps below check their average.)
        for ((name, _), (a, b)) in local.iter().zip(g_ref.iter().zip(&g_pipe)) {
            let d = max_difference(a, b);
            assert!(
                d <= TOLERANCE,
                "gradient of {name} differs by {d} on rank {rank}"
            );
        }
    }

    set_context(ContextUpdate::new().mode(mode)).unwrap();
    let opt = |p: Vec<Parameter>| Momentum::new(p, 0.05, 0.9).unwrap();
    let all_ref = reference.trainable_params();
    let step_ref = TrainOneStepCell::new_dyn(reference, opt(all_ref));
    let step_pipe = TrainOneStepCell::new_dyn(pipeline, opt(local_params.clone()));
    for s in 0..STEPS {
        let inputs = batch(s);
        let a = step_ref.call(&inputs).unwrap().remove(0);
        let b = step_pipe.call(&inputs).unwrap().remove(0);
        let d = max_difference(&a, &b);
        assert!(
            d <= LOSS_TOLERANCE,
            "{mode:?}: step {s}'s loss differs by {d} on rank {rank}"
        );
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative).save_graphs(0)).unwrap();
    for (k, (name, p)) in local.iter().enumerate() {
        let d = max_difference(&ref_params[k].stored(), &p.stored());
        assert!(
            d <= TOLERANCE,
            "{mode:?}: {name} after {STEPS} steps differs by {d} on rank {rank}"
        );
    }
    if mode == Mode::Graph {
        // The compiled step holds the stage's edges and their gradients.
        let ir = read_all(&graphs);
        let edges: &[&str] = match (stage, stages) {
            (_, 1) => &[],
            (0, _) => &["StageSend(", "StageGradRecv("],
            (r, s) if r + 1 == s => &["StageRecv(", "StageGradSend("],
            _ => &[
                "StageSend(",
                "StageGradRecv(",
                "StageRecv(",
                "StageGradSend(",
            ],
        };
        for op in edges {
            assert!(
                ir.contains(op),
                "rank {rank}: no {op} in the compiled step's graphs"
            );
        }
        if n > stages {
            // The stage's replicas average their gradients.
            assert!(
                ir.contains("AllReduce"),
                "rank {rank}: no gradient AllReduce in the compiled step"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&graphs);
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_pipeline() {
    let (rank, n) = world();
    // Stage counts: one rank per stage, then (on 4 ranks) 2 stages of 2 replicas, then
    // one stage of n replicas (data parallelism through a PipelineCell).
    let meshes: &[usize] = if n == 4 { &[4, 2, 1] } else { &[n, 1] };
    for &stages in meshes {
        for mode in [Mode::PyNative, Mode::Graph] {
            reset_auto_parallel_context();
            set_auto_parallel_context(
                AutoParallelUpdate::new()
                    .parallel_mode(ParallelMode::SemiAutoParallel)
                    .pipeline_stages(stages),
            )
            .unwrap();
            check(mode, rank, n, stages);
        }
    }
    // Refusals: a batch that does not split into the micro-batches, and a data-parallel
    // mode.
    set_auto_parallel_context(AutoParallelUpdate::new().pipeline_stages(n)).unwrap();
    let pipeline = PipelineCell::new(build(n), 3);
    let err = match pipeline {
        Ok(p) => p.call(&batch(0)).map(|_| ()).unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("does not split into micro_size 3"), "{err}");
    // More stages than ranks, and a backbone that is not a sequence of cells.
    set_auto_parallel_context(AutoParallelUpdate::new().pipeline_stages(2 * n)).unwrap();
    let err = PipelineCell::new(build(n), MICRO)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("only"), "{err}");
    set_auto_parallel_context(AutoParallelUpdate::new().pipeline_stages(1)).unwrap();
    let dense_only = WithLossCell::new(Dense::new(12, 6).unwrap(), MSELoss::new(Reduction::Mean));
    let err = PipelineCell::new(dense_only, MICRO)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("must be a SequentialCell"), "{err}");
    reset_auto_parallel_context();
    set_auto_parallel_context(AutoParallelUpdate::new().parallel_mode(ParallelMode::DataParallel))
        .unwrap();
    let err = PipelineCell::new(build(n), MICRO)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("semi_auto_parallel"), "{err}");
    reset_auto_parallel_context();
    passed(rank);
}
