//! The main job: LeNet5 (seed 001) trained on the bundled MNIST digits, eagerly
//! (PyNative), with sparse softmax cross-entropy and Momentum(0.01, 0.9), printing
//! LossMonitor-style lines and the final test accuracy.
//!
//! Run: `cargo run --release --example lenet [-- --epochs N --data DIR]`
//!
//! The pipeline follows seed 001: Resize(32, 32, bilinear), Rescale(1/255), normalise with
//! (0.1307, 0.3081), HWC2CHW, shuffle, batch(32, drop_remainder). Layers are written with
//! core ops here; the `nn` cells, `Model`, Graph mode and sinking replace them as those
//! issues land.

use std::time::Instant;

use spore::data::mnist::{Mnist, Usage};
use spore::data::vision::resize_bilinear_u8;
use spore::prelude::*;

const BATCH: usize = 32;

struct LeNet5 {
    params: Vec<Tensor>,
}

impl LeNet5 {
    /// Weights from TruncatedNormal(0.02) as in seed 001 (no conv bias).
    fn new(seed: u64) -> Result<LeNet5> {
        let shapes: [&[usize]; 8] = [
            &[6, 1, 5, 5],
            &[16, 6, 5, 5],
            &[120, 400],
            &[120],
            &[84, 120],
            &[84],
            &[10, 84],
            &[10],
        ];
        let params = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Ok(
                    Tensor::truncated_normal(s, 0.02, DType::F32, Some(seed + i as u64))?
                        .with_requires_grad(true),
                )
            })
            .collect::<Result<_>>()?;
        Ok(LeNet5 { params })
    }

    fn forward(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
        let pool = Pool2dOptions::new(2, 2);
        let conv = Conv2dOptions::default();
        let x = x.conv2d(&p[0], &conv)?.relu()?.max_pool2d(&pool)?;
        let x = x
            .conv2d(&p[1], &conv)?
            .relu()?
            .max_pool2d(&pool)?
            .flatten(1)?;
        // MindSpore's Dense: y = x W^T + b with W of shape [out, in].
        let dense = |x: &Tensor, w: &Tensor, b: &Tensor| x.matmul(&w.transpose()?)?.add(b);
        let x = dense(&x, &p[2], &p[3])?.relu()?;
        let x = dense(&x, &p[4], &p[5])?.relu()?;
        dense(&x, &p[6], &p[7])
    }
}

/// SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean").
fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let onehot = labels.one_hot(10, DType::F32)?;
    logits
        .log_softmax(-1)?
        .mul(&onehot)?
        .sum(&[-1], false)?
        .mean(&[], false)?
        .neg()
}

/// Seed 001's image transforms for one 28x28 digit: resize to 32x32, rescale, normalise.
fn preprocess(img: &[u8]) -> Vec<f32> {
    resize_bilinear_u8(img, 28, 28, 32, 32)
        .into_iter()
        .map(|v| (v as f32 / 255.0) / 0.3081 - 0.1307 / 0.3081)
        .collect()
}

fn batch(data: &Mnist, idx: &[usize]) -> Result<(Tensor, Tensor)> {
    let mut pixels = Vec::with_capacity(idx.len() * 1024);
    for &i in idx {
        pixels.extend(preprocess(data.image(i)));
    }
    let labels: Vec<i32> = idx.iter().map(|&i| data.labels[i] as i32).collect();
    Ok((
        Tensor::from_vec(pixels, &[idx.len(), 1, 32, 32])?,
        Tensor::from_vec(labels, &[idx.len()])?,
    ))
}

/// A seeded Fisher-Yates shuffle (the dataset issue brings MindSpore's buffer shuffle).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    order
}

fn parse_args() -> std::result::Result<(usize, String), String> {
    let mut epochs = 10;
    let mut data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist").to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--epochs" => {
                let v = args.next().ok_or("--epochs needs a number")?;
                epochs = v
                    .parse()
                    .map_err(|_| format!("--epochs expects a positive integer, got {v:?}"))?;
            }
            "--data" => {
                data = args
                    .next()
                    .ok_or("--data needs a folder holding train/ and test/")?
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --epochs N or --data DIR"
                ));
            }
        }
    }
    Ok((epochs, data))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let (epochs, data_dir) = parse_args()?;
    let train = Mnist::load(format!("{data_dir}/train"), Usage::Train)?;
    let test = Mnist::load(format!("{data_dir}/test"), Usage::Test)?;
    println!(
        "LeNet5 on {} training and {} test digits, PyNative mode, batch {BATCH}",
        train.len(),
        test.len()
    );

    let net = LeNet5::new(1)?;
    let mut params = net.params;
    let mut velocity: Vec<Tensor> = params.iter().map(|p| p.zeros_like()).collect();
    let (lr, momentum) = (0.01, 0.9);
    let steps_per_epoch = train.len() / BATCH;
    println!("============== Starting Training ==============");
    let started = Instant::now();
    for epoch in 1..=epochs {
        let order = shuffled(train.len(), epoch as u64);
        let mut last_loss = 0.0;
        for step in 0..steps_per_epoch {
            let (x, y) = batch(&train, &order[step * BATCH..(step + 1) * BATCH])?;
            let current = params.clone();
            let loss_fn =
                move |inp: &[Tensor]| cross_entropy(&LeNet5::forward(&current, &inp[0])?, &inp[1]);
            let out = value_and_grad(loss_fn, None, &params, false)(&[x, y])?;
            last_loss = out.value.item()?;
            // Momentum (MindSpore): v = momentum * v + grad; p = p - lr * v.
            no_grad(|| -> Result<()> {
                for ((p, v), g) in params
                    .iter_mut()
                    .zip(velocity.iter_mut())
                    .zip(&out.weight_grads)
                {
                    *v = v.mul_scalar(momentum)?.add(g)?;
                    *p = p.sub(&v.mul_scalar(lr)?)?.with_requires_grad(true);
                }
                Ok(())
            })?;
        }
        println!("epoch: {epoch} step: {steps_per_epoch}, loss is {last_loss}");
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "trained {} steps in {seconds:.1} s ({:.1} steps/s)",
        epochs * steps_per_epoch,
        (epochs * steps_per_epoch) as f64 / seconds
    );

    let mut correct = 0;
    let all: Vec<usize> = (0..test.len()).collect();
    for chunk in all.chunks(250) {
        let (x, y) = batch(&test, chunk)?;
        let pred = no_grad(|| LeNet5::forward(&params, &x))?.argmax(-1, false)?;
        correct += pred.equal(&y)?.cast(DType::I32)?.sum(&[], false)?.item()? as usize;
    }
    println!(
        "test accuracy: {:.2}% ({correct}/{})",
        100.0 * correct as f64 / test.len() as f64,
        test.len()
    );
    Ok(())
}
