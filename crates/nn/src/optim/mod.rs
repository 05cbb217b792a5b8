//! Optimizers written in tensor ops and `Parameter::assign`, so that an update traces into
//! the training-step graph: `Momentum`, `SGD`, `Adam`, `AdamWeightDecay`, `AdamW`,
//! `RMSProp`, with learning-rate schedules computed from a `global_step` parameter.
//!
//! Every optimizer's state is a list of non-trainable parameters named as MindSpore names
//! them (`global_step`, `learning_rate`, `moments.conv1.weight`, ...), which checkpoints
//! save and restore for resuming.
//!
//! ```
//! use spore_core::{DType, Parameter, Tensor};
//! use spore_nn::optim::{Momentum, Optimizer};
//! let w = Parameter::new(Tensor::ones(&[2], DType::F32).unwrap(), "w");
//! let opt = Momentum::new(vec![w.clone()], 0.1, 0.9).unwrap();
//! let g = Tensor::ones(&[2], DType::F32).unwrap();
//! opt.apply(&[g.clone()]).unwrap(); // v = 1, w = 1 - 0.1
//! opt.apply(&[g]).unwrap(); // v = 1.9, w = 0.9 - 0.19
//! assert!((w.value().to_vec::<f32>().unwrap()[0] - 0.71).abs() < 1e-6);
//! let names: Vec<String> = opt.state().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["learning_rate", "global_step", "moments.w"]);
//! ```

mod adam;
mod momentum;
mod rmsprop;
pub mod schedule;
mod sgd;

use std::sync::Arc;

pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig, AdamWeightDecay, AdamWeightDecayConfig};
pub use momentum::{Momentum, MomentumConfig};
pub use rmsprop::{RMSProp, RMSPropConfig};
pub use schedule::{
    CosineDecayLR, DynamicLR, ExponentialDecayLR, LrSchedule, PiecewiseConstantLR, WarmUpLR,
    WarmupCosineLR,
};
pub use sgd::{SGD, SGDConfig};

use spore_core::{DType, Error, Parameter, Result, Tensor};

/// An optimizer: updates its parameters from gradients given in the same order.
pub trait Optimizer: Send + Sync + 'static {
    /// The parameters it updates (the weights `TrainOneStepCell` differentiates).
    fn params(&self) -> &[Parameter];
    /// One update. Tensor ops and `assign` only, so that it traces into graphs: the
    /// training cells run it compiled in PyNative mode too (no host reads of values,
    /// no state kept outside parameters).
    fn apply(&self, grads: &[Tensor]) -> Result<()>;
    /// The state to checkpoint, with MindSpore's names.
    fn state(&self) -> Vec<(String, Parameter)>;
    fn class_name(&self) -> &'static str;
    /// The shared state (learning rate, `global_step`); callbacks use it to read and set
    /// the learning rate.
    fn core(&self) -> &OptimizerCore;
    /// Sets a fixed learning rate (an error when the optimizer follows a schedule).
    fn set_learning_rate(&self, lr: f64) -> Result<()> {
        self.core().set_learning_rate(lr)
    }
    /// The current fixed learning rate (`None` for a schedule).
    fn learning_rate(&self) -> Option<f64> {
        self.core().fixed_learning_rate()
    }
    /// Whether the optimizer reduces the gradients across ranks itself (the parallel
    /// optimizer), so that a training cell must hand it unreduced gradients.
    fn reduces_gradients(&self) -> bool {
        false
    }
    /// The same optimizer (hyper-parameters, learning rate and step shared with this
    /// one, weight decay decided per parameter as here) over `shards`, one per parameter
    /// in order, with fresh state of the shards' sizes: what the parallel optimizer
    /// (`enable_parallel_optimizer`) runs on each rank's slice of every parameter. Only
    /// element-wise updates can run on slices; an optimizer whose update reads a whole
    /// parameter must not implement this. Once rebuilt, the original must not be applied
    /// any more: the two would advance the shared step twice.
    fn on_shards(&self, shards: Vec<Parameter>) -> Result<Arc<dyn Optimizer>> {
        let _ = shards;
        Err(Error::invalid(format!(
            "{} cannot run on parameter shards, so it does not support the parallel optimizer \
             (enable_parallel_optimizer)",
            self.class_name()
        )))
    }
}

/// A fixed learning rate or a schedule of the step.
#[derive(Clone)]
pub enum LearningRate {
    Fixed(f64),
    Schedule(Arc<dyn LrSchedule>),
}

impl From<f64> for LearningRate {
    fn from(v: f64) -> Self {
        LearningRate::Fixed(v)
    }
}

impl<S: LrSchedule> From<S> for LearningRate {
    fn from(s: S) -> Self {
        LearningRate::Schedule(Arc::new(s))
    }
}

impl From<Arc<dyn LrSchedule>> for LearningRate {
    fn from(s: Arc<dyn LrSchedule>) -> Self {
        LearningRate::Schedule(s)
    }
}

/// Which parameters weight decay applies to.
#[derive(Clone)]
pub enum DecayFilter {
    /// Every parameter.
    All,
    /// MindSpore's default: names without `beta` or `gamma` (norm parameters are skipped).
    MindSporeDefault,
    /// Skips biases and normalisation parameters: rank <= 1, or names ending in
    /// `bias`, `beta` or `gamma`.
    SkipBiasAndNorm,
    /// A predicate on the parameter.
    Custom(Arc<dyn Fn(&Parameter) -> bool + Send + Sync>),
}

impl DecayFilter {
    pub fn applies(&self, p: &Parameter) -> bool {
        let name = p.name();
        match self {
            DecayFilter::All => true,
            DecayFilter::MindSporeDefault => !name.contains("beta") && !name.contains("gamma"),
            DecayFilter::SkipBiasAndNorm => {
                p.tensor_type().rank() > 1
                    && !["bias", "beta", "gamma"].iter().any(|s| name.ends_with(s))
            }
            DecayFilter::Custom(f) => f(p),
        }
    }
}

/// What all optimizers share: parameters, learning rate, `global_step`, weight decay.
pub struct OptimizerCore {
    class: &'static str,
    pub params: Vec<Parameter>,
    lr: LearningRate,
    /// The fixed learning rate as a parameter: changing it never recompiles a graph.
    lr_param: Option<Parameter>,
    /// Int32 `[1]`, starting at 0 (MindSpore's `global_step`).
    pub global_step: Parameter,
    pub weight_decay: f64,
    decay: Vec<bool>,
}

impl OptimizerCore {
    pub fn new(
        class: &'static str,
        params: Vec<Parameter>,
        lr: LearningRate,
        weight_decay: f64,
        filter: &DecayFilter,
    ) -> Result<OptimizerCore> {
        if params.is_empty() {
            return Err(Error::invalid(format!(
                "{class}: the parameter list is empty"
            )));
        }
        if let Some(p) = params.iter().find(|p| !p.tensor_type().dtype.is_float()) {
            return Err(Error::invalid(format!(
                "{class}: parameter {} is {}, only float parameters can be optimised",
                p.name(),
                p.tensor_type().dtype
            )));
        }
        if !(weight_decay >= 0.0 && weight_decay.is_finite()) {
            return Err(Error::invalid(format!(
                "{class}: weight_decay must be a non-negative number, got {weight_decay}"
            )));
        }
        let lr_param = match &lr {
            LearningRate::Fixed(v) => {
                if !(v.is_finite() && *v >= 0.0) {
                    return Err(Error::invalid(format!(
                        "{class}: learning_rate must be a non-negative number, got {v}"
                    )));
                }
                Some(Parameter::with_requires_grad(
                    Tensor::scalar(*v as f32),
                    "learning_rate",
                    false,
                ))
            }
            LearningRate::Schedule(_) => None,
        };
        let decay = params
            .iter()
            .map(|p| weight_decay > 0.0 && filter.applies(p))
            .collect();
        Ok(OptimizerCore {
            class,
            params,
            lr,
            lr_param,
            global_step: Parameter::with_requires_grad(
                Tensor::zeros(&[1], DType::I32)?,
                "global_step",
                false,
            ),
            weight_decay,
            decay,
        })
    }

    /// This core over other parameters, one per parameter in order (see
    /// [`Optimizer::on_shards`]): the learning rate and `global_step` are shared with
    /// this core, and each parameter decays as the one it stands for.
    pub fn on_params(&self, params: Vec<Parameter>) -> Result<OptimizerCore> {
        if params.len() != self.params.len() {
            return Err(Error::invalid(format!(
                "{}: {} shards for {} parameters",
                self.class,
                params.len(),
                self.params.len()
            )));
        }
        Ok(OptimizerCore {
            class: self.class,
            params,
            lr: self.lr.clone(),
            lr_param: self.lr_param.clone(),
            global_step: self.global_step.clone(),
            weight_decay: self.weight_decay,
            decay: self.decay.clone(),
        })
    }

    /// Checks one gradient per parameter, each of the parameter's type.
    pub fn check_grads(&self, grads: &[Tensor]) -> Result<()> {
        if grads.len() != self.params.len() {
            return Err(Error::invalid(format!(
                "{}: expected {} gradients (one per parameter), got {}",
                self.class,
                self.params.len(),
                grads.len()
            )));
        }
        for (p, g) in self.params.iter().zip(grads) {
            if &p.tensor_type() != g.tensor_type() {
                return Err(Error::invalid(format!(
                    "{}: the gradient for {} is {} but the parameter is {}",
                    self.class,
                    p.name(),
                    g.tensor_type(),
                    p.tensor_type()
                )));
            }
        }
        Ok(())
    }

    /// The current step as a Float32 scalar (0 at the first update).
    pub fn step_f32(&self) -> Result<Tensor> {
        self.global_step.value().cast(DType::F32)?.reshape(&[])
    }

    /// The learning rate for this update (a Float32 scalar), then `global_step += 1`.
    pub fn next_lr(&self) -> Result<Tensor> {
        let lr = match (&self.lr, &self.lr_param) {
            (_, Some(p)) => p.value(),
            (LearningRate::Schedule(s), None) => s.learning_rate(&self.step_f32()?)?,
            (LearningRate::Fixed(v), None) => Tensor::scalar(*v as f32),
        };
        let step = self.global_step.value();
        self.global_step
            .assign(&step.add(&Tensor::scalar_of(1.0, DType::I32))?)?;
        Ok(lr)
    }

    /// Whether weight decay applies to parameter `i`.
    pub fn decays(&self, i: usize) -> bool {
        self.decay[i]
    }

    /// `g + weight_decay * p` where decay applies (MindSpore's `decay_weight`), else `g`.
    pub fn decayed_grad(&self, i: usize, g: &Tensor) -> Result<Tensor> {
        if self.decay[i] {
            g.add(&self.params[i].value().mul_scalar(self.weight_decay)?)
        } else {
            Ok(g.clone())
        }
    }

    /// Per-parameter state named `prefix.param_name`, filled with `value`.
    pub fn clone_state(&self, prefix: &str, value: f64) -> Vec<Parameter> {
        self.params
            .iter()
            .map(|p| {
                Parameter::with_requires_grad(
                    p.stored().full_like(value),
                    &format!("{prefix}.{}", p.name()),
                    false,
                )
            })
            .collect()
    }

    /// `learning_rate` (when fixed) and `global_step`.
    pub fn state(&self) -> Vec<(String, Parameter)> {
        let mut v: Vec<(String, Parameter)> = self
            .lr_param
            .iter()
            .map(|p| ("learning_rate".to_string(), p.clone()))
            .collect();
        v.push(("global_step".to_string(), self.global_step.clone()));
        v
    }

    /// The fixed learning rate's current value (`None` for a schedule).
    pub fn fixed_learning_rate(&self) -> Option<f64> {
        self.lr_param.as_ref().and_then(|p| p.stored().item().ok())
    }

    /// Sets a fixed learning rate (no recompilation: it is a graph input).
    pub fn set_learning_rate(&self, lr: f64) -> Result<()> {
        match &self.lr_param {
            Some(p) => p.assign(&Tensor::scalar(lr as f32)),
            None => Err(Error::invalid(format!(
                "{}: the learning rate is a schedule; it cannot be set to a constant",
                self.class
            ))),
        }
    }
}

/// Assigns `value` to `p` and returns what `p` now holds: `value` itself, or under
/// [`assign_if`](spore_core::conditional_assign::assign_if) the value selected on its
/// flag. An update that goes on from state it has just written reads it through this,
/// so that under a flag its later values follow the selected state (and a compiled step
/// computes and selects that state in one loop, which the rest then reads).
pub(crate) fn store(p: &Parameter, value: &Tensor) -> Result<Tensor> {
    p.assign(value)?;
    Ok(p.value())
}

/// `(name, parameter)` pairs of per-parameter state lists.
pub(crate) fn named(lists: &[&[Parameter]]) -> Vec<(String, Parameter)> {
    lists
        .iter()
        .flat_map(|l| l.iter().map(|p| (p.name(), p.clone())))
        .collect()
}

/// `lr` (Float32) as the dtype of `p`.
pub(crate) fn lr_for(lr: &Tensor, p: &Tensor) -> Result<Tensor> {
    lr.cast(p.dtype())
}
