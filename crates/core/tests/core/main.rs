//! spore-core's integration tests (one binary: linking dominates build time on 2 cores).

mod autodiff;
mod conditional_assign;
mod custom;
mod eager;
mod errors;
mod fused_flags;
mod fused_in_place;
mod half;
mod op_table;
mod readers;
mod recycled_outputs;
mod reference;
mod resources;
mod table;
mod table_api;
mod table_compiled;
mod table_products;
mod table_structural;
mod tensor;
mod training;

/// The deterministic input generator, shared with the op table.
pub use table::Lcg;
