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

#[test]
fn spore_run_executes_an_onnx_model_on_npy_inputs() {
    use spore::cli::{args::parse, execute};
    let dir = std::env::temp_dir().join(format!("spore_onnx_run_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let net = Mlp::new().unwrap();
    let x = Tensor::randn(&[3, 1, 28, 28], DType::F32, Some(4)).unwrap();
    let model = dir.join("mlp.onnx");
    spore::export(&*net, std::slice::from_ref(&x), &model, spore::Format::Onnx).unwrap();
    let (input, output) = (dir.join("x.npy"), dir.join("y.npy"));
    std::fs::write(&input, spore::core::debug::npy::encode(&x).unwrap()).unwrap();
    for mode in ["graph", "pynative"] {
        let argv = [
            "spore",
            "run",
            model.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--mode",
            mode,
            "--repeat",
            "2",
        ];
        let said = execute(&parse(argv).unwrap()).unwrap();
        assert!(
            said.contains("ms per run") && said.contains("[3, 10]"),
            "{said}"
        );
        let y = spore::core::debug::npy::decode(&std::fs::read(&output).unwrap())
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let expect = net.call1(&x).unwrap().to_vec::<f32>().unwrap();
        let worst = y
            .iter()
            .zip(&expect)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-5, "{mode}: {worst}");
    }
    let bad =
        execute(&parse(["spore", "run", "missing.onnx", "--input", "x.npy"]).unwrap()).unwrap_err();
    assert!(bad.to_string().contains("missing.onnx"), "{bad}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `spore convert` on an exported LeNet writes this file (the test checks it is what
/// the converter writes today; `SPORE_UPDATE_CONVERTED=1` refreshes it), and it builds
/// here as part of the tests.
#[rustfmt::skip]
#[path = "converted_lenet.rs"]
mod converted_lenet;

#[test]
fn spore_convert_writes_a_cell_that_builds_and_loads_its_checkpoint() {
    use spore::cli::{args::parse, execute};
    use spore::nn::checkpoint::{load_checkpoint, load_param_into_net};
    spore::rng::set_seed(7);
    let dir = std::env::temp_dir().join(format!("spore_onnx_convert_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("lenet.onnx");
    let x = Tensor::randn(&[2, 1, 32, 32], DType::F32, Some(8)).unwrap();
    spore::export(
        &*LeNet5::new(10).unwrap(),
        std::slice::from_ref(&x),
        &model,
        spore::Format::Onnx,
    )
    .unwrap();
    let out = dir.join("converted");
    let said = execute(
        &parse([
            "spore",
            "convert",
            model.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--name",
            "LeNetOnnx",
        ])
        .unwrap(),
    )
    .unwrap();
    assert!(said.contains("0 not converted"), "{said}");
    let source = std::fs::read_to_string(out.join("model.rs")).unwrap();
    let committed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spore/converted_lenet.rs");
    if std::env::var("SPORE_UPDATE_CONVERTED").is_ok() {
        std::fs::write(&committed, &source).unwrap();
    }
    assert_eq!(
        source,
        std::fs::read_to_string(&committed).unwrap(),
        "the converter's output changed: rerun with SPORE_UPDATE_CONVERTED=1"
    );
    let report = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    assert!(
        report.contains("| Conv |") || report.contains("Conv"),
        "{report}"
    );
    // The compiled conversion, with the converted checkpoint, computes what the import does.
    let net = converted_lenet::LeNetOnnx::new().unwrap();
    let loaded =
        load_param_into_net(&*net, &load_checkpoint(out.join("model.ckpt")).unwrap()).unwrap();
    assert!(loaded.missing.is_empty(), "{:?}", loaded.missing);
    let imported = spore::onnx::import(&model).unwrap();
    let (a, b) = (
        net.call1(&x).unwrap().to_vec::<f32>().unwrap(),
        imported.call1(&x).unwrap().to_vec::<f32>().unwrap(),
    );
    assert_eq!(a, b);
    let _ = std::fs::remove_dir_all(&dir);
}
