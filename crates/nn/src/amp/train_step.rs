//! MindSpore's `TrainOneStepWithLossScaleCell`: one training step whose loss is scaled
//! before the backward pass; the gradients are unscaled, checked for overflow in one
//! pass ([`all_finite`]), and applied unless the manager drops the step. `call` returns
//! `[loss, overflow, loss_scale]` as MindSpore's returns `(loss, cond, scaling_sens)`.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::amp::{FixedLossScaleManager, TrainOneStepWithLossScaleCell};
//! use spore_nn::prelude::*;
//! let net = Dense::new(4, 3).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
//! let scale = FixedLossScaleManager::new(128.0, true).unwrap();
//! let step = TrainOneStepWithLossScaleCell::new(WithLossCell::new(net, loss), opt, scale);
//! let x = Tensor::ones(&[2, 4], DType::F32).unwrap();
//! let y = Tensor::from_vec(vec![0i32, 2], &[2]).unwrap();
//! let out = step.call(&[x, y]).unwrap();
//! assert_eq!(out[1].item().unwrap(), 0.0); // no overflow
//! assert_eq!(out[2].item().unwrap(), 128.0);
//! ```
//!
//! Where it differs from MindSpore: the step runs eagerly in both modes (the overflow
//! check and the conditional update read values on the host); MindSpore compiles all of
//! it into one graph with control flow. MindSpore also refuses dynamic loss scaling on CPUs;
//! Spore allows it (its CPU kernels report overflow like any other).

use std::sync::Arc;

use spore_core::{DType, Error, Result, Tensor, no_grad, value_and_grad};

use super::loss_scale::{LossScaleManager, all_finite};
use crate::cell::{Cell, CellBase, CellCall, CellExt};
use crate::optim::Optimizer;
use crate::wrap::OptimizerState;

/// One loss-scaled training step per call: `call(&[data, label])`.
pub struct TrainOneStepWithLossScaleCell {
    base: CellBase,
    network: Arc<dyn Cell>,
    optimizer: Arc<dyn Optimizer>,
    state: Arc<OptimizerState>,
    manager: Arc<dyn LossScaleManager>,
}

impl TrainOneStepWithLossScaleCell {
    /// Wraps a network returning the loss, in training mode.
    pub fn new<N: Cell, O: Optimizer, M: LossScaleManager + 'static>(
        network: Arc<N>,
        optimizer: Arc<O>,
        manager: M,
    ) -> Arc<TrainOneStepWithLossScaleCell> {
        TrainOneStepWithLossScaleCell::new_dyn(network, optimizer, Arc::new(manager))
    }

    pub fn new_dyn(
        network: Arc<dyn Cell>,
        optimizer: Arc<dyn Optimizer>,
        manager: Arc<dyn LossScaleManager>,
    ) -> Arc<TrainOneStepWithLossScaleCell> {
        let cell = Arc::new(TrainOneStepWithLossScaleCell {
            base: CellBase::new(),
            network,
            state: OptimizerState::new(optimizer.clone()),
            optimizer,
            manager,
        });
        cell.set_train(true);
        cell
    }

    /// The loss-scale manager.
    pub fn manager(&self) -> &Arc<dyn LossScaleManager> {
        &self.manager
    }

    /// One step on `(data, label)`; returns the loss.
    pub fn step(self: &Arc<Self>, data: &Tensor, label: &Tensor) -> Result<Tensor> {
        self.call_first(&[data.clone(), label.clone()])
    }
}

impl Cell for TrainOneStepWithLossScaleCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if crate::distributed::current().is_some() {
            // Ranks would have to agree on the overflow and reduce the gradients first.
            return Err(Error::invalid(
                "TrainOneStepWithLossScaleCell: data-parallel training with loss scaling is not supported yet; use TrainOneStepCell (amp O3 or O1, or no loss_scale_manager)",
            ));
        }
        let weights: Vec<Tensor> = self.optimizer.params().iter().map(|p| p.value()).collect();
        let scale = self.manager.loss_scale();
        let network = self.network.clone();
        let scaled_loss = move |x: &[Tensor]| -> Result<(Tensor, Tensor)> {
            let loss = network.call_first(x)?;
            // The loss in float32, whatever the network computed in.
            let loss = loss.cast(DType::F32)?;
            Ok((loss.mul_scalar(scale)?, loss))
        };
        // Eagerly, network included: differentiating the network's compiled call from this
        // host-side step (which rematerialises it) took 670 ms per LeNet step in a release
        // build, against 8 ms eagerly (measured once, this issue's session).
        let out =
            crate::call::run_eagerly(|| value_and_grad(scaled_loss, None, &weights, true)(inputs))?;
        let loss = out.aux.into_iter().next().ok_or_else(|| {
            Error::invalid("TrainOneStepWithLossScaleCell: the loss went missing")
        })?;
        let grads = no_grad(|| {
            out.weight_grads
                .iter()
                .map(|g| g.div_scalar(scale))
                .collect::<Result<Vec<_>>>()
        })?;
        let overflow = !all_finite(&grads)?;
        if self.manager.update(overflow) {
            no_grad(|| self.optimizer.apply(&grads))?;
        }
        Ok(vec![
            loss,
            Tensor::scalar(overflow),
            Tensor::scalar(scale as f32),
        ])
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
        "TrainOneStepWithLossScaleCell"
    }
    fn auto_prefix(&self) -> bool {
        false
    }
    /// The overflow check reads the gradients' values on the host: the step runs eagerly.
    fn compiles(&self) -> bool {
        false
    }
}
