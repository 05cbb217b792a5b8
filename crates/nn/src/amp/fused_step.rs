//! The whole loss-scaled training step as one compiled graph (Graph mode, one process):
//! the network, the gradients of the scaled loss, the overflow check and the optimizer's
//! update applied under the check's flag, as MindSpore compiles its
//! `TrainOneStepWithLossScaleCell` into one graph.
//!
//! ```
//! use spore_core::context::{set_context, ContextUpdate, Mode};
//! use spore_core::{DType, Tensor};
//! use spore_nn::amp::{FixedLossScaleManager, TrainOneStepWithLossScaleCell};
//! use spore_nn::prelude::*;
//! set_context(ContextUpdate::new().mode(Mode::Graph)).unwrap();
//! let net = Dense::new(4, 3).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
//! let scale = FixedLossScaleManager::new(128.0, true).unwrap();
//! let step = TrainOneStepWithLossScaleCell::new(WithLossCell::new(net, loss), opt, scale);
//! let x = Tensor::ones(&[2, 4], DType::F32).unwrap();
//! let y = Tensor::from_vec(vec![0i32, 2], &[2]).unwrap();
//! let out = step.call(&[x, y]).unwrap(); // one compiled graph
//! assert_eq!(out[1].item().unwrap(), 0.0); // no overflow
//! set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
//! ```
//!
//! Why one graph: split in two (see [`super::scaled_grads`]), each unscaled gradient is
//! written out in float32 between the graphs, read by the check and read again by the
//! update, and the host waits for the check before it starts the update. In one graph the
//! check reads the scaled gradients (16-bit ones in place: a finite scale of at least 1,
//! which every manager keeps, leaves a gradient finite exactly when it was), and each
//! update loop unscales its gradient as it reads it.
//!
//! Where the manager drops overflowed steps, the update runs under
//! [`assign_if`](spore_core::conditional_assign::assign_if): each value it writes
//! (weights, moments, the step counter) is a `Select` of the new value and the old one
//! on the flag, which the update's loops absorb, so no control flow is needed. The
//! manager still decides on the host after the step (its scale and counters), and the
//! step checks that its decision was the graph's.

use std::sync::Arc;

use spore_core::conditional_assign::assign_if;
use spore_core::{Result, Tensor, no_grad};

use super::scaled_grads::{scaled_loss_and_gradients, unscaled};
use crate::cell::{Cell, CellBase, CellExt};
use crate::optim::Optimizer;

/// `call(&[data.., scale])` → `[loss, all_finite]`, with the update applied in the graph:
/// always, or (`conditional`) only when every gradient is finite.
pub(super) struct LossScaledStep {
    base: CellBase,
    network: Arc<dyn Cell>,
    optimizer: Arc<dyn Optimizer>,
    /// The optimizer's state as a cell (its parameters' names).
    state: Arc<dyn Cell>,
    conditional: bool,
}

impl LossScaledStep {
    pub(super) fn new(
        network: Arc<dyn Cell>,
        optimizer: Arc<dyn Optimizer>,
        state: Arc<dyn Cell>,
        conditional: bool,
    ) -> Arc<Self> {
        let cell = Arc::new(LossScaledStep {
            base: CellBase::new(),
            network,
            optimizer,
            state,
            conditional,
        });
        cell.set_train(true);
        cell
    }

    /// Whether an overflowed step's update is dropped in the graph.
    pub(super) fn conditional(&self) -> bool {
        self.conditional
    }
}

impl Cell for LossScaledStep {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (loss, scale, grads) =
            scaled_loss_and_gradients(&self.network, &self.optimizer, inputs, "LossScaledStep")?;
        no_grad(|| {
            let finite = super::all_finite_tensor(&grads)?;
            let grads = unscaled(&grads, &scale)?;
            if self.conditional {
                assign_if(&finite, || self.optimizer.apply(&grads))?;
            } else {
                self.optimizer.apply(&grads)?;
            }
            Ok(vec![loss, finite])
        })
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            ("network".into(), self.network.clone()),
            ("optimizer".into(), self.state.clone()),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "LossScaledStep"
    }
    fn auto_prefix(&self) -> bool {
        false
    }
}
