//! The Adam family:
//! - `Adam` (MindSpore): `m = b1 m + (1-b1) g`, `v = b2 v + (1-b2) g^2`,
//!   `lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t)`, `p -= lr_t * m / (sqrt(v) + eps)`: epsilon
//!   is not bias-corrected. Nesterov uses `b1 m + (1-b1) g` for `m`. Weight decay adds
//!   `wd * p` to `g`.
//! - `AdamWeightDecay` (MindSpore, no bias correction at all):
//!   `p -= lr * (m / (sqrt(v) + eps) + wd * p)`.
//! - `AdamW` (PyTorch): `p *= 1 - lr * wd`, then the bias-corrected Adam step with
//!   `denom = sqrt(v) / sqrt(1 - b2^t) + eps`.
//!
//! ```
//! use spore_core::{DType, Parameter, Tensor};
//! use spore_nn::optim::{Adam, Optimizer};
//! let w = Parameter::new(Tensor::zeros(&[1], DType::F64).unwrap(), "w");
//! let opt = Adam::new(vec![w.clone()], 0.1).unwrap();
//! opt.apply(&[Tensor::full(&[1], 3.0, DType::F64).unwrap()]).unwrap();
//! // First step: m = 0.3, v = 0.009 (times 1 - b), lr_t = 0.1 * sqrt(0.001) / 0.1: the step is ~lr.
//! assert!((w.value().item().unwrap() + 0.1).abs() < 1e-6);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Parameter, Result, Tensor};

use super::{DecayFilter, LearningRate, Optimizer, OptimizerCore, lr_for, named};

fn check_betas(class: &str, b1: f64, b2: f64, eps: f64) -> Result<()> {
    let ok = (0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2) && eps > 0.0;
    if !ok {
        return Err(Error::invalid(format!(
            "{class}: beta1 and beta2 must be in [0, 1) and eps positive, got beta1={b1} beta2={b2} eps={eps}"
        )));
    }
    Ok(())
}

/// Updates the moments `m` and `v` of one parameter and returns their new values.
fn moments(m: &Parameter, v: &Parameter, g: &Tensor, b1: f64, b2: f64) -> Result<(Tensor, Tensor)> {
    let m_new = m.value().mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?;
    let v_new = v
        .value()
        .mul_scalar(b2)?
        .add(&g.mul(g)?.mul_scalar(1.0 - b2)?)?;
    Ok((super::store(m, &m_new)?, super::store(v, &v_new)?))
}

macro_rules! adam_config {
    ($config:ident, $opt:ident, $class:literal, $eps:expr, $wd:expr $(, $extra:ident: $ty:ty = $default:expr)*) => {
        /// The optimizer's arguments with its defaults.
        pub struct $config {
            params: Vec<Parameter>,
            lr: LearningRate,
            beta1: f64,
            beta2: f64,
            eps: f64,
            weight_decay: f64,
            filter: DecayFilter,
            $($extra: $ty,)*
        }
        impl $config {
            pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
                self.beta1 = beta1;
                self.beta2 = beta2;
                self
            }
            pub fn eps(mut self, eps: f64) -> Self {
                self.eps = eps;
                self
            }
            pub fn weight_decay(mut self, wd: f64) -> Self {
                self.weight_decay = wd;
                self
            }
            pub fn decay_filter(mut self, f: DecayFilter) -> Self {
                self.filter = f;
                self
            }
            fn core(&mut self) -> Result<OptimizerCore> {
                check_betas($class, self.beta1, self.beta2, self.eps)?;
                OptimizerCore::new(
                    $class,
                    std::mem::take(&mut self.params),
                    self.lr.clone(),
                    self.weight_decay,
                    &self.filter,
                )
            }
        }
        impl $opt {
            pub fn new(params: Vec<Parameter>, learning_rate: impl Into<LearningRate>) -> Result<Arc<$opt>> {
                $opt::config(params, learning_rate).build()
            }
            pub fn config(params: Vec<Parameter>, learning_rate: impl Into<LearningRate>) -> $config {
                $config {
                    params,
                    lr: learning_rate.into(),
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: $eps,
                    weight_decay: $wd,
                    filter: DecayFilter::MindSporeDefault,
                    $($extra: $default,)*
                }
            }
        }
    };
}

/// MindSpore's `nn.Adam` (default eps 1e-8).
pub struct Adam {
    pub core: OptimizerCore,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub nesterov: bool,
    moment1: Vec<Parameter>,
    moment2: Vec<Parameter>,
    beta1_power: Parameter,
    beta2_power: Parameter,
}

adam_config!(AdamConfig, Adam, "Adam", 1e-8, 0.0, nesterov: bool = false);

impl AdamConfig {
    pub fn nesterov(mut self, on: bool) -> Self {
        self.nesterov = on;
        self
    }
    pub fn build(mut self) -> Result<Arc<Adam>> {
        let core = self.core()?;
        let power = |name: &str| {
            Parameter::with_requires_grad(Tensor::scalar_of(1.0, DType::F32), name, false)
        };
        let powers = (power("beta1_power"), power("beta2_power"));
        Ok(Arc::new(Adam::assemble(
            core,
            [self.beta1, self.beta2, self.eps],
            self.nesterov,
            powers,
        )))
    }
}

impl Adam {
    /// An Adam over `core`'s parameters with fresh moments.
    fn assemble(
        core: OptimizerCore,
        [beta1, beta2, eps]: [f64; 3],
        nesterov: bool,
        (beta1_power, beta2_power): (Parameter, Parameter),
    ) -> Adam {
        Adam {
            moment1: core.clone_state("moment1", 0.0),
            moment2: core.clone_state("moment2", 0.0),
            core,
            beta1,
            beta2,
            eps,
            nesterov,
            beta1_power,
            beta2_power,
        }
    }
}

impl Optimizer for Adam {
    fn params(&self) -> &[Parameter] {
        &self.core.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        self.core.check_grads(grads)?;
        let lr = self.core.next_lr()?;
        let b1p = self.beta1_power.value().mul_scalar(self.beta1)?;
        let b2p = self.beta2_power.value().mul_scalar(self.beta2)?;
        let b1p = super::store(&self.beta1_power, &b1p)?;
        let b2p = super::store(&self.beta2_power, &b2p)?;
        let one = Tensor::scalar(1.0f32);
        let lr_t = lr.mul(&one.sub(&b2p)?.sqrt()?)?.div(&one.sub(&b1p)?)?;
        for (i, p) in self.core.params.iter().enumerate() {
            let g = self.core.decayed_grad(i, &grads[i])?;
            let (m, v) = moments(
                &self.moment1[i],
                &self.moment2[i],
                &g,
                self.beta1,
                self.beta2,
            )?;
            let m_hat = if self.nesterov {
                m.mul_scalar(self.beta1)?
                    .add(&g.mul_scalar(1.0 - self.beta1)?)?
            } else {
                m
            };
            let w = p.value();
            let step = m_hat.div(&v.sqrt()?.add_scalar(self.eps)?)?;
            p.assign(&w.sub(&step.mul(&lr_for(&lr_t, &w)?)?)?)?;
        }
        Ok(())
    }
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        // The powers are shared: the bias corrections follow the steps taken so far.
        let powers = (self.beta1_power.clone(), self.beta2_power.clone());
        Ok(Arc::new(Adam::assemble(
            self.core.on_params(shards)?,
            [self.beta1, self.beta2, self.eps],
            self.nesterov,
            powers,
        )))
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        let mut s = self.core.state();
        s.push(("beta1_power".into(), self.beta1_power.clone()));
        s.push(("beta2_power".into(), self.beta2_power.clone()));
        s.extend(named(&[&self.moment1, &self.moment2]));
        s
    }
    fn class_name(&self) -> &'static str {
        "Adam"
    }
    fn core(&self) -> &OptimizerCore {
        &self.core
    }
}

/// MindSpore's `nn.AdamWeightDecay` (default eps 1e-6, no bias correction).
pub struct AdamWeightDecay {
    pub core: OptimizerCore,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    adam_m: Vec<Parameter>,
    adam_v: Vec<Parameter>,
}

adam_config!(
    AdamWeightDecayConfig,
    AdamWeightDecay,
    "AdamWeightDecay",
    1e-6,
    0.0
);

impl AdamWeightDecayConfig {
    pub fn build(mut self) -> Result<Arc<AdamWeightDecay>> {
        let core = self.core()?;
        Ok(Arc::new(AdamWeightDecay::assemble(
            core,
            [self.beta1, self.beta2, self.eps],
        )))
    }
}

impl Optimizer for AdamWeightDecay {
    fn params(&self) -> &[Parameter] {
        &self.core.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        self.core.check_grads(grads)?;
        let lr = self.core.next_lr()?;
        for (i, p) in self.core.params.iter().enumerate() {
            let (m, v) = moments(
                &self.adam_m[i],
                &self.adam_v[i],
                &grads[i],
                self.beta1,
                self.beta2,
            )?;
            let w = p.value();
            let mut update = m.div(&v.sqrt()?.add_scalar(self.eps)?)?;
            if self.core.decays(i) {
                update = update.add(&w.mul_scalar(self.core.weight_decay)?)?;
            }
            p.assign(&w.sub(&update.mul(&lr_for(&lr, &w)?)?)?)?;
        }
        Ok(())
    }
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        let core = self.core.on_params(shards)?;
        Ok(Arc::new(AdamWeightDecay::assemble(
            core,
            [self.beta1, self.beta2, self.eps],
        )))
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        let mut s = self.core.state();
        s.extend(named(&[&self.adam_m, &self.adam_v]));
        s
    }
    fn class_name(&self) -> &'static str {
        "AdamWeightDecay"
    }
    fn core(&self) -> &OptimizerCore {
        &self.core
    }
}

/// PyTorch's `AdamW` (defaults: eps 1e-8, weight decay 0.01, decoupled).
pub struct AdamW {
    pub core: OptimizerCore,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    exp_avg: Vec<Parameter>,
    exp_avg_sq: Vec<Parameter>,
}

adam_config!(AdamWConfig, AdamW, "AdamW", 1e-8, 1e-2);

impl AdamWConfig {
    pub fn build(mut self) -> Result<Arc<AdamW>> {
        let core = self.core()?;
        Ok(Arc::new(AdamW::assemble(
            core,
            [self.beta1, self.beta2, self.eps],
        )))
    }
}

impl Optimizer for AdamW {
    fn params(&self) -> &[Parameter] {
        &self.core.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        self.core.check_grads(grads)?;
        // t = step + 1, read before next_lr increments it.
        let t = self.core.step_f32()?.add_scalar(1.0)?;
        let lr = self.core.next_lr()?;
        let one = Tensor::scalar(1.0f32);
        let bc1 = one.sub(&Tensor::scalar(self.beta1 as f32).pow(&t)?)?;
        let bc2 = one.sub(&Tensor::scalar(self.beta2 as f32).pow(&t)?)?;
        let step_size = lr.div(&bc1)?;
        let bc2_sqrt = bc2.sqrt()?;
        for (i, p) in self.core.params.iter().enumerate() {
            let mut w = p.value();
            if self.core.decays(i) {
                let keep = one.sub(&lr.mul_scalar(self.core.weight_decay)?)?;
                w = w.mul(&lr_for(&keep, &w)?)?;
            }
            let (m, v) = moments(
                &self.exp_avg[i],
                &self.exp_avg_sq[i],
                &grads[i],
                self.beta1,
                self.beta2,
            )?;
            let denom = v
                .sqrt()?
                .div(&lr_for(&bc2_sqrt, &w)?)?
                .add_scalar(self.eps)?;
            let update = m.div(&denom)?.mul(&lr_for(&step_size, &w)?)?;
            p.assign(&w.sub(&update)?)?;
        }
        Ok(())
    }
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        let core = self.core.on_params(shards)?;
        Ok(Arc::new(AdamW::assemble(
            core,
            [self.beta1, self.beta2, self.eps],
        )))
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        let mut s = self.core.state();
        s.extend(named(&[&self.exp_avg, &self.exp_avg_sq]));
        s
    }
    fn class_name(&self) -> &'static str {
        "AdamW"
    }
    fn core(&self) -> &OptimizerCore {
        &self.core
    }
}

impl AdamWeightDecay {
    /// A AdamWeightDecay over `core`'s parameters with fresh moments.
    fn assemble(core: OptimizerCore, [beta1, beta2, eps]: [f64; 3]) -> AdamWeightDecay {
        AdamWeightDecay {
            adam_m: core.clone_state("adam_m", 0.0),
            adam_v: core.clone_state("adam_v", 0.0),
            core,
            beta1,
            beta2,
            eps,
        }
    }
}

impl AdamW {
    /// A AdamW over `core`'s parameters with fresh moments.
    fn assemble(core: OptimizerCore, [beta1, beta2, eps]: [f64; 3]) -> AdamW {
        AdamW {
            exp_avg: core.clone_state("exp_avg", 0.0),
            exp_avg_sq: core.clone_state("exp_avg_sq", 0.0),
            core,
            beta1,
            beta2,
            eps,
        }
    }
}
