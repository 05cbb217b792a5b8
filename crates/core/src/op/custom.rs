//! The data of a user-defined primitive: the [`CustomPrimitive`] trait its author
//! implements and the [`CustomOp`] handle an `Op::Custom` holds. How it is applied is
//! `prims::custom` (see its documentation for a whole example).
//!
//! ```
//! use spore_core::prims::custom::CustomPrimitive;
//! fn takes_any_primitive(_: &dyn CustomPrimitive) {}
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::error::Result;
use crate::tensor::{Tensor, TensorType};

/// The three rules of a user-defined primitive.
pub trait CustomPrimitive: Send + Sync + fmt::Debug {
    /// The operator's name, shown in errors, IR and dumps.
    fn name(&self) -> &str;
    /// Attributes that distinguish two instances of the same op (for caching and CSE).
    fn attributes(&self) -> String {
        String::new()
    }
    /// Validates inputs and returns the output type.
    fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String>;
    /// Computes the output; it must have the type `infer` returned.
    fn eval(&self, inputs: &[&Tensor]) -> Result<Tensor, String>;
    /// Input gradients given the output gradient, written with tensor ops.
    fn vjp(&self, inputs: &[Tensor], out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>>;
    /// True for an op whose run matters beyond its output (communication, I/O): the
    /// compiler then never removes, merges or precomputes it, and keeps its order.
    fn has_side_effect(&self) -> bool {
        false
    }
    /// False for an op whose run cannot fail once `infer` accepted its inputs' types: a
    /// compiled step may then write parameter updates in place before it (see
    /// `Op::may_fail_on_values`). User ops are assumed to fail on values.
    fn may_fail_on_values(&self) -> bool {
        true
    }
    /// True for an op whose output is the same for a float16 or bfloat16 input as for
    /// that input widened to float32 (a test of finiteness, say): the compiler then hands
    /// it the 16-bit value where the graph widened it only on the way, and no float32
    /// copy is made. The op's `eval` must accept the 16-bit types.
    fn same_on_widened_inputs(&self) -> bool {
        false
    }
}

/// A shared handle to a custom primitive; equal when name and attributes are equal.
#[derive(Clone, Debug)]
pub struct CustomOp(pub Arc<dyn CustomPrimitive>);

impl CustomOp {
    pub fn new(p: Arc<dyn CustomPrimitive>) -> CustomOp {
        CustomOp(p)
    }
    pub fn name(&self) -> &str {
        self.0.name()
    }
}

impl PartialEq for CustomOp {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name() && self.0.attributes() == other.0.attributes()
    }
}
impl Eq for CustomOp {}
impl Hash for CustomOp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name().hash(state);
        self.0.attributes().hash(state);
    }
}
