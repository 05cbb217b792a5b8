//! `Momentum` (MindSpore's formula): `v = momentum * v + g; p -= lr * v`, or with Nesterov
//! `p -= lr * (g + momentum * v)`. Weight decay adds `wd * p` to `g` first.
//!
//! ```
//! use spore_core::{DType, Parameter, Tensor};
//! use spore_nn::optim::{Momentum, Optimizer};
//! let w = Parameter::new(Tensor::ones(&[1], DType::F64).unwrap(), "w");
//! let opt = Momentum::config(vec![w.clone()], 0.1, 0.9).nesterov(true).build().unwrap();
//! opt.apply(&[Tensor::ones(&[1], DType::F64).unwrap()]).unwrap(); // v = 1; w = 1 - 0.1 * (1 + 0.9)
//! assert!((w.value().item().unwrap() - 0.81).abs() < 1e-7); // the learning rate is Float32, as in MindSpore
//! ```

use std::sync::Arc;

use spore_core::{Error, Parameter, Result, Tensor};

use super::{DecayFilter, LearningRate, Optimizer, OptimizerCore, lr_for, named};

/// MindSpore's `nn.Momentum`.
pub struct Momentum {
    pub core: OptimizerCore,
    pub momentum: f64,
    pub nesterov: bool,
    moments: Vec<Parameter>,
}

/// `Momentum`'s arguments.
pub struct MomentumConfig {
    params: Vec<Parameter>,
    lr: LearningRate,
    momentum: f64,
    weight_decay: f64,
    filter: DecayFilter,
    nesterov: bool,
}

impl MomentumConfig {
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.weight_decay = wd;
        self
    }
    pub fn decay_filter(mut self, f: DecayFilter) -> Self {
        self.filter = f;
        self
    }
    pub fn nesterov(mut self, on: bool) -> Self {
        self.nesterov = on;
        self
    }
    pub fn build(self) -> Result<Arc<Momentum>> {
        if !(self.momentum >= 0.0 && self.momentum.is_finite()) {
            return Err(Error::invalid(format!(
                "Momentum: momentum must be a non-negative number, got {}",
                self.momentum
            )));
        }
        let core = OptimizerCore::new(
            "Momentum",
            self.params,
            self.lr,
            self.weight_decay,
            &self.filter,
        )?;
        let moments = core.clone_state("moments", 0.0);
        Ok(Arc::new(Momentum {
            core,
            momentum: self.momentum,
            nesterov: self.nesterov,
            moments,
        }))
    }
}

impl Momentum {
    pub fn new(
        params: Vec<Parameter>,
        learning_rate: impl Into<LearningRate>,
        momentum: f64,
    ) -> Result<Arc<Momentum>> {
        Momentum::config(params, learning_rate, momentum).build()
    }
    pub fn config(
        params: Vec<Parameter>,
        learning_rate: impl Into<LearningRate>,
        momentum: f64,
    ) -> MomentumConfig {
        MomentumConfig {
            params,
            lr: learning_rate.into(),
            momentum,
            weight_decay: 0.0,
            filter: DecayFilter::MindSporeDefault,
            nesterov: false,
        }
    }
}

impl Optimizer for Momentum {
    fn params(&self) -> &[Parameter] {
        &self.core.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        self.core.check_grads(grads)?;
        let lr = self.core.next_lr()?;
        for (i, (p, v)) in self.core.params.iter().zip(&self.moments).enumerate() {
            let g = self.core.decayed_grad(i, &grads[i])?;
            let v_new = v.value().mul_scalar(self.momentum)?.add(&g)?;
            let v_new = super::store(v, &v_new)?;
            let update = if self.nesterov {
                g.add(&v_new.mul_scalar(self.momentum)?)?
            } else {
                v_new
            };
            let w = p.value();
            p.assign(&w.sub(&update.mul(&lr_for(&lr, &w)?)?)?)?;
        }
        Ok(())
    }
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        let core = self.core.on_params(shards)?;
        Ok(Arc::new(Momentum {
            moments: core.clone_state("moments", 0.0),
            core,
            momentum: self.momentum,
            nesterov: self.nesterov,
        }))
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        let mut s = self.core.state();
        s.extend(named(&[&self.moments]));
        s
    }
    fn class_name(&self) -> &'static str {
        "Momentum"
    }
    fn core(&self) -> &OptimizerCore {
        &self.core
    }
}
