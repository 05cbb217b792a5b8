//! Spore's core: [`Tensor`], the primitive operators ([`op::Op`] with their rules in
//! [`prims`]), eager (PyNative) execution through [`apply::apply`], and functional
//! autodiff ([`autodiff::grad`], [`autodiff::value_and_grad`], [`Tensor::backward`]).
//!
//! ```
//! use spore_core::{autodiff::value_and_grad, Tensor};
//! let w = Tensor::from_vec(vec![3.0f32], &[1]).unwrap().with_requires_grad(true);
//! let loss = {
//!     let w = w.clone();
//!     move |x: &[Tensor]| w.mul(&x[0])?.square()?.sum(&[], false)
//! };
//! let vg = value_and_grad(loss, None, &[w.clone()], false);
//! let out = vg(&[Tensor::from_vec(vec![2.0f32], &[1]).unwrap()]).unwrap();
//! assert_eq!(out.value.item().unwrap(), 36.0); // (3*2)^2
//! assert_eq!(out.weight_grads[0].item().unwrap(), 24.0); // 2 * w * x^2
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod apply;
pub mod autocast;
pub mod autodiff;
mod composite;
pub mod conditional_assign;
pub mod context;
pub mod control;
pub mod debug;
mod depth;
mod display;
pub mod eager;
pub mod error;
pub mod ir;
pub mod logging;
pub mod memory;
pub mod op;
pub mod ops;
pub mod parameter;
pub mod prims;
pub mod relu_rule;
pub mod rng;
mod scope;
pub mod scoped;
pub mod tensor;
pub mod threads;
pub mod trace;
pub mod types;

pub use autodiff::{ValueAndGrad, grad, value_and_grad};
pub use depth::{is_grad_enabled, no_grad, with_grad_enabled};
pub use error::{Error, Result};
pub use parameter::Parameter;
pub use spore_kernels::{DType, Element, bf16, f16};
pub use tensor::{Tensor, TensorType};
