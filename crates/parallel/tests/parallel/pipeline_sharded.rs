//! Pipeline stages sharded over their ranks (data × model × pipeline) against one
//! process: the MLP of the pipeline tests in 2 stages, each stage's layers split by
//! columns, rows and batch over the stage's ranks (1 on 2 ranks, 2 on 4 ranks), and in
//! one stage of every rank, 4 micro-batches: the loss, the whole gradients and 20
//! training steps in PyNative and Graph mode equal the whole network's on the whole
//! batch within 1e-5, and each rank stores only its blocks of the split weights.

use std::collections::HashMap;

use spore_core::TensorType;
use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Parameter, Tensor};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_parallel::pipeline::PipelineCell;
use spore_parallel::sharding::Strategies;

use crate::launch::{expect_success, passed, read_all, world};
use crate::pipeline::{
    BATCH, MICRO, STEPS, TOLERANCE, batch, build, loss_and_grads, max_difference, named,
};

#[test]
fn sharded_pipeline_stages_equal_one_process_on_2_ranks() {
    expect_success(2, "pipeline_sharded::rank_sharded_pipeline");
}

#[test]
fn sharded_pipeline_stages_equal_one_process_on_4_ranks() {
    expect_success(4, "pipeline_sharded::rank_sharded_pipeline");
}

/// The Dense layers (backbone cells 0, 2, 4, 6) split over the `k` ranks of a stage:
/// columns then rows (Megatron's pair), then the batch, then rows again.
pub(crate) fn strategies(k: usize) -> Strategies {
    let mut s = Strategies::new();
    s.shard("0/MatMul", &format!("((1, 1), (1, {k}))")).unwrap();
    s.shard("2/MatMul", &format!("((1, {k}), ({k}, 1))"))
        .unwrap();
    s.shard("4/MatMul", &format!("(({k}, 1), (1, 1))")).unwrap();
    s.shard("6/MatMul", &format!("((1, {k}), ({k}, 1))"))
        .unwrap();
    s
}

pub(crate) fn types() -> [TensorType; 2] {
    [
        TensorType::new(&[BATCH, 12], DType::F32),
        TensorType::new(&[BATCH, 6], DType::F32),
    ]
}

fn check(mode: Mode, rank: usize, n: usize, stages: usize) {
    let per_stage = n / stages;
    let graphs = std::env::temp_dir().join(format!("spore-pipe-mp-{}-{rank}", std::process::id()));
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
    let types = [
        TensorType::new(&[BATCH, 12], DType::F32),
        TensorType::new(&[BATCH, 6], DType::F32),
    ];
    let pipeline =
        PipelineCell::sharded(build(stages), MICRO, &types, &strategies(per_stage)).unwrap();
    let stage = pipeline
        .sharded_stage()
        .expect("a sharded pipeline")
        .clone();
    let whole: HashMap<String, Parameter> = named(reference.as_ref()).into_iter().collect();
    let local = named(pipeline.as_ref());
    assert!(!local.is_empty(), "rank {rank} holds no parameters");
    let ref_params: Vec<Parameter> = local.iter().map(|(n, _)| whole[n].clone()).collect();
    let local_params: Vec<Parameter> = local.iter().map(|(_, p)| p.clone()).collect();
    // The stage's split weights are stored as blocks: 1/k of the whole on each rank.
    for (name, p) in &local {
        let (layout, ty) = stage.parameter_layout(name).unwrap();
        let split = (0..ty.shape.len())
            .map(|d| layout.factor(d))
            .product::<usize>();
        assert_eq!(
            p.stored().numel() * split,
            ty.numel(),
            "rank {rank}: {name} holds {} of {ty}",
            p.stored().numel()
        );
        if name.ends_with(".weight") && !name.starts_with('4') {
            assert_eq!(
                split, per_stage,
                "rank {rank}: {name} is not split {per_stage} ways"
            );
        }
    }

    // Forward and gradients (PyNative), the gradients gathered whole.
    let first = batch(0);
    let (l_ref, g_ref) = loss_and_grads(reference.clone(), &ref_params, &first);
    let (l_pipe, g_pipe) = loss_and_grads(pipeline.clone(), &local_params, &first);
    let dl = max_difference(&l_ref, &l_pipe);
    assert!(dl <= TOLERANCE, "loss differs by {dl} on rank {rank}");
    for ((name, _), (a, b)) in local.iter().zip(g_ref.iter().zip(&g_pipe)) {
        let d = max_difference(a, &stage.gather_parameter(name, b).unwrap());
        assert!(
            d <= TOLERANCE,
            "gradient of {name} differs by {d} on rank {rank}"
        );
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
            d <= TOLERANCE,
            "{mode:?}: step {s}'s loss differs by {d} on rank {rank}"
        );
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative).save_graphs(0)).unwrap();
    for (k, (name, p)) in local.iter().enumerate() {
        let whole = stage.gather_parameter(name, &p.stored()).unwrap();
        let d = max_difference(&ref_params[k].stored(), &whole);
        assert!(
            d <= TOLERANCE,
            "{mode:?}: {name} after {STEPS} steps differs by {d} on rank {rank}"
        );
    }
    if mode == Mode::Graph {
        // The compiled step's graphs (a folder per graph), not the sharding plans
        // saved beside them.
        let ir: String = std::fs::read_dir(&graphs)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| read_all(&e.path()))
            .collect();
        if stages > 1 {
            let edge = if rank < per_stage {
                "StageSend("
            } else {
                "StageRecv("
            };
            assert!(
                ir.contains(edge),
                "rank {rank}: no {edge} in the compiled step"
            );
        }
        if per_stage > 1 {
            // Stage 0's row-split partial sums are reduced, and stage 1's gradients of
            // the weights its batch-split layer reads whole.
            assert!(
                ir.contains("AllReduce"),
                "rank {rank}: no AllReduce in the compiled step"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&graphs);
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_sharded_pipeline() {
    let (rank, n) = world();
    // 2 stages (of 1 rank on 2 ranks, of 2 on 4), then one stage of every rank.
    for stages in [2, 1] {
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
    searched_stages(rank, n);
    failures_in_one_stage(rank, n);
    // A global batch that does not split into the micro-batches is refused on every rank
    // when the pipeline is built.
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .pipeline_stages(1),
    )
    .unwrap();
    let odd = [
        TensorType::new(&[BATCH + 1, 12], DType::F32),
        TensorType::new(&[BATCH + 1, 6], DType::F32),
    ];
    let err = PipelineCell::sharded(build(1), MICRO, &odd, &Strategies::new())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("does not split into micro_size"), "{err}");
    // A strategy that sets no operator of any stage.
    let mut stray = Strategies::new();
    stray.shard("9/MatMul", "((1, 1), (1, 1))").unwrap();
    let err = PipelineCell::sharded(build(1), MICRO, &types(), &stray)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("'9/MatMul' matches no operator"), "{err}");
    reset_auto_parallel_context();
    passed(rank);
}

/// `auto_parallel`: each stage searches the strategies the user left open on its own
/// ranks' measured rates (and trains like one process), and saves them to its own file
/// (`<stem>_<stage group>.json`); loaded in `semi_auto_parallel` they plan the same.
fn searched_stages(rank: usize, n: usize) {
    let per_stage = n / 2;
    let auto = |save: Option<std::path::PathBuf>| {
        reset_auto_parallel_context();
        set_auto_parallel_context(
            AutoParallelUpdate::new()
                .parallel_mode(ParallelMode::AutoParallel)
                .pipeline_stages(2)
                .strategy_ckpt_config(save, None),
        )
        .unwrap();
    };
    auto(None);
    check(Mode::PyNative, rank, n, 2);

    let parent = std::os::unix::process::parent_id();
    let file = std::env::temp_dir().join(format!("spore-pipe-strategies-{parent}.json"));
    auto(Some(file.clone()));
    spore_core::rng::set_seed(5);
    let searched = PipelineCell::sharded(build(2), MICRO, &types(), &Strategies::new()).unwrap();
    spore_parallel::barrier(None).unwrap();
    let stage = rank / per_stage;
    let stage_file = std::env::temp_dir().join(format!(
        "spore-pipe-strategies-{parent}_pipeline_stage{stage}_of2_ranks{per_stage}.json"
    ));
    assert!(
        stage_file.exists(),
        "rank {rank}: stage {stage}'s strategies were not saved to {}",
        stage_file.display()
    );
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .pipeline_stages(2)
            .strategy_ckpt_config(None, Some(file)),
    )
    .unwrap();
    spore_core::rng::set_seed(5);
    let loaded = PipelineCell::sharded(build(2), MICRO, &types(), &Strategies::new()).unwrap();
    assert_eq!(
        searched.sharded_stage().unwrap().plan(),
        loaded.sharded_stage().unwrap().plan(),
        "rank {rank}: stage {stage}'s reloaded strategies plan differently"
    );
    spore_parallel::barrier(None).unwrap();
    if rank.is_multiple_of(per_stage) {
        let _ = std::fs::remove_file(&stage_file);
    }
}

/// A stage that cannot be planned, or a batch other than the planned one, is an error
/// on every rank (the other stages must not wait for it).
fn failures_in_one_stage(rank: usize, n: usize) {
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .pipeline_stages(2),
    )
    .unwrap();
    // Stage 1's last layer split 3 ways, on stages of 1 or 2 ranks.
    let mut bad = strategies(n / 2);
    bad.shard("6/MatMul", "((1, 3), (3, 1))").unwrap();
    let err = PipelineCell::sharded(build(2), MICRO, &types(), &bad)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let own = if rank < n / 2 {
        "failed on another rank"
    } else {
        "6/MatMul"
    };
    assert!(err.contains(own), "rank {rank}: {err}");
    // Half the planned batch still splits into the micro-batches, but is refused.
    spore_core::rng::set_seed(5);
    let pipeline = PipelineCell::sharded(build(2), MICRO, &types(), &strategies(n / 2)).unwrap();
    let half: Vec<Tensor> = batch(0)
        .iter()
        .map(|t| t.narrow(0, 0, BATCH / 2).unwrap())
        .collect();
    let err = pipeline.call(&half).unwrap_err().to_string();
    assert!(
        err.contains("were sharded for batches"),
        "rank {rank}: {err}"
    );
}
