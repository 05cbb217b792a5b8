//! Operator-level parallelism against one process: a network split by strategies over
//! `n` ranks must compute the loss, the gradients and 20 training steps of the same
//! network run whole in one process (every rank runs that reference itself).

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Parameter, Tensor, TensorType};
use spore_nn::prelude::*;
use spore_parallel::context::{
    AutoParallelUpdate, ParallelMode, reset_auto_parallel_context, set_auto_parallel_context,
};
use spore_parallel::sharding::{ShardedCell, Strategies};

use crate::launch::{expect_success, passed, world};

#[test]
fn sharded_mlp_equals_one_process_on_2_ranks() {
    expect_success(2, "sharding::rank_sharded_mlp");
}

#[test]
fn sharded_mlp_equals_one_process_on_4_ranks() {
    expect_success(4, "sharding::rank_sharded_mlp");
}

const BATCH: usize = 16;
const STEPS: usize = 20;
const TOLERANCE: f32 = 1e-5;

fn mlp() -> Arc<dyn Cell> {
    let net: Arc<dyn Cell> = SequentialCell::new(vec![
        Dense::new(32, 64).unwrap(),
        ReLU::new(),
        Dense::new(64, 64).unwrap(),
        ReLU::new(),
        Dense::new(64, 10).unwrap(),
    ]);
    WithLossCell::new_dyn(
        net,
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    )
}

fn batch(step: usize) -> [Tensor; 2] {
    let x = Tensor::randn(&[BATCH, 32], DType::F32, Some(500 + step as u64)).unwrap();
    let y: Vec<i32> = (0..BATCH).map(|i| ((i * 3 + step) % 10) as i32).collect();
    [x, Tensor::from_vec(y, &[BATCH]).unwrap()]
}

fn types() -> Vec<TensorType> {
    batch(0).iter().map(|t| t.tensor_type().clone()).collect()
}

/// The strategy sets checked on `n` ranks, by name.
fn strategy_sets(n: usize) -> Vec<(&'static str, Strategies)> {
    let set = |entries: &[(&str, String)]| {
        let mut s = Strategies::new();
        for (path, st) in entries {
            s.shard(path, st).unwrap();
        }
        s
    };
    let mut sets = vec![(
        // Megatron's pair (columns, then rows), then a data-parallel last layer.
        "columns-rows-batch",
        set(&[
            ("0/MatMul", format!("((1, 1), (1, {n}))")),
            ("2/MatMul", format!("((1, {n}), ({n}, 1))")),
            ("4/MatMul", format!("(({n}, 1), (1, 1))")),
        ]),
    )];
    if n == 4 {
        // A 2x2 mesh: batch and model splits at once; the last layer follows.
        sets.push((
            "2x2-mesh",
            set(&[
                ("0/MatMul", "((2, 1), (1, 2))".into()),
                ("2/MatMul", "((2, 2), (2, 1))".into()),
            ]),
        ));
    }
    sets
}

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

/// The loss and the weights' gradients of `net` on step 0's batch (PyNative).
fn loss_and_grads(net: &Arc<dyn Cell>, params: &[Parameter]) -> (Tensor, Vec<Tensor>) {
    let f = |x: &[Tensor]| net.call(x).map(|mut o| o.remove(0));
    let vg = spore_core::autodiff::value_and_grad(f, None, &values(params), false);
    let out = vg(&batch(0)).unwrap();
    (out.value, out.weight_grads)
}

fn check(name: &str, mode: Mode, strategies: &Strategies, rank: usize) {
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
    let reference = mlp();
    spore_core::rng::set_seed(11);
    let whole = mlp();
    let sharded = ShardedCell::new(whole, &types(), strategies).unwrap();
    let sharded_dyn: Arc<dyn Cell> = sharded.clone();
    let ref_params = reference.trainable_params();
    let local_params = sharded.trainable_params();
    let names: Vec<String> = sharded.params().into_iter().map(|(n, _)| n).collect();

    // Forward and gradients, gathered from the blocks.
    let (l_ref, g_ref) = loss_and_grads(&reference, &ref_params);
    let (l_sh, g_sh) = loss_and_grads(&sharded_dyn, &local_params);
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
        let [x, y] = batch(s);
        let a = step_ref.step(&x, &y).unwrap();
        let b = step_sh.step(&x, &y).unwrap();
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
fn rank_sharded_mlp() {
    let (rank, n) = world();
    for (name, strategies) in strategy_sets(n) {
        for mode in [Mode::PyNative, Mode::Graph] {
            reset_auto_parallel_context();
            set_auto_parallel_context(
                AutoParallelUpdate::new().parallel_mode(ParallelMode::SemiAutoParallel),
            )
            .unwrap();
            check(name, mode, &strategies, rank);
        }
    }
    reset_auto_parallel_context();
    passed(rank);
}

/// Every file under `dir`, concatenated (lossily as text).
fn read_all(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            text += &read_all(&path);
        } else if let Ok(bytes) = std::fs::read(&path) {
            text += &String::from_utf8_lossy(&bytes);
        }
    }
    text
}
