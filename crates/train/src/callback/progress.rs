//! A one-line progress bar for long runs in a terminal (nothing when output is redirected).

use std::io::{IsTerminal, Write};

use super::{Callback, RunContext};
use spore_core::Result;

#[derive(Default)]
pub struct ProgressBar {
    enabled: bool,
}

impl ProgressBar {
    pub fn new() -> Self {
        ProgressBar {
            enabled: std::io::stderr().is_terminal(),
        }
    }
}

impl Callback for ProgressBar {
    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let total = ctx.batch_num.max(1);
        let done = ctx.step_in_epoch.min(total);
        let width = 30;
        let filled = done * width / total;
        let loss = ctx.loss.map(|l| format!("{l:.4}")).unwrap_or_default();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\repoch {}/{} [{}{}] {done}/{total} loss {loss}   ",
            ctx.cur_epoch_num,
            ctx.epoch_num,
            "#".repeat(filled),
            " ".repeat(width - filled)
        );
        if done == total {
            let _ = writeln!(err);
        }
        let _ = err.flush();
        Ok(())
    }
}
