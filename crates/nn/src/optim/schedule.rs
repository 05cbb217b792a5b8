//! Learning-rate schedules (MindSpore's `nn.learning_rate_schedule`), computed with tensor
//! ops from the optimizer's `global_step`, so that they trace into the training graph and
//! a step never recompiles it. The step is a Float32 scalar, 0 at the first update.
//!
//! ```
//! use spore_nn::optim::{CosineDecayLR, ExponentialDecayLR, LrSchedule, WarmUpLR};
//! let exp = ExponentialDecayLR::new(0.1, 0.5, 10, true);
//! assert!((exp.at(25).unwrap() - 0.025).abs() < 1e-7); // 0.1 * 0.5^floor(2.5)
//! let cos = CosineDecayLR::new(0.0, 1.0, 100);
//! assert!((cos.at(50).unwrap() - 0.5).abs() < 1e-6);
//! assert!((WarmUpLR::new(0.1, 10).at(5).unwrap() - 0.05).abs() < 1e-7);
//! ```

use spore_core::{DType, Error, Result, Tensor};

/// A learning rate as a function of the step.
pub trait LrSchedule: Send + Sync + 'static {
    /// The learning rate (Float32 scalar) at `step` (Float32 scalar, possibly symbolic).
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor>;

    /// The learning rate at a concrete step (for logging and tests).
    fn at(&self, step: u64) -> Result<f64> {
        self.learning_rate(&Tensor::scalar(step as f32))?.item()
    }
}

fn c(v: f64) -> Tensor {
    Tensor::scalar(v as f32)
}

/// `min(step, limit)`.
fn clamp_max(step: &Tensor, limit: f64) -> Result<Tensor> {
    step.minimum(&c(limit))
}

/// `lr * decay_rate ^ (step / decay_steps)`, the exponent floored when `is_stair`.
pub struct ExponentialDecayLR {
    pub learning_rate: f64,
    pub decay_rate: f64,
    pub decay_steps: u64,
    pub is_stair: bool,
}

impl ExponentialDecayLR {
    pub fn new(learning_rate: f64, decay_rate: f64, decay_steps: u64, is_stair: bool) -> Self {
        ExponentialDecayLR {
            learning_rate,
            decay_rate,
            decay_steps: decay_steps.max(1),
            is_stair,
        }
    }
}

impl LrSchedule for ExponentialDecayLR {
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor> {
        let mut p = step.div_scalar(self.decay_steps as f64)?;
        if self.is_stair {
            // floor of a non-negative value: truncate through Int32.
            p = p.cast(DType::I32)?.cast(DType::F32)?;
        }
        c(self.decay_rate).pow(&p)?.mul_scalar(self.learning_rate)
    }
}

/// `min_lr + (max_lr - min_lr) * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2`.
pub struct CosineDecayLR {
    pub min_lr: f64,
    pub max_lr: f64,
    pub decay_steps: u64,
}

impl CosineDecayLR {
    pub fn new(min_lr: f64, max_lr: f64, decay_steps: u64) -> Self {
        CosineDecayLR {
            min_lr,
            max_lr,
            decay_steps: decay_steps.max(1),
        }
    }
}

impl LrSchedule for CosineDecayLR {
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor> {
        let d = self.decay_steps as f64;
        let p = clamp_max(step, d)?.div_scalar(d)?;
        p.mul_scalar(std::f64::consts::PI)?
            .cos()?
            .add_scalar(1.0)?
            .mul_scalar(0.5 * (self.max_lr - self.min_lr))?
            .add_scalar(self.min_lr)
    }
}

/// `lr * min(step, warmup_steps) / warmup_steps` (MindSpore's `WarmUpLR`: 0 at step 0).
pub struct WarmUpLR {
    pub learning_rate: f64,
    pub warmup_steps: u64,
}

impl WarmUpLR {
    pub fn new(learning_rate: f64, warmup_steps: u64) -> Self {
        WarmUpLR {
            learning_rate,
            warmup_steps: warmup_steps.max(1),
        }
    }
}

impl LrSchedule for WarmUpLR {
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor> {
        let w = self.warmup_steps as f64;
        clamp_max(step, w)?.mul_scalar(self.learning_rate / w)
    }
}

/// Linear warm-up to `max_lr` over `warmup_steps`, then cosine decay to `min_lr` over
/// `decay_steps` (held at `min_lr` after).
pub struct WarmupCosineLR {
    pub warmup: WarmUpLR,
    pub cosine: CosineDecayLR,
}

impl WarmupCosineLR {
    pub fn new(min_lr: f64, max_lr: f64, warmup_steps: u64, decay_steps: u64) -> Self {
        WarmupCosineLR {
            warmup: WarmUpLR::new(max_lr, warmup_steps),
            cosine: CosineDecayLR::new(min_lr, max_lr, decay_steps),
        }
    }
}

impl LrSchedule for WarmupCosineLR {
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor> {
        let w = self.warmup.warmup_steps as f64;
        let warm = self.warmup.learning_rate(step)?;
        let after = step.sub_scalar(w)?.maximum(&c(0.0))?;
        let cos = self.cosine.learning_rate(&after)?;
        Tensor::select(&step.less(&c(w))?, &warm, &cos)
    }
}

/// `values[i]` from `milestones[i-1]` (inclusive) to `milestones[i]` (exclusive); the last
/// value holds after the last milestone (MindSpore's `piecewise_constant_lr`, as a schedule).
pub struct PiecewiseConstantLR {
    pub milestones: Vec<u64>,
    pub values: Vec<f64>,
}

impl PiecewiseConstantLR {
    /// `milestones` strictly increasing, one value per milestone.
    pub fn new(milestones: &[u64], values: &[f64]) -> Result<Self> {
        let increasing = milestones.windows(2).all(|w| w[0] < w[1]);
        if milestones.is_empty() || milestones.len() != values.len() || !increasing {
            return Err(Error::invalid(format!(
                "PiecewiseConstantLR: expected strictly increasing milestones and one value per milestone, got {milestones:?} and {values:?}"
            )));
        }
        Ok(PiecewiseConstantLR {
            milestones: milestones.to_vec(),
            values: values.to_vec(),
        })
    }

    /// The per-step list MindSpore's `piecewise_constant_lr` returns.
    pub fn to_list(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let mut start = 0;
        for (&m, &v) in self.milestones.iter().zip(&self.values) {
            out.extend(std::iter::repeat_n(v, (m - start) as usize));
            start = m;
        }
        out
    }
}

impl LrSchedule for PiecewiseConstantLR {
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor> {
        // values[0] + sum_i (values[i] - values[i-1]) * [step >= milestones[i-1]]
        let mut lr = c(self.values[0]);
        for i in 1..self.values.len() {
            let reached = step
                .greater_equal(&c(self.milestones[i - 1] as f64))?
                .cast(DType::F32)?;
            lr = lr.add(&reached.mul_scalar(self.values[i] - self.values[i - 1])?)?;
        }
        Ok(lr)
    }
}

/// A learning rate per step from a list (MindSpore's list learning rate); the last value
/// holds after the list ends.
pub struct DynamicLR {
    table: Tensor,
    len: usize,
}

impl DynamicLR {
    pub fn new(values: &[f64]) -> Result<Self> {
        if values.is_empty() {
            return Err(Error::invalid(
                "DynamicLR: the list of learning rates is empty",
            ));
        }
        Ok(DynamicLR {
            table: Tensor::from_f64(values, &[values.len()], DType::F32)?,
            len: values.len(),
        })
    }
}

impl LrSchedule for DynamicLR {
    fn learning_rate(&self, step: &Tensor) -> Result<Tensor> {
        let idx = clamp_max(step, (self.len - 1) as f64)?
            .cast(DType::I32)?
            .reshape(&[1])?;
        self.table.gather(&idx, 0)?.reshape(&[])
    }
}
