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

/// The committed conversion of [`ops_model::model`] (regenerated like
/// `converted_lenet.rs`).
#[rustfmt::skip]
#[path = "converted_ops.rs"]
mod converted_ops;

mod ops_model {
    //! A hand-built ONNX model for the converter test.
    use spore::onnx::proto::{
        AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
        ValueInfoProto,
    };
    use spore::onnx::tensor::from_tensor;
    use spore::prelude::*;

    fn ints(name: &str, v: &[i64]) -> TensorProto {
        from_tensor(name, &Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()).unwrap()
    }

    fn floats(name: &str, shape: &[usize], seed: u64) -> TensorProto {
        let t = Tensor::randn(shape, DType::F32, Some(seed)).unwrap();
        from_tensor(name, &t.mul_scalar(0.3).unwrap()).unwrap()
    }

    /// An attribute: `ints`, or an int, a float or a string.
    fn attr(name: &str, value: Attr) -> AttributeProto {
        let mut a = AttributeProto {
            name: name.into(),
            ..Default::default()
        };
        match value {
            Attr::Ints(v) => (a.r#type, a.ints) = (7, v.to_vec()),
            Attr::Int(v) => (a.r#type, a.i) = (2, v),
            Attr::Float(v) => (a.r#type, a.f) = (1, v),
            Attr::Str(v) => (a.r#type, a.s) = (3, v.as_bytes().to_vec()),
        }
        a
    }

    enum Attr {
        Ints(&'static [i64]),
        Int(i64),
        Float(f32),
        Str(&'static str),
    }

    fn node(op: &str, ins: &[&str], outs: &[&str], attrs: Vec<(&str, Attr)>) -> NodeProto {
        NodeProto {
            name: format!("{op}_{}", outs[0]),
            op_type: op.into(),
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: outs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs.into_iter().map(|(n, v)| attr(n, v)).collect(),
            ..Default::default()
        }
    }

    fn nodes() -> Vec<NodeProto> {
        vec![
            node(
                "Pad",
                &["x", "pads"],
                &["p"],
                vec![("mode", Attr::Str("reflect"))],
            ),
            node(
                "ConvTranspose",
                &["p", "up", "up_bias"],
                &["ct"],
                vec![
                    ("strides", Attr::Ints(&[2, 2])),
                    ("pads", Attr::Ints(&[1, 1, 1, 1])),
                    ("output_padding", Attr::Ints(&[1, 1])),
                ],
            ),
            node(
                "Split",
                &["ct", "sizes"],
                &["a", "b"],
                vec![("axis", Attr::Int(1))],
            ),
            node(
                "Slice",
                &["a", "starts", "ends", "axes"],
                &["a_cut"],
                vec![],
            ),
            node(
                "Slice",
                &["b", "starts", "ends", "axes"],
                &["b_cut"],
                vec![],
            ),
            node("Mul", &["a_cut", "b_cut"], &["y"], vec![]),
            node(
                "OneHot",
                &["idx", "depth", "vals"],
                &["hot"],
                vec![("axis", Attr::Int(0))],
            ),
            node(
                "LeakyRelu",
                &["y"],
                &["lr"],
                vec![("alpha", Attr::Float(0.2))],
            ),
            node("Clip", &["lr", "lo", "hi"], &["cl"], vec![]),
            node("Greater", &["cl", "lr"], &["gt"], vec![]),
            node("Where", &["gt", "cl", "lr"], &["w"], vec![]),
            node(
                "ReduceMax",
                &["w"],
                &["rm"],
                vec![("axes", Attr::Ints(&[2, 3])), ("keepdims", Attr::Int(0))],
            ),
            node(
                "Gather",
                &["rm", "gidx"],
                &["g"],
                vec![("axis", Attr::Int(0))],
            ),
            node("Cast", &["g"], &["gc"], vec![("to", Attr::Int(1))]),
            node("Unsqueeze", &["hot", "uaxes"], &["hot3"], vec![]),
            node("Expand", &["hot3", "eshape"], &["hot_big"], vec![]),
        ]
    }

    /// The model of the operators whose converted forms need known indices and sizes
    /// (Pad, ConvTranspose with a bias, Split, Slice, OneHot, ReduceMax, Gather,
    /// Unsqueeze, Expand) and of LeakyRelu, Clip, Greater, Where and Cast.
    pub fn model() -> ModelProto {
        let value = |name: &str| ValueInfoProto {
            name: name.into(),
            ..Default::default()
        };
        let graph = GraphProto {
            name: "ops".into(),
            node: nodes(),
            initializer: vec![
                ints("pads", &[0, 0, 1, 2, 0, 0, 2, 1]),
                floats("up", &[3, 2, 3, 3], 11),
                floats("up_bias", &[2], 12),
                ints("sizes", &[1, 1]),
                ints("starts", &[1]),
                ints("ends", &[-1]),
                ints("axes", &[2]),
                ints("idx", &[1, -1]),
                ints("depth", &[3]),
                floats("vals", &[2], 13),
                from_tensor("lo", &Tensor::scalar(-0.05f32)).unwrap(),
                from_tensor("hi", &Tensor::scalar(0.05f32)).unwrap(),
                ints("gidx", &[1, 0]),
                ints("uaxes", &[0]),
                ints("eshape", &[2, 3, 2]),
            ],
            input: vec![value("x")],
            output: ["y", "hot", "w", "gc", "hot_big"].map(value).to_vec(),
            ..Default::default()
        };
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            graph: Some(graph),
            ..Default::default()
        }
    }
}

#[test]
fn converted_pad_conv_transpose_split_slice_and_one_hot_build_and_match_the_import() {
    use prost::Message;
    use spore::nn::checkpoint::{load_checkpoint, load_param_into_net};
    let dir = std::env::temp_dir().join(format!("spore_onnx_convert_ops_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("ops.onnx");
    std::fs::write(&model, ops_model::model().encode_to_vec()).unwrap();
    let out = dir.join("converted");
    let c = spore::onnx::convert::convert_file(&model, &out, "OpsOnnx").unwrap();
    assert!(c.not_converted.is_empty(), "{}", c.report);
    let committed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spore/converted_ops.rs");
    if std::env::var("SPORE_UPDATE_CONVERTED").is_ok() {
        std::fs::write(&committed, &c.source).unwrap();
    }
    assert_eq!(
        c.source,
        std::fs::read_to_string(&committed).unwrap(),
        "the converter's output changed: rerun with SPORE_UPDATE_CONVERTED=1"
    );
    let net = converted_ops::OpsOnnx::new().unwrap();
    let loaded =
        load_param_into_net(&*net, &load_checkpoint(out.join("model.ckpt")).unwrap()).unwrap();
    assert!(loaded.missing.is_empty(), "{:?}", loaded.missing);
    let imported = spore::onnx::import(&model).unwrap();
    let x = Tensor::randn(&[2, 3, 6, 6], DType::F32, Some(9)).unwrap();
    let (a, b) = (
        net.call(std::slice::from_ref(&x)).unwrap(),
        imported.call(&[x]).unwrap(),
    );
    assert_eq!(a.len(), 5);
    assert_eq!(a[0].shape(), &[2, 1, 16, 18]);
    assert_eq!(a[1].shape(), &[3, 2]);
    assert_eq!(a[4].shape(), &[2, 3, 2]);
    for (p, q) in a.iter().zip(&b) {
        assert_eq!(p.to_vec::<f32>().unwrap(), q.to_vec::<f32>().unwrap());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
