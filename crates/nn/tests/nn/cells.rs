//! Cells: parameter names from registration, scope names in traced graphs, the training
//! flag, the compiled-construct cache, and wrappers keeping their network's names.

use std::sync::Arc;

use spore_core::context::Mode;
use spore_core::ir::NodeKind;
use spore_core::trace::trace;
use spore_core::{DType, Result, Tensor, TensorType, no_grad};
use spore_nn::prelude::*;

use super::{batch, serial, set_mode};

#[test]
fn parameters_are_named_by_where_they_are_registered() {
    let _s = serial();
    let net = LeNet5::new(10).unwrap();
    let names: Vec<String> = net
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "conv1.weight",
            "conv2.weight",
            "fc1.weight",
            "fc1.bias",
            "fc2.weight",
            "fc2.bias",
            "fc3.weight",
            "fc3.bias"
        ]
    );
    assert_eq!(
        net.fc1.weight.name(),
        "fc1.weight",
        "the parameter itself is renamed"
    );
    // Walking a sub-cell gives local names but keeps the global ones.
    let local: Vec<String> = net
        .fc1
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(local, ["weight", "bias"]);
    assert_eq!(net.fc1.weight.name(), "fc1.weight");
    assert_eq!(net.trainable_params().len(), 8);
    let cells: Vec<String> = net.cells_and_names().into_iter().map(|(n, _)| n).collect();
    assert_eq!(cells[0], "conv1");

    let resnet = ResNet::new(&[1, 1, 1, 1], 10).unwrap();
    let names: Vec<String> = resnet
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        names.contains(&"layer2.0.downsample.1.moving_variance".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"layer1.0.bn2.gamma".to_string()));
    assert_eq!(resnet.untrainable_params().len(), 2 * (1 + 4 * 2 + 3));
}

#[test]
fn wrappers_keep_the_network_names_and_add_the_optimizer_state() {
    let _s = serial();
    let net = LeNet5::new(10).unwrap();
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let train = TrainOneStepCell::new(WithLossCell::new(net.clone(), loss), opt);
    let names: Vec<String> = train
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names[0], "conv1.weight");
    assert_eq!(
        names[8..11],
        ["learning_rate", "global_step", "moments.conv1.weight"]
    );
    assert_eq!(names.len(), 8 + 2 + 8);
    assert!(
        net.is_training() && net.conv1.is_training(),
        "TrainOneStepCell sets train mode"
    );
}

#[test]
fn traced_graphs_carry_mindspore_scope_names() {
    let _s = serial();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let train = TrainOneStepCell::new(WithLossCell::new(net, loss), opt);
    let types = [
        TensorType::new(&[2, 1, 32, 32], DType::F32),
        TensorType::new(&[2], DType::I32),
    ];
    let t = train.clone();
    let g = trace("train", &types, move |x| t.call(x)).unwrap();
    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    let has = |prefix: &str| names.iter().any(|n| n.starts_with(prefix));
    assert!(
        has("Default/network/_backbone/conv1/Conv2D-op"),
        "{names:?}"
    );
    assert!(has("Default/network/_backbone/fc3/MatMul-op"));
    assert!(has("Default/network/_loss_fn/"));
    let params: Vec<&str> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Parameter(_)))
        .map(|n| n.name.as_str())
        .collect();
    assert!(
        params.contains(&"conv1.weight") && params.contains(&"moments.fc3.bias"),
        "{params:?}"
    );
    assert!(
        !g.updates.is_empty(),
        "the optimizer's assignments are graph updates"
    );
}

#[test]
fn set_train_switches_every_descendant_and_graph_mode_compiles_one_graph_per_flag() {
    let _s = serial();
    spore_core::rng::set_seed(3);
    let net = SequentialCell::new(vec![
        Dense::new(6, 8).unwrap(),
        BatchNorm1d::new(8).unwrap(),
        Dropout::new(0.5).unwrap(),
        Dense::new(8, 2).unwrap(),
    ]);
    assert!(
        !net.is_training(),
        "MindSpore cells start in evaluation mode"
    );
    let x = Tensor::randn(&[4, 6], DType::F32, Some(1)).unwrap();
    let eager_eval = net.call1(&x).unwrap();
    set_mode(Mode::Graph);
    let graph_eval = net.call1(&x).unwrap();
    super::assert_close(&graph_eval, &eager_eval, 1e-5, "eval: graph vs eager");
    net.set_train(true);
    assert!(net.get(2).unwrap().is_training());
    // (Under no_grad: with gradients wanted, a graph with BatchNorm updates and dropout
    // runs eagerly, see `compiled.rs`.)
    no_grad(|| net.call1(&x)).unwrap();
    no_grad(|| net.call1(&x)).unwrap();
    let base = net.base();
    assert_eq!(base.compiled(false).unwrap().compile_count(), 1);
    assert_eq!(base.compiled(true).unwrap().compile_count(), 1);
    // A new input shape compiles again (per signature), the same flag reuses the cache.
    no_grad(|| net.call1(&Tensor::ones(&[3, 6], DType::F32).unwrap())).unwrap();
    assert_eq!(base.compiled(true).unwrap().compile_count(), 2);
    // With gradients wanted it runs eagerly, and the training graph is not used.
    net.call1(&x).unwrap();
    assert_eq!(base.compiled(true).unwrap().compile_count(), 2);
}

#[test]
fn a_custom_cell_works_and_a_dropped_cell_does_not_leak_through_its_jit() {
    let _s = serial();
    struct Twice {
        base: CellBase,
        fc: Arc<Dense>,
    }
    impl Cell for Twice {
        fn construct(&self, x: &[Tensor]) -> Result<Vec<Tensor>> {
            let h = self.fc.call1(&x[0])?;
            Ok(vec![self.fc.call1(&h)?])
        }
        fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
            vec![child("fc", &self.fc)]
        }
        fn base(&self) -> &CellBase {
            &self.base
        }
        fn class_name(&self) -> &'static str {
            "Twice"
        }
    }
    let cell = Arc::new(Twice {
        base: CellBase::new(),
        fc: Dense::new(3, 3).unwrap(),
    });
    cell.set_jit(true);
    let (x, _) = batch(&[2, 3], 3, 1);
    let y = cell.call1(&x).unwrap();
    assert!(cell.base().compiled(false).is_some());
    let eager = {
        let h = cell.fc.call1(&x).unwrap();
        cell.fc.call1(&h).unwrap()
    };
    super::assert_close(&y, &eager, 1e-6, "shared child called twice");
    let weak = Arc::downgrade(&cell);
    drop(cell);
    assert!(
        weak.upgrade().is_none(),
        "the compiled construct holds no strong reference"
    );
}
