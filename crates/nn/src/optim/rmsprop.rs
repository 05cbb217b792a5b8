//! `RMSProp` (MindSpore's formula): the mean square starts at 1 and epsilon sits inside
//! the square root; `ms = decay * ms + (1 - decay) g^2`,
//! `mom = momentum * mom + lr * g / sqrt(ms + eps)`, `p -= mom`. Centered:
//! `mg = decay * mg + (1 - decay) g` and `sqrt(ms - mg^2 + eps)`.
//!
//! ```
//! use spore_core::{DType, Parameter, Tensor};
//! use spore_nn::optim::{Optimizer, RMSProp};
//! let w = Parameter::new(Tensor::zeros(&[1], DType::F64).unwrap(), "w");
//! let opt = RMSProp::new(vec![w.clone()], 0.1).unwrap();
//! opt.apply(&[Tensor::ones(&[1], DType::F64).unwrap()]).unwrap();
//! // ms = 0.9 * 1 + 0.1 * 1 = 1, so the step is lr * 1 / sqrt(1 + 1e-10).
//! assert!((w.value().item().unwrap() + 0.1).abs() < 1e-7);
//! ```

use std::sync::Arc;

use spore_core::{Error, Parameter, Result, Tensor};

use super::{DecayFilter, LearningRate, Optimizer, OptimizerCore, lr_for, named};

/// MindSpore's `nn.RMSProp`.
pub struct RMSProp {
    pub core: OptimizerCore,
    pub decay: f64,
    pub momentum: f64,
    pub epsilon: f64,
    pub centered: bool,
    mean_square: Vec<Parameter>,
    moment: Vec<Parameter>,
    mean_grad: Vec<Parameter>,
}

/// `RMSProp`'s arguments (defaults: decay 0.9, momentum 0, epsilon 1e-10, not centered).
pub struct RMSPropConfig {
    params: Vec<Parameter>,
    lr: LearningRate,
    decay: f64,
    momentum: f64,
    epsilon: f64,
    centered: bool,
    weight_decay: f64,
    filter: DecayFilter,
}

impl RMSPropConfig {
    pub fn decay(mut self, d: f64) -> Self {
        self.decay = d;
        self
    }
    pub fn momentum(mut self, m: f64) -> Self {
        self.momentum = m;
        self
    }
    pub fn epsilon(mut self, e: f64) -> Self {
        self.epsilon = e;
        self
    }
    pub fn centered(mut self, on: bool) -> Self {
        self.centered = on;
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
    pub fn build(self) -> Result<Arc<RMSProp>> {
        let ok = (0.0..=1.0).contains(&self.decay)
            && self.momentum >= 0.0
            && self.momentum.is_finite()
            && self.epsilon > 0.0;
        if !ok {
            return Err(Error::invalid(format!(
                "RMSProp: decay must be in [0, 1], momentum non-negative and epsilon positive, got decay={} momentum={} epsilon={}",
                self.decay, self.momentum, self.epsilon
            )));
        }
        let core = OptimizerCore::new(
            "RMSProp",
            self.params,
            self.lr,
            self.weight_decay,
            &self.filter,
        )?;
        let mean_grad = if self.centered {
            core.clone_state("mean_grad", 0.0)
        } else {
            vec![]
        };
        Ok(Arc::new(RMSProp {
            mean_square: core.clone_state("mean_square", 1.0),
            moment: core.clone_state("moment", 0.0),
            mean_grad,
            core,
            decay: self.decay,
            momentum: self.momentum,
            epsilon: self.epsilon,
            centered: self.centered,
        }))
    }
}

impl RMSProp {
    pub fn new(
        params: Vec<Parameter>,
        learning_rate: impl Into<LearningRate>,
    ) -> Result<Arc<RMSProp>> {
        RMSProp::config(params, learning_rate).build()
    }
    pub fn config(params: Vec<Parameter>, learning_rate: impl Into<LearningRate>) -> RMSPropConfig {
        RMSPropConfig {
            params,
            lr: learning_rate.into(),
            decay: 0.9,
            momentum: 0.0,
            epsilon: 1e-10,
            centered: false,
            weight_decay: 0.0,
            filter: DecayFilter::MindSporeDefault,
        }
    }
}

impl Optimizer for RMSProp {
    fn params(&self) -> &[Parameter] {
        &self.core.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        self.core.check_grads(grads)?;
        let lr = self.core.next_lr()?;
        let d = self.decay;
        for (i, p) in self.core.params.iter().enumerate() {
            let g = self.core.decayed_grad(i, &grads[i])?;
            let ms = self.mean_square[i]
                .value()
                .mul_scalar(d)?
                .add(&g.mul(&g)?.mul_scalar(1.0 - d)?)?;
            let ms = super::store(&self.mean_square[i], &ms)?;
            let inner = if self.centered {
                let mg = self.mean_grad[i]
                    .value()
                    .mul_scalar(d)?
                    .add(&g.mul_scalar(1.0 - d)?)?;
                let mg = super::store(&self.mean_grad[i], &mg)?;
                ms.sub(&mg.mul(&mg)?)?
            } else {
                ms
            };
            let w = p.value();
            let step = g
                .mul(&lr_for(&lr, &w)?)?
                .div(&inner.add_scalar(self.epsilon)?.sqrt()?)?;
            let mom = self.moment[i]
                .value()
                .mul_scalar(self.momentum)?
                .add(&step)?;
            let mom = super::store(&self.moment[i], &mom)?;
            p.assign(&w.sub(&mom)?)?;
        }
        Ok(())
    }
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        let core = self.core.on_params(shards)?;
        Ok(Arc::new(RMSProp {
            mean_grad: match self.centered {
                true => core.clone_state("mean_grad", 0.0),
                false => vec![],
            },
            mean_square: core.clone_state("mean_square", 1.0),
            moment: core.clone_state("moment", 0.0),
            core,
            decay: self.decay,
            momentum: self.momentum,
            epsilon: self.epsilon,
            centered: self.centered,
        }))
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        let mut s = self.core.state();
        s.extend(named(&[&self.mean_square, &self.moment, &self.mean_grad]));
        s
    }
    fn class_name(&self) -> &'static str {
        "RMSProp"
    }
    fn core(&self) -> &OptimizerCore {
        &self.core
    }
}
