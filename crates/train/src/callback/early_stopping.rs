//! `EarlyStopping`: stops training when a monitored value (`"loss"` or an evaluation
//! metric) has not improved by `min_delta` for `patience` epochs in a row: the epoch that
//! makes the `patience`-th epoch without improvement is the last one, as in MindSpore and
//! Keras (`wait >= patience`).
//!
//! ```
//! use spore_train::callback::{Callback, EarlyStopping, RunContext};
//! let mut stop = EarlyStopping::new("loss", 1, 0.0);
//! let mut ctx = RunContext::new(10, 1, false);
//! for loss in [1.0, 0.5] {
//!     ctx.loss = Some(loss);
//!     stop.on_epoch_end(&mut ctx).unwrap();
//! }
//! assert!(!ctx.stop_requested());
//! ctx.loss = Some(0.6); // the first epoch without improvement: patience 1 is used up
//! stop.on_epoch_end(&mut ctx).unwrap();
//! assert!(ctx.stop_requested());
//! ```

use super::{Callback, RunContext};
use spore_core::{Error, Result};

pub struct EarlyStopping {
    monitor: String,
    patience: usize,
    min_delta: f64,
    /// Larger is better (accuracy) instead of smaller (loss).
    maximize: bool,
    best: Option<f64>,
    wait: usize,
    pub stopped_epoch: Option<usize>,
}

impl EarlyStopping {
    /// Monitors `monitor`; accuracy-like names ("acc", "precision", "recall", "f1") are
    /// maximised, everything else minimised.
    pub fn new(monitor: &str, patience: usize, min_delta: f64) -> Self {
        let maximize = ["acc", "precision", "recall", "f1"]
            .iter()
            .any(|k| monitor.contains(k));
        EarlyStopping {
            monitor: monitor.to_string(),
            patience,
            min_delta: min_delta.abs(),
            maximize,
            best: None,
            wait: 0,
            stopped_epoch: None,
        }
    }
}

impl Callback for EarlyStopping {
    fn on_epoch_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        let value = if self.monitor == "loss" {
            ctx.loss
        } else {
            ctx.metrics.get(&self.monitor).copied()
        };
        let Some(v) = value else {
            return Err(Error::invalid(format!(
                "EarlyStopping monitors {:?}, which this run does not report (available: loss{})",
                self.monitor,
                ctx.metrics
                    .keys()
                    .map(|k| format!(", {k}"))
                    .collect::<String>()
            )));
        };
        let improved = match self.best {
            None => true,
            Some(b) if self.maximize => v > b + self.min_delta,
            Some(b) => v < b - self.min_delta,
        };
        if improved {
            self.best = Some(v);
            self.wait = 0;
        } else {
            self.wait += 1;
            if self.wait >= self.patience {
                self.stopped_epoch = Some(ctx.cur_epoch_num);
                ctx.request_stop();
            }
        }
        Ok(())
    }
}
