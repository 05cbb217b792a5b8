//! Float32 code for the zoo's LeNet, MLP and ResNet-18 equals Spore's eager outputs.

use std::sync::Arc;

use spore_codegen::{Options, Target, generate};
use spore_core::{DType, Tensor, TensorType};
use spore_data::mnist::{Mnist, Usage};
use spore_nn::prelude::*;

use crate::build::{assert_freestanding, build, run_benchmark, write_inputs};
use crate::{bundled, temp_dir};

/// The first `n` test digits, scaled and normalised as LeNet's pipeline does, padded
/// from 28x28 to `side` x `side` (centred).
pub fn digits(n: usize, side: usize) -> Vec<f32> {
    let mnist = Mnist::load(bundled("test"), Usage::Test).unwrap();
    let pad = (side - 28) / 2;
    let mut out = vec![(0.0 - 0.1307) / 0.3081; n * side * side];
    for i in 0..n {
        for (k, &p) in mnist.image(i).iter().enumerate() {
            let (y, x) = (k / 28 + pad, k % 28 + pad);
            out[i * side * side + y * side + x] = (p as f32 / 255.0 - 0.1307) / 0.3081;
        }
    }
    out
}

/// Generates `net` for one sample of `shape`, builds it, runs it on every sample of
/// `inputs`, and returns (largest difference from eager, the project's report).
fn compare<C: Cell>(
    name: &str,
    net: &Arc<C>,
    shape: &[usize],
    inputs: &[f32],
) -> (f32, spore_codegen::Report) {
    let per: usize = shape.iter().product();
    let n = inputs.len() / per;
    let project = generate(
        &**net,
        &[TensorType::new(shape, DType::F32)],
        &Options::new(name, Target::X86),
    )
    .unwrap();
    let dir = temp_dir(name);
    project.write_to(&dir).unwrap();
    let bin = build(&dir);
    assert_freestanding(&dir);
    write_inputs(&dir.join("inputs.bin"), inputs);
    let (rows, timing) = run_benchmark(&bin, &dir.join("inputs.bin"), 3);
    assert!(timing.contains("time per inference"), "{timing}");
    assert_eq!(rows.len(), n);
    net.set_train(false);
    let mut batch_shape = shape.to_vec();
    batch_shape[0] = n;
    let eager = net
        .call1(&Tensor::from_vec(inputs.to_vec(), &batch_shape).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let per_out = eager.len() / n;
    let mut worst = 0.0f32;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), per_out);
        for (a, b) in row.iter().zip(&eager[i * per_out..(i + 1) * per_out]) {
            worst = worst.max((a - b).abs());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{name}: largest difference from eager over {n} inputs: {worst:e}");
    (worst, project.report)
}

#[test]
fn lenet_matches_eager_on_100_digits_within_budgets() {
    spore_core::rng::set_seed(3);
    let net = LeNet5::new(10).unwrap();
    let (worst, report) = compare("lenet", &net, &[1, 1, 32, 32], &digits(100, 32));
    assert!(worst <= 1e-5, "largest difference from eager: {worst}");
    // Weights are exactly the parameters; the arena is within 5% of its lower bound.
    assert_eq!(report.weight_bytes, report.parameter_bytes);
    assert!(report.workspace_bytes <= 8 * 1024, "{report:?}");
    assert!(
        report.workspace_bytes as f64 <= 1.05 * report.arena_lower_bound as f64,
        "{report:?}"
    );
    let kinds: Vec<&str> = report.kernels.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(kinds[0], "Conv2D+ReLU+MaxPool");
}

#[test]
fn lenet_code_fits_in_4_kb() {
    let net = LeNet5::new(10).unwrap();
    let project = generate(
        &*net,
        &[TensorType::new(&[1, 1, 32, 32], DType::F32)],
        &Options::new("lenet", Target::X86),
    )
    .unwrap();
    let dir = temp_dir("lenet_size");
    project.write_to(&dir).unwrap();
    let (text, data, bss) = crate::build::object_size(&dir, "model.c", &["-std=c99", "-Os"]);
    eprintln!("LeNet model.o at -Os: text {text} B, data {data} B, bss {bss} B");
    assert!(text <= 4096, "code {text} bytes");
    assert_eq!(data + bss, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mlp_matches_eager() {
    spore_core::rng::set_seed(4);
    let net = Mlp::new().unwrap();
    let (worst, report) = compare("mlp", &net, &[1, 1, 28, 28], &digits(20, 28));
    assert!(worst <= 1e-5, "largest difference from eager: {worst}");
    assert_eq!(report.weight_bytes, report.parameter_bytes);
}

/// Gives every BatchNorm random statistics and affine parameters, so that folding them
/// into the convolutions is exercised (fresh ones are the identity).
pub fn randomise_batchnorm<C: Cell>(net: &Arc<C>) {
    for (name, p) in net.parameters_and_names() {
        let shape = p.tensor_type().shape.to_vec();
        let u = Tensor::rand(&shape, DType::F32, None).unwrap();
        let v = if name.ends_with("moving_variance") {
            u.add_scalar(0.5).unwrap()
        } else if name.ends_with("moving_mean") || name.ends_with("beta") {
            u.sub_scalar(0.5).unwrap().mul_scalar(0.2).unwrap()
        } else if name.ends_with("gamma") {
            u.add_scalar(0.5).unwrap()
        } else {
            continue;
        };
        p.store(v);
    }
}

#[test]
fn resnet18_with_folded_batchnorm_matches_eager() {
    spore_core::rng::set_seed(5);
    let net = ResNet::resnet18(10).unwrap();
    randomise_batchnorm(&net);
    let input = Tensor::randn(&[2, 3, 32, 32], DType::F32, None)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let (worst, report) = compare("resnet18", &net, &[1, 3, 32, 32], &input);
    assert!(worst <= 1e-5, "largest difference from eager: {worst}");
    // BatchNorm's four vectors per layer became one bias.
    assert!(report.weight_bytes < report.parameter_bytes);
    assert!(
        report.kernels.iter().all(|(_, k)| !k.starts_with("Mul")),
        "{report:?}"
    );
    assert!(
        report.kernels.iter().any(|(_, k)| k == "Add+ReLU"),
        "{report:?}"
    );
}
