//! Loss scaling (MindSpore's `FixedLossScaleManager` and `DynamicLossScaleManager`): the
//! loss is multiplied by a scale before the backward pass so that small float16
//! gradients do not flush to zero, and the gradients are divided by it before the
//! update. A step whose gradients overflowed (an infinity or NaN anywhere) is skipped
//! when the manager says so.
//!
//! ```
//! use spore_nn::amp::{DynamicLossScaleManager, LossScaleManager};
//! let m = DynamicLossScaleManager::new(1024.0, 2.0, 2).unwrap();
//! assert!(!m.update(true)); // overflow: halve, skip the update
//! assert_eq!(m.loss_scale(), 512.0);
//! assert!(m.update(false) && m.update(false)); // two clean steps: double
//! assert_eq!(m.loss_scale(), 1024.0);
//! ```
//!
//! The dynamic rule is MindSpore's `DynamicLossScaleUpdateCell`, step by step: with
//! `cur_iter` from 1 and `last_overflow_iter` from 0, an overflow sets the scale to
//! `max(scale / factor, 1)`; when `cur_iter - last_overflow_iter >= scale_window` the
//! scale is multiplied by `factor` (unless the step overflowed); either event sets
//! `last_overflow_iter = cur_iter`; then `cur_iter += 1`.

use std::sync::Mutex;

use spore_core::{Error, Result, Tensor};

/// Decides the loss scale of each step and whether an overflowed step updates.
pub trait LossScaleManager: Send + Sync {
    /// The scale for the next step.
    fn loss_scale(&self) -> f64;
    /// Records a step's outcome; returns whether its update is applied (false: an
    /// overflowed step is dropped).
    fn update(&self, overflow: bool) -> bool;
    /// MindSpore's name for the manager.
    fn class_name(&self) -> &'static str;
    /// Whether [`update`](Self::update) applies an overflowed step, where that is fixed
    /// for the manager's life and its scales stay from 1 to float32's largest: a compiled
    /// step then applies or drops the update in the graph and asks `update` afterwards
    /// (see `TrainOneStepWithLossScaleCell`). `None`, the default: the step asks
    /// `update` on the host before it runs the update.
    fn applies_overflowed_steps(&self) -> Option<bool> {
        None
    }
    /// The state a checkpoint saves (a fixed manager: its scale, the counters at their
    /// starting values).
    fn state(&self) -> LossScaleState {
        LossScaleState {
            scale: self.loss_scale(),
            cur_iter: 1,
            last_overflow_iter: 0,
        }
    }
    /// Continues from a saved state (a resumed run); a fixed manager keeps its scale.
    fn restore(&self, state: LossScaleState) -> Result<()> {
        let _ = state;
        Ok(())
    }
}

/// A manager's state as MindSpore's checkpoints hold it: the scale (`scale_sense`), the
/// step counter (`current_iterator_step`) and the step of the last overflow or growth
/// (`last_overflow_iterator_step`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleState {
    pub scale: f64,
    pub cur_iter: u64,
    pub last_overflow_iter: u64,
}

/// Whether `scale` can scale a loss: at least 1, and a float32 (the step multiplies the
/// float32 loss by it; a larger one would be an infinity and drop every step).
fn valid_scale(scale: f64) -> bool {
    (1.0..=f64::from(f32::MAX)).contains(&scale)
}

/// A constant scale (MindSpore's default 128); with `drop_overflow_update`, an
/// overflowed step is skipped.
pub struct FixedLossScaleManager {
    scale: f64,
    drop_overflow_update: bool,
}

impl FixedLossScaleManager {
    pub fn new(loss_scale: f64, drop_overflow_update: bool) -> Result<FixedLossScaleManager> {
        if !valid_scale(loss_scale) {
            return Err(Error::invalid(format!(
                "FixedLossScaleManager: loss_scale must be a number from 1 to float32's largest (3.4e38), got {loss_scale}"
            )));
        }
        Ok(FixedLossScaleManager {
            scale: loss_scale,
            drop_overflow_update,
        })
    }
}

impl LossScaleManager for FixedLossScaleManager {
    fn loss_scale(&self) -> f64 {
        self.scale
    }
    fn update(&self, overflow: bool) -> bool {
        !(overflow && self.drop_overflow_update)
    }
    fn class_name(&self) -> &'static str {
        "FixedLossScaleManager"
    }
    fn applies_overflowed_steps(&self) -> Option<bool> {
        Some(!self.drop_overflow_update)
    }
}

/// A scale that halves on overflow and doubles after `scale_window` clean steps
/// (MindSpore's defaults: `2**24`, 2, 2000); overflowed steps are always skipped.
pub struct DynamicLossScaleManager {
    factor: f64,
    window: u64,
    state: Mutex<DynamicState>,
}

#[derive(Clone, Copy, Debug)]
struct DynamicState {
    scale: f64,
    cur_iter: u64,
    last_overflow_iter: u64,
}

impl DynamicLossScaleManager {
    pub fn new(
        init_loss_scale: f64,
        scale_factor: f64,
        scale_window: u64,
    ) -> Result<DynamicLossScaleManager> {
        if !valid_scale(init_loss_scale) {
            return Err(Error::invalid(format!(
                "DynamicLossScaleManager: init_loss_scale must be a number from 1 to float32's largest (3.4e38), got {init_loss_scale}"
            )));
        }
        if !(scale_factor > 1.0 && scale_factor.is_finite()) {
            return Err(Error::invalid(format!(
                "DynamicLossScaleManager: scale_factor must be a finite number > 1, got {scale_factor}"
            )));
        }
        if scale_window == 0 {
            return Err(Error::invalid(
                "DynamicLossScaleManager: scale_window must be a positive integer, got 0",
            ));
        }
        Ok(DynamicLossScaleManager {
            factor: scale_factor,
            window: scale_window,
            state: Mutex::new(DynamicState {
                scale: init_loss_scale,
                cur_iter: 1,
                last_overflow_iter: 0,
            }),
        })
    }

    /// MindSpore's defaults: `init_loss_scale = 2**24`, `scale_factor = 2`,
    /// `scale_window = 2000`.
    pub fn default_mindspore() -> DynamicLossScaleManager {
        DynamicLossScaleManager {
            factor: 2.0,
            window: 2000,
            state: Mutex::new(DynamicState {
                scale: (1u64 << 24) as f64,
                cur_iter: 1,
                last_overflow_iter: 0,
            }),
        }
    }
}

impl LossScaleManager for DynamicLossScaleManager {
    fn loss_scale(&self) -> f64 {
        self.state.lock().map(|s| s.scale).unwrap_or(1.0)
    }
    fn update(&self, overflow: bool) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return !overflow;
        };
        let scale = if overflow {
            (s.scale / self.factor).max(1.0)
        } else {
            s.scale
        };
        let should_grow = s.cur_iter - s.last_overflow_iter >= self.window;
        if overflow || should_grow {
            s.last_overflow_iter = s.cur_iter;
        }
        s.scale = if should_grow && !overflow {
            // At most float32's largest: the step multiplies the float32 loss by it.
            (scale * self.factor).min(f64::from(f32::MAX))
        } else {
            scale
        };
        s.cur_iter += 1;
        !overflow
    }
    fn class_name(&self) -> &'static str {
        "DynamicLossScaleManager"
    }
    fn applies_overflowed_steps(&self) -> Option<bool> {
        Some(false)
    }
    fn state(&self) -> LossScaleState {
        let s = self
            .state
            .lock()
            .map(|s| *s)
            .unwrap_or_else(|p| *p.into_inner());
        LossScaleState {
            scale: s.scale,
            cur_iter: s.cur_iter,
            last_overflow_iter: s.last_overflow_iter,
        }
    }
    fn restore(&self, saved: LossScaleState) -> Result<()> {
        let valid = valid_scale(saved.scale)
            && saved.cur_iter >= 1
            && saved.last_overflow_iter <= saved.cur_iter;
        if !valid {
            return Err(Error::invalid(format!(
                "DynamicLossScaleManager: a saved state needs a scale from 1 to float32's largest and 0 <= last_overflow_iterator_step <= current_iterator_step (from 1), got scale {}, current {}, last overflow {}",
                saved.scale, saved.cur_iter, saved.last_overflow_iter
            )));
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = DynamicState {
            scale: saved.scale,
            cur_iter: saved.cur_iter,
            last_overflow_iter: saved.last_overflow_iter,
        };
        Ok(())
    }
}

/// Whether every value of every tensor is finite, in one pass over the buffers that
/// stops at the first infinity or NaN (the overflow check of a loss-scaled step; inside a
/// compiled step, [`super::all_finite_tensor`] is the same check as an operator).
pub fn all_finite(tensors: &[Tensor]) -> Result<bool> {
    let refs: Vec<&Tensor> = tensors.iter().collect();
    super::all_finite_op::values_finite(&refs).map_err(|e| {
        Error::invalid(format!(
            "{e} (run the check outside compiled graphs, or use all_finite_tensor)"
        ))
    })
}
