//! Spore's LeNet, MLP and ResNet-18 exported, checked by onnx.checker, run by
//! onnxruntime within 1e-5 of Spore, and imported back.

use std::sync::Arc;

use prost::Message;
use spore_core::{DType, Tensor, TensorType};
use spore_nn::prelude::*;

use crate::{python, read_npy, temp_dir};

fn round_trip(name: &str, net: Arc<dyn Cell>, shape: &[usize]) {
    round_trip_at(name, net, shape, shape[0]);
}

/// [`round_trip`] with the model exported for `shape` and run at batch `batch` (the
/// exported batch axis is symbolic).
fn round_trip_at(name: &str, net: Arc<dyn Cell>, shape: &[usize], batch: usize) {
    let dir = temp_dir(&format!("export_{name}"));
    let model = dir.join("model.onnx");
    spore_onnx::export(&*net, &[TensorType::new(shape, DType::F32)], &model).unwrap();
    let mut run_shape = shape.to_vec();
    run_shape[0] = batch;
    let x = Tensor::randn(&run_shape, DType::F32, Some(3)).unwrap();
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

/// A network made of the operator options ONNX needed: a transposed convolution,
/// reflect, constant and replicate padding with cropping, a reversed strided slice, a
/// convolution and a ceil-mode max pool.
struct Decoder {
    base: CellBase,
    up: spore_core::Parameter,
    conv: spore_core::Parameter,
}

impl Cell for Decoder {
    fn construct(&self, inputs: &[Tensor]) -> spore_core::Result<Vec<Tensor>> {
        use spore_core::ops::{ConvTranspose2dOptions, PadMode, PaddingMode, Pool2dOptions};
        let up = ConvTranspose2dOptions {
            stride: [2, 2],
            pad_mode: PadMode::Pad([1, 1, 1, 1]),
            output_padding: [1, 1],
            ..Default::default()
        };
        let y = inputs[0].conv_transpose2d(&self.up.value(), &up)?;
        let y = y.pad_with(&[(0, 0), (0, 0), (2, 1), (1, 2)], PaddingMode::Reflect)?;
        let y = y.pad_with(
            &[(0, 0), (0, 0), (1, -1), (0, 0)],
            PaddingMode::Constant(0.25),
        )?;
        let y = y.pad_with(&[(0, 0), (0, 0), (0, 0), (1, -1)], PaddingMode::Replicate)?;
        // The batch and channel axes whole (ends past them), the rows reversed in steps
        // of 2, the columns from 1.
        let y = y.strided_slice(&[0, 0, -1, 1], &[100, 100, -100, 15], &[1, 1, -2, 1])?;
        let y = y.conv2d(&self.conv.value(), &Default::default())?.relu()?;
        let y = y.max_pool2d(&Pool2dOptions::new(2, 2).ceil_mode(true))?;
        Ok(vec![y.flatten(1)?])
    }
    fn params(&self) -> Vec<(String, spore_core::Parameter)> {
        vec![
            ("up".into(), self.up.clone()),
            ("conv".into(), self.conv.clone()),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Decoder"
    }
}

#[test]
fn transposed_convolution_padding_slicing_and_ceil_pooling_round_trip() {
    let weight = |shape: &[usize], seed, name| {
        let t = Tensor::randn(shape, DType::F32, Some(seed)).unwrap();
        spore_core::Parameter::new(t.mul_scalar(0.3).unwrap(), name)
    };
    let net = Arc::new(Decoder {
        base: CellBase::new(),
        up: weight(&[3, 2, 3, 3], 1, "up"),
        conv: weight(&[4, 2, 3, 3], 2, "conv"),
    });
    // Exported at batch 2, run at batch 3: slices and broadcasts leave the batch free.
    round_trip_at("decoder", net, &[2, 3, 6, 6], 3);
}

/// Convolution, BatchNorm2d, ReLU, Dense and BatchNorm1d: the two BatchNorm layers the
/// exporter writes as `BatchNormalization` nodes.
struct Normalised {
    base: CellBase,
    conv: Arc<Conv2d>,
    bn2d: Arc<BatchNorm2d>,
    fc: Arc<Dense>,
    bn1d: Arc<BatchNorm1d>,
}

impl Cell for Normalised {
    fn construct(&self, inputs: &[Tensor]) -> spore_core::Result<Vec<Tensor>> {
        let y = self.bn2d.call1(&self.conv.call1(&inputs[0])?)?.relu()?;
        Ok(vec![self.bn1d.call1(&self.fc.call1(&y.flatten(1)?)?)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        use spore_nn::cell::child;
        vec![
            child("conv", &self.conv),
            child("bn2d", &self.bn2d),
            child("fc", &self.fc),
            child("bn1d", &self.bn1d),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Normalised"
    }
}

#[test]
fn batch_norm_exports_as_one_node_in_inference_and_training_mode() {
    use spore_onnx::export::{ExportOptions, export_with};
    spore_core::rng::set_seed(9);
    let net = Arc::new(Normalised {
        base: CellBase::new(),
        conv: Conv2d::config(3, 4, 3).build().unwrap(),
        bn2d: BatchNorm2d::new(4).unwrap(),
        fc: Dense::new(4 * 5 * 5, 6).unwrap(),
        bn1d: BatchNorm1d::new(6).unwrap(),
    });
    crate::randomise_moving_statistics(&*net);
    round_trip("normalised", net.clone(), &[4, 3, 5, 5]);
    let dir = temp_dir("export_training");
    let model = dir.join("train.onnx");
    let shape = [4, 3, 5, 5];
    export_with(
        &*net,
        &[TensorType::new(&shape, DType::F32)],
        &model,
        &ExportOptions { training: true },
    )
    .unwrap();
    let proto =
        spore_onnx::proto::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    let graph = proto.graph.unwrap();
    let bns: Vec<_> = graph
        .node
        .iter()
        .filter(|n| n.op_type == "BatchNormalization")
        .collect();
    assert_eq!(bns.len(), 2, "one node per BatchNorm layer");
    assert!(
        bns.iter()
            .all(|n| n.output.len() == 3 && n.name.starts_with("Default/bn"))
    );
    let x = Tensor::randn(&shape, DType::F32, Some(4)).unwrap();
    std::fs::write(
        dir.join("x.npy"),
        spore_core::debug::npy::encode(&x).unwrap(),
    )
    .unwrap();
    python(
        "check_export.py",
        &[&model, &dir.join("x.npy"), &dir.join("y.npy")],
    );
    // Spore in training mode: batch statistics, and the moving statistics updated.
    let before: Vec<Vec<f32>> = [&net.bn2d.state, &net.bn1d.state]
        .iter()
        .map(|b| b.moving_variance.value().to_vec::<f32>().unwrap())
        .collect();
    net.set_train(true);
    let y = net.call1(&x).unwrap().to_vec::<f32>().unwrap();
    net.set_train(false);
    let close = |a: &[f32], b: &[f32], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        let worst = a
            .iter()
            .zip(b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst <= 1e-5,
            "{what}: onnxruntime differs from Spore by {worst}"
        );
    };
    close(
        &read_npy(&dir.join("y.npy")).to_vec::<f32>().unwrap(),
        &y,
        "output",
    );
    for (k, (bn, n)) in [(&net.bn2d.state, 4.0 * 5.0 * 5.0), (&net.bn1d.state, 4.0)]
        .iter()
        .enumerate()
    {
        let running = |j: usize| {
            read_npy(&dir.join(format!("y_{}.npy", 2 * k + j)))
                .to_vec::<f32>()
                .unwrap()
        };
        close(
            &running(1),
            &bn.moving_mean.value().to_vec::<f32>().unwrap(),
            "running mean",
        );
        // ONNX's variance term is the batch's biased variance, Spore's the unbiased one.
        let m = bn.momentum as f32;
        let onnx_rule: Vec<f32> = bn
            .moving_variance
            .value()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(&before[k])
            .map(|(new, old)| m * old + (new - m * old) * (n - 1.0) / n)
            .collect();
        close(&running(2), &onnx_rule, "running variance");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
