//! Custom operators defined outside Spore (MindSpore's `Custom` primitive): implement
//! [`CustomPrimitive`] (shape rule, CPU kernel, gradient rule) and call it through
//! [`Tensor::custom`]; it then behaves like a built-in operator, with autodiff.
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::prims::custom::{CustomOp, CustomPrimitive};
//! use spore_core::{Result, Tensor, TensorType};
//!
//! /// y = x^3, with dy/dx = 3x^2.
//! #[derive(Debug)]
//! struct Cube;
//! impl CustomPrimitive for Cube {
//!     fn name(&self) -> &str { "Cube" }
//!     fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
//!         if inputs.len() != 1 { return Err(format!("expected 1 input, got {}", inputs.len())); }
//!         Ok(inputs[0].clone())
//!     }
//!     fn eval(&self, inputs: &[&Tensor]) -> Result<Tensor, String> {
//!         let v: Vec<f64> = inputs[0].to_f64_vec().map_err(|e| e.to_string())?.iter().map(|x| x * x * x).collect();
//!         Tensor::from_f64(&v, inputs[0].shape(), inputs[0].dtype()).map_err(|e| e.to_string())
//!     }
//!     fn vjp(&self, inputs: &[Tensor], _out: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
//!         Ok(vec![Some(g.mul(&inputs[0].square()?.mul_scalar(3.0)?)?)])
//!     }
//! }
//! let cube = CustomOp::new(Arc::new(Cube));
//! let x = Tensor::from_vec(vec![2.0f32], &[1]).unwrap();
//! assert_eq!(x.custom(&cube, &[]).unwrap().item().unwrap(), 8.0);
//! ```

use std::panic::Location;

use crate::apply::apply;
use crate::error::Result;
use crate::op::Op;
pub use crate::op::custom::{CustomOp, CustomPrimitive};
use crate::tensor::{Storage, Tensor, TensorType};

fn primitive(op: &Op) -> std::result::Result<&CustomOp, String> {
    match op {
        Op::Custom(c) => Ok(c),
        _ => Err(super::not_in_family(op, "custom")),
    }
}

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
    primitive(op)?.infer(inputs)
}

pub(crate) fn eval(
    op: &Op,
    inputs: &[&Tensor],
    out: &TensorType,
) -> std::result::Result<Storage, String> {
    primitive(op)?.eval(inputs, out)
}

pub(crate) fn vjp(
    op: &Op,
    inputs: &[Tensor],
    out: &Tensor,
    grad: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    primitive(op)
        .map_err(crate::error::Error::invalid)?
        .vjp(inputs, out, grad)
}

/// How a custom op runs: through its author's rules, with the kernel's result checked
/// against the shape rule.
impl CustomOp {
    pub(crate) fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        self.0.infer(inputs)
    }
    pub(crate) fn eval(&self, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
        let t = self.0.eval(inputs)?;
        if t.tensor_type() != out {
            return Err(format!(
                "kernel returned {} but the shape rule promised {out}",
                t.tensor_type()
            ));
        }
        t.storage()
            .cloned()
            .ok_or_else(|| "kernel returned a symbolic tensor".to_string())
    }
    pub(crate) fn vjp(
        &self,
        inputs: &[Tensor],
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        self.0.vjp(inputs, out, grad)
    }
}

impl Tensor {
    /// Applies a custom primitive to `self` followed by `others`.
    #[track_caller]
    pub fn custom(&self, op: &CustomOp, others: &[&Tensor]) -> Result<Tensor> {
        let mut inputs = vec![self];
        inputs.extend_from_slice(others);
        apply(Op::Custom(op.clone()), &inputs, Location::caller())
    }
}
