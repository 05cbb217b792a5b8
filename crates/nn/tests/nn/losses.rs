//! Losses against the JAX references in `fixtures/losses.safetensors`: the loss value and
//! its gradient with respect to the logits.

use std::sync::Arc;

use spore_core::{DType, Tensor, value_and_grad};
use spore_nn::prelude::*;

use super::{assert_close, fixture, serial};

fn check(loss: Arc<dyn Cell>, case: &str) {
    let f = fixture("losses.safetensors", case);
    let labels = f["labels"].clone();
    let dy = f.get("dy").cloned();
    let l = loss.clone();
    let objective = move |x: &[Tensor]| -> spore_core::Result<Vec<Tensor>> {
        let v = l.call(&[x[0].clone(), labels.clone()])?.remove(0);
        let scalar = match &dy {
            Some(d) => v.mul(d)?.sum(&[], false)?,
            None => v.clone(),
        };
        Ok(vec![scalar, v])
    };
    let out = value_and_grad(objective, Some(&[0]), &[], true)(&[f["logits"].clone()]).unwrap();
    assert_close(&out.aux[0], &f["loss"], 1e-5, &format!("{case}: loss"));
    assert_close(
        &out.input_grads[0],
        &f["dlogits"],
        1e-5,
        &format!("{case}: dlogits"),
    );
}

#[test]
fn softmax_cross_entropy_sparse_and_dense_with_each_reduction() {
    let _s = serial();
    check(
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::None),
        "sce_sparse_none",
    );
    check(
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
        "sce_sparse_mean",
    );
    check(
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Sum),
        "sce_sparse_sum",
    );
    check(
        SoftmaxCrossEntropyWithLogits::new(false, Reduction::Mean),
        "sce_dense_mean",
    );
}

#[test]
fn cross_entropy_with_weights_ignore_index_and_label_smoothing() {
    let _s = serial();
    check(CrossEntropyLoss::new(), "ce_mean");
    let w = fixture("losses.safetensors", "ce_weight_ignore_smooth")["weight"].clone();
    check(
        CrossEntropyLoss::with_options(Some(w), -100, Reduction::Mean, 0.1).unwrap(),
        "ce_weight_ignore_smooth",
    );
    check(
        CrossEntropyLoss::with_options(None, -100, Reduction::Sum, 0.2).unwrap(),
        "ce_smooth_sum",
    );
    check(CrossEntropyLoss::new(), "ce_probs");
}

#[test]
fn nll_loss_weights_and_ignore_index() {
    let _s = serial();
    let w = fixture("losses.safetensors", "nll_weight_ignore")["weight"].clone();
    check(
        NLLLoss::with_options(Some(w.clone()), 2, Reduction::Mean),
        "nll_weight_ignore",
    );
    check(
        NLLLoss::with_options(Some(w), -100, Reduction::None),
        "nll_none",
    );
}

#[test]
fn regression_and_binary_losses() {
    let _s = serial();
    check(MSELoss::new(Reduction::Mean), "mse_mean");
    check(L1Loss::new(Reduction::Sum), "l1_sum");
    let f = fixture("losses.safetensors", "bce_weights_mean");
    check(
        BCEWithLogitsLoss::with_weights(
            Reduction::Mean,
            Some(f["weight"].clone()),
            Some(f["pos_weight"].clone()),
        ),
        "bce_weights_mean",
    );
}

#[test]
fn loss_input_errors_say_what_was_expected() {
    let _s = serial();
    let sce = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let logits = Tensor::zeros(&[4, 3], DType::F32).unwrap();
    let err = sce
        .call(&[logits.clone(), Tensor::zeros(&[4], DType::F32).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Int32/Int64 class labels of shape [4]"),
        "{err}"
    );
    let err = sce
        .call(std::slice::from_ref(&logits))
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected 2 inputs"), "{err}");
    let dense = SoftmaxCrossEntropyWithLogits::new(false, Reduction::Mean);
    assert!(
        dense
            .call(&[logits.clone(), Tensor::zeros(&[4, 2], DType::F32).unwrap()])
            .is_err()
    );
    let bad_w = CrossEntropyLoss::with_options(
        Some(Tensor::ones(&[2], DType::F32).unwrap()),
        -100,
        Reduction::Mean,
        0.0,
    )
    .unwrap();
    let labels = Tensor::from_vec(vec![0i32, 1, 2, 0], &[4]).unwrap();
    let err = bad_w.call(&[logits, labels]).unwrap_err().to_string();
    assert!(
        err.contains("weight must be") && err.contains("[3]"),
        "{err}"
    );
    assert!(CrossEntropyLoss::with_options(None, -100, Reduction::Mean, 1.5).is_err());
    assert_eq!(Reduction::parse("sum").unwrap(), Reduction::Sum);
    assert!(Reduction::parse("avg").is_err());
}
