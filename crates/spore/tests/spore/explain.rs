//! `spore explain` on a trained LeNet and digit images: a map per image and method, the
//! scores as JSON and CSV, and one HTML page holding every picture.

use std::path::PathBuf;

use spore::cli::{args::parse, execute};
use spore::datasets::bundled_mnist;
use spore_data::mnist::{Mnist, Usage};

fn temp_dir(name: &str) -> PathBuf {
    crate::temp_dir("explain", name)
}

#[test]
fn trained_lenet_explanations_are_written_and_scored() {
    let work = temp_dir("lenet");
    let (_, ckpt) = crate::trained_lenet(3, &work);

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
