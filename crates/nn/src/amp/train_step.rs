//! MindSpore's `TrainOneStepWithLossScaleCell`: one training step whose loss is scaled
//! before the backward pass; the gradients are checked for overflow in one pass
//! ([`all_finite`]), unscaled, and applied unless the manager drops the step. `call` returns
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
//! In a distributed job (data parallel, sharded, pipelined, with or without the parallel
//! optimizer) the ranks agree on each step's overflow, so every rank applies or drops
//! the same steps and keeps the same loss scale; ranks found at different steps are an
//! error. With the parallel optimizer each rank checks its own gradients before they are
//! reduce-scattered, so a sum of finite 16-bit gradients that overflows in the reduction
//! (`gradients_mean` off) is not caught.
//!
//! The manager's state is three parameters of the cell, named as MindSpore names them
//! (`scale_sense`, `current_iterator_step`, `last_overflow_iterator_step`): checkpoints
//! save it, and a step after a checkpoint was loaded continues from it.
//!
//! In Graph mode, in one process, with MindSpore's managers, the step is one compiled
//! graph, as in MindSpore: the update is applied or dropped in the graph on the
//! overflow check's flag, and the manager is told the outcome afterwards (see
//! [`super::fused_step`]). Elsewhere (PyNative mode, a distributed job, whose ranks agree
//! on the overflow between the graphs, or a manager of one's own whose decision varies)
//! it is two compiled graphs, one for the loss, gradients and overflow check and one for
//! the update, with the manager's decision taken on the host between them (see
//! [`super::scaled_grads`]). Where it differs from MindSpore: MindSpore refuses dynamic
//! loss scaling on CPUs; Spore allows it (its CPU kernels report overflow like any other).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use spore_core::context::Mode;
use spore_core::{Error, Result, Tensor, no_grad};

use super::fused_step::LossScaledStep;
use super::loss_scale::LossScaleManager;
use super::scale_params::ScaleParams;
use super::scaled_grads::ScaledGradients;
use crate::cell::{Cell, CellBase, CellCall, CellExt};
use crate::optim::Optimizer;
use crate::wrap::{ApplyGradients, OptimizerState};

/// One loss-scaled training step per call: `call(&[data, label])`.
pub struct TrainOneStepWithLossScaleCell {
    base: CellBase,
    network: Arc<dyn Cell>,
    state: Arc<OptimizerState>,
    manager: Arc<dyn LossScaleManager>,
    gradients: Arc<ScaledGradients>,
    update: Arc<ApplyGradients>,
    /// The whole step as one graph, where the manager's rule is fixed (see
    /// [`LossScaledStep`]).
    fused: Option<Arc<LossScaledStep>>,
    /// The manager's state, saved by checkpoints (see [`super::scale_params`]).
    saved: ScaleParams,
    /// Why the distributed job's optimizer cannot run here; the first call reports it.
    setup_error: Option<String>,
    /// Steps this cell has taken (every rank of a job agrees on it with the overflow).
    steps: AtomicU64,
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
        // The distributed job's optimizer (the parallel optimizer, where the job asks);
        // a job that cannot build it reports why at the first step.
        let (optimizer, setup_error) =
            match crate::distributed::training_optimizer(optimizer.clone()) {
                Ok(o) => (o, None),
                Err(e) => (optimizer, Some(e.to_string())),
            };
        let state = OptimizerState::new(optimizer.clone());
        let fused = manager.applies_overflowed_steps().map(|always| {
            LossScaledStep::new(network.clone(), optimizer.clone(), state.clone(), !always)
        });
        let cell = Arc::new(TrainOneStepWithLossScaleCell {
            fused,
            base: CellBase::new(),
            gradients: ScaledGradients::new(network.clone(), optimizer.clone()),
            update: ApplyGradients::new(optimizer.clone(), state.clone()),
            saved: ScaleParams::new(manager.state()),
            network,
            state,
            manager,
            setup_error,
            steps: AtomicU64::new(0),
        });
        cell.set_train(true);
        cell
    }

    /// The loss-scale manager.
    pub fn manager(&self) -> &Arc<dyn LossScaleManager> {
        &self.manager
    }

    /// The whole step as one cell where Graph mode runs it so (see [`super::fused_step`];
    /// `SPORE_AMP_ONE_GRAPH=0` runs the two graphs instead):
    /// inputs: the data, then the loss scale as a float32 scalar; outputs: the loss and
    /// whether every gradient was finite. Its graph shows what a step computes and holds.
    pub fn fused_step(&self) -> Option<Arc<dyn Cell>> {
        self.fused.clone().map(|c| c as Arc<dyn Cell>)
    }

    /// The two cells a step runs elsewhere (see [`super::scaled_grads`]): the gradients (inputs: the
    /// data, then the loss scale as a float32 scalar; outputs: the loss, whether every
    /// gradient is finite (a boolean), the unscaled gradients) and the update (inputs: the gradients). Where they run in Graph mode each
    /// compiles (the update in PyNative mode too); their graphs show what a step
    /// computes and holds.
    pub fn stages(&self) -> (Arc<dyn Cell>, Arc<dyn Cell>) {
        (self.gradients.clone(), self.update.clone())
    }

    /// One step on `(data, label)`; returns the loss.
    pub fn step(self: &Arc<Self>, data: &Tensor, label: &Tensor) -> Result<Tensor> {
        self.call_first(&[data.clone(), label.clone()])
    }
}

/// False when the environment sets `SPORE_AMP_ONE_GRAPH=0`, to measure or test the two
/// graphs where one would run; read once.
fn one_graph_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var("SPORE_AMP_ONE_GRAPH").as_deref() != Ok("0"))
}

impl TrainOneStepWithLossScaleCell {
    /// One step as one graph: the update was applied or dropped inside it; the manager
    /// learns the outcome and must agree with the graph's rule.
    fn fused_call(
        &self,
        fused: &Arc<LossScaledStep>,
        args: &[Tensor],
        scale: f64,
    ) -> Result<Vec<Tensor>> {
        let mut out = no_grad(|| fused.call(args))?.into_iter();
        let (Some(loss), Some(all_finite)) = (out.next(), out.next()) else {
            return Err(Error::invalid(
                "TrainOneStepWithLossScaleCell: the step's graph returned too few outputs",
            ));
        };
        self.steps.fetch_add(1, Ordering::Relaxed);
        let overflow = no_grad(|| all_finite.item())? == 0.0;
        let applied = self.manager.update(overflow);
        self.saved.write(self.manager.state())?;
        if applied != (!overflow || !fused.conditional()) {
            return Err(Error::invalid(format!(
                "TrainOneStepWithLossScaleCell: {} decided to {} an overflowed step, against its `applies_overflowed_steps`, after the compiled step had {} it",
                self.manager.class_name(),
                if applied { "apply" } else { "drop" },
                if applied { "dropped" } else { "applied" },
            )));
        }
        Ok(vec![
            loss,
            Tensor::scalar(overflow),
            Tensor::scalar(scale as f32),
        ])
    }
}

impl Cell for TrainOneStepWithLossScaleCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Some(e) = &self.setup_error {
            return Err(Error::invalid(format!(
                "TrainOneStepWithLossScaleCell: {e}"
            )));
        }
        // A checkpoint loaded since the last step brings the manager's state with it.
        self.saved.sync_into(&*self.manager)?;
        let scale = self.manager.loss_scale();
        let mut args = inputs.to_vec();
        args.push(Tensor::scalar(scale as f32));
        if let Some(fused) = &self.fused
            && one_graph_allowed()
            && spore_core::context::mode() == Mode::Graph
            && crate::distributed::current().is_none()
            // A finite scale of at least 1 leaves a scaled gradient finite exactly when
            // the unscaled one is, which the fused graph checks (every manager of
            // Spore's keeps its scale so; see `applies_overflowed_steps`).
            && (1.0..=f64::from(f32::MAX)).contains(&scale)
        {
            return self.fused_call(fused, &args, scale);
        }
        // Under no_grad: nothing differentiates the step itself, and a compiled call that
        // updates state (BatchNorm's statistics) runs eagerly where gradients may flow.
        let mut out = no_grad(|| self.gradients.call(&args))?.into_iter();
        let (Some(loss), Some(all_finite)) = (out.next(), out.next()) else {
            return Err(Error::invalid(
                "TrainOneStepWithLossScaleCell: the gradient graph returned too few outputs",
            ));
        };
        let grads: Vec<Tensor> = out.collect();
        // Every rank of a distributed job takes the same decision (see
        // `Distributed::overflow_anywhere`), so their scales and parameters stay in step.
        let step = self.steps.fetch_add(1, Ordering::Relaxed);
        let finite = no_grad(|| all_finite.item())? != 0.0;
        let overflow = crate::distributed::overflow_anywhere(!finite, step)?;
        let apply = self.manager.update(overflow);
        // Saved before the update runs: the parameters follow the manager even when the
        // update then fails.
        self.saved.write(self.manager.state())?;
        if apply {
            no_grad(|| self.update.call(&grads))?;
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
    fn params(&self) -> Vec<(String, spore_core::Parameter)> {
        self.saved.named()
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
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    /// The step itself runs on the host: its one graph, or its two halves, compile (see
    /// the module docs).
    fn compiles(&self) -> bool {
        false
    }
    /// As `TrainOneStepCell`: a distributed job checks that every rank built the same
    /// parameters, and broadcasts rank 0's where asked.
    fn before_first_call(&self) -> Result<()> {
        match crate::distributed::current() {
            Some(d) => d.prepare_parameters(&self.parameters_and_names()),
            None => Ok(()),
        }
    }
}
