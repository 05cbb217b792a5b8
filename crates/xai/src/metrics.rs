//! Evaluating explanations (MindSpore XAI's benchmarks; every score is "higher is
//! better"):
//! - [`Faithfulness`]: does the map point at what the network uses? `Naive`: the Pearson
//!   correlation between the mean saliency of each of `bins` pixel groups (by rank) and
//!   the drop of the target's probability when that group alone is replaced by the
//!   baseline; `Deletion`: 1 − the area under the probability curve as pixels are replaced
//!   in decreasing saliency; `Insertion`: the area as pixels are restored onto the
//!   baseline in the same order. The baseline is the image blurred (Gaussian, σ = 1/8 of
//!   its shorter side), as in MindSpore XAI.
//! - [`localization`]: the pointing game (1 when the map's maximum lies within 15 pixels
//!   of the object's mask) and IoSR (the share of the salient region, saliency ≥ half the
//!   maximum, that lies inside the mask).
//! - [`class_sensitivity`]: (1 − ρ) / 2 for the Pearson correlation ρ between the maps of
//!   the most and the least probable classes: 0 when they are identical.
//! - [`robustness`]: 1 / (1 + the largest relative change of the map over `draws` noisy
//!   copies of the input): 1 for a map that noise does not change.
//!
//! ```
//! use spore_xai::metrics::{iosr, pearson, pointing_game};
//! assert!(pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5]) > 0.99);
//! let mask = [false, false, true, true];
//! assert_eq!(pointing_game(&[0.0, 0.1, 0.9, 0.2], &mask, 1, 4, 0.0), 1.0);
//! assert_eq!(iosr(&[0.0, 0.1, 0.9, 0.6], &mask), 1.0);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Result, Tensor};
use spore_nn::cell::Cell;

use crate::common::{Explainer, forward, in_eval};
use crate::perturbation::{Activation, probabilities};

/// Pearson's correlation (0 when either side is constant).
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()) as f64;
    if n == 0.0 {
        return 0.0;
    }
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    if saa == 0.0 || sbb == 0.0 {
        0.0
    } else {
        // Rounding can carry a perfect correlation a few ulps past 1.
        (sab / (saa * sbb).sqrt()).clamp(-1.0, 1.0)
    }
}

/// 1 when the map's maximum is within `radius` pixels of a mask pixel (`h`×`w` maps).
pub fn pointing_game(map: &[f32], mask: &[bool], h: usize, w: usize, radius: f64) -> f64 {
    let Some((best, _)) = map.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) else {
        return 0.0;
    };
    let (by, bx) = ((best / w) as f64, (best % w) as f64);
    let hit = (0..h * w).any(|i| {
        mask.get(i) == Some(&true) && {
            let (y, x) = ((i / w) as f64, (i % w) as f64);
            ((y - by).powi(2) + (x - bx).powi(2)).sqrt() <= radius
        }
    });
    hit as u8 as f64
}

/// Intersection over the salient region (saliency ≥ half the maximum).
pub fn iosr(map: &[f32], mask: &[bool]) -> f64 {
    let max = map.iter().copied().fold(f32::MIN, f32::max);
    if max <= 0.0 {
        return 0.0;
    }
    let salient: Vec<usize> = (0..map.len()).filter(|&i| map[i] >= 0.5 * max).collect();
    let inside = salient
        .iter()
        .filter(|&&i| mask.get(i) == Some(&true))
        .count();
    inside as f64 / salient.len().max(1) as f64
}

/// Pointing game (radius 15 pixels) and IoSR of a `[1, 1, H, W]` map for one mask.
pub fn localization(map: &Tensor, mask: &[bool]) -> Result<(f64, f64)> {
    let s = map.shape();
    if s.len() < 2 || map.numel() != s[s.len() - 2] * s[s.len() - 1] {
        return Err(Error::invalid(format!(
            "localization: expected one map ([1, 1, H, W] or [H, W]), got {s:?}"
        )));
    }
    let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
    if mask.len() != h * w {
        return Err(Error::invalid(format!(
            "localization: the mask holds {} pixels, the map {h}x{w}",
            mask.len()
        )));
    }
    let v = map.to_vec::<f32>()?;
    Ok((pointing_game(&v, mask, h, w, 15.0), iosr(&v, mask)))
}

/// Gaussian blur of each plane of `[C, H, W]` values (σ in pixels, borders clamped).
pub fn blur(x: &[f32], c: usize, h: usize, w: usize, sigma: f64) -> Vec<f32> {
    let r = (3.0 * sigma).ceil() as isize;
    let k: Vec<f64> = (-r..=r)
        .map(|i| (-(i * i) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f64 = k.iter().sum();
    let pass = |src: &[f32], horizontal: bool| -> Vec<f32> {
        let mut out = vec![0f32; src.len()];
        for p in 0..c {
            for y in 0..h as isize {
                for xx in 0..w as isize {
                    let mut s = 0.0;
                    for (j, kv) in k.iter().enumerate() {
                        let d = j as isize - r;
                        let (yy, xs) = if horizontal {
                            (y, (xx + d).clamp(0, w as isize - 1))
                        } else {
                            ((y + d).clamp(0, h as isize - 1), xx)
                        };
                        s += kv * src[p * h * w + yy as usize * w + xs as usize] as f64;
                    }
                    out[p * h * w + y as usize * w + xx as usize] = (s / total) as f32;
                }
            }
        }
        out
    };
    pass(&pass(x, true), false)
}

/// Which faithfulness score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faithfulness {
    Naive,
    Deletion,
    Insertion,
}

/// The faithfulness of `map` (`[1, 1, H, W]`) for one input (`[1, C, H, W]`) and target,
/// in `steps` steps (or bins).
pub fn faithfulness(
    net: &Arc<dyn Cell>,
    input: &Tensor,
    target: usize,
    map: &Tensor,
    kind: Faithfulness,
    steps: usize,
    activation: Activation,
) -> Result<f64> {
    let s = input.shape().to_vec();
    let [1, c, h, w] = s[..] else {
        return Err(Error::invalid(format!(
            "faithfulness: expected one input [1, C, H, W], got {s:?}"
        )));
    };
    if c * h * w == 0 {
        return Err(Error::invalid(format!(
            "faithfulness: the input {s:?} is empty"
        )));
    }
    let saliency = map.to_vec::<f32>()?;
    if saliency.len() != h * w {
        return Err(Error::invalid(format!(
            "faithfulness: the map must be [1, 1, {h}, {w}], got {:?}",
            map.shape()
        )));
    }
    let x = input.to_vec::<f32>()?;
    let base = blur(&x, c, h, w, (h.min(w) as f64 / 8.0).max(0.5));
    let mut order: Vec<usize> = (0..h * w).collect();
    order.sort_by(|&a, &b| saliency[b].total_cmp(&saliency[a]));
    let steps = steps.clamp(1, h * w);
    let cut = |k: usize| k * h * w / steps;
    // Pixels (all channels) of `px` taken from `from` into `img`.
    let put = |img: &mut Vec<f32>, from: &[f32], px: &[usize]| {
        for &p in px {
            for ch in 0..c {
                img[ch * h * w + p] = from[ch * h * w + p];
            }
        }
    };
    let mut images = vec![];
    match kind {
        Faithfulness::Naive => {
            images.extend_from_slice(&x);
            for k in 0..steps {
                let mut img = x.clone();
                put(&mut img, &base, &order[cut(k)..cut(k + 1)]);
                images.extend(img);
            }
        }
        Faithfulness::Deletion | Faithfulness::Insertion => {
            let (start, other) = if kind == Faithfulness::Deletion {
                (&x, &base)
            } else {
                (&base, &x)
            };
            for k in 0..=steps {
                let mut img = start.clone();
                put(&mut img, other, &order[..cut(k)]);
                images.extend(img);
            }
        }
    }
    let p = probabilities(net, &images, &s, target, activation, 64)?;
    let p: Vec<f64> = p.iter().map(|&v| v as f64).collect();
    Ok(match kind {
        Faithfulness::Naive => {
            let drops: Vec<f64> = p[1..].iter().map(|q| p[0] - q).collect();
            let means: Vec<f64> = (0..steps)
                .map(|k| {
                    let px = &order[cut(k)..cut(k + 1)];
                    px.iter().map(|&i| saliency[i] as f64).sum::<f64>() / px.len().max(1) as f64
                })
                .collect();
            pearson(&means, &drops)
        }
        _ => {
            let auc = p.windows(2).map(|w| (w[0] + w[1]) / 2.0).sum::<f64>() / steps as f64;
            if kind == Faithfulness::Deletion {
                1.0 - auc
            } else {
                auc
            }
        }
    })
}

/// Class sensitivity for one input `[1, C, H, W]`.
pub fn class_sensitivity(
    net: &Arc<dyn Cell>,
    explainer: &dyn Explainer,
    input: &Tensor,
) -> Result<f64> {
    let logits = in_eval(net, || spore_core::no_grad(|| forward(net, input)))?.to_vec::<f32>()?;
    let best = (0..logits.len())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
        .unwrap_or(0);
    let worst = (0..logits.len())
        .min_by(|&a, &b| logits[a].total_cmp(&logits[b]))
        .unwrap_or(0);
    let a = explainer.explain(input, &[best])?.to_f64_vec()?;
    let b = explainer.explain(input, &[worst])?.to_f64_vec()?;
    Ok((1.0 - pearson(&a, &b)) / 2.0)
}

/// Robustness over `draws` copies of `input` with Gaussian noise of standard deviation
/// `noise · (max - min)`.
pub fn robustness(
    explainer: &dyn Explainer,
    input: &Tensor,
    target: usize,
    draws: usize,
    noise: f64,
    seed: u64,
) -> Result<f64> {
    let map = explainer.explain(input, &[target])?.to_f64_vec()?;
    let norm = map.iter().map(|v| v * v).sum::<f64>().sqrt();
    let x = input.to_vec::<f32>()?;
    let (lo, hi) = x
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let sigma = noise as f32 * (hi - lo).max(0.0);
    let mut worst: f64 = 0.0;
    for d in 0..draws.max(1) {
        let e = Tensor::randn(input.shape(), DType::F32, Some(seed.wrapping_add(d as u64)))?
            .to_vec::<f32>()?;
        let noisy: Vec<f32> = x.iter().zip(&e).map(|(v, n)| v + sigma * n).collect();
        let m = explainer
            .explain(&Tensor::from_vec(noisy, input.shape())?, &[target])?
            .to_f64_vec()?;
        let diff = m
            .iter()
            .zip(&map)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt();
        worst = worst.max(if norm > 0.0 { diff / norm } else { diff });
    }
    Ok(1.0 / (1.0 + worst))
}
