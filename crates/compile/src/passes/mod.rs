//! The graph passes, one small unit each; `fusion` lists fusion's stages in order.

mod const_fold;
pub mod contract;
mod conv_epilogue;
mod conv_relu;
mod cse;
mod dce;
mod fuse;
mod fuse_sum;
mod fusion;
mod matmul_epilogue;
mod narrowing_casts;
mod pool_relu;
mod product_sums;
mod simplify;
mod widening_casts;

pub use const_fold::ConstFold;
pub use contract::Contract;
pub use conv_epilogue::ConvEpilogue;
pub use conv_relu::ConvRelu;
pub use cse::Cse;
pub use dce::Dce;
pub use fuse::ElementwiseLoops;
pub use fuse_sum::SumLoops;
pub use fusion::{FuseElementwise, fusion_passes, is_fusion_stage};
pub use matmul_epilogue::MatMulEpilogue;
pub use narrowing_casts::NarrowingCasts;
pub use pool_relu::PoolRelu;
pub use product_sums::ProductSums;
pub use simplify::Simplify;
pub use widening_casts::WideningCasts;
