//! The graph passes, one small unit each.

mod const_fold;
mod conv_relu;
mod cse;
mod dce;
mod fuse;
mod matmul_epilogue;
mod pool_relu;
mod simplify;

pub use const_fold::ConstFold;
pub use cse::Cse;
pub use dce::Dce;
pub use fuse::FuseElementwise;
pub use simplify::Simplify;
