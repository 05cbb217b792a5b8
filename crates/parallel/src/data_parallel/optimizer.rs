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
//! The state is each rank's own: its names carry the block
//! (`moments.fc1.weight.block0of4`), so a checkpoint of it is saved per rank and loads
//! back only into the same rank of a job of the same size.

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

/// One parameter's place in the sharded update.
struct Slot {
    whole: Parameter,
    /// This rank's block, `chunk` elements.
    block: Parameter,
    numel: usize,
    chunk: usize,
}

/// The user's optimizer run on this rank's blocks of the parameters.
pub(crate) struct ParallelOptimizer {
    params: Vec<Parameter>,
    slots: Vec<Slot>,
    inner: Arc<dyn Optimizer>,
    ranks: usize,
    rank: usize,
    op: ReduceOp,
}

impl ParallelOptimizer {
    pub(crate) fn new(
        optimizer: &Arc<dyn Optimizer>,
        rank: usize,
        ranks: usize,
        gradients_mean: bool,
    ) -> Result<ParallelOptimizer> {
        let params = optimizer.params().to_vec();
        let mut slots = Vec::with_capacity(params.len());
        for p in &params {
            let ty = p.tensor_type();
            let numel = ty.numel();
            let chunk = numel.div_ceil(ranks).max(1);
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
            ranks,
            rank,
            op: if gradients_mean {
                ReduceOp::Mean
            } else {
                ReduceOp::Sum
            },
        })
    }

    /// This rank's block of `x` flattened and padded with zeros (a view where the block
    /// lies inside the parameter: only the last blocks hold padding).
    fn block_of(&self, x: &Tensor, slot: &Slot) -> Result<Tensor> {
        let flat = x.reshape(&[slot.numel])?;
        let start = (self.rank * slot.chunk).min(slot.numel);
        let end = ((self.rank + 1) * slot.chunk).min(slot.numel);
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
        let total = slot.chunk * self.ranks;
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
            block_grads.push(ops::reduce_scatter(&self.padded(g, slot)?, self.op, None)?);
        }
        self.inner.apply(&block_grads)?;
        for slot in &self.slots {
            let gathered = ops::all_gather(&slot.block.value(), None)?;
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
