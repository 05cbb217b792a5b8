//! Normalisation: `BatchNorm2d` / `BatchNorm1d` and `LayerNorm`, with MindSpore's rules.
//!
//! BatchNorm in training normalises with the batch mean and the *biased* batch variance
//! and updates `moving = momentum * moving + (1 - momentum) * batch_stat` with the
//! *unbiased* variance (momentum 0.9 by default); in evaluation it uses the moving
//! statistics. The updates are `Parameter::assign`s, so they also happen inside compiled
//! graphs. LayerNorm's epsilon defaults to 1e-7.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let bn = BatchNorm2d::new(2).unwrap();
//! bn.set_train(true);
//! let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32).unwrap().reshape(&[2, 2, 2, 2]).unwrap();
//! bn.call1(&x).unwrap();
//! // channel 0 holds 0,1,2,3,8,9,10,11: mean 5.5, moving_mean = 0.1 * 5.5
//! assert!((bn.moving_mean.value().to_vec::<f32>().unwrap()[0] - 0.55).abs() < 1e-6);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Parameter, Result, Tensor};

use super::{label, norm_eager, positive, single};
use crate::cell::{Cell, CellBase, param};
use crate::init::Initializer;

/// BatchNorm's arguments with MindSpore's defaults.
#[derive(Clone, Debug)]
pub struct BatchNormConfig {
    num_features: usize,
    eps: f64,
    momentum: f64,
    affine: bool,
    gamma_init: Initializer,
    beta_init: Initializer,
    moving_mean_init: Initializer,
    moving_var_init: Initializer,
    use_batch_statistics: Option<bool>,
    dtype: DType,
}

impl BatchNormConfig {
    pub fn new(num_features: usize) -> Self {
        BatchNormConfig {
            num_features,
            eps: 1e-5,
            momentum: 0.9,
            affine: true,
            gamma_init: Initializer::one(),
            beta_init: Initializer::zero(),
            moving_mean_init: Initializer::zero(),
            moving_var_init: Initializer::one(),
            use_batch_statistics: None,
            dtype: DType::F32,
        }
    }
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    /// Weight of the old moving statistic (MindSpore's convention; PyTorch's is 1 - this).
    pub fn momentum(mut self, m: f64) -> Self {
        self.momentum = m;
        self
    }
    /// Whether gamma and beta are trained.
    pub fn affine(mut self, on: bool) -> Self {
        self.affine = on;
        self
    }
    pub fn gamma_init(mut self, i: Initializer) -> Self {
        self.gamma_init = i;
        self
    }
    pub fn beta_init(mut self, i: Initializer) -> Self {
        self.beta_init = i;
        self
    }
    pub fn moving_mean_init(mut self, i: Initializer) -> Self {
        self.moving_mean_init = i;
        self
    }
    pub fn moving_var_init(mut self, i: Initializer) -> Self {
        self.moving_var_init = i;
        self
    }
    /// `Some(true)`: always batch statistics (and update); `Some(false)`: always the moving
    /// ones; `None` (default): follow the training flag.
    pub fn use_batch_statistics(mut self, v: Option<bool>) -> Self {
        self.use_batch_statistics = v;
        self
    }
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }

    fn state(self, class: &str) -> Result<BatchNormState> {
        positive(class, &[("num_features", self.num_features)])?;
        if !(0.0..=1.0).contains(&self.momentum) || self.eps.is_nan() || self.eps <= 0.0 {
            return Err(Error::invalid(format!(
                "{class}: momentum must be in [0, 1] and eps positive, got momentum={} eps={}",
                self.momentum, self.eps
            )));
        }
        let c = [self.num_features];
        let p = |i: &Initializer, name: &str, trainable: bool| -> Result<Parameter> {
            Ok(Parameter::with_requires_grad(
                i.init(&c, self.dtype)?,
                name,
                trainable,
            ))
        };
        Ok(BatchNormState {
            gamma: p(&self.gamma_init, "gamma", self.affine)?,
            beta: p(&self.beta_init, "beta", self.affine)?,
            moving_mean: p(&self.moving_mean_init, "moving_mean", false)?,
            moving_variance: p(&self.moving_var_init, "moving_variance", false)?,
            num_features: self.num_features,
            eps: self.eps,
            momentum: self.momentum,
            use_batch_statistics: self.use_batch_statistics,
        })
    }
    pub fn build_2d(self) -> Result<Arc<BatchNorm2d>> {
        let state = self.state("BatchNorm2d")?;
        Ok(Arc::new(BatchNorm2d {
            base: CellBase::new(),
            state,
        }))
    }
    pub fn build_1d(self) -> Result<Arc<BatchNorm1d>> {
        let state = self.state("BatchNorm1d")?;
        Ok(Arc::new(BatchNorm1d {
            base: CellBase::new(),
            state,
        }))
    }
}

/// Parameters and settings shared by the BatchNorm cells.
pub struct BatchNormState {
    pub gamma: Parameter,
    pub beta: Parameter,
    pub moving_mean: Parameter,
    pub moving_variance: Parameter,
    pub num_features: usize,
    pub eps: f64,
    pub momentum: f64,
    pub use_batch_statistics: Option<bool>,
}

impl BatchNormState {
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![
            param("gamma", &self.gamma),
            param("beta", &self.beta),
            param("moving_mean", &self.moving_mean),
            param("moving_variance", &self.moving_variance),
        ]
    }

    /// Moving statistics: unbiased variance, MindSpore's momentum convention, in the
    /// statistics' own dtype (float32 under mixed precision); `n` values per channel.
    fn update_moving(&self, mean: &Tensor, var: &Tensor, n: usize) -> Result<()> {
        let m = self.momentum;
        let unbiased = var.stop_gradient()?.mul_scalar(n as f64 / (n - 1) as f64)?;
        let stats = Some(self.moving_mean.value().dtype());
        let (mm, mv) = spore_core::autocast::with_compute_dtype(stats, || {
            let mm = self
                .moving_mean
                .value()
                .mul_scalar(m)?
                .add(&mean.stop_gradient()?.mul_scalar(1.0 - m)?)?;
            let mv = self
                .moving_variance
                .value()
                .mul_scalar(m)?
                .add(&unbiased.mul_scalar(1.0 - m)?)?;
            Ok::<_, Error>((mm, mv))
        })?;
        self.moving_mean.assign(&mm)?;
        self.moving_variance.assign(&mv)
    }

    /// Normalises `x` over `axes` (every axis but the channel axis 1).
    fn forward(&self, who: &str, training: bool, x: &Tensor, axes: &[isize]) -> Result<Tensor> {
        let c = self.num_features;
        let mut bshape = vec![1; x.rank()];
        bshape[1] = c;
        let n = x.numel() / c.max(1);
        let batch_stats = self.use_batch_statistics.unwrap_or(training);
        if batch_stats && n < 2 {
            return Err(Error::invalid(format!(
                "{who}: training needs more than one value per channel, got input shape {:?}",
                x.shape()
            )));
        }
        let (gamma, beta) = (self.gamma.value(), self.beta.value());
        let moving = (self.moving_mean.value(), self.moving_variance.value());
        // Whole operators in PyNative mode, and inside `jit` traces when training: there
        // the batch's statistics are sums that fusion cannot merge with the loops around
        // them, and the composite took about a dozen passes forward and back. Evaluation
        // in a trace keeps the composite: with the moving statistics it is one multiply-
        // add per value, which fusion merges with the ReLU and residual addition after it.
        let values = [x, &gamma, &beta, &moving.0, &moving.1];
        let whole = if batch_stats {
            spore_core::eager::applies_traced(&values)
        } else {
            spore_core::eager::applies(&values)
        };
        if whole {
            let moments = if batch_stats {
                let moments = norm_eager::moments(x)?;
                let row = |r| moments.narrow(0, r, 1)?.reshape(&[c]);
                self.update_moving(&row(0)?, &row(1)?, n)?;
                moments
            } else {
                Tensor::stack(&[&moving.0, &moving.1], 0)?
            };
            return norm_eager::batch_norm(x, &moments, &gamma, &beta, self.eps, batch_stats);
        }
        let (mean, var) = if batch_stats {
            // One pass for the mean (kept broadcastable), one for the variance around it:
            // `Tensor::var` would reduce `x` a second time for its own mean.
            //
            // The variance's own dependence on the mean is cut (stop_gradient): its
            // gradient, -2/n * sum(x - mean), is exactly zero, and leaving it in costs the
            // backward pass three full-size products and a reduction per layer.
            let mean_b = x.mean(axes, true)?;
            let centred = x.sub(&mean_b.stop_gradient()?)?;
            let var = centred.mul(&centred)?.mean(axes, false)?;
            let mean = mean_b.reshape(&[c])?;
            self.update_moving(&mean, &var, n)?;
            (mean, var)
        } else {
            moving
        };
        let inv = var.add_scalar(self.eps)?.rsqrt()?.mul(&gamma)?;
        let shift = beta.sub(&mean.mul(&inv)?)?;
        x.mul(&inv.reshape(&bshape)?)?.add(&shift.reshape(&bshape)?)
    }
}

fn check_input(who: &str, x: &Tensor, ranks: &[usize], c: usize) -> Result<()> {
    if !ranks.contains(&x.rank()) || x.shape()[1] != c {
        return Err(Error::invalid(format!(
            "{who}: expected a rank {ranks:?} input with {c} channels on axis 1, got shape {:?}",
            x.shape()
        )));
    }
    Ok(())
}

/// Batch normalisation of NCHW inputs over N, H and W.
pub struct BatchNorm2d {
    base: CellBase,
    pub state: BatchNormState,
}

impl BatchNorm2d {
    pub fn new(num_features: usize) -> Result<Arc<BatchNorm2d>> {
        BatchNormConfig::new(num_features).build_2d()
    }
    pub fn config(num_features: usize) -> BatchNormConfig {
        BatchNormConfig::new(num_features)
    }
}

impl std::ops::Deref for BatchNorm2d {
    type Target = BatchNormState;
    fn deref(&self) -> &BatchNormState {
        &self.state
    }
}

impl Cell for BatchNorm2d {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = label(&self.base, "BatchNorm2d");
        let x = single(&self.base, "BatchNorm2d", inputs)?;
        check_input(&who, x, &[4], self.state.num_features)?;
        let y = self
            .state
            .forward(&who, self.base.training(), x, &[0, 2, 3])?;
        Ok(vec![y])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.state.params()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "BatchNorm2d"
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// Batch normalisation of `(N, C)` or `(N, C, L)` inputs.
pub struct BatchNorm1d {
    base: CellBase,
    pub state: BatchNormState,
}

impl BatchNorm1d {
    pub fn new(num_features: usize) -> Result<Arc<BatchNorm1d>> {
        BatchNormConfig::new(num_features).build_1d()
    }
}

impl std::ops::Deref for BatchNorm1d {
    type Target = BatchNormState;
    fn deref(&self) -> &BatchNormState {
        &self.state
    }
}

impl Cell for BatchNorm1d {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = label(&self.base, "BatchNorm1d");
        let x = single(&self.base, "BatchNorm1d", inputs)?;
        check_input(&who, x, &[2, 3], self.state.num_features)?;
        let axes: &[isize] = if x.rank() == 2 { &[0] } else { &[0, 2] };
        let y = self.state.forward(&who, self.base.training(), x, axes)?;
        Ok(vec![y])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.state.params()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "BatchNorm1d"
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// Layer normalisation over the trailing axes from `begin_norm_axis`, with `gamma`/`beta`
/// of `normalized_shape` applied from `begin_params_axis` (both -1 by default).
pub struct LayerNorm {
    base: CellBase,
    pub gamma: Parameter,
    pub beta: Parameter,
    pub normalized_shape: Vec<usize>,
    pub begin_norm_axis: isize,
    pub begin_params_axis: isize,
    pub epsilon: f64,
}

impl LayerNorm {
    /// `LayerNorm(normalized_shape)` with epsilon 1e-7 and axes -1.
    pub fn new(normalized_shape: &[usize]) -> Result<Arc<LayerNorm>> {
        LayerNorm::with_options(normalized_shape, -1, -1, 1e-7)
    }

    pub fn with_options(
        normalized_shape: &[usize],
        begin_norm_axis: isize,
        begin_params_axis: isize,
        epsilon: f64,
    ) -> Result<Arc<LayerNorm>> {
        if normalized_shape.is_empty() || normalized_shape.contains(&0) || epsilon <= 0.0 {
            return Err(Error::invalid(format!(
                "LayerNorm: normalized_shape must be non-empty with positive sizes and epsilon positive, got {normalized_shape:?}, {epsilon}"
            )));
        }
        Ok(Arc::new(LayerNorm {
            base: CellBase::new(),
            gamma: Parameter::new(Tensor::ones(normalized_shape, DType::F32)?, "gamma"),
            beta: Parameter::new(Tensor::zeros(normalized_shape, DType::F32)?, "beta"),
            normalized_shape: normalized_shape.to_vec(),
            begin_norm_axis,
            begin_params_axis,
            epsilon,
        }))
    }
}

impl Cell for LayerNorm {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = label(&self.base, "LayerNorm");
        let x = single(&self.base, "LayerNorm", inputs)?;
        let rank = x.rank() as isize;
        let norm = |a: isize| if a < 0 { a + rank } else { a };
        let (bn, bp) = (norm(self.begin_norm_axis), norm(self.begin_params_axis));
        let fits = bp >= 0 && bp < rank && x.shape()[bp as usize..] == self.normalized_shape[..];
        if bn < 0 || bn >= rank || !fits {
            return Err(Error::invalid(format!(
                "{who}: input shape {:?} does not fit begin_norm_axis={} and gamma/beta of shape {:?} from begin_params_axis={}",
                x.shape(),
                self.begin_norm_axis,
                self.normalized_shape,
                self.begin_params_axis
            )));
        }
        let (gamma, beta) = (self.gamma.value(), self.beta.value());
        if bn == bp && spore_core::eager::applies_traced(&[x, &gamma, &beta]) {
            return Ok(vec![norm_eager::layer_norm(
                x,
                &gamma,
                &beta,
                self.epsilon,
            )?]);
        }
        let axes: Vec<isize> = (bn..rank).collect();
        let mean = x.mean(&axes, true)?;
        let centered = x.sub(&mean)?;
        let var = centered.mul(&centered)?.mean(&axes, true)?;
        let y = centered.mul(&var.add_scalar(self.epsilon)?.rsqrt()?)?;
        let y = y.mul(&gamma)?.add(&beta)?;
        Ok(vec![y])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![param("gamma", &self.gamma), param("beta", &self.beta)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "LayerNorm"
    }
}
