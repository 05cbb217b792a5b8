//! The parallel optimizer (MindSpore's `enable_parallel_optimizer`, ZeRO stage 1): each
//! of `N` data-parallel ranks keeps the optimizer state of, and updates, one `1/N` slice
//! of every parameter.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_parallel::context::*;
//! spore_parallel::init().unwrap();
//! set_auto_parallel_context(
//!     AutoParallelUpdate::new().parallel_mode(ParallelMode::DataParallel).enable_parallel_optimizer(true),
//! ).unwrap();
//! let net = WithLossCell::new(Dense::new(4, 2).unwrap(), MSELoss::new(Reduction::Mean));
//! let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
//! // Under `mpirun -n 4`, each rank would hold a quarter of the momentum.
//! let step = TrainOneStepCell::new(net, opt);
//! assert_eq!(step.optimizer().class_name(), "Momentum");
//! let (x, y) = (Tensor::ones(&[8, 4], DType::F32).unwrap(), Tensor::zeros(&[8, 2], DType::F32).unwrap());
//! assert!(step.call(&[x, y]).unwrap()[0].item().unwrap() >= 0.0);
//! # reset_auto_parallel_context();
//! ```
//!
//! A step, per parameter of `n` elements flattened and padded with zeros to
//! `N * ceil(n / N)`: the gradient is reduce-scattered (the sum, or the mean with
//! `gradients_mean`), so rank `r` receives the reduced gradient of block `r`; the user's
//! optimizer, rebuilt on the blocks (`Optimizer::on_shards`), updates rank `r`'s block
//! of the parameter; the blocks are all-gathered back into the whole parameter on every
//! rank. ReduceScatter plus AllGather move what one AllReduce does, so communication
//! stays that of data parallelism while the state shrinks to `1/N`. Each step takes the
//! block from the whole parameter first, so a parameter changed between steps (a
//! checkpoint loaded, `parameter_broadcast`) is what the next update starts from.
//!
//! In `semi_auto_parallel` and `auto_parallel` jobs each parameter is shared by the
//! ranks that hold it: the ranks of a sharded network holding the same block (each has
//! the whole gradient of it already, so each takes its slice without a reduction), or
//! the data-parallel replicas of a pipeline stage (their gradients' mean is
//! reduce-scattered); a block held by one rank is updated as it is.
//!
//! The state is each rank's own: its names carry the block among the parameter's
//! holders (`moments.fc1.weight.block0of4`), `ModelCheckpoint` writes it per rank
//! (`rank_<id>/`) and each rank resumes from its own file. In a data-parallel job another
//! rank's file is refused (its blocks are named for that rank); in a sharded network,
//! ranks holding different blocks can share names, as the sharded parameters do.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use spore_core::{Error, Parameter, Result, Tensor};
use spore_nn::optim::{Optimizer, OptimizerCore};

use crate::backend::ReduceOp;
use crate::ops;

/// Ids of the parameters that differ from rank to rank by design (the blocks and their
/// optimizer state): the start-up check that every rank built the same parameters, and
/// `parameter_broadcast`, leave them out.
static RANK_LOCAL: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

/// Whether `p` is one rank's block of the parallel optimizer, or state of one.
pub(crate) fn is_rank_local(p: &Parameter) -> bool {
    RANK_LOCAL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&p.id())
}

/// The ranks that share one parameter's update, and how its gradient reaches them.
#[derive(Clone, Debug)]
pub(crate) struct Share {
    /// Their group (`None`: the world).
    pub(crate) group: Option<String>,
    /// This rank's index among them, and how many they are (1: this rank alone).
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
    /// How their gradients combine where each is a summand (data parallelism), or
    /// `None` where each already holds the whole gradient (a sharded network's).
    pub(crate) reduce: Option<ReduceOp>,
}

/// One parameter's place in the sharded update.
struct Slot {
    whole: Parameter,
    /// This rank's block, `chunk` elements.
    block: Parameter,
    numel: usize,
    chunk: usize,
    share: Share,
}

/// The user's optimizer run on this rank's blocks of the parameters.
pub(crate) struct ParallelOptimizer {
    params: Vec<Parameter>,
    slots: Vec<Slot>,
    inner: Arc<dyn Optimizer>,
}

impl ParallelOptimizer {
    /// `optimizer` on this rank's blocks, each parameter shared as `shares` says (one
    /// per parameter, in the optimizer's order).
    pub(crate) fn new(
        optimizer: &Arc<dyn Optimizer>,
        shares: Vec<Share>,
    ) -> Result<ParallelOptimizer> {
        let params = optimizer.params().to_vec();
        if shares.len() != params.len() {
            return Err(Error::invalid(format!(
                "internal: {} shares for the parallel optimizer's {} parameters",
                shares.len(),
                params.len()
            )));
        }
        let mut slots = Vec::with_capacity(params.len());
        for (p, share) in params.iter().zip(shares) {
            let ty = p.tensor_type();
            let numel = ty.numel();
            let chunk = numel.div_ceil(share.ranks).max(1);
            let (rank, ranks) = (share.rank, share.ranks);
            // Named for the rank's block, so that its state in a checkpoint cannot be
            // taken for another rank's, or for the whole parameter's.
            let block = Parameter::with_requires_grad(
                Tensor::zeros(&[chunk], ty.dtype)?,
                &format!("{}.block{rank}of{ranks}", p.name()),
                false,
            );
            slots.push(Slot {
                whole: p.clone(),
                block,
                numel,
                chunk,
                share,
            });
        }
        let inner = optimizer.on_shards(slots.iter().map(|s| s.block.clone()).collect())?;
        let mut local = RANK_LOCAL.lock().unwrap_or_else(|p| p.into_inner());
        local.extend(inner.state().iter().map(|(_, p)| p.id()));
        local.extend(slots.iter().map(|s| s.block.id()));
        drop(local);
        Ok(ParallelOptimizer {
            params,
            slots,
            inner,
        })
    }

    /// This rank's block of `x` flattened and padded with zeros (a view where the block
    /// lies inside the parameter: only the last blocks hold padding).
    fn block_of(&self, x: &Tensor, slot: &Slot) -> Result<Tensor> {
        let flat = x.reshape(&[slot.numel])?;
        let rank = slot.share.rank;
        let start = (rank * slot.chunk).min(slot.numel);
        let end = ((rank + 1) * slot.chunk).min(slot.numel);
        let inside = flat.narrow(0, start, end - start)?;
        if end - start == slot.chunk {
            return Ok(inside);
        }
        let zeros = Tensor::zeros(&[slot.chunk - (end - start)], x.dtype())?;
        spore_core::ops::concat(&[&inside, &zeros], 0)
    }

    /// `x` flattened and padded with zeros to `ranks * chunk` elements.
    fn padded(&self, x: &Tensor, slot: &Slot) -> Result<Tensor> {
        let flat = x.reshape(&[slot.numel])?;
        let total = slot.chunk * slot.share.ranks;
        if total == slot.numel {
            return Ok(flat);
        }
        let zeros = Tensor::zeros(&[total - slot.numel], x.dtype())?;
        spore_core::ops::concat(&[&flat, &zeros], 0)
    }
}

impl Optimizer for ParallelOptimizer {
    fn params(&self) -> &[Parameter] {
        &self.params
    }
    fn apply(&self, grads: &[Tensor]) -> Result<()> {
        if grads.len() != self.slots.len() {
            return Err(Error::invalid(format!(
                "parallel optimizer ({}): expected {} gradients, got {}",
                self.inner.class_name(),
                self.slots.len(),
                grads.len()
            )));
        }
        let mut block_grads = Vec::with_capacity(grads.len());
        for (slot, g) in self.slots.iter().zip(grads) {
            slot.block
                .assign(&self.block_of(&slot.whole.value(), slot)?)?;
            let share = &slot.share;
            block_grads.push(match share.reduce {
                Some(op) if share.ranks > 1 => {
                    ops::reduce_scatter(&self.padded(g, slot)?, op, share.group.as_deref())?
                }
                _ => self.block_of(g, slot)?,
            });
        }
        self.inner.apply(&block_grads)?;
        for slot in &self.slots {
            let share = &slot.share;
            let gathered = match share.ranks {
                1 => slot.block.value(),
                _ => ops::all_gather(&slot.block.value(), share.group.as_deref())?,
            };
            let shape = slot.whole.tensor_type().shape.to_vec();
            slot.whole
                .assign(&gathered.narrow(0, 0, slot.numel)?.reshape(&shape)?)?;
        }
        Ok(())
    }
    fn state(&self) -> Vec<(String, Parameter)> {
        self.inner.state()
    }
    fn reduces_gradients(&self) -> bool {
        true
    }
    fn class_name(&self) -> &'static str {
        self.inner.class_name()
    }
    fn core(&self) -> &OptimizerCore {
        self.inner.core()
    }
}
