//! Training steps shared by the compile tests: an MLP and a LeNet-sized convolutional
//! network, trained by Momentum(0.01, 0.9) on sparse softmax cross-entropy, written once
//! for eager execution and tracing alike.
//!
//! ```ignore
//! let ps = params(MLP_SHAPES, 7);
//! let loss = train_step(mlp, &ps, &velocities(&ps), &x, &y)?;
//! ```

use spore_core::ops::{Conv2dOptions, Pool2dOptions};
use spore_core::{DType, Parameter, Result, Tensor, value_and_grad};

/// Parameter shapes of [`mlp`] (input 20 features, batch 16).
pub const MLP_SHAPES: &[&[usize]] = &[&[32, 20], &[32], &[10, 32], &[10]];
pub const MLP_INPUT: &[usize] = &[16, 20];
/// Parameter shapes of [`lenet`] (input 1x32x32, batch 8).
pub const LENET_SHAPES: &[&[usize]] = &[
    &[6, 1, 5, 5],
    &[16, 6, 5, 5],
    &[32, 400],
    &[32],
    &[10, 32],
    &[10],
];
pub const LENET_INPUT: &[usize] = &[8, 1, 32, 32];

pub type Forward = fn(&[Tensor], &Tensor) -> Result<Tensor>;

pub fn mlp(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let h = x.matmul(&p[0].transpose()?)?.add(&p[1])?.relu()?;
    h.matmul(&p[2].transpose()?)?.add(&p[3])
}

pub fn lenet(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let (conv, pool) = (Conv2dOptions::default(), Pool2dOptions::new(2, 2));
    let x = x.conv2d(&p[0], &conv)?.relu()?.max_pool2d(&pool)?;
    let x = x
        .conv2d(&p[1], &conv)?
        .relu()?
        .max_pool2d(&pool)?
        .flatten(1)?;
    let x = x.matmul(&p[2].transpose()?)?.add(&p[3])?.relu()?;
    x.matmul(&p[4].transpose()?)?.add(&p[5])
}

pub fn params(shapes: &[&[usize]], seed: u64) -> Vec<Parameter> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Parameter::new(
                Tensor::randn(s, DType::F32, Some(seed + i as u64))
                    .unwrap()
                    .mul_scalar(0.1)
                    .unwrap(),
                &format!("p{i}"),
            )
        })
        .collect()
}

/// One Momentum(0.01, 0.9) step on sparse softmax cross-entropy; returns the loss.
pub fn train_step(
    forward: Forward,
    ps: &[Parameter],
    vs: &[Parameter],
    x: &Tensor,
    y: &Tensor,
) -> Result<Tensor> {
    let weights: Vec<Tensor> = ps.iter().map(|p| p.value()).collect();
    let loss = move |inp: &[Tensor]| -> Result<Tensor> {
        let w: Vec<Tensor> = inp[2..].to_vec();
        let logits = forward(&w, &inp[0])?;
        logits
            .log_softmax(-1)?
            .mul(&inp[1].one_hot(10, DType::F32)?)?
            .sum(&[-1], false)?
            .mean(&[], false)?
            .neg()
    };
    let args: Vec<Tensor> = [vec![x.clone(), y.clone()], weights.clone()].concat();
    let out = value_and_grad(loss, None, &weights, false)(&args)?;
    for ((p, v), g) in ps.iter().zip(vs).zip(&out.weight_grads) {
        let nv = v.value().mul_scalar(0.9)?.add(g)?;
        v.assign(&nv)?;
        p.assign(&p.value().sub(&nv.mul_scalar(0.01)?)?)?;
    }
    Ok(out.value)
}

/// Zero velocities for Momentum, one per parameter.
pub fn velocities(ps: &[Parameter]) -> Vec<Parameter> {
    ps.iter()
        .map(|p| Parameter::with_requires_grad(p.stored().zeros_like(), "v", false))
        .collect()
}

/// A batch for step `s`: N(0, 1) inputs and labels spread over the ten classes.
pub fn batch(x_shape: &[usize], s: usize) -> (Tensor, Tensor) {
    let x = Tensor::randn(x_shape, DType::F32, Some(1000 + s as u64)).unwrap();
    let labels: Vec<i32> = (0..x_shape[0])
        .map(|i| ((i * 7 + s * 3) % 10) as i32)
        .collect();
    (x, Tensor::from_vec(labels, &[x_shape[0]]).unwrap())
}
