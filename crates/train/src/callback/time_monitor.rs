//! `TimeMonitor`: prints each epoch's time and the time per training step.

use super::{Callback, RunContext};
use spore_core::Result;

#[derive(Default)]
pub struct TimeMonitor {
    /// (epoch, milliseconds, milliseconds per step) of every finished epoch.
    pub epochs: Vec<(usize, f64, f64)>,
    quiet: bool,
}

impl TimeMonitor {
    pub fn new() -> Self {
        Self::default()
    }
    /// Records without printing.
    pub fn quiet() -> Self {
        TimeMonitor {
            epochs: vec![],
            quiet: true,
        }
    }
}

impl Callback for TimeMonitor {
    fn on_epoch_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        let ms = ctx.epoch_started.elapsed().as_secs_f64() * 1e3;
        let per_step = ms / ctx.step_in_epoch.max(1) as f64;
        self.epochs.push((ctx.cur_epoch_num, ms, per_step));
        if !self.quiet {
            println!("epoch time: {ms:.3} ms, per step time: {per_step:.3} ms");
        }
        Ok(())
    }
}
