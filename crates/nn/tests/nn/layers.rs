//! Each layer's forward and backward against the frozen JAX references in
//! `fixtures/layers.safetensors`, plus behaviour the references do not cover.

use std::sync::Arc;

use spore_core::ops::PadMode;
use spore_core::{DType, Tensor, value_and_grad};
use spore_nn::checkpoint::load_param_into_net;
use spore_nn::prelude::*;

use super::{assert_close, fixture, serial};

/// Loads the case's parameters into `cell`, runs forward and `value_and_grad` of
/// `sum(y * dy)`, and compares y, dx and every trainable parameter's gradient.
fn check(cell: Arc<dyn Cell>, case: &str) -> spore_nn::checkpoint::ParamDict {
    let f = fixture("layers.safetensors", case);
    let report = load_param_into_net(&*cell, &f).unwrap();
    let trainable: Vec<(String, spore_core::Parameter)> = cell
        .parameters_and_names()
        .into_iter()
        .filter(|(_, p)| p.requires_grad())
        .collect();
    assert!(
        report
            .missing
            .iter()
            .all(|m| !trainable.iter().any(|(n, _)| n == m)),
        "{case}: trainable parameters missing from the fixture: {:?}",
        report.missing
    );
    let x = f["x"].clone();
    let dy = f["dy"].clone();
    let weights: Vec<Tensor> = trainable.iter().map(|(_, p)| p.value()).collect();
    let c = cell.clone();
    let objective = move |inp: &[Tensor]| -> spore_core::Result<Vec<Tensor>> {
        let y = c.call(inp)?.remove(0);
        Ok(vec![y.mul(&dy)?.sum(&[], false)?, y])
    };
    let float_input = x.dtype().is_float();
    let positions: &[usize] = &[0];
    let out =
        value_and_grad(objective, float_input.then_some(positions), &weights, true)(&[x]).unwrap();
    let tol = 1e-4;
    assert_close(&out.aux[0], &f["y"], tol, &format!("{case}: y"));
    if float_input {
        assert_close(&out.input_grads[0], &f["dx"], tol, &format!("{case}: dx"));
    }
    for ((name, _), g) in trainable.iter().zip(&out.weight_grads) {
        let expected = &f[&format!("d{name}")];
        assert_close(g, expected, tol, &format!("{case}: d{name}"));
    }
    f
}

#[test]
fn dense_matches_reference() {
    let _s = serial();
    check(Dense::new(5, 3).unwrap(), "dense");
}

#[test]
fn conv2d_matches_reference_for_each_pad_mode_stride_dilation_and_group() {
    let _s = serial();
    let valid = Conv2d::config(3, 4, 3)
        .pad_mode(PadMode::Valid)
        .has_bias(true)
        .build()
        .unwrap();
    check(valid, "conv_valid_bias");
    check(
        Conv2d::config(3, 4, 3).stride(2).build().unwrap(),
        "conv_same_s2",
    );
    let padded = Conv2d::config(2, 3, 3)
        .pad_mode(PadMode::Pad([1, 2, 0, 1]))
        .dilation(2)
        .build()
        .unwrap();
    check(padded, "conv_pad_dilation");
    let grouped = Conv2d::config(4, 6, 3)
        .group(2)
        .pad_mode(PadMode::Valid)
        .has_bias(true)
        .build()
        .unwrap();
    check(grouped, "conv_group");
}

#[test]
fn pooling_matches_reference() {
    let _s = serial();
    check(MaxPool2d::new(2, 2).unwrap(), "maxpool_valid");
    check(
        MaxPool2d::with_pad_mode(3, 2, PadMode::Same).unwrap(),
        "maxpool_same",
    );
    check(AvgPool2d::new(2, 2).unwrap(), "avgpool_valid");
    check(
        AvgPool2d::with_pad_mode(3, 2, PadMode::Same).unwrap(),
        "avgpool_same",
    );
}

#[test]
fn batchnorm_training_matches_reference_and_updates_moving_statistics() {
    let _s = serial();
    let bn = BatchNorm2d::new(3).unwrap();
    bn.set_train(true);
    let f = check(bn.clone(), "bn_train");
    assert_close(
        &bn.moving_mean.value(),
        &f["new_moving_mean"],
        1e-5,
        "moving_mean",
    );
    assert_close(
        &bn.moving_variance.value(),
        &f["new_moving_variance"],
        1e-5,
        "moving_variance (unbiased)",
    );
}

#[test]
fn batchnorm_evaluation_uses_moving_statistics_and_leaves_them() {
    let _s = serial();
    let bn = BatchNorm2d::new(3).unwrap();
    let f = check(bn.clone(), "bn_eval");
    assert_close(&bn.moving_mean.value(), &f["moving_mean"], 0.0, "unchanged");
    assert!(!bn.moving_mean.requires_grad() && bn.gamma.requires_grad());
}

#[test]
fn activations_match_reference() {
    let _s = serial();
    check(ReLU::new(), "relu");
    check(Sigmoid::new(), "sigmoid");
    check(Tanh::new(), "tanh");
    check(GELU::new(), "gelu_tanh");
    check(GELU::with_approximate(false), "gelu_erf");
    check(Softmax::new(), "softmax");
}

#[test]
fn embedding_matches_reference() {
    let _s = serial();
    check(Embedding::new(10, 4).unwrap(), "embedding");
}

#[test]
fn layernorm_matches_reference() {
    let _s = serial();
    check(LayerNorm::new(&[6]).unwrap(), "layernorm_last");
    check(
        LayerNorm::with_options(&[3, 6], 1, 1, 1e-7).unwrap(),
        "layernorm_axis1",
    );
}

#[test]
fn embedding_one_hot_and_padding_idx() {
    let _s = serial();
    spore_core::rng::set_seed(5);
    let a = Embedding::config(6, 3).padding_idx(2).build().unwrap();
    let table = a.embedding_table.value().to_vec::<f32>().unwrap();
    assert_eq!(&table[6..9], &[0.0, 0.0, 0.0], "padding row starts at zero");
    let b = Embedding::config(6, 3).use_one_hot(true).build().unwrap();
    b.embedding_table
        .assign(&a.embedding_table.value())
        .unwrap();
    let ids = Tensor::from_vec(vec![1i32, 5, 1, 2], &[2, 2]).unwrap();
    let (ya, yb) = (a.call1(&ids).unwrap(), b.call1(&ids).unwrap());
    assert_close(&yb, &ya, 1e-6, "one-hot lookup");
    let err = a
        .call1(&Tensor::ones(&[2], DType::F32).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("Int32 or Int64"), "{err}");
}

#[test]
fn dense_accepts_higher_rank_inputs_and_reports_bad_shapes() {
    let _s = serial();
    let fc = Dense::new(4, 2).unwrap();
    let x = Tensor::randn(&[2, 3, 4], DType::F32, Some(1)).unwrap();
    let y = fc.call1(&x).unwrap();
    assert_eq!(y.shape(), &[2, 3, 2]);
    let flat = fc.call1(&x.reshape(&[6, 4]).unwrap()).unwrap();
    assert_close(&y.reshape(&[6, 2]).unwrap(), &flat, 1e-6, "rank 3 vs 2");
    let err = fc
        .call1(&Tensor::ones(&[2, 5], DType::F32).unwrap())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("Dense") && msg.contains("in_channels=4") && msg.contains("[2, 5]"),
        "{msg}"
    );
    let with_act = Dense::config(4, 2).activation(ReLU::new()).build().unwrap();
    let y = with_act.call1(&x).unwrap().to_vec::<f32>().unwrap();
    assert!(y.iter().all(|&v| v >= 0.0));
}

#[test]
fn layer_errors_name_the_layer_and_the_shapes() {
    let _s = serial();
    let net = LeNet5::new(10).unwrap();
    net.parameters_and_names(); // registration names the children
    let err = net
        .call1(&Tensor::ones(&[1, 3, 32, 32], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Conv2d 'conv1'") && err.contains("[1, 3, 32, 32]"),
        "{err}"
    );
    let bad = Conv2d::config(3, 4, 3)
        .group(2)
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(bad.contains("group=2"), "{bad}");
    assert!(Dense::new(0, 3).is_err());
    assert!(Dropout::new(1.0).is_err());
    assert!(MaxPool2d::new(0, 1).is_err());
    let bn = BatchNorm2d::new(3).unwrap();
    let e = bn
        .call1(&Tensor::ones(&[2, 4, 3, 3], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("BatchNorm2d") && e.contains("3 channels"), "{e}");
    let ln = LayerNorm::new(&[5]).unwrap();
    assert!(
        ln.call1(&Tensor::ones(&[2, 4], DType::F32).unwrap())
            .is_err()
    );
    let e = ReLU::new()
        .call(&[
            Tensor::ones(&[1], DType::F32).unwrap(),
            Tensor::ones(&[1], DType::F32).unwrap(),
        ])
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected 1 input, got 2"), "{e}");
}

#[test]
fn flatten_and_dropout() {
    let _s = serial();
    let x = Tensor::ones(&[2, 3, 4, 5], DType::F32).unwrap();
    assert_eq!(Flatten::new().call1(&x).unwrap().shape(), &[2, 60]);
    assert_eq!(
        Flatten::with_dims(0, 1).call1(&x).unwrap().shape(),
        &[6, 4, 5]
    );
    assert!(Flatten::with_dims(3, 1).call1(&x).is_err());

    let drop = Dropout::new(0.25).unwrap();
    let ones = Tensor::ones(&[4000], DType::F32).unwrap();
    assert_eq!(
        drop.call1(&ones).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0; 4000]
    );
    drop.set_train(true);
    spore_core::rng::set_seed(11);
    let a = drop.call1(&ones).unwrap().to_vec::<f32>().unwrap();
    let dropped = a.iter().filter(|&&v| v == 0.0).count();
    assert!((850..1150).contains(&dropped), "{dropped} of 4000 dropped");
    assert!(a.iter().all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
    spore_core::rng::set_seed(11);
    let b = drop.call1(&ones).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b, "the same seed gives the same mask");
}

#[test]
fn batchnorm1d_normalises_per_feature() {
    let _s = serial();
    let bn = BatchNorm1d::new(3).unwrap();
    bn.set_train(true);
    let x = Tensor::randn(&[8, 3], DType::F32, Some(3))
        .unwrap()
        .mul_scalar(4.0)
        .unwrap();
    let y = bn.call1(&x).unwrap();
    let mean = y.mean(&[0], false).unwrap().to_vec::<f32>().unwrap();
    let var = y.var(&[0], false, 0).unwrap().to_vec::<f32>().unwrap();
    assert!(mean.iter().all(|m| m.abs() < 1e-5), "{mean:?}");
    assert!(var.iter().all(|v| (v - 1.0).abs() < 1e-3), "{var:?}");
    let e = bn
        .call1(&Tensor::ones(&[1, 3], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than one value per channel"), "{e}");
}

#[test]
fn containers_run_in_order_and_cell_list_is_not_callable() {
    let _s = serial();
    let seq = SequentialCell::new(vec![
        Flatten::new(),
        Dense::new(12, 4).unwrap(),
        ReLU::new(),
    ]);
    assert_eq!(seq.len(), 3);
    let y = seq
        .call1(&Tensor::ones(&[2, 3, 2, 2], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[2, 4]);
    let list = CellList::new(vec![Dense::new(2, 2).unwrap(), Dense::new(2, 2).unwrap()]);
    let names: Vec<String> = list
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["0.weight", "0.bias", "1.weight", "1.bias"]);
    assert!(
        list.call1(&Tensor::ones(&[1, 2], DType::F32).unwrap())
            .is_err()
    );
    let first = list.get(0).unwrap();
    assert_eq!(
        first
            .call1(&Tensor::ones(&[1, 2], DType::F32).unwrap())
            .unwrap()
            .shape(),
        &[1, 2]
    );
}

/// `Conv2dTranspose` is the adjoint of `Conv2d` with the same weight and geometry
/// (`<up(y), x> = <y, conv(x)>`), sizes its output by `pad_mode` as MindSpore does, adds
/// its bias per channel, and names a wrong input.
#[test]
fn conv2d_transpose_is_the_adjoint_of_conv2d_and_sizes_its_output_by_pad_mode() {
    let _s = serial();
    let up = Conv2dTranspose::config(6, 4, 3)
        .stride(2)
        .pad_mode(PadMode::Pad([1, 1, 1, 1]))
        .output_padding(1)
        .build()
        .unwrap();
    let conv = Conv2d::config(4, 6, 3)
        .stride(2)
        .pad_mode(PadMode::Pad([1, 1, 1, 1]))
        .build()
        .unwrap();
    conv.weight.assign(&up.weight.value()).unwrap();
    let x = Tensor::randn(&[2, 4, 8, 8], DType::F32, Some(1)).unwrap();
    let y = Tensor::randn(&[2, 6, 4, 4], DType::F32, Some(2)).unwrap();
    let dot = |a: &Tensor, b: &Tensor| a.mul(b).unwrap().sum(&[], false).unwrap().item().unwrap();
    let up_y = up.call1(&y).unwrap();
    assert_eq!(up_y.shape(), &[2, 4, 8, 8]);
    let (left, right) = (dot(&up_y, &x), dot(&y, &conv.call1(&x).unwrap()));
    assert!(
        (left - right).abs() <= 1e-4 * (1.0 + right.abs()),
        "{left} vs {right}"
    );
    let same = Conv2dTranspose::config(6, 4, 3)
        .stride(2)
        .has_bias(true)
        .build()
        .unwrap();
    let out = same.call1(&y).unwrap();
    assert_eq!(out.shape(), &[2, 4, 8, 8], "`same`: input * stride");
    let no_bias = same
        .call1(&y)
        .unwrap()
        .sub(
            &same
                .bias
                .as_ref()
                .unwrap()
                .value()
                .reshape(&[1, 4, 1, 1])
                .unwrap(),
        )
        .unwrap();
    let plain = y
        .conv_transpose2d(&same.weight.value(), same.options())
        .unwrap();
    assert_close(&no_bias, &plain, 1e-6, "bias per channel");
    let valid = Conv2dTranspose::config(6, 4, 3)
        .stride(2)
        .pad_mode(PadMode::Valid)
        .build()
        .unwrap();
    assert_eq!(
        valid.call1(&y).unwrap().shape(),
        &[2, 4, 9, 9],
        "`valid`: (4 - 1) * 2 + 3"
    );
    let err = valid.call1(&x).unwrap_err().to_string();
    assert!(
        err.contains("Conv2dTranspose") && err.contains("in_channels = 6"),
        "{err}"
    );
}
