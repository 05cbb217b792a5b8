//! Operator-level parallelism (MindSpore's `semi_auto_parallel`): each operator's
//! tensors are cut into blocks across the ranks by a strategy, the parameters are stored
//! as blocks, and the communication between operators whose layouts differ is inserted.
//!
//! ```
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! use spore_parallel::sharding::{plan_graph, Strategies};
//! // Megatron's MLP on 4 ranks: the first product split by columns, the second by rows.
//! let net = WithLossCell::new(
//!     SequentialCell::new(vec![Dense::new(16, 64).unwrap(), ReLU::new(), Dense::new(64, 8).unwrap()]),
//!     MSELoss::new(Reduction::Mean),
//! );
//! let types = [TensorType::new(&[32, 16], DType::F32), TensorType::new(&[32, 8], DType::F32)];
//! let g = spore_core::trace::trace("mlp", &types, |x| net.call(x)).unwrap();
//! let mut s = Strategies::new();
//! s.shard("0/MatMul", "((1, 1), (1, 4))").unwrap();
//! s.shard("2/MatMul", "((1, 4), (4, 1))").unwrap();
//! let plan = plan_graph(&g, &s, 4).unwrap();
//! let text = plan.describe(&g);
//! // The hidden layer never leaves its blocks; one AllReduce adds the second product's
//! // summands (the loss, on its share of the batch, adds one more of a scalar).
//! assert!(!text.contains("AllGather"), "{text}");
//! assert_eq!(text.matches("AllReduce(axes [1] of dev[1, 4, 1])").count(), 1, "{text}");
//! ```
//!
//! The pieces, each usable alone: [`Layout`] (device matrix, tensor map, partial sums),
//! [`Strategy`]/[`Strategies`] (MindSpore's `shard` tuples by operator path),
//! [`plan_op`] (one operator's rule), [`plan_graph`] (the pass over a traced graph),
//! [`redistribution_steps`]/[`redistribute`] (the collectives between two layouts, with
//! gradients that keep every rank's loss the same), [`run_planned`] and [`ShardedCell`].

mod agree;
mod calibrate;
mod cell;
mod comm;
mod cost;
mod execute;
mod holders;
mod layout;
mod output;
mod plan;
mod redistribute;
mod rules;
mod search;
mod strategy;
mod strategy_file;

pub(crate) use agree::agree;
pub use agree::same_on_every_rank;
pub use cell::ShardedCell;
pub use cost::{Cluster, Cost, needs_grad, op_time, plan_cost, redistribution_time};
pub use execute::run_planned;
pub use holders::block_holders;
pub(crate) use holders::holders_of;
pub use layout::{Layout, coords, group_ranks};
pub use output::output_layout;
pub(crate) use plan::used_strategy_paths;
pub use plan::{NodeSharding, ShardingPlan, Stored, plan_graph, plan_graph_local_inputs};
pub(crate) use redistribute::group_of_ranks;
pub use redistribute::{Step, redistribute, redistribution_steps};
pub use rules::{OpPlan, plan_op};
pub use search::{SearchMode, Searched, brute_force, candidates, search, search_given_blocks};
pub use strategy::{Strategies, Strategy, op_path};
pub use strategy_file::{load_strategies, save_strategies};
