//! The two compiled halves of a loss-scaled training step ([`super::TrainOneStepWithLossScaleCell`]):
//! [`ScaledGradients`] runs the network, differentiates the scaled loss, unscales the
//! gradients and checks all of them for an infinity or a NaN in one operator (`AllFinite`);
//! `ApplyGradients` (`crate::wrap`) runs the optimizer's update. Between them the step
//! reads that one boolean on the host and asks the loss-scale manager whether to apply
//! the update: the only value that leaves the graphs.
//!
//! When two graphs and not one ([`super::fused_step`]): in PyNative mode (the gradients
//! run op by op and the update compiled, as in `TrainOneStepCell`), in a distributed job
//! (whose ranks agree on the overflow on the host, between the graphs), and with a
//! manager whose decision on an overflowed step varies. Each half compiles in Graph
//! mode, with the loss scale as an input, so a new scale does not recompile. The helpers
//! here (the scaled loss's gradients, unscaling) serve both forms.

use std::sync::Arc;

use spore_core::autodiff::value_and_grad_reporting;
use spore_core::{DType, Error, Result, Tensor, no_grad, value_and_grad};

use crate::cell::{Cell, CellBase, CellCall, CellExt};
use crate::optim::Optimizer;

/// `call(&[data.., scale])` → `[loss, all_finite, unscaled gradients..]`, the loss in
/// float32 and the gradients in the order of the optimizer's parameters.
pub(super) struct ScaledGradients {
    base: CellBase,
    network: Arc<dyn Cell>,
    optimizer: Arc<dyn Optimizer>,
}

impl ScaledGradients {
    pub(super) fn new(network: Arc<dyn Cell>, optimizer: Arc<dyn Optimizer>) -> Arc<Self> {
        let cell = Arc::new(ScaledGradients {
            base: CellBase::new(),
            network,
            optimizer,
        });
        cell.set_train(true);
        cell
    }
}

impl Cell for ScaledGradients {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (loss, scale, grads) =
            scaled_loss_and_gradients(&self.network, &self.optimizer, inputs, "ScaledGradients")?;
        no_grad(|| {
            let grads = unscaled(&grads, &scale)?;
            // Checked after unscaling, as MindSpore's cell checks: an infinity or a NaN
            // in a scaled gradient stays one, and the check reads the values the update
            // will. (Before unscaling it would read each gradient's widening cast, which
            // the unscaling loop otherwise reads in place, and so keep it in memory.)
            let finite = super::all_finite_tensor(&grads)?;
            Ok([vec![loss, finite], grads].concat())
        })
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![("network".into(), self.network.clone())]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "ScaledGradients"
    }
    fn auto_prefix(&self) -> bool {
        false
    }
}

/// For `inputs = [data.., scale]`: the float32 loss (detached), the scale, and the
/// gradients of `loss * scale` for the optimizer's parameters, in their order (reduced
/// across the ranks of a distributed job as the backward pass finishes them). `who`
/// names the calling cell in errors.
pub(super) fn scaled_loss_and_gradients(
    network: &Arc<dyn Cell>,
    optimizer: &Arc<dyn Optimizer>,
    inputs: &[Tensor],
    who: &str,
) -> Result<(Tensor, Tensor, Vec<Tensor>)> {
    let Some((scale, data)) = inputs.split_last() else {
        return Err(Error::invalid(format!(
            "{who}: expected data and a loss scale"
        )));
    };
    let weights: Vec<Tensor> = optimizer.params().iter().map(|p| p.value()).collect();
    let network = network.clone();
    let factor = scale.clone();
    let scaled_loss = move |x: &[Tensor]| -> Result<(Tensor, Tensor)> {
        // The loss in float32, whatever the network computed in.
        let loss = network.call_first(x)?.cast(DType::F32)?;
        Ok((loss.mul(&factor)?, loss))
    };
    // Data parallelism: the gradients are reduced across ranks as the backward pass
    // finishes them (as in `TrainOneStepCell`), before they are unscaled and checked;
    // an optimizer that reduces them itself (the parallel optimizer) gets them as
    // they are. The step then agrees on the overflow across the job.
    let reduction = match crate::distributed::current() {
        Some(_) if optimizer.reduces_gradients() => None,
        Some(d) => d.gradient_reduction(optimizer.params(), &weights)?,
        None => None,
    };
    let out = match reduction {
        None => value_and_grad(scaled_loss, None, &weights, true)(data)?,
        Some(mut r) => {
            let mut out =
                value_and_grad_reporting(&scaled_loss, None, &weights, true, data, &mut |i, g| {
                    r.gradient_ready(i, g)
                })?;
            out.weight_grads = r.finish(out.weight_grads)?;
            out
        }
    };
    let loss = out
        .aux
        .into_iter()
        .next()
        .ok_or_else(|| Error::invalid(format!("{who}: the loss went missing")))?
        // Without its autodiff record, which holds the weights (the update writes
        // over them) and the forward pass's values.
        .detach();
    Ok((loss, scale.clone(), out.weight_grads))
}

/// Each gradient divided by the loss scale, in float32: a scale above float16's range
/// (the default 2^24) would be an infinity in the gradient's own type. A 16-bit
/// gradient is rounded back to its type afterwards.
pub(super) fn unscaled(grads: &[Tensor], scale: &Tensor) -> Result<Vec<Tensor>> {
    grads
        .iter()
        .map(|g| match g.dtype() {
            DType::F16 | DType::BF16 => g.cast(DType::F32)?.div(scale)?.cast(g.dtype()),
            _ => g.div(&scale.cast(g.dtype())?),
        })
        .collect()
}
