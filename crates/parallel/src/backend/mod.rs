//! What moves bytes between processes. Every call runs on the communication thread
//! ([`crate::engine`]), one at a time, in the order the job submitted them, so that every
//! rank issues its collectives in the same order.
//!
//! Two implementations: [`local`] (a job of one process, for programs not started by a
//! launcher, and for builds without MPI) and, with the `mpi` feature, `mpi` (Open MPI
//! through the `mpi` crate).
//!
//! ```
//! # use spore_parallel::ReduceOp;
//! assert_eq!(ReduceOp::parse("sum").unwrap(), ReduceOp::Sum);
//! ```

pub(crate) mod local;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;

use std::time::Duration;

use spore_kernels::Buffer;

/// How a reduction combines the ranks' values (MindSpore's `ReduceOp`, plus the mean that
/// `gradients_mean` uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// The sum divided by the group size (floating-point tensors only).
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    /// MindSpore's names: "sum", "mean", "max", "min", "prod" (any case).
    pub fn parse(name: &str) -> Result<ReduceOp, String> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            "prod" => ReduceOp::Prod,
            other => {
                return Err(format!(
                    "unknown reduce op {other:?}; expected sum, mean, max, min or prod"
                ));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }

    pub(crate) fn code(self) -> i64 {
        self as i64
    }

    pub(crate) fn from_code(code: i64) -> Option<ReduceOp> {
        [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Prod,
        ]
        .into_iter()
        .find(|op| op.code() == code)
    }
}

/// A communicator's index in its backend: 0 is the world, groups follow.
pub(crate) type CommIndex = usize;

/// The transport: collectives over a communicator on whole contiguous buffers. Element
/// counts are the caller's business (the engine checks that the ranks agree on shapes
/// before any data moves); `Mean` reaches a backend as `Sum`.
pub(crate) trait Backend {
    fn world_rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// A communicator over `world_ranks` (this rank among them). Collective over those
    /// ranks only.
    fn create_group(&mut self, world_ranks: &[usize]) -> Result<CommIndex, String>;
    /// `recv` (as long as `send`) becomes the reduction of every rank's `send`.
    fn all_reduce(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
        op: ReduceOp,
    ) -> Result<(), String>;
    /// `recv` (group size times `send`'s length) ends with every rank's `send`, in rank order.
    fn all_gather(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
    ) -> Result<(), String>;
    /// `send` is group-size blocks; rank r ends with block r of the reduction.
    fn reduce_scatter(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
        op: ReduceOp,
    ) -> Result<(), String>;
    /// Every rank ends with `root`'s `data` (a rank of the communicator).
    fn broadcast(&mut self, comm: CommIndex, data: &mut Buffer, root: usize) -> Result<(), String>;
    /// `send` is group-size blocks; block j goes to rank j, and `recv`'s block i comes
    /// from rank i.
    fn all_to_all(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
    ) -> Result<(), String>;
    fn send(&mut self, comm: CommIndex, data: &Buffer, dest: usize, tag: i32)
    -> Result<(), String>;
    fn recv(
        &mut self,
        comm: CommIndex,
        data: &mut Buffer,
        src: usize,
        tag: i32,
    ) -> Result<(), String>;
    fn barrier(&mut self, comm: CommIndex) -> Result<(), String>;
    /// The end of the job on this rank: waits up to `timeout` for every rank to reach
    /// its end too, then shuts the transport down. An error means some rank did not
    /// arrive (it may be waiting for this one in a collective this one never joined).
    fn finish(&mut self, timeout: Duration) -> Result<(), String>;
}

/// Ends the whole job from any thread, for when the communication thread is stuck in a
/// collective that cannot complete (a function pointer, so no lock is needed).
pub(crate) type AbortJob = fn(code: i32);
