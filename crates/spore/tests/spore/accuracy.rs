//! LeNet5 trained as seed 001 trains it (10 epochs of `sink_size = 1000` steps, Momentum
//! 0.01/0.9, batch 32) on the 8,000 bundled digits reaches at least 97% on the 1,000
//! bundled test digits, in Graph mode and in PyNative mode.

use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;

fn train_and_test(mode: Mode) -> f64 {
    set_context(ContextUpdate::new().mode(mode).seed(1)).unwrap();
    spore_data::config::set_seed(1);
    let train = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let test = create_dataset(bundled_mnist().join("test"), 32, 1, 2, false).unwrap();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let mut model = Model::new(net, loss, opt).metrics(vec![Box::new(Accuracy::new())]);
    let (mut monitor, printed) = LossMonitor::capturing(1);
    model
        .train(10, &train, &mut [&mut monitor], TrainConfig::sink(1000))
        .unwrap();
    let lines: Vec<String> = printed
        .lock()
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 10, "one LossMonitor line per epoch: {lines:?}");
    assert!(
        lines[9].starts_with("epoch: 10 step: 1000, loss is "),
        "{}",
        lines[9]
    );
    let acc = model.eval(&test).unwrap()["accuracy"];
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    acc
}

#[test]
fn lenet_reaches_97_percent_in_graph_and_pynative_mode() {
    let graph = train_and_test(Mode::Graph);
    assert!(graph >= 0.97, "Graph mode test accuracy {graph}");
    let pynative = train_and_test(Mode::PyNative);
    assert!(pynative >= 0.97, "PyNative mode test accuracy {pynative}");
}
