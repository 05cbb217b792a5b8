//! Spore's LeNet, MLP and ResNet-18 exported, checked by onnx.checker, run by
//! onnxruntime within 1e-5 of Spore, and imported back.

use std::sync::Arc;

use prost::Message;
use spore_core::{DType, Tensor, TensorType};
use spore_nn::prelude::*;

use crate::{python, read_npy, temp_dir};

fn round_trip(name: &str, net: Arc<dyn Cell>, shape: &[usize]) {
    let dir = temp_dir(&format!("export_{name}"));
    let model = dir.join("model.onnx");
    spore_onnx::export(&*net, &[TensorType::new(shape, DType::F32)], &model).unwrap();
    let x = Tensor::randn(shape, DType::F32, Some(3)).unwrap();
    std::fs::write(
        dir.join("x.npy"),
        spore_core::debug::npy::encode(&x).unwrap(),
    )
    .unwrap();
    let said = python(
        "check_export.py",
        &[&model, &dir.join("x.npy"), &dir.join("y.npy")],
    );
    net.set_train(false);
    let spore = net.call1(&x).unwrap().to_vec::<f32>().unwrap();
    let ort = read_npy(&dir.join("y.npy")).to_vec::<f32>().unwrap();
    let worst = spore
        .iter()
        .zip(&ort)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!("{name}: {} onnxruntime vs Spore {worst:e}", said.trim());
    assert_eq!(spore.len(), ort.len());
    assert!(
        worst <= 1e-5,
        "{name}: onnxruntime differs from Spore by {worst}"
    );
    // Spore's scope names are the node names; the model imports back.
    let proto =
        spore_onnx::proto::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    let graph = proto.graph.unwrap();
    assert!(
        graph.node.iter().any(|n| n.name.starts_with("Default/")),
        "node names keep the scopes"
    );
    let back = spore_onnx::import(&model).unwrap();
    let again = back.call1(&x).unwrap().to_vec::<f32>().unwrap();
    let worst = spore
        .iter()
        .zip(&again)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= 1e-5,
        "{name}: the re-imported network differs by {worst}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lenet_mlp_and_resnet18_round_trip_through_onnxruntime() {
    spore_core::rng::set_seed(5);
    round_trip("lenet", LeNet5::new(10).unwrap(), &[2, 1, 32, 32]);
    round_trip("mlp", Mlp::new().unwrap(), &[2, 1, 28, 28]);
    round_trip("resnet18", ResNet::resnet18(10).unwrap(), &[1, 3, 32, 32]);
}
