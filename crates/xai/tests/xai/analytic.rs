//! Cases whose answer is known: a linear model's gradient is its weights; Integrated
//! Gradients add up to f(x) - f(0); one-pixel Occlusion is a finite difference;
//! Deconvolution and GuidedBackprop on a hand-built ReLU network; GradCAM against its
//! formula in f64.

use std::sync::Arc;

use spore_core::ops::PadMode;
use spore_core::{DType, Result, Tensor};
use spore_nn::cell::{Cell, CellBase, CellCall, child};
use spore_nn::prelude::*;
use spore_xai::{Backprop, Explainer, GradCam, Gradient, IntegratedGradients, Occlusion};

/// `x.reshape([N, -1]) · Wᵀ + b` for `[N, 1, 2, 3]` inputs.
struct Linear {
    base: CellBase,
    fc: Arc<Dense>,
}

impl Cell for Linear {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let n = inputs[0].shape()[0];
        Ok(vec![self.fc.call1(&inputs[0].reshape(&[n, 6])?)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("fc", &self.fc)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Linear"
    }
}

fn set(p: &spore_core::Parameter, v: Vec<f32>) {
    let shape = p.tensor_type().shape.to_vec();
    p.store(Tensor::from_vec(v, &shape).unwrap());
}

#[test]
fn gradient_of_a_linear_model_is_its_weights() {
    let fc = Dense::new(6, 3).unwrap();
    let w: Vec<f32> = (0..18).map(|i| (i as f32 - 8.5) * 0.25).collect();
    set(&fc.weight, w.clone());
    let net: Arc<dyn Cell> = Arc::new(Linear {
        base: CellBase::new(),
        fc,
    });
    let x = Tensor::randn(&[2, 1, 2, 3], DType::F32, Some(1)).unwrap();
    let map = Gradient::new(net)
        .explain(&x, &[2, 0])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let expect: Vec<f32> = w[12..18].iter().chain(&w[0..6]).map(|v| v.abs()).collect();
    assert_eq!(map, expect);
}

#[test]
fn integrated_gradients_add_up_to_the_change_of_the_score() {
    spore_core::rng::set_seed(2);
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    let x = Tensor::randn(&[2, 1, 32, 32], DType::F32, Some(3)).unwrap();
    let ig = IntegratedGradients::new(net.clone());
    let attr = ig.attribute(&x, &[4, 7]).unwrap().to_vec::<f32>().unwrap();
    let f = net.call1(&x).unwrap().to_vec::<f32>().unwrap();
    let f0 = net.call1(&x.zeros_like()).unwrap().to_vec::<f32>().unwrap();
    for (n, t) in [(0usize, 4usize), (1, 7)] {
        let total: f64 = attr[n * 1024..(n + 1) * 1024]
            .iter()
            .map(|&v| v as f64)
            .sum();
        let change = (f[n * 10 + t] - f0[n * 10 + t]) as f64;
        assert!(
            (total - change).abs() <= 1e-3,
            "input {n}: attributions sum to {total}, the score changed by {change}"
        );
    }
}

#[test]
fn one_pixel_occlusion_is_the_finite_difference() {
    spore_core::rng::set_seed(4);
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    let x = Tensor::randn(&[1, 1, 32, 32], DType::F32, Some(5)).unwrap();
    let map = Occlusion::new(net.clone())
        .window(1, 1)
        .explain(&x, &[3])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let prob = |v: &[f32]| -> f32 {
        let t = Tensor::from_vec(v.to_vec(), &[1, 1, 32, 32]).unwrap();
        net.call1(&t)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()[3]
    };
    let xv = x.to_vec::<f32>().unwrap();
    let p = prob(&xv);
    for pixel in [0usize, 33, 500, 1023] {
        let mut occluded = xv.clone();
        occluded[pixel] = 0.0;
        let diff = p - prob(&occluded);
        assert!(
            (map[pixel] - diff).abs() <= 1e-6,
            "pixel {pixel}: {} vs {diff}",
            map[pixel]
        );
    }
}

/// `v · relu(W x)` for `[N, 1, 1, 2]` inputs: two hidden units, one score (plus a zero
/// second class).
struct Tiny {
    base: CellBase,
    hidden: Arc<Dense>,
    out: Arc<Dense>,
}

impl Cell for Tiny {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let n = inputs[0].shape()[0];
        let h = self.hidden.call1(&inputs[0].reshape(&[n, 2])?)?.relu()?;
        Ok(vec![self.out.call1(&h)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("hidden", &self.hidden), child("out", &self.out)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Tiny"
    }
}

#[test]
fn deconvolution_and_guided_backprop_follow_their_relu_rules() {
    // W = [[1, 2], [3, -1]], v = [-2, 1] (class 0), x = (1, 1): W x = (3, 2), both on.
    // A second input x = (1, -2): W x = (-3, 5): unit 0 off.
    let hidden = Dense::config(2, 2).has_bias(false).build().unwrap();
    set(&hidden.weight, vec![1.0, 2.0, 3.0, -1.0]);
    let out = Dense::config(2, 2).has_bias(false).build().unwrap();
    set(&out.weight, vec![-2.0, 1.0, 0.0, 0.0]);
    let net: Arc<dyn Cell> = Arc::new(Tiny {
        base: CellBase::new(),
        hidden,
        out,
    });
    let x = Tensor::from_vec(vec![1.0f32, 1.0, 1.0, -2.0], &[2, 1, 1, 2]).unwrap();
    let map = |e: Backprop| e.input_gradient(&x, &[0]).unwrap().to_vec::<f32>().unwrap();
    // Gradient: Wᵀ (v ⊙ on). Input 1: (-2·1 + 1·3, -2·2 + 1·-1) = (1, -5); input 2: (3, -1).
    assert_eq!(map(Gradient::new(net.clone())), vec![1.0, -5.0, 3.0, -1.0]);
    // Deconvolution: Wᵀ relu(v) = (3, -1) for both inputs.
    assert_eq!(
        map(Backprop::deconvolution(net.clone())),
        vec![3.0, -1.0, 3.0, -1.0]
    );
    // GuidedBackprop: Wᵀ (relu(v) ⊙ on): input 1 (3, -1); input 2 (3, -1) (unit 0 is off
    // and relu(v0) = 0 anyway); the maps are the absolute values.
    assert_eq!(
        map(Backprop::guided(net.clone())),
        vec![3.0, -1.0, 3.0, -1.0]
    );
    let guided = Backprop::guided(net)
        .explain(&x, &[0])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(guided, vec![3.0, 1.0, 3.0, 1.0]);
}

#[test]
fn guided_backprop_masks_by_the_forward_pass_where_deconvolution_does_not() {
    // v = [2, 1]: both gradients positive; input 2 has unit 0 off.
    let hidden = Dense::config(2, 2).has_bias(false).build().unwrap();
    set(&hidden.weight, vec![1.0, 2.0, 3.0, -1.0]);
    let out = Dense::config(2, 2).has_bias(false).build().unwrap();
    set(&out.weight, vec![2.0, 1.0, 0.0, 0.0]);
    let net: Arc<dyn Cell> = Arc::new(Tiny {
        base: CellBase::new(),
        hidden,
        out,
    });
    let x = Tensor::from_vec(vec![1.0f32, -2.0], &[1, 1, 1, 2]).unwrap();
    let g = |e: Backprop| e.input_gradient(&x, &[0]).unwrap().to_vec::<f32>().unwrap();
    // Deconvolution ignores the mask: Wᵀ (2, 1) = (5, 3). Guided keeps only unit 1: (3, -1).
    assert_eq!(g(Backprop::deconvolution(net.clone())), vec![5.0, 3.0]);
    assert_eq!(g(Backprop::guided(net)), vec![3.0, -1.0]);
}

/// conv(1 → 3, 3x3, pad 1) → ReLU → mean over H, W → dense(3 → 2).
struct SmallCnn {
    base: CellBase,
    conv: Arc<Conv2d>,
    fc: Arc<Dense>,
}

impl Cell for SmallCnn {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let a = self.conv.call1(&inputs[0])?.relu()?;
        Ok(vec![self.fc.call1(&a.mean(&[2, 3], false)?)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("conv", &self.conv), child("fc", &self.fc)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "SmallCnn"
    }
}

#[test]
fn gradcam_equals_its_formula_in_f64() {
    spore_core::rng::set_seed(6);
    let conv = Conv2d::config(1, 3, 3)
        .pad_mode(PadMode::Pad([1; 4]))
        .has_bias(false)
        .build()
        .unwrap();
    let fc = Dense::config(3, 2).has_bias(false).build().unwrap();
    let (wc, wf) = (
        conv.weight.stored().to_vec::<f32>().unwrap(),
        fc.weight.stored().to_vec::<f32>().unwrap(),
    );
    let net: Arc<dyn Cell> = Arc::new(SmallCnn {
        base: CellBase::new(),
        conv,
        fc,
    });
    let (h, w) = (5usize, 6usize);
    let x = Tensor::randn(&[1, 1, h, w], DType::F32, Some(7)).unwrap();
    let xv: Vec<f64> = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
    let target = 1;
    let got = GradCam::new(net, "conv")
        .unwrap()
        .explain(&x, &[target])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    // A = conv(x) in f64; ∂score/∂A[k] = Wf[t, k] · [A > 0] / (h w); α_k = its mean.
    let mut a = vec![0f64; 3 * h * w];
    for k in 0..3 {
        for i in 0..h {
            for j in 0..w {
                let mut s = 0.0;
                for di in 0..3 {
                    for dj in 0..3 {
                        let (y, xx) = (i as isize + di as isize - 1, j as isize + dj as isize - 1);
                        if y >= 0 && xx >= 0 && (y as usize) < h && (xx as usize) < w {
                            s += wc[k * 9 + di * 3 + dj] as f64 * xv[y as usize * w + xx as usize];
                        }
                    }
                }
                a[k * h * w + i * w + j] = s;
            }
        }
    }
    let hw = (h * w) as f64;
    let mut cam = vec![0f64; h * w];
    for k in 0..3 {
        let plane = &a[k * h * w..(k + 1) * h * w];
        let alpha: f64 = plane
            .iter()
            .map(|&v| {
                if v > 0.0 {
                    wf[target * 3 + k] as f64 / hw
                } else {
                    0.0
                }
            })
            .sum::<f64>()
            / hw;
        for (c, v) in cam.iter_mut().zip(plane) {
            *c += alpha * v;
        }
    }
    // The layer's map is already the input's size: resizing leaves it as it is.
    for (g, c) in got.iter().zip(&cam) {
        assert!(
            (*g as f64 - c.max(0.0)).abs() <= 1e-5,
            "{g} vs {}",
            c.max(0.0)
        );
    }
}
