//! `spore explain` on a trained LeNet and digit images: a map per image and method, the
//! scores as JSON and CSV, and one HTML page holding every picture.

use std::path::PathBuf;

use spore::cli::{args::parse, execute};
use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;
use spore_data::mnist::{Mnist, Usage};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_cli_explain_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn trained_lenet_explanations_are_written_and_scored() {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1)).unwrap();
    spore_data::config::set_seed(1);
    let work = temp_dir("lenet");
    let train = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let mut model = Model::new(net.clone(), loss, opt);
    model
        .train(3, &train, &mut [], TrainConfig::sink(1000))
        .unwrap();
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    let ckpt = work.join("lenet.ckpt");
    spore::nn::checkpoint::save_checkpoint(&*net, &ckpt).unwrap();

    let images = work.join("digits");
    std::fs::create_dir_all(&images).unwrap();
    let mnist = Mnist::load(bundled_mnist().join("test"), Usage::Test).unwrap();
    for i in 0..3 {
        let img = image::GrayImage::from_raw(28, 28, mnist.image(i).to_vec()).unwrap();
        img.save(images.join(format!("digit{i}.png"))).unwrap();
    }
    let out = work.join("out");
    let argv = [
        "spore",
        "explain",
        "--model",
        "lenet",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--images",
        images.to_str().unwrap(),
        "--methods",
        "gradient,gradcam,integratedgradients,occlusion",
        "--out",
        out.to_str().unwrap(),
    ];
    let said = execute(&parse(argv).unwrap()).unwrap();
    eprintln!("{said}");
    assert!(
        said.contains("| GradCAM |") && said.contains("faithfulness_deletion"),
        "{said}"
    );
    for i in 0..3 {
        for m in ["Gradient", "GradCAM", "IntegratedGradients", "Occlusion"] {
            let png = out.join(format!("digit{i}_{m}.png"));
            let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
            assert_eq!(&bytes[1..4], b"PNG");
        }
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("scores.json")).unwrap()).unwrap();
    assert_eq!(json["predictions"].as_array().unwrap().len(), 3);
    // Three faithfulness scores, class sensitivity and robustness, per image and method.
    assert_eq!(json["scores"].as_array().unwrap().len(), 3 * 4 * 5);
    let csv = std::fs::read_to_string(out.join("scores.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 3 * 4 * 5);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert_eq!(
        html.matches("<img src=\"data:image/png;base64,").count(),
        3 * (1 + 4)
    );
    // The trained network reads the digits it explains.
    let preds: Vec<String> = json["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["class"].as_str().unwrap().to_string())
        .collect();
    let labels: Vec<String> = (0..3).map(|i| mnist.labels[i].to_string()).collect();
    assert_eq!(preds, labels);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn explain_arguments_are_checked() {
    let err = parse([
        "spore",
        "explain",
        "--model",
        "lenet",
        "--checkpoint",
        "a",
        "--images",
        "d",
        "--methods",
        ",",
        "--out",
        "o",
    ])
    .unwrap_err();
    assert!(
        err.to_string().contains("--methods expects at least one"),
        "{err}"
    );
    let inv = parse([
        "spore",
        "explain",
        "--model",
        "lenet",
        "--checkpoint",
        "a",
        "--images",
        "d",
        "--methods",
        "nope",
        "--out",
        "o",
    ])
    .unwrap();
    let err = execute(&inv).unwrap_err().to_string();
    assert!(
        err.contains("cannot read") || err.contains("unknown method"),
        "{err}"
    );
}
