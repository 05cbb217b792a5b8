//! Callbacks (MindSpore's `Callback`): hooks at the beginning and end of training, of each
//! epoch and of each step, with a [`RunContext`] describing where training is.
//!
//! In dataset sink mode a "step" seen by callbacks is one sink: `sink_size` training
//! steps run per host interaction, and `step_end` is called once with the last loss.
//!
//! ```
//! use spore_train::callback::{Callback, RunContext};
//! struct CountSteps(usize);
//! impl Callback for CountSteps {
//!     fn on_step_end(&mut self, _ctx: &mut RunContext) -> spore_core::Result<()> {
//!         self.0 += 1;
//!         Ok(())
//!     }
//! }
//! ```

mod checkpoint;
mod early_stopping;
mod history;
mod loss_monitor;
mod progress;
mod time_monitor;

pub use checkpoint::{CheckpointConfig, ModelCheckpoint};
pub use early_stopping::EarlyStopping;
pub use history::History;
pub use loss_monitor::LossMonitor;
pub use progress::ProgressBar;
pub use time_monitor::TimeMonitor;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use spore_nn::cell::Cell;

use spore_core::Result;

/// Where training is, as callbacks see it (MindSpore's `cb_params`).
#[derive(Clone)]
pub struct RunContext {
    /// Total epochs of this `train` call (counting `initial_epoch`).
    pub epoch_num: usize,
    /// Current epoch, from 1.
    pub cur_epoch_num: usize,
    /// Training steps done so far in this call (sunk steps included).
    pub cur_step_num: usize,
    /// Training steps per epoch.
    pub batch_num: usize,
    /// Training steps done in the current epoch.
    pub step_in_epoch: usize,
    /// Training steps in the latest callback step (1, or `sink_size` when sinking).
    pub steps_in_last_call: usize,
    /// Loss of the latest step.
    pub loss: Option<f64>,
    /// Current learning rate, if the optimizer reports one.
    pub learning_rate: Option<f64>,
    /// Evaluation metrics, when the model evaluates during training.
    pub metrics: BTreeMap<String, f64>,
    pub dataset_sink_mode: bool,
    /// The network being trained (a `TrainOneStepCell`, or a mixed-precision step: its
    /// parameters include the optimizer's state), for callbacks that save checkpoints.
    pub train_network: Option<Arc<dyn Cell>>,
    pub epoch_started: Instant,
    pub step_started: Instant,
    stop: bool,
    new_learning_rate: Option<f64>,
}

impl RunContext {
    pub fn new(epoch_num: usize, batch_num: usize, dataset_sink_mode: bool) -> RunContext {
        RunContext {
            epoch_num,
            cur_epoch_num: 0,
            cur_step_num: 0,
            batch_num,
            step_in_epoch: 0,
            steps_in_last_call: 0,
            loss: None,
            learning_rate: None,
            metrics: BTreeMap::new(),
            dataset_sink_mode,
            train_network: None,
            epoch_started: Instant::now(),
            step_started: Instant::now(),
            stop: false,
            new_learning_rate: None,
        }
    }

    /// Asks training to stop after the current step (EarlyStopping uses this).
    pub fn request_stop(&mut self) {
        self.stop = true;
    }

    pub fn stop_requested(&self) -> bool {
        self.stop
    }

    /// Asks the model to change the optimizer's learning rate.
    pub fn set_learning_rate(&mut self, lr: f64) {
        self.new_learning_rate = Some(lr);
    }

    /// The learning rate a callback asked for, taken once.
    pub fn take_learning_rate_request(&mut self) -> Option<f64> {
        self.new_learning_rate.take()
    }
}

/// Hooks called by `Model::train`; every one defaults to doing nothing.
pub trait Callback: Send {
    fn on_train_begin(&mut self, _ctx: &mut RunContext) -> Result<()> {
        Ok(())
    }
    fn on_train_end(&mut self, _ctx: &mut RunContext) -> Result<()> {
        Ok(())
    }
    fn on_epoch_begin(&mut self, _ctx: &mut RunContext) -> Result<()> {
        Ok(())
    }
    fn on_epoch_end(&mut self, _ctx: &mut RunContext) -> Result<()> {
        Ok(())
    }
    fn on_step_begin(&mut self, _ctx: &mut RunContext) -> Result<()> {
        Ok(())
    }
    fn on_step_end(&mut self, _ctx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

/// Changes the learning rate each epoch: `schedule(epoch, current_lr) -> new_lr`
/// (MindSpore's `LearningRateScheduler`).
pub struct LearningRateScheduler {
    schedule: Box<dyn FnMut(usize, f64) -> f64 + Send>,
}

impl LearningRateScheduler {
    pub fn new(schedule: impl FnMut(usize, f64) -> f64 + Send + 'static) -> Self {
        LearningRateScheduler {
            schedule: Box::new(schedule),
        }
    }
}

impl Callback for LearningRateScheduler {
    fn on_epoch_begin(&mut self, ctx: &mut RunContext) -> Result<()> {
        if let Some(lr) = ctx.learning_rate {
            let next = (self.schedule)(ctx.cur_epoch_num, lr);
            if next != lr {
                ctx.set_learning_rate(next);
            }
        }
        Ok(())
    }
}
