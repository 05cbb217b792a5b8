//! The perturbation methods: Occlusion and RISE (MindSpore XAI's definitions). Both
//! score perturbed copies of the input by the target's probability (softmax of the
//! network's scores, or sigmoid for multi-label networks), in batches run by the
//! network as it is (compiled in Graph mode).
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_xai::{Explainer, Occlusion, Rise};
//! let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
//! let x = Tensor::ones(&[1, 1, 32, 32], DType::F32).unwrap();
//! assert_eq!(Occlusion::new(net.clone()).window(8, 4).explain(&x, &[1]).unwrap().shape(), &[1, 1, 32, 32]);
//! assert_eq!(Rise::new(net).masks(64).explain(&x, &[1]).unwrap().shape(), &[1, 1, 32, 32]);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Result, Tensor, no_grad};
use spore_nn::cell::Cell;

use crate::common::{Explainer, bilinear_plane, check, forward, in_eval};

/// How scores become probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Softmax,
    Sigmoid,
}

/// The target's probability for `count` images of `shape[1..]`, each made by `fill(k,
/// image)`, in batches of `batch` (so memory holds one batch, not every image), with
/// the network in evaluation mode.
pub fn probabilities_of(
    net: &Arc<dyn Cell>,
    shape: &[usize],
    count: usize,
    target: usize,
    activation: Activation,
    batch: usize,
    fill: &mut dyn FnMut(usize, &mut [f32]),
) -> Result<Vec<f32>> {
    if shape.len() != 4 || shape[1..].contains(&0) {
        return Err(Error::invalid(format!(
            "explainer: expected images of shape [N, C, H, W] with no empty axis, got {shape:?}"
        )));
    }
    let per: usize = shape[1..].iter().product();
    let batch = batch.max(1);
    in_eval(net, || {
        let mut out = Vec::with_capacity(count);
        let mut buf = vec![0f32; batch * per];
        for start in (0..count).step_by(batch) {
            let m = batch.min(count - start);
            for k in 0..m {
                fill(start + k, &mut buf[k * per..(k + 1) * per]);
            }
            let mut s = shape.to_vec();
            s[0] = m;
            let x = Tensor::from_vec(buf[..m * per].to_vec(), &s)?;
            let logits = no_grad(|| forward(net, &x))?;
            let ls = logits.shape();
            if ls.len() != 2 || ls[0] != m {
                return Err(Error::invalid(format!(
                    "explainer: the network must return [N, classes] scores, got {ls:?}"
                )));
            }
            let p = match activation {
                Activation::Softmax => logits.softmax(-1)?,
                Activation::Sigmoid => logits.sigmoid()?,
            };
            let classes = ls[1];
            if target >= classes {
                return Err(Error::invalid(format!(
                    "explainer: target class {target} is out of range for {classes} classes"
                )));
            }
            let v = p.to_vec::<f32>()?;
            out.extend((0..m).map(|i| v[i * classes + target]));
        }
        Ok(out)
    })
}

/// [`probabilities_of`] for images given as one flat vector (`[M, C, H, W]`).
pub fn probabilities(
    net: &Arc<dyn Cell>,
    images: &[f32],
    shape: &[usize],
    target: usize,
    activation: Activation,
    batch: usize,
) -> Result<Vec<f32>> {
    let per: usize = shape.get(1..).map_or(0, |s| s.iter().product());
    let count = images.len() / per.max(1);
    probabilities_of(
        net,
        shape,
        count,
        target,
        activation,
        batch,
        &mut |k, img| img.copy_from_slice(&images[k * per..(k + 1) * per]),
    )
}

/// Occlusion: a window of the baseline (0) slides over the image; each pixel's
/// attribution is the mean drop of the target's probability over the windows covering it.
pub struct Occlusion {
    net: Arc<dyn Cell>,
    window: usize,
    stride: usize,
    activation: Activation,
    batch: usize,
}

impl Occlusion {
    /// 15x15 windows every 5 pixels, softmax, 32 perturbations per batch.
    pub fn new(net: Arc<dyn Cell>) -> Occlusion {
        Occlusion {
            net,
            window: 15,
            stride: 5,
            activation: Activation::Softmax,
            batch: 32,
        }
    }

    pub fn window(mut self, size: usize, stride: usize) -> Occlusion {
        self.window = size.max(1);
        self.stride = stride.max(1);
        self
    }

    pub fn activation(mut self, a: Activation) -> Occlusion {
        self.activation = a;
        self
    }
}

/// Window starts covering `0..len` with windows of `size` every `stride` (the last one
/// flush with the end).
fn starts(len: usize, size: usize, stride: usize) -> Vec<usize> {
    if size >= len {
        return vec![0];
    }
    let mut v: Vec<usize> = (0..=len - size).step_by(stride).collect();
    if v.last() != Some(&(len - size)) {
        v.push(len - size);
    }
    v
}

impl Explainer for Occlusion {
    fn name(&self) -> String {
        "Occlusion".into()
    }

    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        let targets = check("Occlusion", inputs, targets)?;
        let s = inputs.shape().to_vec();
        let [n, c, h, w] = s[..] else {
            unreachable!("checked")
        };
        let x = inputs.to_vec::<f32>()?;
        let per = c * h * w;
        let (ys, xs) = (
            starts(h, self.window, self.stride),
            starts(w, self.window, self.stride),
        );
        let (wh, ww) = (self.window.min(h), self.window.min(w));
        let mut out = vec![0f32; n * h * w];
        let windows: Vec<(usize, usize)> = ys
            .iter()
            .flat_map(|&y| xs.iter().map(move |&x| (y, x)))
            .collect();
        for (i, &t) in targets.iter().enumerate() {
            let xi = &x[i * per..(i + 1) * per];
            // Image 0 is the input; image k the input with window k - 1 occluded.
            let mut fill = |k: usize, img: &mut [f32]| {
                img.copy_from_slice(xi);
                if k > 0 {
                    let (y0, x0) = windows[k - 1];
                    for ch in 0..c {
                        for y in y0..y0 + wh {
                            img[ch * h * w + y * w + x0..ch * h * w + y * w + x0 + ww].fill(0.0);
                        }
                    }
                }
            };
            let p = probabilities_of(
                &self.net,
                &s,
                1 + windows.len(),
                t,
                self.activation,
                self.batch,
                &mut fill,
            )?;
            let (sum, count) = (&mut vec![0f32; h * w], &mut vec![0f32; h * w]);
            let mut k = 1;
            for &y0 in &ys {
                for &x0 in &xs {
                    let drop = p[0] - p[k];
                    k += 1;
                    for y in y0..y0 + wh {
                        for xx in x0..x0 + ww {
                            sum[y * w + xx] += drop;
                            count[y * w + xx] += 1.0;
                        }
                    }
                }
            }
            for (o, (s, c)) in out[i * h * w..(i + 1) * h * w]
                .iter_mut()
                .zip(sum.iter().zip(count.iter()))
            {
                *o = if *c > 0.0 { s / c } else { 0.0 };
            }
        }
        Tensor::from_vec(out, &[n, 1, h, w])
    }
}

/// RISE (Petsiuk et al., 2018): random masks, each a coarse grid of cells kept with
/// probability `p`, upsampled bilinearly with a random shift; the map is the average of
/// the masks weighted by the target's probability on the masked input, divided by `p`.
pub struct Rise {
    net: Arc<dyn Cell>,
    masks: usize,
    grid: usize,
    keep: f32,
    activation: Activation,
    batch: usize,
    seed: u64,
}

impl Rise {
    /// 6000 masks (MindSpore XAI's count) of a 7x7 grid kept with probability 0.5.
    pub fn new(net: Arc<dyn Cell>) -> Rise {
        Rise {
            net,
            masks: 6000,
            grid: 7,
            keep: 0.5,
            activation: Activation::Softmax,
            batch: 200,
            seed: 0,
        }
    }

    pub fn masks(mut self, n: usize) -> Rise {
        self.masks = n.max(1);
        self
    }

    pub fn grid(mut self, cells: usize, keep: f32) -> Rise {
        self.grid = cells.max(1);
        self.keep = if keep.is_finite() {
            keep.clamp(f32::MIN_POSITIVE, 1.0)
        } else {
            0.5
        };
        self
    }

    pub fn activation(mut self, a: Activation) -> Rise {
        self.activation = a;
        self
    }

    pub fn seed(mut self, seed: u64) -> Rise {
        self.seed = seed;
        self
    }

    /// Mask `m` (`h`×`w`), from the grids and shifts drawn for this explanation.
    fn mask(&self, m: usize, cells: &[f32], shifts: &[f32], h: usize, w: usize) -> Vec<f32> {
        let g = self.grid;
        let (ch, cw) = (h.div_ceil(g), w.div_ceil(g));
        let (uh, uw) = ((g + 1) * ch, (g + 1) * cw);
        let binary: Vec<f32> = cells[m * g * g..(m + 1) * g * g]
            .iter()
            .map(|&u| if u < self.keep { 1.0 } else { 0.0 })
            .collect();
        let up = bilinear_plane(&binary, g, g, uh, uw);
        let dy = ((shifts[2 * m] * ch as f32) as usize).min(ch.saturating_sub(1));
        let dx = ((shifts[2 * m + 1] * cw as f32) as usize).min(cw.saturating_sub(1));
        let mut out = Vec::with_capacity(h * w);
        for y in 0..h {
            out.extend_from_slice(&up[(y + dy) * uw + dx..][..w]);
        }
        out
    }
}

impl Explainer for Rise {
    fn name(&self) -> String {
        "RISE".into()
    }

    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        let targets = check("RISE", inputs, targets)?;
        let s = inputs.shape().to_vec();
        let [n, c, h, w] = s[..] else {
            unreachable!("checked")
        };
        let g = self.grid;
        let cells =
            Tensor::rand(&[self.masks, g * g], DType::F32, Some(self.seed))?.to_vec::<f32>()?;
        let shifts = Tensor::rand(&[self.masks, 2], DType::F32, Some(self.seed ^ 0x5eed))?
            .to_vec::<f32>()?;
        let x = inputs.to_vec::<f32>()?;
        let per = c * h * w;
        let mut out = vec![0f32; n * h * w];
        for (i, &t) in targets.iter().enumerate() {
            let xi = &x[i * per..(i + 1) * per];
            let o = &mut out[i * h * w..(i + 1) * h * w];
            // One batch of masks at a time: each is used for its image, then for the sum.
            for start in (0..self.masks).step_by(self.batch.max(1)) {
                let end = (start + self.batch.max(1)).min(self.masks);
                let masks: Vec<Vec<f32>> = (start..end)
                    .map(|m| self.mask(m, &cells, &shifts, h, w))
                    .collect();
                let mut fill = |k: usize, img: &mut [f32]| {
                    let mask = &masks[k];
                    for ch in 0..c {
                        for ((d, v), mv) in img[ch * h * w..(ch + 1) * h * w]
                            .iter_mut()
                            .zip(&xi[ch * h * w..(ch + 1) * h * w])
                            .zip(mask)
                        {
                            *d = v * mv;
                        }
                    }
                };
                let p = probabilities_of(
                    &self.net,
                    &s,
                    end - start,
                    t,
                    self.activation,
                    self.batch,
                    &mut fill,
                )?;
                for (pm, mask) in p.iter().zip(&masks) {
                    for (a, k) in o.iter_mut().zip(mask) {
                        *a += pm * k;
                    }
                }
            }
            let norm = 1.0 / (self.masks as f32 * self.keep);
            o.iter_mut().for_each(|a| *a *= norm);
        }
        Tensor::from_vec(out, &[n, 1, h, w])
    }
}
