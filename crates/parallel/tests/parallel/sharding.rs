//! Operator-level parallelism against one process: networks (`sharding_nets`) split by strategies over
//! `n` ranks must compute the loss, the gradients and 20 training steps of the same
//! network run whole in one process (every rank runs that reference itself).

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Parameter, Tensor, TensorType};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, SearchMode, reset_auto_parallel_context,
    set_auto_parallel_context,
};
use spore_parallel::sharding::ShardedCell;

use crate::launch::{expect_success, passed, read_all, world};
use crate::sharding_nets::{Case, cases};

#[test]
fn sharded_networks_equal_one_process_on_2_ranks() {
    expect_success(2, "sharding::rank_sharded_networks");
}

#[test]
fn sharded_networks_equal_one_process_on_4_ranks() {
    expect_success(4, "sharding::rank_sharded_networks");
}

const STEPS: usize = 20;
const TOLERANCE: f32 = 1e-5;

fn max_difference(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn values(params: &[Parameter]) -> Vec<Tensor> {
    params.iter().map(|p| p.value()).collect()
}

/// The loss and the weights' gradients of `net` on `inputs` (PyNative).
fn loss_and_grads(
    net: &Arc<dyn Cell>,
    params: &[Parameter],
    inputs: &[Tensor],
) -> (Tensor, Vec<Tensor>) {
    let f = |x: &[Tensor]| net.call(x).map(|mut o| o.remove(0));
    let vg = spore_core::autodiff::value_and_grad(f, None, &values(params), false);
    let out = vg(inputs).unwrap();
    (out.value, out.weight_grads)
}

/// What the sharded network is given on `rank`: the whole batch with `full_batch`,
/// else this rank's block of every input's first dimension (the reference always gets
/// the whole batch).
fn mine(inputs: &[Tensor], rank: usize) -> Vec<Tensor> {
    if spore_parallel::context::get_auto_parallel_context().full_batch {
        return inputs.to_vec();
    }
    let n = spore_parallel::get_group_size(None).unwrap();
    inputs
        .iter()
        .map(|x| match x.shape().first() {
            // A scalar is given whole.
            None => x.clone(),
            Some(&b) => x.narrow(0, rank * (b / n), b / n).unwrap(),
        })
        .collect()
}

fn check(case: &Case, mode: Mode, rank: usize) {
    let name = &case.name;
    // Graph mode saves its graphs and the plan (written when the cell is built).
    let graphs = std::env::temp_dir().join(format!("spore-shard-{}-{rank}", std::process::id()));
    let _ = std::fs::remove_dir_all(&graphs);
    set_context(
        ContextUpdate::new()
            .mode(Mode::PyNative)
            .save_graphs(u8::from(mode == Mode::Graph))
            .save_graphs_path(&graphs),
    )
    .unwrap();
    spore_core::rng::set_seed(11);
    let reference = (case.build)();
    spore_core::rng::set_seed(11);
    let whole = (case.build)();
    let first = (case.batch)(0);
    let types: Vec<TensorType> = first.iter().map(|t| t.tensor_type().clone()).collect();
    let sharded = ShardedCell::new(whole, &types, &case.strategies).unwrap();
    let sharded_dyn: Arc<dyn Cell> = sharded.clone();
    let ref_params = reference.trainable_params();
    let local_params = sharded.trainable_params();
    let names: Vec<String> = sharded.params().into_iter().map(|(n, _)| n).collect();

    // Forward and gradients, gathered from the blocks.
    let (l_ref, g_ref) = loss_and_grads(&reference, &ref_params, &first);
    let (l_sh, g_sh) = loss_and_grads(&sharded_dyn, &local_params, &mine(&first, rank));
    let dl = max_difference(&l_ref, &l_sh);
    assert!(
        dl <= TOLERANCE,
        "{name}: loss differs by {dl} on rank {rank}"
    );
    for (k, name_k) in names.iter().enumerate() {
        let whole = sharded.gather_parameter(name_k, &g_sh[k]).unwrap();
        let d = max_difference(&g_ref[k], &whole);
        assert!(
            d <= TOLERANCE,
            "{name}: gradient of {name_k} differs by {d} on rank {rank}"
        );
    }

    // Training, in `mode`.
    set_context(ContextUpdate::new().mode(mode)).unwrap();
    let opt = |p: Vec<Parameter>| Momentum::new(p, 0.05, 0.9).unwrap();
    let step_ref = TrainOneStepCell::new_dyn(reference, opt(ref_params.clone()));
    let step_sh = TrainOneStepCell::new_dyn(sharded_dyn, opt(local_params.clone()));
    for s in 0..STEPS {
        let inputs = (case.batch)(s);
        let a = step_ref.call(&inputs).unwrap().remove(0);
        let b = step_sh.call(&mine(&inputs, rank)).unwrap().remove(0);
        let d = max_difference(&a, &b);
        assert!(
            d <= TOLERANCE,
            "{name} {mode:?}: step {s}'s loss differs by {d} on rank {rank}"
        );
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative).save_graphs(0)).unwrap();
    for (k, name_k) in names.iter().enumerate() {
        let whole = sharded
            .gather_parameter(name_k, &local_params[k].stored())
            .unwrap();
        let d = max_difference(&ref_params[k].stored(), &whole);
        assert!(
            d <= TOLERANCE,
            "{name} {mode:?}: {name_k} after {STEPS} steps differs by {d} on rank {rank}"
        );
    }
    if mode == Mode::Graph {
        let plan = std::fs::read_to_string(graphs.join(format!("sharding_plan_rank{rank}.txt")))
            .expect("save_graphs writes the sharding plan");
        assert!(
            plan.contains("AllReduce("),
            "{name}: the plan shows no AllReduce:\n{plan}"
        );
        if name.contains("out-strategy") {
            assert!(
                plan.contains("out_strategy: ReduceScatter("),
                "{name}: no ReduceScatter:\n{plan}"
            );
        }
        if name.contains("all-to-all") {
            assert!(
                plan.contains("AllToAll("),
                "{name}: no AllToAll in the plan:\n{plan}"
            );
        }
        // The compiled step holds the inserted collectives and their gradients.
        let ir = read_all(&graphs);
        for op in ["AllReduce(", "GradAllReduce("] {
            assert!(
                ir.contains(op),
                "{name}: no {op} in the compiled step's graphs"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&graphs);
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_sharded_networks() {
    let (rank, n) = world();
    for case in cases(n) {
        for mode in [Mode::PyNative, Mode::Graph] {
            reset_auto_parallel_context();
            // PyNative with the whole batch on every rank, Graph mode with each rank's
            // block of it (MindSpore's default) where the batch divides among the ranks.
            let divides = (case.batch)(0).iter().all(|t| t.shape()[0] % n == 0);
            set_auto_parallel_context(
                AutoParallelUpdate::new()
                    .parallel_mode(ParallelMode::SemiAutoParallel)
                    .full_batch(mode == Mode::PyNative || !divides),
            )
            .unwrap();
            check(&case, mode, rank);
        }
    }
    // auto_parallel: strategies searched on the job's measured rates, then saved and
    // loaded back.
    for name in ["mlp columns-rows-batch", "encoder megatron"] {
        let Some(base) = cases(n).into_iter().find(|c| c.name == name) else {
            unreachable!("{name} is one of the cases")
        };
        let case = Case {
            name: format!("{name} (searched)"),
            strategies: Default::default(),
            ..base
        };
        // Each rank's block of the batch where it divides (the search then plans with
        // the blocks fixed), else the whole batch.
        let full = !(case.batch)(0).iter().all(|t| t.shape()[0] % n == 0);
        for search in [
            SearchMode::DynamicProgramming,
            SearchMode::RecursiveProgramming,
        ] {
            reset_auto_parallel_context();
            set_auto_parallel_context(
                AutoParallelUpdate::new()
                    .parallel_mode(ParallelMode::AutoParallel)
                    .search_mode(search)
                    .full_batch(full),
            )
            .unwrap();
            check(&case, Mode::Graph, rank);
        }
        reloaded_strategies_give_the_same_plan(&case, rank, full);
    }
    reset_auto_parallel_context();
    passed(rank);
}

/// A searched plan saved by `strategy_ckpt_config` and loaded in `semi_auto_parallel`
/// is the same plan.
fn reloaded_strategies_give_the_same_plan(case: &Case, rank: usize, full_batch: bool) {
    // One path for every rank of the job (they share the launcher as parent).
    let file = std::env::temp_dir().join(format!(
        "spore-strategies-{}.json",
        std::os::unix::process::parent_id()
    ));
    let types: Vec<TensorType> = (case.batch)(0)
        .iter()
        .map(|t| t.tensor_type().clone())
        .collect();
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::AutoParallel)
            .full_batch(full_batch)
            .strategy_ckpt_config(Some(file.clone()), None),
    )
    .unwrap();
    let searched = ShardedCell::new((case.build)(), &types, &case.strategies).unwrap();
    spore_parallel::barrier(None).unwrap();
    reset_auto_parallel_context();
    set_auto_parallel_context(
        AutoParallelUpdate::new()
            .parallel_mode(ParallelMode::SemiAutoParallel)
            .full_batch(full_batch)
            .strategy_ckpt_config(None, Some(file.clone())),
    )
    .unwrap();
    let loaded = ShardedCell::new((case.build)(), &types, &case.strategies).unwrap();
    assert_eq!(
        searched.plan(),
        loaded.plan(),
        "{}: the reloaded strategies plan differently on rank {rank}",
        case.name
    );
    spore_parallel::barrier(None).unwrap();
    if rank == 0 {
        let _ = std::fs::remove_file(&file);
    }
}
