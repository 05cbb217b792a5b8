//! An ONNX LeNet imported into Spore trains further: one epoch on the bundled digits
//! lifts its accuracy, in Graph mode, through `Model` like any network.

use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;

#[test]
fn an_imported_lenet_fine_tunes_on_the_bundled_digits() {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(2)).unwrap();
    spore_data::config::set_seed(2);
    let dir = std::env::temp_dir().join(format!("spore_onnx_finetune_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lenet.onnx");
    let x = Tensor::zeros(&[32, 1, 32, 32], DType::F32).unwrap();
    spore::export(&*LeNet5::new(10).unwrap(), &[x], &path, spore::Format::Onnx).unwrap();
    let net = spore::onnx::import(&path).unwrap();
    assert_eq!(
        net.trainable_params().len(),
        8,
        "initializers became trainable parameters"
    );
    let test = create_dataset(bundled_mnist().join("test"), 32, 1, 2, false).unwrap();
    let train = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let mut model = Model::new(net, loss, opt).metrics(vec![Box::new(Accuracy::new())]);
    let before = model.eval(&test).unwrap()["accuracy"];
    model
        .train(1, &train, &mut [], TrainConfig::sink(1000))
        .unwrap();
    let after = model.eval(&test).unwrap()["accuracy"];
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    eprintln!("imported LeNet: accuracy {before} before, {after} after one epoch");
    assert!(after > before + 0.5, "accuracy {before} -> {after}");
    let _ = std::fs::remove_dir_all(&dir);
}
