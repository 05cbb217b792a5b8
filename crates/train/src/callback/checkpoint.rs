//! `ModelCheckpoint`: saves the training network (parameters and optimizer state) every
//! `save_checkpoint_steps` training steps as `{prefix}-{epoch}_{step}.ckpt` (safetensors
//! inside; writes are atomic), keeping the newest `keep_checkpoint_max` files.

use std::collections::VecDeque;
use std::path::PathBuf;

use super::{Callback, RunContext};
use spore_core::{Error, Result};

/// When and how many checkpoints to keep (MindSpore's `CheckpointConfig`).
#[derive(Clone, Copy, Debug)]
pub struct CheckpointConfig {
    pub save_checkpoint_steps: usize,
    pub keep_checkpoint_max: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            save_checkpoint_steps: 1,
            keep_checkpoint_max: 5,
        }
    }
}

pub struct ModelCheckpoint {
    prefix: String,
    directory: PathBuf,
    config: CheckpointConfig,
    last_saved_step: usize,
    /// Files written and still kept, oldest first.
    pub saved: VecDeque<PathBuf>,
}

impl ModelCheckpoint {
    pub fn new(
        prefix: &str,
        directory: impl Into<PathBuf>,
        config: CheckpointConfig,
    ) -> Result<Self> {
        if config.save_checkpoint_steps == 0 || config.keep_checkpoint_max == 0 {
            return Err(Error::invalid(
                "CheckpointConfig: save_checkpoint_steps and keep_checkpoint_max must be at least 1",
            ));
        }
        if prefix.is_empty() || prefix.contains(['/', '\\']) {
            return Err(Error::invalid(format!(
                "ModelCheckpoint: prefix must be a plain file name part, got {prefix:?}"
            )));
        }
        let directory = directory.into();
        std::fs::create_dir_all(&directory).map_err(|e| {
            Error::io(
                &directory,
                format!("cannot create the checkpoint folder: {e}"),
            )
        })?;
        Ok(ModelCheckpoint {
            prefix: prefix.to_string(),
            directory,
            config,
            last_saved_step: 0,
            saved: VecDeque::new(),
        })
    }

    /// The newest checkpoint written.
    pub fn latest(&self) -> Option<&PathBuf> {
        self.saved.back()
    }

    fn save(&mut self, ctx: &RunContext) -> Result<()> {
        let Some(net) = &ctx.train_network else {
            return Err(Error::invalid(
                "ModelCheckpoint: the run has no network to save",
            ));
        };
        let path = self.directory.join(format!(
            "{}-{}_{}.ckpt",
            self.prefix, ctx.cur_epoch_num, ctx.step_in_epoch
        ));
        spore_nn::checkpoint::save_checkpoint(&**net, &path)?;
        self.last_saved_step = ctx.cur_step_num;
        self.saved.retain(|p| p != &path);
        self.saved.push_back(path);
        while self.saved.len() > self.config.keep_checkpoint_max {
            if let Some(old) = self.saved.pop_front() {
                std::fs::remove_file(&old).map_err(|e| {
                    Error::io(&old, format!("cannot remove an old checkpoint: {e}"))
                })?;
            }
        }
        Ok(())
    }
}

impl Callback for ModelCheckpoint {
    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        if ctx.cur_step_num >= self.last_saved_step + self.config.save_checkpoint_steps {
            self.save(ctx)?;
        }
        Ok(())
    }
}
