//! Spore's distributed training on MPI: communication management (MindSpore's
//! `init`, `get_rank`, `get_group_size`, `create_group`), the collectives as operators
//! (`ops`), the auto-parallel context (`context`) and data parallelism, which
//! `TrainOneStepCell` and `Model` use without changes to user code.
//!
//! ```
//! use spore_parallel::context::{set_auto_parallel_context, AutoParallelUpdate, ParallelMode};
//! spore_parallel::init().unwrap();
//! set_auto_parallel_context(
//!     AutoParallelUpdate::new().parallel_mode(ParallelMode::DataParallel).gradients_mean(true),
//! ).unwrap();
//! // ... build the network and train as on one process; launch with
//! // `mpirun -n 4 target/release/examples/lenet_distributed` (built with `--features mpi`).
//! # spore_parallel::context::reset_auto_parallel_context();
//! ```
//!
//! Every MPI call runs on one communication thread (`engine`), in program order, so
//! collectives can be started without waiting (a gradient bucket's AllReduce overlaps
//! the rest of the backward pass) and a stuck collective becomes an error, not a hang.

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod backend;
mod collective;
pub mod context;
mod data_parallel;
mod engine;
mod management;
pub mod ops;
pub mod pipeline;
mod recycle;
pub mod sharding;

pub use backend::ReduceOp;
pub use collective::{barrier, collective_max_f64, collective_sum_f64};
pub use engine::{BackendKind, engine_timeout_from};
pub use management::{
    WORLD_COMM_GROUP, backend_kind, create_group, destroy_group, get_group_rank_from_world_rank,
    get_group_size, get_rank, get_world_rank_from_group_rank, init, is_initialized, release,
};
