//! What every explainer shares: the [`Explainer`] trait, targets, the target's score, and
//! running a network eagerly in evaluation mode.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_xai::common::abs_max_over_channels;
//! let g = Tensor::from_vec(vec![1.0f32, -3.0, 2.0, 0.5], &[1, 2, 1, 2]).unwrap();
//! assert_eq!(abs_max_over_channels(&g).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
//! ```

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, mode, set_context};
use spore_core::{DType, Error, Result, Tensor};
use spore_nn::cell::{Cell, CellCall, CellExt};

/// An explanation method: a saliency map `[N, 1, H, W]` for inputs `[N, C, H, W]` and one
/// target class per input.
pub trait Explainer {
    /// The method's name (`Gradient`, `GradCAM`, ...).
    fn name(&self) -> String;
    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor>;
}

/// Checks `inputs` is `[N, C, H, W]` and gives one target per input (a single target
/// applies to all).
pub fn check(who: &str, inputs: &Tensor, targets: &[usize]) -> Result<Vec<usize>> {
    let s = inputs.shape();
    if s.len() != 4 || inputs.dtype() != DType::F32 {
        return Err(Error::invalid(format!(
            "{who}: expected Float32 inputs of shape [N, C, H, W], got {:?} {:?}",
            inputs.dtype(),
            s
        )));
    }
    match targets.len() {
        1 => Ok(vec![targets[0]; s[0]]),
        n if n == s[0] => Ok(targets.to_vec()),
        n => Err(Error::invalid(format!(
            "{who}: expected 1 or {} targets (one per input), got {n}",
            s[0]
        ))),
    }
}

/// Runs `f` with the network in evaluation mode and Spore in PyNative mode (gradients of
/// explainers are taken op by op, where ReLU's modified rules and hooks apply), restoring
/// both after.
pub fn eagerly<R>(net: &Arc<dyn Cell>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let (was_training, was_mode) = (net.is_training(), mode());
    net.set_train(false);
    if was_mode != Mode::PyNative {
        set_context(ContextUpdate::new().mode(Mode::PyNative))?;
    }
    let out = f();
    if was_mode != Mode::PyNative {
        set_context(ContextUpdate::new().mode(was_mode))?;
    }
    net.set_train(was_training);
    out
}

/// `Σ_n logits[n, targets[n]]`: differentiating it gives each input its own target's
/// gradient.
pub fn target_score(logits: &Tensor, targets: &[usize]) -> Result<Tensor> {
    let s = logits.shape();
    if s.len() != 2 || s[0] != targets.len() {
        return Err(Error::invalid(format!(
            "explainer: the network must return [N, classes] scores for {} inputs, got {s:?}",
            targets.len()
        )));
    }
    if let Some(t) = targets.iter().find(|&&t| t >= s[1]) {
        return Err(Error::invalid(format!(
            "explainer: target class {t} is out of range for {} classes",
            s[1]
        )));
    }
    let mut mask = vec![0f32; s[0] * s[1]];
    for (n, &t) in targets.iter().enumerate() {
        mask[n * s[1] + t] = 1.0;
    }
    logits.mul(&Tensor::from_vec(mask, s)?)?.sum(&[0, 1], false)
}

/// The network's first output for `inputs`.
pub fn forward(net: &Arc<dyn Cell>, inputs: &Tensor) -> Result<Tensor> {
    net.call_first(std::slice::from_ref(inputs))
}

/// `max_c |g[n, c, h, w]|`: MindSpore XAI's aggregation of a gradient into a map.
pub fn abs_max_over_channels(g: &Tensor) -> Result<Tensor> {
    g.abs()?.max(&[1], true)
}

/// Bilinear resize of `[N, C, h, w]` to `[N, C, H, W]` (half-pixel centres, edges
/// clamped, as `ResizeBilinear` with `align_corners=False`).
pub fn resize_bilinear(x: &Tensor, h_out: usize, w_out: usize) -> Result<Tensor> {
    let s = x.shape().to_vec();
    let [n, c, h, w] = s[..] else {
        return Err(Error::invalid(format!(
            "resize_bilinear: expected [N, C, H, W], got {s:?}"
        )));
    };
    let v = x.to_vec::<f32>()?;
    let mut out = vec![0f32; n * c * h_out * w_out];
    let coord = |o: usize, inn: usize, out_n: usize| -> (usize, usize, f32) {
        let src = ((o as f32 + 0.5) * inn as f32 / out_n as f32 - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(inn - 1);
        let i1 = (i0 + 1).min(inn - 1);
        (i0, i1, src - i0 as f32)
    };
    for p in 0..n * c {
        let plane = &v[p * h * w..(p + 1) * h * w];
        for oy in 0..h_out {
            let (y0, y1, fy) = coord(oy, h, h_out);
            for ox in 0..w_out {
                let (x0, x1, fx) = coord(ox, w, w_out);
                let top = plane[y0 * w + x0] * (1.0 - fx) + plane[y0 * w + x1] * fx;
                let bottom = plane[y1 * w + x0] * (1.0 - fx) + plane[y1 * w + x1] * fx;
                out[p * h_out * w_out + oy * w_out + ox] = top * (1.0 - fy) + bottom * fy;
            }
        }
    }
    Tensor::from_vec(out, &[n, c, h_out, w_out])
}
