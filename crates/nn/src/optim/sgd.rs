//! `SGD` (PyTorch's formula, which MindSpore's `nn.SGD` follows): with weight decay
//! `g += wd * p`; with momentum the buffer is `g` at the first step, then
//! `buf = momentum * buf + (1 - dampening) * g`; Nesterov uses `g + momentum * buf`;
//! `p -= lr * update`.
//!
//! ```
//! use spore_core::{DType, Parameter, Tensor};
//! use spore_nn::optim::{Optimizer, SGD};
//! let w = Parameter::new(Tensor::ones(&[1], DType::F64).unwrap(), "w");
//! let opt = SGD::config(vec![w.clone()], 0.1).momentum(0.9).dampening(0.5).build().unwrap();
//! let g = Tensor::ones(&[1], DType::F64).unwrap();
//! opt.apply(&[g.clone()]).unwrap(); // buf = 1 (no dampening at the first step)
//! opt.apply(&[g]).unwrap(); // buf = 0.9 + 0.5 = 1.4
//! assert!((w.value().item().unwrap() - (1.0 - 0.1 - 0.14)).abs() < 1e-7);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Parameter, Result, Tensor};

use super::{DecayFilter, LearningRate, Optimizer, OptimizerCore, lr_for, named};

/// Stochastic gradient descent with optional momentum, dampening and Nesterov.
pub struct SGD {
    pub core: OptimizerCore,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    accum: Vec<Parameter>,
    /// 1 until the first update with momentum (then the buffer starts as `g`).
    stat: Vec<Parameter>,
}

/// `SGD`'s arguments (MindSpore's defaults: momentum 0, dampening 0, no Nesterov).
pub struct SGDConfig {
    params: Vec<Parameter>,
    lr: LearningRate,
    momentum: f64,
    dampening: f64,
    weight_decay: f64,
    filter: DecayFilter,
    nesterov: bool,
}

impl SGDConfig {
    pub fn momentum(mut self, m: f64) -> Self {
        self.momentum = m;
        self
    }
    pub fn dampening(mut self, d: f64) -> Self {
        self.dampening = d;
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
    pub fn nesterov(mut self, on: bool) -> Self {
        self.nesterov = on;
        self
    }
    pub fn build(self) -> Result<Arc<SGD>> {
        if !(self.momentum >= 0.0 && self.momentum.is_finite() && self.dampening.is_finite()) {
            return Err(Error::invalid(format!(
                "SGD: momentum must be non-negative and dampening finite, got momentum={} dampening={}",
                self.momentum, self.dampening
            )));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid(format!(
                "SGD: Nesterov momentum needs momentum > 0 and dampening = 0, got momentum={} dampening={}",
                self.momentum, self.dampening
            )));
        }
        let core =
            OptimizerCore::new("SGD", self.params, self.lr, self.weight_decay, &self.filter)?;
        Ok(Arc::new(SGD::assemble(
            core,
            self.momentum,
            self.dampening,
            self.nesterov,
        )))
    }
}

impl SGD {
    /// An SGD over `core`'s parameters with fresh state.
    fn assemble(core: OptimizerCore, momentum: f64, dampening: f64, nesterov: bool) -> SGD {
        let stat = core
            .params
            .iter()
            .map(|p| {
                Parameter::with_requires_grad(
                    Tensor::scalar_of(1.0, DType::F32),
                    &format!("stat.{}", p.name()),
                    false,
                )
            })
            .collect();
        SGD {
            accum: core.clone_state("accum", 0.0),
            stat,
            core,
            momentum,
            dampening,
            nesterov,
        }
    }

    pub fn new(params: Vec<Parameter>, learning_rate: impl Into<LearningRate>) -> Result<Arc<SGD>> {
        SGD::config(params, learning_rate).build()
    }
    pub fn config(params: Vec<Parameter>, learning_rate: impl Into<LearningRate>) -> SGDConfig {
        SGDConfig {
            params,
            lr: learning_rate.into(),
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            filter: DecayFilter::MindSporeDefault,
            nesterov: false,
        }
    }
}

impl Optimizer for SGD {
    fn params(&self) -> &[Parameter] {
        &self.core.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        self.core.check_grads(grads)?;
        let lr = self.core.next_lr()?;
        for (i, p) in self.core.params.iter().enumerate() {
            let mut g = self.core.decayed_grad(i, &grads[i])?;
            if self.momentum != 0.0 {
                let (buf, stat) = (&self.accum[i], &self.stat[i]);
                let first = stat.value().greater(&Tensor::scalar(0.0f32))?;
                let later = buf
                    .value()
                    .mul_scalar(self.momentum)?
                    .add(&g.mul_scalar(1.0 - self.dampening)?)?;
                let b = Tensor::select(&first, &g, &later)?;
                let b = super::store(buf, &b)?;
                stat.assign(&Tensor::zeros(&[], DType::F32)?)?;
                g = if self.nesterov {
                    g.add(&b.mul_scalar(self.momentum)?)?
                } else {
                    b
                };
            }
            let w = p.value();
            p.assign(&w.sub(&g.mul(&lr_for(&lr, &w)?)?)?)?;
        }
        Ok(())
    }
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        Ok(Arc::new(SGD::assemble(
            self.core.on_params(shards)?,
            self.momentum,
            self.dampening,
            self.nesterov,
        )))
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        let mut s = self.core.state();
        s.extend(named(&[&self.accum, &self.stat]));
        s
    }
    fn class_name(&self) -> &'static str {
        "SGD"
    }
    fn core(&self) -> &OptimizerCore {
        &self.core
    }
}
