//! PyNative mode's BatchNorm and LayerNorm as whole operators: each forward pass one
//! sweep over memory (BatchNorm's statistics one more) and each gradient two, where the
//! composites of primitives take a dozen, one operator at a time. MindSpore runs
//! `BatchNorm` and `LayerNorm` as primitives in PyNative mode for the same reason.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_nn::prelude::*;
//! let ln = LayerNorm::new(&[4]).unwrap();
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 4]).unwrap();
//! let y = ln.call1(&x).unwrap().to_vec::<f32>().unwrap();
//! assert!(y.iter().sum::<f32>().abs() < 1e-5); // centred
//! let x = x.with_requires_grad(true);
//! assert_eq!(ln.call1(&x).unwrap().grad_fn().unwrap().op.name(), "LayerNorm"); // one operator
//! ```
//!
//! LayerNorm takes this path when `spore_core::eager::applies_traced`, also inside a
//! `jit` trace; BatchNorm too when it normalises with the batch's statistics (training),
//! and with the moving ones only when `spore_core::eager::applies` (nothing is being
//! traced: a compiled evaluation keeps the composite, one multiply-add per value that
//! fusion merges with the ReLU and additions after it). Either needs every
//! value float32 and no mixed-precision compute dtype in force (so not under AMP's O2,
//! whose BatchNorm reads 16-bit inputs); LayerNorm also needs its normalised axes to be
//! gamma's (`begin_norm_axis == begin_params_axis`). The gradient operators run only in a
//! backward pass that is not itself recorded; a recorded one (for a higher derivative)
//! writes the same gradient with differentiable primitives instead.

use std::sync::Arc;

use spore_core::eager::{f32_values as values, recycle_values};
use spore_core::prims::custom::{CustomOp, CustomPrimitive};
use spore_core::{DType, Error, Result, Tensor, TensorType};
use spore_kernels::{arena, norm};

/// Which eager operator, with its attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    /// `x` (`[N, C, ...]`) → `[2, C]`: per channel the mean and the biased variance.
    Moments,
    /// `(x, moments, gamma, beta)` → `y`; `batch_stats`: the moments are `x`'s own, so the
    /// gradient of `x` runs through them too.
    BatchNorm { eps: f32, batch_stats: bool },
    /// `(dy, x, moments)` → `[2, C]`: `Σ dy · x̂` (gamma's gradient) and `Σ dy` (beta's).
    BatchNormParamGrads { eps: f32 },
    /// `(dy, x, moments, gamma, param grads)` → `dx`.
    BatchNormInputGrad { eps: f32, batch_stats: bool },
    /// `(x, gamma, beta)` → `y`, normalising over gamma's trailing axes.
    LayerNorm { eps: f32 },
    /// `(dy, x, gamma)` → `[2, gamma.numel()]`: gamma's and beta's gradients.
    LayerNormParamGrads { eps: f32 },
    /// `(dy, x, gamma)` → `dx`.
    LayerNormInputGrad { eps: f32 },
}

#[derive(Debug)]
struct Eager(Kernel);

fn op(kernel: Kernel) -> CustomOp {
    CustomOp::new(Arc::new(Eager(kernel)))
}

impl Kernel {
    fn arity(self) -> usize {
        match self {
            Kernel::Moments => 1,
            Kernel::BatchNorm { .. } => 4,
            Kernel::BatchNormParamGrads { .. } => 3,
            Kernel::BatchNormInputGrad { .. } => 5,
            Kernel::LayerNorm { .. } => 3,
            Kernel::LayerNormParamGrads { .. } | Kernel::LayerNormInputGrad { .. } => 3,
        }
    }
}

/// `(n, c, l)` of an `[N, C, ...]` shape.
fn channels(shape: &[usize]) -> (usize, usize, usize) {
    (shape[0], shape[1], shape[2..].iter().product())
}

fn tensor(data: Vec<f32>, shape: &[usize]) -> std::result::Result<Tensor, String> {
    Tensor::from_vec(data, shape).map_err(|e| e.to_string())
}

impl CustomPrimitive for Eager {
    fn name(&self) -> &str {
        match self.0 {
            Kernel::Moments => "BatchNormMoments",
            Kernel::BatchNorm { .. } => "BatchNorm",
            Kernel::BatchNormParamGrads { .. } => "BatchNormGradParams",
            Kernel::BatchNormInputGrad { .. } => "BatchNormGrad",
            Kernel::LayerNorm { .. } => "LayerNorm",
            Kernel::LayerNormParamGrads { .. } => "LayerNormGradParams",
            Kernel::LayerNormInputGrad { .. } => "LayerNormGrad",
        }
    }

    fn attributes(&self) -> String {
        format!("{:?}", self.0)
    }

    /// `infer` checked every shape and dtype; no value makes a kernel fail, so a compiled
    /// step may write parameters in place before these ops.
    fn may_fail_on_values(&self) -> bool {
        false
    }

    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let k = self.0;
        if inputs.len() != k.arity() || inputs.iter().any(|t| t.dtype != DType::F32) {
            return Err(format!(
                "expected {} float32 inputs, got {:?}",
                k.arity(),
                inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>()
            ));
        }
        let x = match k {
            Kernel::Moments | Kernel::BatchNorm { .. } | Kernel::LayerNorm { .. } => inputs[0],
            _ => inputs[1],
        };
        let per_channel = |t: &TensorType, rows: usize, c: usize| t.shape[..] == [rows, c];
        let ok = match k {
            Kernel::Moments => x.rank() >= 2,
            Kernel::BatchNorm { .. } => {
                let c = x.shape.get(1).copied().unwrap_or(0);
                x.rank() >= 2
                    && per_channel(inputs[1], 2, c)
                    && inputs[2].shape[..] == [c]
                    && inputs[3].shape[..] == [c]
            }
            Kernel::BatchNormParamGrads { .. } | Kernel::BatchNormInputGrad { .. } => {
                let c = x.shape.get(1).copied().unwrap_or(0);
                let extra = inputs.len() == 3
                    || (inputs[3].shape[..] == [c] && per_channel(inputs[4], 2, c));
                x.rank() >= 2 && inputs[0] == x && per_channel(inputs[2], 2, c) && extra
            }
            Kernel::LayerNorm { .. } => {
                let (g, b) = (inputs[1], inputs[2]);
                g == b && g.rank() >= 1 && x.shape.ends_with(&g.shape) && g.numel() > 0
            }
            Kernel::LayerNormParamGrads { .. } | Kernel::LayerNormInputGrad { .. } => {
                let g = inputs[2];
                inputs[0] == x && g.rank() >= 1 && x.shape.ends_with(&g.shape) && g.numel() > 0
            }
        };
        if !ok {
            return Err(format!(
                "inputs {:?} do not fit {:?}",
                inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                k
            ));
        }
        Ok(match k {
            Kernel::Moments => TensorType::new(&[2, x.shape[1]], DType::F32),
            Kernel::BatchNormParamGrads { .. } => TensorType::new(&[2, x.shape[1]], DType::F32),
            Kernel::LayerNormParamGrads { .. } => {
                TensorType::new(&[2, inputs[2].numel()], DType::F32)
            }
            _ => x.clone(),
        })
    }

    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        match self.0 {
            // BatchNorm (when training) and LayerNorm run in compiled graphs too, where
            // outputs come from the step's buffer pool and a copy of a strided input goes
            // back to it.
            Kernel::Moments => {
                let (n, c, l) = channels(inputs[0].shape());
                let x = values(inputs[0])?;
                let moments = norm::channel_moments(&x, n, c, l);
                recycle_values(x);
                tensor(moments, &[2, c])
            }
            Kernel::BatchNorm { eps, .. } => batch_norm_forward(inputs, eps),
            Kernel::BatchNormParamGrads { eps } => {
                let (dy, x) = (inputs[0], inputs[1]);
                let (n, c, l) = channels(x.shape());
                let moments = values(inputs[2])?;
                let (mean, var) = moments.split_at(c);
                let (dy, x) = (values(dy)?, values(x)?);
                let mut sums = norm::channel_grad_sums(&dy, &x, mean, n, c, l);
                recycle_values(dy);
                recycle_values(x);
                // [Σ dy, Σ dy·(x - mean)] → [Σ dy·x̂, Σ dy]
                let (sum_dy, sum_dyx) = sums.split_at_mut(c);
                for ch in 0..c {
                    let dgamma = sum_dyx[ch] / (var[ch] + eps).sqrt();
                    sum_dyx[ch] = sum_dy[ch];
                    sum_dy[ch] = dgamma;
                }
                tensor(sums, &[2, c])
            }
            Kernel::BatchNormInputGrad { eps, batch_stats } => {
                batch_norm_input_grad(inputs, eps, batch_stats)
            }
            Kernel::LayerNorm { eps } => {
                let x = values(inputs[0])?;
                let mut out = arena::for_overwrite::<f32>(x.len());
                norm::row_norm(&x, &values(inputs[1])?, &values(inputs[2])?, eps, &mut out);
                recycle_values(x);
                tensor(out, inputs[0].shape())
            }
            Kernel::LayerNormParamGrads { eps } => {
                let d = inputs[2].numel();
                let (dy, x) = (values(inputs[0])?, values(inputs[1])?);
                let sums = norm::row_norm_param_grads(&dy, &x, d, eps);
                recycle_values(dy);
                recycle_values(x);
                tensor(sums, &[2, d])
            }
            Kernel::LayerNormInputGrad { eps } => {
                let (dy, x) = (values(inputs[0])?, values(inputs[1])?);
                let mut dx = arena::for_overwrite::<f32>(x.len());
                norm::row_norm_input_grad(&dy, &x, &values(inputs[2])?, eps, &mut dx);
                recycle_values(dy);
                recycle_values(x);
                tensor(dx, inputs[1].shape())
            }
        }
    }

    fn vjp(&self, inputs: &[Tensor], _out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        match self.0 {
            Kernel::BatchNorm { eps, batch_stats } => {
                batch_norm_vjp(inputs, grad, eps, batch_stats)
            }
            Kernel::LayerNorm { eps } => layer_norm_vjp(inputs, grad, eps),
            // Their inputs never carry gradients: the moments are taken of a stopped `x`,
            // and the gradient operators are made only in a backward pass not recorded.
            k => Err(Error::invalid(format!(
                "{k:?} has no gradient: it is made only where none is taken"
            ))),
        }
    }
}

/// `y = x · scale_c + shift_c` with `scale = gamma / sqrt(var + eps)` and `shift = beta -
/// mean · scale`, as the composite computes it.
fn batch_norm_forward(inputs: &[&Tensor], eps: f32) -> std::result::Result<Tensor, String> {
    let x = inputs[0];
    let (n, c, l) = channels(x.shape());
    let moments = values(inputs[1])?;
    let (mean, var) = moments.split_at(c);
    let (gamma, beta) = (values(inputs[2])?, values(inputs[3])?);
    let scale: Vec<f32> = (0..c)
        .map(|ch| 1.0 / (var[ch] + eps).sqrt() * gamma[ch])
        .collect();
    let shift: Vec<f32> = (0..c).map(|ch| beta[ch] - mean[ch] * scale[ch]).collect();
    let mut out = arena::for_overwrite::<f32>(x.numel());
    let values_x = values(x)?;
    norm::channel_affine(&values_x, None, &scale, &shift, (n, c, l), &mut out);
    recycle_values(values_x);
    tensor(out, x.shape())
}

/// `dx = a · (dy - Σdy / m - x̂ · Σ(dy·x̂) / m)` with `a = gamma · rstd` (batch statistics),
/// or `a · dy` (fixed statistics), written as `a · dy + b · x + k` per channel.
fn batch_norm_input_grad(
    inputs: &[&Tensor],
    eps: f32,
    batch_stats: bool,
) -> std::result::Result<Tensor, String> {
    let (dy, x) = (inputs[0], inputs[1]);
    let (n, c, l) = channels(x.shape());
    let moments = values(inputs[2])?;
    let (mean, var) = moments.split_at(c);
    let gamma = values(inputs[3])?;
    let params = values(inputs[4])?;
    let (dgamma, dbeta) = params.split_at(c);
    let m = (n * l).max(1) as f32;
    let rstd: Vec<f32> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let a: Vec<f32> = (0..c).map(|ch| gamma[ch] * rstd[ch]).collect();
    // `channel_affine` writes every value.
    let mut dx = arena::for_overwrite::<f32>(x.numel());
    let dy = values(dy)?;
    if batch_stats {
        let b: Vec<f32> = (0..c)
            .map(|ch| -a[ch] * rstd[ch] * dgamma[ch] / m)
            .collect();
        let k: Vec<f32> = (0..c)
            .map(|ch| -b[ch] * mean[ch] - a[ch] * dbeta[ch] / m)
            .collect();
        let values_x = values(x)?;
        norm::channel_affine(&dy, Some((&values_x, &b)), &a, &k, (n, c, l), &mut dx);
        recycle_values(values_x);
    } else {
        norm::channel_affine(&dy, None, &a, &vec![0.0; c], (n, c, l), &mut dx);
    }
    recycle_values(dy);
    tensor(dx, x.shape())
}

/// `[N, C, ...]` → the broadcastable `[1, C, 1, ...]` and the axes other than 1.
fn channel_axes(x: &Tensor) -> (Vec<usize>, Vec<isize>) {
    let mut shape = vec![1; x.rank()];
    shape[1] = x.shape()[1];
    let axes = (0..x.rank() as isize).filter(|&a| a != 1).collect();
    (shape, axes)
}

fn batch_norm_vjp(
    inputs: &[Tensor],
    g: &Tensor,
    eps: f32,
    batch_stats: bool,
) -> Result<Vec<Option<Tensor>>> {
    let [x, moments, gamma, _beta] = inputs else {
        return Err(Error::invalid("BatchNorm: expected 4 inputs"));
    };
    if spore_core::is_grad_enabled() {
        return batch_norm_vjp_recorded(x, moments, gamma, g, eps, batch_stats);
    }
    let c = gamma.numel();
    let params = g.custom(&op(Kernel::BatchNormParamGrads { eps }), &[x, moments])?;
    let dx = g.custom(
        &op(Kernel::BatchNormInputGrad { eps, batch_stats }),
        &[x, moments, gamma, &params],
    )?;
    let dgamma = params.narrow(0, 0, 1)?.reshape(&[c])?;
    let dbeta = params.narrow(0, 1, 1)?.reshape(&[c])?;
    Ok(vec![Some(dx), None, Some(dgamma), Some(dbeta)])
}

/// The same gradient from differentiable primitives (a backward pass being recorded).
fn batch_norm_vjp_recorded(
    x: &Tensor,
    moments: &Tensor,
    gamma: &Tensor,
    g: &Tensor,
    eps: f32,
    batch_stats: bool,
) -> Result<Vec<Option<Tensor>>> {
    let (bshape, axes) = channel_axes(x);
    let c = gamma.numel();
    let (mean, var) = if batch_stats {
        let mean = x.mean(&axes, true)?;
        let centred = x.sub(&mean)?;
        (mean, centred.mul(&centred)?.mean(&axes, true)?)
    } else {
        let part = |row| moments.narrow(0, row, 1)?.reshape(&bshape);
        (part(0)?, part(1)?)
    };
    let rstd = var.add_scalar(eps as f64)?.rsqrt()?;
    let xhat = x.sub(&mean)?.mul(&rstd)?;
    let gh = g.mul(&gamma.reshape(&bshape)?)?;
    let dx = if batch_stats {
        let proj = xhat.mul(&gh.mul(&xhat)?.mean(&axes, true)?)?;
        gh.sub(&gh.mean(&axes, true)?)?.sub(&proj)?.mul(&rstd)?
    } else {
        gh.mul(&rstd)?
    };
    let dgamma = g.mul(&xhat)?.sum(&axes, false)?.reshape(&[c])?;
    let dbeta = g.sum(&axes, false)?.reshape(&[c])?;
    Ok(vec![Some(dx), None, Some(dgamma), Some(dbeta)])
}

fn layer_norm_vjp(inputs: &[Tensor], g: &Tensor, eps: f32) -> Result<Vec<Option<Tensor>>> {
    let [x, gamma, _beta] = inputs else {
        return Err(Error::invalid("LayerNorm: expected 3 inputs"));
    };
    if spore_core::is_grad_enabled() {
        return layer_norm_vjp_recorded(x, gamma, g, eps);
    }
    let dx = g.custom(&op(Kernel::LayerNormInputGrad { eps }), &[x, gamma])?;
    let params = g.custom(&op(Kernel::LayerNormParamGrads { eps }), &[x, gamma])?;
    let dgamma = params.narrow(0, 0, 1)?.reshape(gamma.shape())?;
    let dbeta = params.narrow(0, 1, 1)?.reshape(gamma.shape())?;
    Ok(vec![Some(dx), Some(dgamma), Some(dbeta)])
}

/// LayerNorm's gradient from differentiable primitives (a backward pass being recorded).
fn layer_norm_vjp_recorded(
    x: &Tensor,
    gamma: &Tensor,
    g: &Tensor,
    eps: f32,
) -> Result<Vec<Option<Tensor>>> {
    let (rank, kept) = (x.rank() as isize, gamma.rank() as isize);
    let norm_axes: Vec<isize> = (rank - kept..rank).collect();
    let row_axes: Vec<isize> = (0..rank - kept).collect();
    let mean = x.mean(&norm_axes, true)?;
    let centred = x.sub(&mean)?;
    let var = centred.mul(&centred)?.mean(&norm_axes, true)?;
    let rstd = var.add_scalar(eps as f64)?.rsqrt()?;
    let xhat = centred.mul(&rstd)?;
    let gh = g.mul(gamma)?;
    let proj = xhat.mul(&gh.mul(&xhat)?.mean(&norm_axes, true)?)?;
    let dx = gh
        .sub(&gh.mean(&norm_axes, true)?)?
        .sub(&proj)?
        .mul(&rstd)?;
    // With no axes before gamma's (an input of gamma's own shape) nothing is summed:
    // `sum(&[])` would sum every axis.
    let over_rows = |t: Tensor| {
        if row_axes.is_empty() {
            Ok(t)
        } else {
            t.sum(&row_axes, false)
        }
    };
    let dgamma = over_rows(g.mul(&xhat)?)?;
    let dbeta = over_rows(g.clone())?;
    Ok(vec![Some(dx), Some(dgamma), Some(dbeta)])
}

/// Per-channel mean and biased variance of `x` as `[2, C]`, with no gradient.
#[track_caller]
pub(crate) fn moments(x: &Tensor) -> Result<Tensor> {
    x.stop_gradient()?.custom(&op(Kernel::Moments), &[])
}

/// BatchNorm of `x` with the `[2, C]` `moments`; `batch_stats` says they are `x`'s own.
#[track_caller]
pub(crate) fn batch_norm(
    x: &Tensor,
    moments: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
    batch_stats: bool,
) -> Result<Tensor> {
    let kernel = Kernel::BatchNorm {
        eps: eps as f32,
        batch_stats,
    };
    x.custom(&op(kernel), &[moments, gamma, beta])
}

/// LayerNorm of `x` over gamma's (and beta's) trailing axes.
#[track_caller]
pub(crate) fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
    x.custom(&op(Kernel::LayerNorm { eps: eps as f32 }), &[gamma, beta])
}
