//! `ModelCheckpoint`: saves the training network (parameters and optimizer state) every
//! `save_checkpoint_steps` training steps as `{prefix}-{epoch}_{step}.ckpt` (safetensors
//! inside; writes are atomic), keeping the newest `keep_checkpoint_max` files.
//!
//! In a distributed job rank 0 writes (data parallelism keeps every rank's parameters
//! equal, so one copy is the whole state) and the others skip; with
//! [`ModelCheckpoint::per_rank`] every rank writes into `directory/rank_<id>/`, as
//! MindSpore's per-rank checkpoint folders do. To resume, every rank loads the file.
//! Where the state differs between ranks by design (a sharded or pipelined network, the
//! parallel optimizer's blocks of state), every rank writes its own whatever was asked,
//! and each resumes from its `rank_<id>` file.
//!
//! ```
//! use spore_train::callback::{CheckpointConfig, ModelCheckpoint};
//! let dir = std::env::temp_dir().join(format!("spore-ckpt-doc-{}", std::process::id()));
//! let ckpt = ModelCheckpoint::new("lenet", &dir, CheckpointConfig::default()).unwrap().per_rank(true);
//! assert!(ckpt.directory().ends_with("rank_0"));
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use std::collections::VecDeque;
use std::path::PathBuf;

use super::{Callback, RunContext};
use spore_core::{Error, Parameter, Result};
use spore_nn::cell::{Cell, CellExt};

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
    /// Every rank writes (into its `rank_<id>` folder), not only rank 0.
    per_rank: bool,
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
            per_rank: false,
            last_saved_step: 0,
            saved: VecDeque::new(),
        })
    }

    /// Every rank writes its own checkpoints, into `directory/rank_<id>/`. (A network
    /// whose state differs between ranks is always saved so.)
    pub fn per_rank(mut self, on: bool) -> Self {
        self.set_per_rank(on);
        self
    }

    fn set_per_rank(&mut self, on: bool) {
        let rank_dir = format!("rank_{}", spore_nn::distributed::rank());
        let is_rank_dir = self.directory.ends_with(&rank_dir);
        if on && !is_rank_dir {
            self.directory.push(rank_dir);
        } else if !on && is_rank_dir {
            self.directory.pop();
        }
        self.per_rank = on;
    }

    /// Where this rank's checkpoints go.
    pub fn directory(&self) -> &std::path::Path {
        &self.directory
    }

    /// The newest checkpoint written.
    pub fn latest(&self) -> Option<&PathBuf> {
        self.saved.back()
    }

    fn save(&mut self, ctx: &RunContext) -> Result<()> {
        self.last_saved_step = ctx.cur_step_num;
        let Some(net) = &ctx.train_network else {
            return Err(Error::invalid(
                "ModelCheckpoint: the run has no network to save",
            ));
        };
        self.per_rank_where_state_differs(net.as_ref());
        if !self.per_rank && spore_nn::distributed::rank() != 0 {
            return Ok(());
        }
        std::fs::create_dir_all(&self.directory).map_err(|e| {
            Error::io(
                &self.directory,
                format!("cannot create the checkpoint folder: {e}"),
            )
        })?;
        let path = self.directory.join(format!(
            "{}-{}_{}.ckpt",
            self.prefix, ctx.cur_epoch_num, ctx.step_in_epoch
        ));
        spore_nn::checkpoint::save_checkpoint(&**net, &path)?;
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

impl ModelCheckpoint {
    /// Switches to one checkpoint per rank when the network's state differs between
    /// ranks (sharded or pipelined networks, the parallel optimizer's blocks): rank 0's
    /// file alone would lose the others' parts.
    fn per_rank_where_state_differs(&mut self, net: &dyn Cell) {
        if self.per_rank {
            return;
        }
        let params: Vec<Parameter> = net
            .parameters_and_names()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        if spore_nn::distributed::rank_local_state(&params) {
            self.set_per_rank(true);
            if spore_nn::distributed::rank() == 0 {
                log::warn!(
                    "ModelCheckpoint: the network's parameters or optimizer state differ between ranks (sharded, \
                     pipelined or a parallel optimizer); every rank writes its own checkpoints, into {}/rank_<id>",
                    self.directory.parent().unwrap_or(&self.directory).display()
                );
            }
        }
    }
}

impl Callback for ModelCheckpoint {
    fn on_train_begin(&mut self, ctx: &mut RunContext) -> Result<()> {
        if let Some(net) = ctx.train_network.clone() {
            self.per_rank_where_state_differs(net.as_ref());
        }
        Ok(())
    }
    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        if ctx.cur_step_num >= self.last_saved_step + self.config.save_checkpoint_steps {
            self.save(ctx)?;
        }
        Ok(())
    }
}
