//! Initializers: bounds and moments of each distribution, MindSpore 2.x's layer defaults,
//! and reproducibility under the global seed.

use spore_core::{DType, rng};
use spore_nn::init::{Initializer, fans};
use spore_nn::prelude::*;

use super::serial;

fn stats(v: &[f32]) -> (f64, f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    let max = v.iter().map(|x| x.abs() as f64).fold(0.0, f64::max);
    (mean, var.sqrt(), max)
}

fn sample(init: Initializer, shape: &[usize]) -> Vec<f32> {
    init.init(shape, DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

#[test]
fn distributions_have_their_bounds_and_moments() {
    let _s = serial();
    rng::set_seed(0);
    let (m, s, max) = stats(&sample(Initializer::normal(0.5), &[200, 100]));
    assert!(m.abs() < 0.01 && (s - 0.5).abs() < 0.01, "normal: {m} {s}");
    assert!(max > 1.5, "a normal reaches beyond 3 sigma in 20000 draws");
    // MindSpore 2.x: absolute bounds [-2, 2], so sigma 0.02 is a plain normal in practice.
    let (_, s, max) = stats(&sample(Initializer::truncated_normal(0.02), &[200, 100]));
    assert!(
        max <= 2.0 && max > 0.06 && (s - 0.02).abs() < 0.001,
        "truncated normal: {max} {s}"
    );
    let (_, s, max) = stats(&sample(Initializer::truncated_normal(1.5), &[200, 100]));
    assert!(
        max <= 2.0 && s < 1.5,
        "truncated at the absolute bound 2: {max} {s}"
    );
    let (m, _, max) = stats(&sample(Initializer::uniform(0.3), &[200, 100]));
    assert!(max <= 0.3 && max > 0.29 && m.abs() < 0.01);
    // HeUniform(sqrt 5) on (out=50, in=64): bound 1/sqrt(64).
    let (_, _, max) = stats(&sample(Initializer::default_weight(), &[50, 64]));
    assert!(max <= 0.125 && max > 0.12, "HeUniform bound {max}");
    // HeNormal(0) on a conv kernel: std = sqrt(2 / fan_in), fan_in = 8 * 3 * 3.
    let (_, s, _) = stats(&sample(Initializer::he_normal(0.0), &[64, 8, 3, 3]));
    assert!(
        (s - (2.0f64 / 72.0).sqrt()).abs() < 0.01,
        "HeNormal std {s}"
    );
    // XavierUniform: bound sqrt(6 / (fan_in + fan_out)).
    let (_, _, max) = stats(&sample(Initializer::xavier_uniform(1.0), &[30, 70]));
    assert!(max <= (6.0f64 / 100.0).sqrt() && max > 0.24);
    assert_eq!(sample(Initializer::constant(2.5), &[3]), vec![2.5; 3]);
    assert_eq!(sample(Initializer::zero(), &[2]), vec![0.0; 2]);
    assert_eq!(sample(Initializer::one(), &[2]), vec![1.0; 2]);
    assert_eq!(fans(&[6, 2, 5, 5]).unwrap(), (50, 150));
    assert!(
        Initializer::default_weight()
            .init(&[5], DType::F32)
            .is_err()
    );
}

#[test]
fn layer_defaults_follow_mindspore_2() {
    let _s = serial();
    rng::set_seed(1);
    let fc = Dense::new(100, 40).unwrap();
    let bound = 0.1; // 1/sqrt(100) for both weight and bias
    let (_, _, w) = stats(&fc.weight.value().to_vec::<f32>().unwrap());
    let (_, _, b) = stats(&fc.bias.as_ref().unwrap().value().to_vec::<f32>().unwrap());
    assert!(w <= bound && w > 0.09 && b <= bound && b > 0.05, "{w} {b}");
    let conv = Conv2d::new(4, 8, 3).unwrap();
    assert!(conv.bias.is_none(), "Conv2d has_bias defaults to false");
    assert_eq!(conv.options().pad_mode, spore_core::ops::PadMode::Same);
    let (_, _, w) = stats(&conv.weight.value().to_vec::<f32>().unwrap());
    assert!(w <= 1.0 / 6.0, "fan_in 36: bound 1/6, got {w}");
    let conv_b = Conv2d::config(4, 8, 3).has_bias(true).build().unwrap();
    let (_, _, b) = stats(
        &conv_b
            .bias
            .as_ref()
            .unwrap()
            .value()
            .to_vec::<f32>()
            .unwrap(),
    );
    assert!(b <= 1.0 / 6.0);
    let emb = Embedding::new(200, 50).unwrap();
    let (_, s, _) = stats(&emb.embedding_table.value().to_vec::<f32>().unwrap());
    assert!((s - 1.0).abs() < 0.03, "Embedding Normal(1.0): std {s}");
    let bn = BatchNorm2d::new(3).unwrap();
    assert_eq!(bn.gamma.value().to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert_eq!(bn.beta.value().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(
        bn.moving_mean.value().to_vec::<f32>().unwrap(),
        vec![0.0; 3]
    );
    assert_eq!(
        bn.moving_variance.value().to_vec::<f32>().unwrap(),
        vec![1.0; 3]
    );
}

#[test]
fn a_seed_reproduces_a_network() {
    let _s = serial();
    let build = |seed| {
        rng::set_seed(seed);
        LeNet5::new(10)
            .unwrap()
            .parameters_and_names()
            .into_iter()
            .map(|(_, p)| p.value().to_vec::<f32>().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(build(42), build(42));
    assert_ne!(build(42), build(43));
    let a = Initializer::normal(1.0)
        .init_seeded(&[4], DType::F32, Some(9))
        .unwrap();
    rng::set_seed(123);
    let b = Initializer::normal(1.0)
        .init_seeded(&[4], DType::F32, Some(9))
        .unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
}
