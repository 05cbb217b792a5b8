//! spore-parallel's multi-process tests. Each outer test launches this test binary under
//! `mpirun` to run one `#[ignore]`d inner test (named `rank_*`) on every rank, and checks
//! that the job succeeded (or, for the fault tests, failed the expected way in bounded
//! time). Without the `mpi` feature there is no MPI to launch: the outer tests say so
//! loudly and fail, because a multi-process claim that was never run proved nothing.
//! `scripts/test.sh` builds them with `--features spore-parallel/mpi`.

mod collectives;
mod context;
mod data_parallel;
mod faults;
mod launch;
mod loss_scaled;
mod model;
mod parallel_optimizer;
mod parallel_optimizer_sharded;
mod pipeline;
mod pipeline_sharded;
mod sharding;
mod sharding_memory;
mod sharding_nets;
