//! Where a distributed job meets the training wrappers. The communication layer
//! (`spore-parallel`, above this crate) registers a [`Distributed`] implementation when
//! it initialises; `TrainOneStepCell`, `Model` and the callbacks ask it for what changes
//! under data parallelism (reduced gradients, synchronised parameters, rank-aware
//! printing, saving and metrics). Without one, training is a single process's.
//!
//! ```
//! assert_eq!(spore_nn::distributed::rank(), 0);
//! assert_eq!(spore_nn::distributed::group_size(), 1);
//! ```

use std::sync::{Arc, RwLock};

use spore_core::{Parameter, Result, Tensor};

use crate::optim::Optimizer;

/// What data parallelism changes in a training step.
pub trait Distributed: Send + Sync {
    /// This process's rank in the world.
    fn rank(&self) -> usize;
    /// How many ranks the world has.
    fn group_size(&self) -> usize;
    /// Whether the job trains data parallel (each rank on its shard of the data) across
    /// more than one rank.
    fn is_data_parallel(&self) -> bool;
    /// A reduction of this step's weight gradients when the job is data parallel (or the
    /// parameters belong to a data-parallel group, such as a pipeline stage's replicas),
    /// `None` otherwise. `params` are the optimizer's parameters and `weights` their
    /// values, in its order.
    fn gradient_reduction(
        &self,
        params: &[Parameter],
        weights: &[Tensor],
    ) -> Result<Option<Box<dyn GradientReduction>>>;
    /// Before a training cell's first step: checks that every rank built the same
    /// parameters (names, shapes, dtypes) and, when the job asks, copies rank 0's values
    /// to every rank.
    fn prepare_parameters(&self, params: &[(String, Parameter)]) -> Result<()>;
    /// Every rank's `values` summed, on every rank (metrics over a sharded dataset).
    fn sum_across_ranks(&self, values: &[f64]) -> Result<Vec<f64>>;
    /// The optimizer a training cell should run: `Some` replaces `optimizer` with one
    /// that shards its state and update across the ranks (the parallel optimizer), which
    /// reduces the gradients itself ([`Optimizer::reduces_gradients`]). `None` keeps
    /// `optimizer`.
    fn parallel_optimizer(
        &self,
        optimizer: &Arc<dyn Optimizer>,
    ) -> Result<Option<Arc<dyn Optimizer>>> {
        let _ = optimizer;
        Ok(None)
    }
    /// Whether `params` hold different values on different ranks by design (blocks of
    /// sharded parameters, a pipeline stage's own layers, the parallel optimizer's
    /// blocks of state): saved from one rank, a checkpoint of them would lose the
    /// others', so every rank must write its own.
    fn rank_local_state(&self, params: &[Parameter]) -> bool {
        let _ = params;
        false
    }
    /// Whether step `step` of a loss-scaled training overflowed on any rank, `local`
    /// being this rank's check of the gradients it holds: where ranks hold different
    /// gradients (unreduced, or other blocks or stages), every rank must still take the
    /// same decision. Ranks at different steps (one failed or skipped a step) are an
    /// error.
    fn overflow_anywhere(&self, local: bool, step: u64) -> Result<bool> {
        let _ = step;
        Ok(local)
    }
}

/// One step's gradient reduction. The backward pass reports each weight's gradient as
/// soon as it is complete (so communication can start while the pass goes on);
/// `finish` returns the reduced gradients, in weight order.
pub trait GradientReduction {
    fn gradient_ready(&mut self, index: usize, grad: &Tensor) -> Result<()>;
    fn finish(self: Box<Self>, grads: Vec<Tensor>) -> Result<Vec<Tensor>>;
}

static CURRENT: RwLock<Option<Arc<dyn Distributed>>> = RwLock::new(None);

/// Registers (or with `None` removes) the job's distributed behaviour.
pub fn register(d: Option<Arc<dyn Distributed>>) {
    let mut c = CURRENT.write().unwrap_or_else(|p| p.into_inner());
    *c = d;
}

/// The registered behaviour, if any.
pub fn current() -> Option<Arc<dyn Distributed>> {
    match CURRENT.read() {
        Ok(c) => c.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

/// The optimizer a training cell runs (see [`Distributed::parallel_optimizer`]).
pub fn training_optimizer(optimizer: Arc<dyn Optimizer>) -> Result<Arc<dyn Optimizer>> {
    match current() {
        Some(d) => Ok(d.parallel_optimizer(&optimizer)?.unwrap_or(optimizer)),
        None => Ok(optimizer),
    }
}

/// Whether `params` differ between the job's ranks by design (see
/// [`Distributed::rank_local_state`]); `false` without a distributed job.
pub fn rank_local_state(params: &[Parameter]) -> bool {
    current().is_some_and(|d| d.rank_local_state(params))
}

/// See [`Distributed::overflow_anywhere`]; `local` without a distributed job.
pub fn overflow_anywhere(local: bool, step: u64) -> Result<bool> {
    match current() {
        Some(d) => d.overflow_anywhere(local, step),
        None => Ok(local),
    }
}

/// This process's rank (0 without a distributed job).
pub fn rank() -> usize {
    current().map_or(0, |d| d.rank())
}

/// The world's size (1 without a distributed job).
pub fn group_size() -> usize {
    current().map_or(1, |d| d.group_size())
}
