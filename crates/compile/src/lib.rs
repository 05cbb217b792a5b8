//! Spore's graph compiler: the pass pipeline ([`pass`], [`passes`]), memory planning
//! ([`plan`]), the [`executor`], and [`jit()`], which ties them to tracing.
//!
//! ```
//! use spore_compile::jit::jit;
//! use spore_core::{Tensor, DType};
//! let f = jit("gelu", |x: &[Tensor]| Ok(vec![x[0].gelu(true)?]));
//! let y = f.call(&[Tensor::ones(&[2], DType::F32).unwrap()]).unwrap();
//! assert!((y[0].to_vec::<f32>().unwrap()[0] - 0.8412).abs() < 1e-3);
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod args;
pub mod executor;
pub mod in_place;
pub mod jit;
pub mod pass;
pub mod passes;
pub mod plan;

pub use jit::{Jit, jit};
