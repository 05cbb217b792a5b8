//! Automatic mixed precision on the main job: LeNet5 at O2 (float16 compute, float32
//! master weights and loss, dynamic loss scaling) trains as seed 001 trains it and
//! reaches the accuracy bar; its loss over the first 500 steps tracks float32's.

use std::sync::Arc;

use spore::datasets::{bundled_mnist, create_dataset};
use spore::nn::amp::{AmpLevel, AmpOptions, build_train_network};
use spore::prelude::*;

/// LeNet5 trained `steps` steps at `level` (Graph mode, seed 1, Momentum 0.01/0.9, batch
/// 32); returns the network and each step's loss.
fn train(level: AmpLevel, dtype: DType, steps: usize) -> (Arc<LeNet5>, Vec<f64>) {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1)).unwrap();
    spore_data::config::set_seed(1);
    let data = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let options = AmpOptions {
        dtype: Some(dtype),
        ..AmpOptions::default()
    };
    let step = build_train_network(net.clone(), opt, Some(loss), level, options).unwrap();
    let mut losses = Vec::with_capacity(steps);
    while losses.len() < steps {
        for row in data.create_tuple_iterator(1) {
            let row = row.unwrap();
            let out = step.call(&row).unwrap();
            assert_eq!(out[0].dtype(), DType::F32, "the loss is float32");
            losses.push(out[0].item().unwrap());
            if losses.len() == steps {
                break;
            }
        }
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    (net, losses)
}

fn accuracy(net: &Arc<LeNet5>) -> f64 {
    net.set_train(false);
    let test = create_dataset(bundled_mnist().join("test"), 1000, 1, 2, false).unwrap();
    let row = test.create_tuple_iterator(1).next().unwrap().unwrap();
    let logits = net.call1(&row[0]).unwrap();
    assert_eq!(logits.dtype(), DType::F16, "O2 evaluates in float16 too");
    let predicted = logits.argmax(1, false).unwrap().to_vec::<i32>().unwrap();
    let labels = row[1].to_vec::<i32>().unwrap();
    let right = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, l)| p == l)
        .count();
    right as f64 / labels.len() as f64
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn lenet_at_o2_tracks_float32_and_reaches_97_percent() {
    let (_, o0) = train(AmpLevel::O0, DType::F16, 3000);
    let (net, o2) = train(AmpLevel::O2, DType::F16, 10_000);
    assert!(o2.iter().all(|l| l.is_finite()), "a loss overflowed");
    // One batch's loss is noisy: means over 100 steps. After 500 steps (the issue's
    // point; LeNet is still near ln 10 there) within 2 %; after 3,000, where both have
    // learnt and the trajectories have parted, O2's loss is as low as O0's within 0.05
    // (2 % of the starting loss: a relative bound on losses near 0 measures noise).
    let window = |v: &[f64], end: usize| mean(&v[end - 100..end]);
    let (a, b) = (window(&o0, 500), window(&o2, 500));
    println!("LeNet5: mean loss over steps 401-500: O0 {a:.4}, O2 {b:.4}");
    assert!(
        (b - a).abs() <= 0.02 * a,
        "steps 401-500: O2 {b}, O0 {a}: more than 2 % apart"
    );
    let (a, b) = (window(&o0, 3000), window(&o2, 3000));
    println!("LeNet5: mean loss over steps 2901-3000: O0 {a:.4}, O2 {b:.4}");
    assert!(b <= a + 0.05 && a < 0.5, "steps 2901-3000: O2 {b}, O0 {a}");
    let acc = accuracy(&net);
    println!("LeNet5: O2 test accuracy after 10,000 steps {acc:.4}");
    assert!(acc >= 0.97, "O2 test accuracy {acc}");
}
