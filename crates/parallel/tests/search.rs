//! The strategy search against its references: `dynamic_programming` finds the cost
//! model's optimum (checked by brute force on small graphs), `recursive_programming`
//! stays near it, and both respect the devices' memory. No MPI: plans are made for a
//! number of devices, not run.

use std::sync::Arc;

use spore_core::ir::Graph;
use spore_core::{DType, TensorType};
use spore_nn::prelude::*;
use spore_parallel::sharding::{
    Cluster, SearchMode, Strategies, brute_force, plan_cost, plan_graph_local_inputs, search,
    search_given_blocks,
};

#[path = "parallel/sharding_nets.rs"]
#[allow(dead_code)]
mod sharding_nets;

fn traced(net: Arc<dyn Cell>, types: &[TensorType]) -> Graph {
    spore_core::trace::trace("net", types, |x| net.call(x)).unwrap()
}

fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(shape, DType::F32)
}

/// Dense layers without biases and ReLUs between them, with an MSE loss.
fn chain(widths: &[usize], batch: usize) -> Graph {
    let mut layers: Vec<Arc<dyn Cell>> = vec![];
    for (i, w) in widths.windows(2).enumerate() {
        if i > 0 {
            layers.push(ReLU::new());
        }
        layers.push(Dense::config(w[0], w[1]).has_bias(false).build().unwrap());
    }
    let net = WithLossCell::new_dyn(SequentialCell::new(layers), MSELoss::new(Reduction::Mean));
    let last = *widths.last().unwrap();
    traced(net, &[f32s(&[batch, widths[0]]), f32s(&[batch, last])])
}

/// `y = x + relu(x W1) W2` then MSE: a residual, so terms depend on two choices.
struct Residual {
    base: CellBase,
    a: Arc<Dense>,
    b: Arc<Dense>,
    loss: Arc<MSELoss>,
}

impl Cell for Residual {
    fn construct(&self, x: &[spore_core::Tensor]) -> spore_core::Result<Vec<spore_core::Tensor>> {
        let h = self.b.call1(&self.a.call1(&x[0])?.relu()?)?;
        self.loss.call(&[x[0].add(&h)?, x[1].clone()])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("a", &self.a),
            child("b", &self.b),
            child("loss", &self.loss),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Residual"
    }
}

fn residual(width: usize, hidden: usize, batch: usize) -> Graph {
    let net = Arc::new(Residual {
        base: CellBase::new(),
        a: Dense::new(width, hidden).unwrap(),
        b: Dense::new(hidden, width).unwrap(),
        loss: MSELoss::new(Reduction::Mean),
    });
    traced(net, &[f32s(&[batch, width]), f32s(&[batch, width])])
}

/// Clusters that favour different plans: fast links (split everything), slow links
/// (little communication) and high latency.
fn clusters(devices: usize) -> Vec<Cluster> {
    let base = Cluster::example(devices);
    vec![
        base.clone(),
        Cluster {
            bandwidth: 1e8,
            ..base.clone()
        },
        Cluster {
            latency: 1e-3,
            flops: 1e14,
            ..base
        },
    ]
}

fn graphs() -> Vec<(&'static str, Graph)> {
    vec![
        ("chain 3", chain(&[64, 256, 256, 16], 32)),
        ("chain wide batch", chain(&[32, 64, 8], 512)),
        ("residual", residual(64, 256, 16)),
    ]
}

#[test]
fn dynamic_programming_finds_the_brute_force_optimum() {
    for (name, g) in graphs() {
        let ops = g.op_count();
        assert!(
            ops <= 12 || name.starts_with("residual"),
            "{name} has {ops} ops"
        );
        for devices in [2, 4, 8] {
            for cluster in clusters(devices) {
                let none = Strategies::new();
                let exact =
                    search(&g, &cluster, SearchMode::DynamicProgramming, &none, 1.0).unwrap();
                let brute = brute_force(&g, &cluster, &none, 1.0, 200_000).unwrap();
                let (e, b) = (exact.cost.step_time(), brute.cost.step_time());
                assert!(
                    (e - b).abs() <= 1e-9 * b.max(1e-12),
                    "{name} on {devices} devices ({cluster:?}): dynamic programming {e} s, brute force {b} s"
                );
            }
        }
    }
}

#[test]
fn recursive_programming_stays_within_ten_percent_of_the_optimum() {
    for (name, g) in graphs() {
        for devices in [2, 4, 8] {
            for cluster in clusters(devices) {
                let none = Strategies::new();
                let exact =
                    search(&g, &cluster, SearchMode::DynamicProgramming, &none, 1.0).unwrap();
                let fast =
                    search(&g, &cluster, SearchMode::RecursiveProgramming, &none, 1.0).unwrap();
                let ratio = fast.cost.step_time() / exact.cost.step_time();
                println!("{name} on {devices} devices: recursive / exact = {ratio:.4}");
                assert!(
                    (1.0 - 1e-9..=1.10).contains(&ratio),
                    "{name} on {devices} devices ({cluster:?}): recursive programming is {ratio:.3}x the optimum"
                );
            }
        }
    }
}

#[test]
fn plans_fit_the_devices_memory_or_the_search_says_why() {
    let g = chain(&[512, 2048, 2048, 16], 8);
    let roomy = Cluster::example(8);
    let fastest = search(
        &g,
        &roomy,
        SearchMode::DynamicProgramming,
        &Strategies::new(),
        2.0,
    )
    .unwrap();
    // Half the memory the fastest plan needs: the answer must fit, at some cost in time.
    let tight = Cluster {
        memory: fastest.cost.memory() * 0.5,
        ..roomy.clone()
    };
    for mode in [
        SearchMode::DynamicProgramming,
        SearchMode::RecursiveProgramming,
    ] {
        match search(&g, &tight, mode, &Strategies::new(), 2.0) {
            Ok(found) => assert!(
                found.cost.memory() <= tight.memory,
                "{mode:?} exceeds the memory"
            ),
            Err(e) => assert!(e.to_string().contains("fits in"), "{e}"),
        }
    }
    let tiny = Cluster {
        memory: 1e3,
        ..roomy
    };
    let e = search(
        &g,
        &tiny,
        SearchMode::RecursiveProgramming,
        &Strategies::new(),
        2.0,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("no recursive_programming plan"),
        "{e}"
    );
}

#[test]
fn user_strategies_stay_fixed_in_a_search() {
    let g = chain(&[64, 256, 256, 16], 32);
    let mut fixed = Strategies::new();
    fixed.shard("0/MatMul", "((1, 1), (1, 4))").unwrap();
    let found = search(
        &g,
        &Cluster::example(4),
        SearchMode::DynamicProgramming,
        &fixed,
        1.0,
    )
    .unwrap();
    let first = g
        .nodes
        .iter()
        .position(|n| n.name.contains("/0/MatMul"))
        .unwrap();
    assert_eq!(
        found.plan.nodes[first]
            .strategy
            .as_ref()
            .unwrap()
            .1
            .to_string(),
        "((1, 1), (1, 4))"
    );
}

#[test]
fn recursive_programming_is_near_the_optimum_on_the_equivalence_networks() {
    // The MLP, Transformer encoder layer and CNN that the mpirun tests run split.
    for case in sharding_nets::cases(4) {
        let types: Vec<TensorType> = (case.batch)(0)
            .iter()
            .map(|t| t.tensor_type().clone())
            .collect();
        let g = traced((case.build)(), &types);
        for devices in [2, 4] {
            let cluster = Cluster::example(devices);
            let none = Strategies::new();
            let exact = search(&g, &cluster, SearchMode::DynamicProgramming, &none, 1.0).unwrap();
            let fast = search(&g, &cluster, SearchMode::RecursiveProgramming, &none, 1.0).unwrap();
            let ratio = fast.cost.step_time() / exact.cost.step_time();
            println!(
                "{} on {devices} devices: recursive / exact = {ratio:.4}",
                case.name
            );
            assert!(
                (1.0 - 1e-9..=1.10).contains(&ratio),
                "{} on {devices} devices: recursive programming is {ratio:.3}x the optimum",
                case.name
            );
        }
    }
}

/// With each rank given its block of the batch (`full_batch` off), the search plans with
/// the inputs fixed: its plan keeps them as blocks, and `dynamic_programming` costs no
/// more than the full-batch search's strategies re-planned with the blocks.
#[test]
fn the_search_plans_for_blocks_of_the_batch() {
    let g = chain(&[64, 128, 128, 16], 32);
    for devices in [2, 4] {
        let cluster = Cluster::example(devices);
        let none = Strategies::new();
        for mode in [
            SearchMode::DynamicProgramming,
            SearchMode::RecursiveProgramming,
        ] {
            let blocks = search_given_blocks(&g, &cluster, mode, &none, 1.0).unwrap();
            assert!(blocks.plan.local_inputs);
            assert!(blocks.plan.inputs.iter().all(|l| l.factor(0) == devices));
            if mode == SearchMode::DynamicProgramming {
                let whole = search(&g, &cluster, mode, &none, 1.0).unwrap();
                let replanned = plan_graph_local_inputs(&g, &whole.strategies, devices).unwrap();
                let other = plan_cost(&g, &replanned, &cluster, 1.0).step_time();
                assert!(
                    blocks.cost.step_time() <= other * (1.0 + 1e-9),
                    "{devices} devices: {} s searched for blocks, {other} s replanned",
                    blocks.cost.step_time()
                );
            }
        }
    }
}
