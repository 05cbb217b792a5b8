//! The model zoo: LeNet5 as seed 001 defines it, seed 004's network, ResNet-18 (CIFAR-10).

use spore_core::{DType, Tensor};
use spore_nn::prelude::*;

use super::serial;

fn count(params: &[spore_core::Parameter]) -> usize {
    params.iter().map(|p| p.tensor_type().numel()).sum()
}

#[test]
fn lenet5_is_seed_001s_network() {
    let _s = serial();
    let net = LeNet5::new(10).unwrap();
    let shapes: Vec<Vec<usize>> = net
        .trainable_params()
        .iter()
        .map(|p| p.tensor_type().shape.to_vec())
        .collect();
    assert_eq!(
        shapes,
        vec![
            vec![6, 1, 5, 5],
            vec![16, 6, 5, 5],
            vec![120, 400],
            vec![120],
            vec![84, 120],
            vec![84],
            vec![10, 84],
            vec![10]
        ]
    );
    // TruncatedNormal(0.02) everywhere, the biases too: standard deviation 0.02 (MindSpore
    // 2.x truncates at the absolute bounds [-2, 2], far outside).
    for p in net.trainable_params() {
        let v = p.value().to_vec::<f32>().unwrap();
        let n = v.len() as f32;
        let std = (v.iter().map(|x| x * x).sum::<f32>() / n).sqrt();
        assert!(v.iter().all(|x| x.abs() <= 2.0), "{}", p.name());
        if v.len() >= 400 {
            assert!((std - 0.02).abs() < 0.004, "{}: std {std}", p.name());
        }
    }
    assert_eq!(count(&net.trainable_params()), 61_684);
    let y = net
        .call1(&Tensor::ones(&[3, 1, 32, 32], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[3, 10]);
}

#[test]
fn seed_004_network_is_784_512_512_10() {
    let _s = serial();
    let net = Mlp::new().unwrap();
    assert_eq!(
        count(&net.trainable_params()),
        784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    );
    let names: Vec<String> = net
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.last().unwrap(), "dense_relu_sequential.4.bias");
}

#[test]
fn resnet18_has_11_173_962_parameters_and_classifies_cifar_images() {
    let _s = serial();
    let net = ResNet::resnet18(10).unwrap();
    assert_eq!(count(&net.trainable_params()), 11_173_962);
    let y = net
        .call1(&Tensor::ones(&[1, 3, 32, 32], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[1, 10]);
}
