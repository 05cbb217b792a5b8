//! The metrics' edge cases, the counterfactual on a planted patch, and the sanity check.

use std::sync::Arc;

use spore_core::{DType, Result, Tensor};
use spore_nn::cell::{Cell, CellBase, CellCall, child};
use spore_nn::prelude::*;
use spore_xai::HierarchicalOcclusion;
use spore_xai::common::Explainer;
use spore_xai::metrics::{Faithfulness, class_sensitivity, faithfulness, localization, robustness};
use spore_xai::perturbation::Activation;
use spore_xai::sanity::model_randomization;
use spore_xai::{GradCam, Gradient};

/// The same map whatever the target and input: the input's first channel.
struct SameMap;

impl Explainer for SameMap {
    fn name(&self) -> String {
        "SameMap".into()
    }
    fn explain(&self, inputs: &Tensor, _targets: &[usize]) -> Result<Tensor> {
        let s = inputs.shape();
        let v = inputs.to_vec::<f32>()?;
        Tensor::from_vec(v[..s[2] * s[3]].to_vec(), &[1, 1, s[2], s[3]])
    }
}

/// A constant map.
struct Constant;

impl Explainer for Constant {
    fn name(&self) -> String {
        "Constant".into()
    }
    fn explain(&self, inputs: &Tensor, _targets: &[usize]) -> Result<Tensor> {
        let s = inputs.shape();
        Tensor::ones(&[1, 1, s[2], s[3]], DType::F32)
    }
}

#[test]
fn identical_maps_for_two_classes_give_class_sensitivity_zero() {
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    let x = Tensor::randn(&[1, 1, 32, 32], DType::F32, Some(1)).unwrap();
    assert_eq!(class_sensitivity(&net, &SameMap, &x).unwrap(), 0.0);
    // Gradient gives different maps to different classes.
    let g = class_sensitivity(&net, &Gradient::new(net.clone()), &x).unwrap();
    assert!(g > 0.0 && g <= 1.0, "{g}");
}

#[test]
fn a_constant_explainer_is_perfectly_robust() {
    let x = Tensor::randn(&[1, 1, 32, 32], DType::F32, Some(2)).unwrap();
    assert_eq!(robustness(&Constant, &x, 0, 10, 0.1, 0).unwrap(), 1.0);
    let r = robustness(&SameMap, &x, 0, 10, 0.1, 0).unwrap();
    assert!(r < 1.0, "a map that follows the noise is less robust: {r}");
}

#[test]
fn saliency_peaking_inside_the_mask_wins_the_pointing_game() {
    let mut map = vec![0.0f32; 32 * 32];
    map[10 * 32 + 12] = 1.0;
    map[20 * 32 + 3] = 0.4;
    let mut mask = vec![false; 32 * 32];
    for y in 8..14 {
        for x in 10..16 {
            mask[y * 32 + x] = true;
        }
    }
    let t = Tensor::from_vec(map.clone(), &[1, 1, 32, 32]).unwrap();
    let (pg, iosr) = localization(&t, &mask).unwrap();
    assert_eq!((pg, iosr), (1.0, 1.0));
    // Far from the mask (more than 15 pixels): a miss.
    map[10 * 32 + 12] = 0.0;
    map[31 * 32 + 31] = 1.0;
    let t = Tensor::from_vec(map, &[1, 1, 32, 32]).unwrap();
    assert_eq!(localization(&t, &mask).unwrap(), (0.0, 0.0));
}

/// Scores class 0 by the brightest 8x8 mean anywhere: a patch detector.
struct PatchDetector {
    base: CellBase,
    mean: Arc<Conv2d>,
}

impl Cell for PatchDetector {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let n = inputs[0].shape()[0];
        let c = self.mean.call1(&inputs[0])?;
        let m = c.reshape(&[n, c.numel() / n])?.max(&[1], true)?;
        // Class 0: 12 (m - 0.5); class 1: 0.
        let score = m.sub_scalar(0.5)?.mul_scalar(12.0)?;
        Ok(vec![Tensor::concat(&[&score, &score.zeros_like()], 1)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("mean", &self.mean)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "PatchDetector"
    }
}

#[test]
fn the_counterfactual_finds_a_planted_patch() {
    let mean = Conv2d::config(1, 1, 8)
        .pad_mode(spore_core::ops::PadMode::Valid)
        .has_bias(false)
        .build()
        .unwrap();
    mean.weight
        .store(Tensor::full(&[1, 1, 8, 8], 1.0 / 64.0, DType::F32).unwrap());
    let net: Arc<dyn Cell> = Arc::new(PatchDetector {
        base: CellBase::new(),
        mean,
    });
    let mut img = vec![0.1f32; 64 * 64];
    let (py, px) = (44usize, 9usize);
    for y in py..py + 8 {
        for x in px..px + 8 {
            img[y * 64 + x] = 1.0;
        }
    }
    let x = Tensor::from_vec(img, &[1, 1, 64, 64]).unwrap();
    let found = HierarchicalOcclusion::new(net)
        .min_side(16)
        .search(&x, 0)
        .unwrap();
    let (r, shown) = found.expect("the patch keeps the class");
    assert!(r.confidence > 0.5, "{r:?}");
    assert!(r.side <= 16, "searched down to the last layer: {r:?}");
    assert!(
        r.top <= py && py + 8 <= r.top + r.side && r.left <= px && px + 8 <= r.left + r.side,
        "the region {r:?} holds the patch at ({py}, {px})"
    );
    assert_eq!(shown.shape(), &[1, 1, 64, 64]);
}

#[test]
fn faithfulness_scores_are_in_range_and_a_right_map_beats_a_wrong_one() {
    let mean = Conv2d::config(1, 1, 8)
        .pad_mode(spore_core::ops::PadMode::Valid)
        .has_bias(false)
        .build()
        .unwrap();
    mean.weight
        .store(Tensor::full(&[1, 1, 8, 8], 1.0 / 64.0, DType::F32).unwrap());
    let net: Arc<dyn Cell> = Arc::new(PatchDetector {
        base: CellBase::new(),
        mean,
    });
    let mut img = vec![0.1f32; 64 * 64];
    let mut right = vec![0.0f32; 64 * 64];
    for y in 20..28 {
        for x in 30..38 {
            img[y * 64 + x] = 1.0;
            right[y * 64 + x] = 1.0;
        }
    }
    let wrong: Vec<f32> = right.iter().map(|v| 1.0 - v).collect();
    let x = Tensor::from_vec(img, &[1, 1, 64, 64]).unwrap();
    let map = |v: Vec<f32>| Tensor::from_vec(v, &[1, 1, 64, 64]).unwrap();
    for kind in [
        Faithfulness::Deletion,
        Faithfulness::Insertion,
        Faithfulness::Naive,
    ] {
        let good = faithfulness(
            &net,
            &x,
            0,
            &map(right.clone()),
            kind,
            16,
            Activation::Softmax,
        )
        .unwrap();
        let bad = faithfulness(
            &net,
            &x,
            0,
            &map(wrong.clone()),
            kind,
            16,
            Activation::Softmax,
        )
        .unwrap();
        assert!(
            (-1.0..=1.0).contains(&good) && (-1.0..=1.0).contains(&bad),
            "{kind:?}: {good} {bad}"
        );
        assert!(
            good > bad,
            "{kind:?}: the patch's map scores {good}, its complement {bad}"
        );
    }
}

#[test]
fn the_sanity_check_re_draws_each_layer_and_restores_the_weights() {
    spore_core::rng::set_seed(8);
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    let before: Vec<Vec<f32>> = net
        .trainable_params()
        .iter()
        .map(|p| p.stored().to_vec::<f32>().unwrap())
        .collect();
    let x = Tensor::randn(&[1, 1, 32, 32], DType::F32, Some(9)).unwrap();
    let cam = GradCam::new(net.clone(), "conv2").unwrap();
    let result = model_randomization(&net, &cam, &x, 3, 1).unwrap();
    let names: Vec<&str> = result.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["fc3", "fc2", "fc1", "conv2", "conv1"]);
    assert!(
        result.iter().all(|(_, r)| (-1.0..=1.0).contains(r)),
        "{result:?}"
    );
    let after: Vec<Vec<f32>> = net
        .trainable_params()
        .iter()
        .map(|p| p.stored().to_vec::<f32>().unwrap())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn empty_images_are_errors_not_panics() {
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    for shape in [[1usize, 0, 8, 8], [1, 1, 0, 8], [0, 1, 32, 32]] {
        let x = Tensor::zeros(&shape, DType::F32).unwrap();
        for e in [
            Box::new(spore_xai::Occlusion::new(net.clone())) as Box<dyn Explainer>,
            Box::new(spore_xai::Rise::new(net.clone()).masks(4)),
            Box::new(Gradient::new(net.clone())),
        ] {
            let err = e.explain(&x, &[0]).unwrap_err().to_string();
            assert!(err.contains("no empty axis"), "{}: {err}", e.name());
        }
    }
    let map = Tensor::zeros(&[2, 1, 4, 4], DType::F32).unwrap();
    assert!(
        localization(&map, &[false; 16]).is_err(),
        "two maps for one mask"
    );
}
