//! MindSpore's training wrappers. [`WithLossCell`] joins a backbone and a loss;
//! [`TrainOneStepCell`] runs one training step per call: forward, backward
//! (`value_and_grad` over the optimizer's parameters) and the optimizer update, returning
//! the loss. In Graph mode (or with `set_jit(true)`) the whole step is one compiled graph.
//!
//! Both keep the wrapped network's parameter names (MindSpore's `auto_prefix=False`), and
//! a `TrainOneStepCell`'s parameters include the optimizer state, so checkpointing it
//! saves everything needed to resume.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = Dense::new(4, 3).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
//! let train = TrainOneStepCell::new(WithLossCell::new(net, loss), opt);
//! let names: Vec<String> = train.parameters_and_names().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["weight", "bias", "learning_rate", "global_step", "moments.weight", "moments.bias"]);
//! let x = Tensor::ones(&[2, 4], DType::F32).unwrap();
//! let y = Tensor::from_vec(vec![0i32, 2], &[2]).unwrap();
//! assert!(train.step(&x, &y).unwrap().item().unwrap() > 0.0);
//! ```

use std::sync::Arc;

use spore_core::autodiff::value_and_grad_reporting;
use spore_core::{Error, Parameter, Result, Tensor, no_grad, value_and_grad};

use crate::cell::{Cell, CellBase, CellCall, CellExt};
use crate::optim::Optimizer;

/// `loss_fn(backbone(data), label)`.
pub struct WithLossCell {
    base: CellBase,
    backbone: Arc<dyn Cell>,
    loss_fn: Arc<dyn Cell>,
}

impl WithLossCell {
    pub fn new<B: Cell, L: Cell>(backbone: Arc<B>, loss_fn: Arc<L>) -> Arc<WithLossCell> {
        WithLossCell::new_dyn(backbone, loss_fn)
    }
    pub fn new_dyn(backbone: Arc<dyn Cell>, loss_fn: Arc<dyn Cell>) -> Arc<WithLossCell> {
        Arc::new(WithLossCell {
            base: CellBase::new(),
            backbone,
            loss_fn,
        })
    }
    pub fn backbone(&self) -> &Arc<dyn Cell> {
        &self.backbone
    }
    pub fn loss_fn(&self) -> &Arc<dyn Cell> {
        &self.loss_fn
    }
}

impl Cell for WithLossCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [data, label] = inputs else {
            return Err(Error::invalid(format!(
                "WithLossCell: expected 2 inputs (data, label), got {}",
                inputs.len()
            )));
        };
        let out = self.backbone.call1(data)?;
        self.loss_fn.call(&[out, label.clone()])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            ("_backbone".into(), self.backbone.clone()),
            ("_loss_fn".into(), self.loss_fn.clone()),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "WithLossCell"
    }
    fn auto_prefix(&self) -> bool {
        false
    }
}

/// Holds an optimizer's state as the parameters of a cell, so that the state appears in
/// `parameters_and_names` (and checkpoints) after the network's parameters.
pub(crate) struct OptimizerState {
    base: CellBase,
    optimizer: Arc<dyn Optimizer>,
}

impl OptimizerState {
    pub(crate) fn new(optimizer: Arc<dyn Optimizer>) -> Arc<OptimizerState> {
        Arc::new(OptimizerState {
            base: CellBase::new(),
            optimizer,
        })
    }
}

impl Cell for OptimizerState {
    fn construct(&self, _inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Err(Error::invalid(format!(
            "{}: an optimizer is applied by TrainOneStepCell, not called",
            self.optimizer.class_name()
        )))
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.optimizer.state()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        self.optimizer.class_name()
    }
}

/// One training step per call: `call(&[data, label])` returns `[loss]`.
pub struct TrainOneStepCell {
    base: CellBase,
    network: Arc<dyn Cell>,
    optimizer: Arc<dyn Optimizer>,
    state: Arc<OptimizerState>,
    /// The optimizer's update, compiled (see [`ApplyGradients`]).
    update: Arc<ApplyGradients>,
    /// Why the distributed job's optimizer could not be set up; the first call reports it.
    setup_error: Option<String>,
}

impl TrainOneStepCell {
    /// Wraps a network that returns the loss (usually a [`WithLossCell`]) and switches it
    /// to training mode.
    pub fn new<N: Cell, O: Optimizer>(network: Arc<N>, optimizer: Arc<O>) -> Arc<TrainOneStepCell> {
        TrainOneStepCell::new_dyn(network, optimizer)
    }

    /// In a job with the parallel optimizer (`enable_parallel_optimizer`), `optimizer`
    /// is replaced by one that runs it on this rank's slices of the parameters.
    pub fn new_dyn(network: Arc<dyn Cell>, optimizer: Arc<dyn Optimizer>) -> Arc<TrainOneStepCell> {
        let (optimizer, setup_error) =
            match crate::distributed::training_optimizer(optimizer.clone()) {
                Ok(o) => (o, None),
                Err(e) => (optimizer, Some(e.to_string())),
            };
        let state = OptimizerState::new(optimizer.clone());
        let cell = Arc::new(TrainOneStepCell {
            base: CellBase::new(),
            network,
            update: ApplyGradients::new(optimizer.clone(), state.clone()),
            state,
            optimizer,
            setup_error,
        });
        cell.set_train(true);
        cell
    }

    pub fn network(&self) -> &Arc<dyn Cell> {
        &self.network
    }
    pub fn optimizer(&self) -> &Arc<dyn Optimizer> {
        &self.optimizer
    }

    /// One step on `(data, label)`; returns the loss.
    pub fn step(self: &Arc<Self>, data: &Tensor, label: &Tensor) -> Result<Tensor> {
        self.call_first(&[data.clone(), label.clone()])
    }
}

impl Cell for TrainOneStepCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Some(e) = &self.setup_error {
            return Err(Error::invalid(format!("TrainOneStepCell: {e}")));
        }
        // The same handles go to value_and_grad as weights and are read again by the layers
        // inside the call (Parameter::value returns the same tensor until it is assigned).
        let weights: Vec<Tensor> = self.optimizer.params().iter().map(|p| p.value()).collect();
        let network = self.network.clone();
        let loss = move |x: &[Tensor]| -> Result<Tensor> {
            let mut out = network.call(x)?;
            if out.is_empty() {
                return Err(Error::invalid(
                    "TrainOneStepCell: the network returned no outputs; it must return the loss",
                ));
            }
            Ok(out.remove(0))
        };
        // Data parallelism: each weight's gradient reduction starts as the backward pass
        // finishes it, and the optimizer gets the reduced gradients.
        let reduction = match crate::distributed::current() {
            Some(_) if self.optimizer.reduces_gradients() => None,
            Some(d) => d.gradient_reduction(self.optimizer.params(), &weights)?,
            None => None,
        };
        let (value, weight_grads) = match reduction {
            None => {
                let out = value_and_grad(loss, None, &weights, false)(inputs)?;
                (out.value, out.weight_grads)
            }
            Some(mut r) => {
                let out =
                    value_and_grad_reporting(&loss, None, &weights, false, inputs, &mut |i, g| {
                        r.gradient_ready(i, g)
                    })?;
                (out.value, r.finish(out.weight_grads)?)
            }
        };
        if !weights.is_empty() && !value.requires_grad() {
            // Without this check every gradient would silently be zero.
            return Err(Error::invalid(
                "TrainOneStepCell: the loss does not depend on the optimizer's parameters, so every gradient would be zero. \
                 A jit-compiled cell whose graph updates state (BatchNorm in training) is not differentiable from PyNative mode; \
                 compile the whole step instead (Graph mode or set_jit on the TrainOneStepCell)",
            ));
        }
        // The step's handles on the old weights, and the loss's autodiff record (which
        // holds the forward pass, weights included), go before the update, so that it can
        // write over the weights' buffers. It needs no autodiff record.
        drop(weights);
        let loss = value.detach();
        drop(value);
        no_grad(|| self.update.call(&weight_grads))?;
        Ok(vec![loss])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            ("network".into(), self.network.clone()),
            ("optimizer".into(), self.state.clone() as Arc<dyn Cell>),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "TrainOneStepCell"
    }
    fn auto_prefix(&self) -> bool {
        false
    }
    fn before_first_call(&self) -> Result<()> {
        match crate::distributed::current() {
            Some(d) => d.prepare_parameters(&self.parameters_and_names()),
            None => Ok(()),
        }
    }
}

/// `call(&gradients)`: the optimizer's update with these gradients; returns nothing.
/// Compiled in PyNative mode too (`set_jit`): an update is tensor ops only, and as one
/// graph it runs as a few fused loops per parameter instead of a pass over memory per
/// op (a dozen for Adam), as MindSpore runs its optimizers as fused kernels. (Inside a
/// compiled step it is traced inline like any cell.)
pub(crate) struct ApplyGradients {
    base: CellBase,
    optimizer: Arc<dyn Optimizer>,
    state: Arc<dyn Cell>,
}

impl ApplyGradients {
    pub(crate) fn new(optimizer: Arc<dyn Optimizer>, state: Arc<dyn Cell>) -> Arc<Self> {
        let cell = Arc::new(ApplyGradients {
            base: CellBase::new(),
            optimizer,
            state,
        });
        cell.set_train(true);
        cell.set_jit(true);
        cell
    }
}

impl Cell for ApplyGradients {
    fn construct(&self, grads: &[Tensor]) -> Result<Vec<Tensor>> {
        no_grad(|| self.optimizer.apply(grads))?;
        Ok(vec![])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![("optimizer".into(), self.state.clone())]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "ApplyGradients"
    }
    fn auto_prefix(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::{Dense, MSELoss, Momentum, Reduction};
    use spore_core::{DType, TensorType};

    /// In PyNative mode the compiled update writes every new value (weights and
    /// momenta) over the old one's buffer: nothing of the step still holds them.
    #[test]
    fn the_pynative_update_writes_over_the_parameters() {
        let net = WithLossCell::new(Dense::new(16, 8).unwrap(), MSELoss::new(Reduction::Mean));
        let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
        let step = TrainOneStepCell::new(net, opt);
        let (x, y) = (
            Tensor::ones(&[4, 16], DType::F32).unwrap(),
            Tensor::zeros(&[4, 8], DType::F32).unwrap(),
        );
        for _ in 0..3 {
            step.call(&[x.clone(), y.clone()]).unwrap();
        }
        let types: Vec<TensorType> = step
            .optimizer()
            .params()
            .iter()
            .map(|p| p.tensor_type())
            .collect();
        let jit = step
            .update
            .base()
            .compiled(true)
            .expect("the update compiled");
        // Weight and bias, and their two momenta, in each of the 3 steps.
        assert_eq!(jit.in_place_updates_for(&types), Some(12));
    }
}
