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

use spore_core::{DType, Error, Result, Tensor};
use spore_nn::call::run_eagerly;
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
    if s.len() != 4 || inputs.dtype() != DType::F32 || s.contains(&0) {
        return Err(Error::invalid(format!(
            "{who}: expected Float32 inputs of shape [N, C, H, W] with no empty axis, got {:?} {:?}",
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

/// Runs `f` with every layer of the network in evaluation mode, restoring each layer's
/// own flag after (also when `f` fails or panics).
pub fn in_eval<R>(net: &Arc<dyn Cell>, f: impl FnOnce() -> R) -> R {
    struct Restore(Vec<(Arc<dyn Cell>, bool)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            // Each cell's own flag (`set_train` would reset a parent's children too).
            for (c, t) in &self.0 {
                c.base().set_training_flag(*t);
            }
        }
    }
    let mut flags: Vec<(Arc<dyn Cell>, bool)> = vec![(net.clone(), net.is_training())];
    flags.extend(net.cells_and_names().into_iter().map(|(_, c)| {
        let t = c.is_training();
        (c, t)
    }));
    let _restore = Restore(flags);
    net.set_train(false);
    f()
}

/// Runs `f` with the network in evaluation mode and its cells run op by op on this
/// thread (gradients of explainers are taken eagerly, where ReLU's modified rules and
/// hooks apply), without touching the process-wide mode.
pub fn eagerly<R>(net: &Arc<dyn Cell>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    in_eval(net, || run_eagerly(f))
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
    if h == 0 || w == 0 {
        return Err(Error::invalid(format!(
            "resize_bilinear: cannot resize an empty plane ({s:?})"
        )));
    }
    let v = x.to_vec::<f32>()?;
    let mut out = Vec::with_capacity(n * c * h_out * w_out);
    for p in 0..n * c {
        out.extend(bilinear_plane(
            &v[p * h * w..(p + 1) * h * w],
            h,
            w,
            h_out,
            w_out,
        ));
    }
    Tensor::from_vec(out, &[n, c, h_out, w_out])
}

/// One `h`×`w` plane resized bilinearly to `h_out`×`w_out` (see [`resize_bilinear`]); the
/// plane must not be empty.
pub fn bilinear_plane(plane: &[f32], h: usize, w: usize, h_out: usize, w_out: usize) -> Vec<f32> {
    let coord = |o: usize, inn: usize, out_n: usize| -> (usize, usize, f32) {
        let src = ((o as f32 + 0.5) * inn as f32 / out_n as f32 - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(inn.saturating_sub(1));
        let i1 = (i0 + 1).min(inn.saturating_sub(1));
        (i0, i1, src - i0 as f32)
    };
    let mut out = vec![0f32; h_out * w_out];
    for oy in 0..h_out {
        let (y0, y1, fy) = coord(oy, h, h_out);
        for ox in 0..w_out {
            let (x0, x1, fx) = coord(ox, w, w_out);
            let top = plane[y0 * w + x0] * (1.0 - fx) + plane[y0 * w + x1] * fx;
            let bottom = plane[y1 * w + x0] * (1.0 - fx) + plane[y1 * w + x1] * fx;
            out[oy * w_out + ox] = top * (1.0 - fy) + bottom * fy;
        }
    }
    out
}
