//! Spore's graph compiler: the pass pipeline ([`pass`], [`passes`]), memory planning
//! ([`plan`]), the [`executor`], and [`jit()`], which ties them to tracing.
//!
//! ```
//! use spore_compile::jit::jit;
//! use spore_core::{Tensor, DType};
//! let f = jit("gelu", |x: &[Tensor]| Ok(vec![x[0].gelu(true)?]));
//! let y = f.call(&[Tensor::ones(&[2], DType::F32)]).unwrap();
//! assert!((y[0].to_vec::<f32>().unwrap()[0] - 0.8412).abs() < 1e-3);
//! ```

pub mod executor;
pub mod in_place;
pub mod jit;
pub mod pass;
pub mod passes;
pub mod plan;

pub use jit::{Jit, jit};
