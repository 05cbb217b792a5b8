//! `LossMonitor`: prints `epoch: E step: S, loss is L` every `per_print_times` callback
//! steps, in MindSpore's format; an invalid (NaN or infinite) loss stops training with an
//! error. In a distributed job only rank 0 prints, unless [`LossMonitor::all_ranks`] asks
//! for every rank (each rank still checks its loss).
//!
//! ```
//! use spore_train::callback::{Callback, LossMonitor, RunContext};
//! let (mut monitor, output) = LossMonitor::capturing(1);
//! let mut ctx = RunContext::new(1, 10, false);
//! ctx.cur_epoch_num = 1;
//! ctx.step_in_epoch = 3;
//! ctx.loss = Some(0.5);
//! monitor.on_step_end(&mut ctx).unwrap();
//! assert_eq!(output.lock().unwrap().as_str(), "epoch: 1 step: 3, loss is 0.5\n");
//! ```

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::{Callback, RunContext};
use spore_core::{Error, Result};

pub struct LossMonitor {
    per_print_times: usize,
    sink: Option<Arc<Mutex<String>>>,
    all_ranks: bool,
}

impl LossMonitor {
    /// Prints every callback step.
    pub fn new() -> Self {
        Self::every(1)
    }

    /// Prints every `n` callback steps (MindSpore's `per_print_times`).
    pub fn every(n: usize) -> Self {
        LossMonitor {
            per_print_times: n.max(1),
            sink: None,
            all_ranks: false,
        }
    }

    /// Prints on every rank of a distributed job, not only rank 0.
    pub fn all_ranks(mut self, on: bool) -> Self {
        self.all_ranks = on;
        self
    }

    /// A monitor writing into a shared string instead of standard output (for tests and
    /// embedding).
    pub fn capturing(n: usize) -> (Self, Arc<Mutex<String>>) {
        let out = Arc::new(Mutex::new(String::new()));
        (
            LossMonitor {
                per_print_times: n.max(1),
                sink: Some(out.clone()),
                all_ranks: false,
            },
            out,
        )
    }
}

impl Default for LossMonitor {
    fn default() -> Self {
        Self::new()
    }
}

impl Callback for LossMonitor {
    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        let Some(loss) = ctx.loss else { return Ok(()) };
        if !loss.is_finite() {
            return Err(Error::invalid(format!(
                "epoch: {} step: {}. Invalid loss {loss}, terminating training",
                ctx.cur_epoch_num, ctx.step_in_epoch
            )));
        }
        if !ctx.step_in_epoch.is_multiple_of(self.per_print_times) && ctx.steps_in_last_call <= 1 {
            return Ok(());
        }
        if !self.all_ranks && spore_nn::distributed::rank() != 0 {
            return Ok(());
        }
        let line = format!(
            "epoch: {} step: {}, loss is {loss}\n",
            ctx.cur_epoch_num, ctx.step_in_epoch
        );
        match &self.sink {
            Some(s) => s
                .lock()
                .map_err(|_| Error::invalid("LossMonitor output poisoned"))?
                .push_str(&line),
            None => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(line.as_bytes());
                let _ = out.flush();
            }
        }
        Ok(())
    }
}
