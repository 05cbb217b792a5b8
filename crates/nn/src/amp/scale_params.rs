//! The loss-scale manager's state as three parameters of the loss-scaled step, named as
//! MindSpore names them (`scale_sense`, `current_iterator_step`,
//! `last_overflow_iterator_step`), so that checkpoints save it and a resumed run
//! continues the dynamic schedule where it stopped.
//!
//! ```
//! use spore_nn::amp::{DynamicLossScaleManager, TrainOneStepWithLossScaleCell};
//! use spore_nn::prelude::*;
//! let net = Dense::new(4, 3).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
//! let m = DynamicLossScaleManager::new(1024.0, 2.0, 2000).unwrap();
//! let step = TrainOneStepWithLossScaleCell::new(WithLossCell::new(net, loss), opt, m);
//! let names: Vec<String> = step.parameters_and_names().into_iter().map(|(n, _)| n).collect();
//! assert!(names.contains(&"scale_sense".to_string()));
//! ```

use std::sync::Mutex;

use spore_core::{Error, Parameter, Result, Tensor};

use super::loss_scale::{LossScaleManager, LossScaleState};

/// The three parameters (not trained: the step writes them after each update).
pub(super) struct ScaleParams {
    scale: Parameter,
    cur_iter: Parameter,
    last_overflow_iter: Parameter,
    /// What the step last wrote: parameters that differ from it were loaded since.
    written: Mutex<LossScaleState>,
}

impl ScaleParams {
    pub(super) fn new(state: LossScaleState) -> ScaleParams {
        let counter = |v: u64| Tensor::scalar(i32::try_from(v).unwrap_or(i32::MAX));
        ScaleParams {
            written: Mutex::new(state),
            scale: Parameter::with_requires_grad(
                Tensor::scalar(state.scale as f32),
                "scale_sense",
                false,
            ),
            cur_iter: Parameter::with_requires_grad(
                counter(state.cur_iter),
                "current_iterator_step",
                false,
            ),
            last_overflow_iter: Parameter::with_requires_grad(
                counter(state.last_overflow_iter),
                "last_overflow_iterator_step",
                false,
            ),
        }
    }

    /// The parameters with their names, for the step cell's `params`.
    pub(super) fn named(&self) -> Vec<(String, Parameter)> {
        [&self.scale, &self.cur_iter, &self.last_overflow_iter]
            .into_iter()
            .map(|p| (p.name(), p.clone()))
            .collect()
    }

    /// Hands the manager the state the parameters hold when they changed since the step
    /// last wrote them (a checkpoint was loaded into them). Why not "when they differ from
    /// the manager": the manager is shared (`manager()`, `AmpOptions`), and changes made
    /// to it directly must stand.
    pub(super) fn sync_into(&self, manager: &dyn LossScaleManager) -> Result<()> {
        let held = self.read()?;
        let written = *self.written.lock().unwrap_or_else(|p| p.into_inner());
        // The scale is saved in float32 (as MindSpore saves it): compare it so.
        let same = held.scale as f32 == written.scale as f32
            && held.cur_iter == written.cur_iter
            && held.last_overflow_iter == written.last_overflow_iter;
        if same {
            return Ok(());
        }
        manager.restore(held)?;
        *self.written.lock().unwrap_or_else(|p| p.into_inner()) = held;
        Ok(())
    }

    /// Stores the manager's state after a step.
    pub(super) fn write(&self, state: LossScaleState) -> Result<()> {
        let counter = |v: u64, name: &str| -> Result<Tensor> {
            let v = i32::try_from(v).map_err(|_| {
                Error::invalid(format!(
                    "TrainOneStepWithLossScaleCell: {name} {v} does not fit the int32 a checkpoint holds"
                ))
            })?;
            Ok(Tensor::scalar(v))
        };
        let cur = counter(state.cur_iter, "current_iterator_step")?;
        let last = counter(state.last_overflow_iter, "last_overflow_iterator_step")?;
        self.scale.store(Tensor::scalar(state.scale as f32));
        self.cur_iter.store(cur);
        self.last_overflow_iter.store(last);
        *self.written.lock().unwrap_or_else(|p| p.into_inner()) = state;
        Ok(())
    }

    fn read(&self) -> Result<LossScaleState> {
        let count = |p: &Parameter| -> Result<u64> {
            let v = p.stored().item()?;
            if !(v >= 0.0 && v.fract() == 0.0) {
                return Err(Error::invalid(format!(
                    "TrainOneStepWithLossScaleCell: {} must be a step count >= 0, got {v}",
                    p.name()
                )));
            }
            Ok(v as u64)
        };
        Ok(LossScaleState {
            scale: self.scale.stored().item()?,
            cur_iter: count(&self.cur_iter)?,
            last_overflow_iter: count(&self.last_overflow_iter)?,
        })
    }
}
