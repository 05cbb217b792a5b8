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

#[test]
fn resnet50_has_torchvisions_25_557_032_parameters_and_classifies_imagenet_shaped_images() {
    let _s = serial();
    let net = ImageNetResNet::resnet50(1000).unwrap();
    assert_eq!(count(&net.trainable_params()), 25_557_032);
    let names: Vec<String> = net
        .parameters_and_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    // torchvision's names, so a converted checkpoint maps one to one.
    assert!(
        names.contains(&"layer4.2.conv3.weight".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"layer2.0.downsample.0.weight".to_string()));
    net.set_train(false);
    // 7x7/2 stem, 3x3/2 pool and three stride-2 stages: 64 -> 2 pixels before the pool.
    let y = net
        .call1(&Tensor::ones(&[1, 3, 64, 64], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[1, 1000]);
}

fn tiny_bert() -> BertConfig {
    BertConfig {
        vocab_size: 40,
        hidden: 16,
        layers: 2,
        heads: 4,
        feed_forward: 24,
        max_positions: 12,
        num_classes: 3,
    }
}

#[test]
fn the_bert_encoder_has_berts_parameters() {
    let _s = serial();
    let (v, h, l, f, p, c) = (30_522, 256, 4, 1024, 512, 2);
    let layer = 4 * (h * h + h) + h * f + f + f * h + h + 2 * 2 * h;
    let expected = v * h + p * h + 2 * h + l * layer + h * h + h + h * c + c;
    let net = BertClassifier::new(&BertConfig::small()).unwrap();
    assert_eq!(count(&net.trainable_params()), expected);
    let bad = BertConfig {
        heads: 5,
        ..tiny_bert()
    };
    let err = BertClassifier::new(&bad).err().unwrap().to_string();
    assert!(err.contains("divisible by heads"), "{err}");
}

/// Padding (id 0) is masked out of attention: trailing padding changes no logit, while
/// the same ids unmasked (a real token in its place) do.
#[test]
fn bert_padding_tokens_are_masked_out_of_attention() {
    let _s = serial();
    let net = BertClassifier::new(&tiny_bert()).unwrap();
    let run = |ids: Vec<i32>| {
        let n = ids.len();
        net.call1(&Tensor::from_vec(ids, &[1, n]).unwrap())
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let short = run(vec![5, 7, 9]);
    let padded = run(vec![5, 7, 9, 0, 0, 0]);
    let unmasked = run(vec![5, 7, 9, 1, 1, 1]);
    for (a, b) in short.iter().zip(&padded) {
        assert!((a - b).abs() <= 1e-5, "{short:?} vs {padded:?}");
    }
    let moved = short.iter().zip(&unmasked).map(|(a, b)| (a - b).abs());
    assert!(
        moved.fold(0.0, f32::max) > 1e-4,
        "{short:?} vs {unmasked:?}"
    );
    let long = Tensor::from_vec(vec![1i32; 13], &[1, 13]).unwrap();
    let err = net.call1(&long).err().unwrap().to_string();
    assert!(err.contains("longer than the 12 positions"), "{err}");
    // int64 ids are the same tokens (and the same mask).
    let wide = Tensor::from_vec(vec![5i64, 7, 9, 0, 0, 0], &[1, 6]).unwrap();
    let from_i64 = net.call1(&wide).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(from_i64, padded);
    let floats = Tensor::ones(&[1, 3], spore_core::DType::F32).unwrap();
    let err = net.call1(&floats).err().unwrap().to_string();
    assert!(err.contains("int32 or int64 token ids"), "{err}");
}

#[test]
fn attention_layers_refuse_head_counts_that_do_not_divide_the_width() {
    let _s = serial();
    for (hidden, heads) in [(16, 0), (16, 5), (0, 4)] {
        let err = spore_nn::zoo::SelfAttention::new(hidden, heads)
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("positive multiple of heads"),
            "{err}"
        );
    }
    let cfg = BertConfig {
        heads: 3,
        ..tiny_bert()
    };
    assert!(spore_nn::zoo::EncoderLayer::new(&cfg).is_err());
}
