//! The hierarchical-occlusion counterfactual (MindInsight's rules): which square region,
//! shown alone on a blurred copy of the image, still keeps the target's confidence above
//! 0.5. Windows of the first layer have half the image's shorter side (at least
//! `min_side`, 28 pixels, and at most the image), each next layer halves the side and
//! searches inside the previous layer's best window, for up to 3 layers while the side
//! stays at least `min_side`; windows move by a fifth of their side. The answer is the
//! last layer's most confident window above the threshold.
//!
//! ```
//! use spore_xai::counterfactual::window_sides;
//! assert_eq!(window_sides(224, 28, 3), vec![112, 56, 28]);
//! assert_eq!(window_sides(32, 28, 3), vec![28]);
//! ```

use std::sync::Arc;

use spore_core::{Error, Result, Tensor};
use spore_nn::cell::Cell;

use crate::metrics::blur;
use crate::perturbation::{Activation, probabilities};

/// The window side of each layer for an image whose shorter side is `short`.
pub fn window_sides(short: usize, min_side: usize, layers: usize) -> Vec<usize> {
    let mut sides = vec![];
    let mut side = short / 2;
    if side < min_side {
        side = min_side.min(short);
    }
    while sides.len() < layers && side >= min_side.min(short) && side > 0 {
        sides.push(side);
        if side / 2 < min_side {
            break;
        }
        side /= 2;
    }
    sides
}

/// A square region of the image.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Region {
    pub top: usize,
    pub left: usize,
    pub side: usize,
    /// The target's confidence with only this region shown.
    pub confidence: f32,
}

/// The counterfactual search.
pub struct HierarchicalOcclusion {
    net: Arc<dyn Cell>,
    threshold: f32,
    min_side: usize,
    layers: usize,
    activation: Activation,
}

impl HierarchicalOcclusion {
    /// MindInsight's settings: confidence above 0.5, windows of at least 28 pixels, 3
    /// layers, softmax.
    pub fn new(net: Arc<dyn Cell>) -> HierarchicalOcclusion {
        HierarchicalOcclusion {
            net,
            threshold: 0.5,
            min_side: 28,
            layers: 3,
            activation: Activation::Softmax,
        }
    }

    pub fn min_side(mut self, side: usize) -> HierarchicalOcclusion {
        self.min_side = side.max(1);
        self
    }

    /// The smallest region found for `target` in `input` (`[1, C, H, W]`), and the image
    /// showing only it; `None` when no first-layer window keeps the confidence.
    pub fn search(&self, input: &Tensor, target: usize) -> Result<Option<(Region, Tensor)>> {
        let s = input.shape().to_vec();
        let [1, c, h, w] = s[..] else {
            return Err(Error::invalid(format!(
                "HierarchicalOcclusion: expected one input [1, C, H, W], got {s:?}"
            )));
        };
        if c * h * w == 0 {
            return Err(Error::invalid(format!(
                "HierarchicalOcclusion: the input {s:?} is empty"
            )));
        }
        let x = input.to_vec::<f32>()?;
        let blurred = blur(&x, c, h, w, (h.min(w) as f64 / 8.0).max(0.5));
        let show = |r: &Region| -> Vec<f32> {
            let mut img = blurred.clone();
            for ch in 0..c {
                for y in r.top..r.top + r.side {
                    let row = ch * h * w + y * w;
                    img[row + r.left..row + r.left + r.side]
                        .copy_from_slice(&x[row + r.left..row + r.left + r.side]);
                }
            }
            img
        };
        let (mut area_top, mut area_left, mut area_side_h, mut area_side_w) = (0, 0, h, w);
        let mut best: Option<Region> = None;
        for side in window_sides(h.min(w), self.min_side, self.layers) {
            if side > area_side_h || side > area_side_w {
                break;
            }
            let stride = (side / 5).max(1);
            let positions = |len: usize| -> Vec<usize> {
                let mut v: Vec<usize> = (0..=len - side).step_by(stride).collect();
                if v.last() != Some(&(len - side)) {
                    v.push(len - side);
                }
                v
            };
            let mut windows = vec![];
            for dy in positions(area_side_h) {
                for dx in positions(area_side_w) {
                    windows.push(Region {
                        top: area_top + dy,
                        left: area_left + dx,
                        side,
                        confidence: 0.0,
                    });
                }
            }
            let images: Vec<f32> = windows.iter().flat_map(show).collect();
            let p = probabilities(&self.net, &images, &s, target, self.activation, 64)?;
            let found = windows
                .into_iter()
                .zip(p)
                .filter(|(_, q)| *q > self.threshold)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(r, q)| Region { confidence: q, ..r });
            match found {
                Some(r) => {
                    (area_top, area_left, area_side_h, area_side_w) =
                        (r.top, r.left, r.side, r.side);
                    best = Some(r);
                }
                None => break,
            }
        }
        match best {
            Some(r) => Ok(Some((r, Tensor::from_vec(show(&r), &s)?))),
            None => Ok(None),
        }
    }
}
