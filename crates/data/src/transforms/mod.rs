//! Transforms that `map` applies to the columns of each row, as
//! `mindspore.dataset.vision` / `mindspore.dataset.transforms`: each is a [`TensorOp`]
//! (tensors in, tensors out), wrapped in a cheaply cloned [`Transform`]; random ones draw
//! from the per-row [`Rng`] that `map` hands them, so results do not depend on threads.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::rng::Rng;
//! use spore_data::transforms::{Transform, vision::{HWC2CHW, Rescale}};
//! let ops: Vec<Transform> = vec![Rescale::new(1.0 / 255.0, 0.0).into(), HWC2CHW.into()];
//! let img = Tensor::from_vec(vec![255u8; 6], &[1, 2, 3]).unwrap();
//! let mut rng = Rng::new(0);
//! let out = ops.iter().try_fold(vec![img], |x, op| op.apply(x, &mut rng)).unwrap();
//! assert_eq!(out[0].shape(), &[3, 1, 2]);
//! assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0; 6]);
//! ```

pub mod common;
pub mod resize;
pub mod vision;

use std::fmt;
use std::sync::Arc;

use spore_core::{Error, Result, Tensor};

use crate::rng::Rng;

pub use common::{Compose, OneHot, TypeCast};

/// An operation on the tensors of the mapped columns of one row.
pub trait TensorOp: Send + Sync {
    /// The name used in errors (MindSpore's class name: `Resize`, `TypeCast`, ...).
    fn name(&self) -> String;
    /// Transforms `inputs` (one tensor per mapped column, or the previous op's outputs).
    /// Random ops draw only from `rng`, which is seeded per row.
    fn apply(&self, inputs: Vec<Tensor>, rng: &mut Rng) -> Result<Vec<Tensor>>;
}

/// A shared transform, what `map` takes a list of. Any [`TensorOp`] converts into one
/// with `.into()`; [`Transform::from_fn`] wraps a closure (MindSpore's PyFunc).
#[derive(Clone)]
pub struct Transform(Arc<dyn TensorOp>);

impl<T: TensorOp + 'static> From<T> for Transform {
    fn from(op: T) -> Transform {
        Transform(Arc::new(op))
    }
}

impl Transform {
    pub fn name(&self) -> String {
        self.0.name()
    }

    pub fn apply(&self, inputs: Vec<Tensor>, rng: &mut Rng) -> Result<Vec<Tensor>> {
        self.0.apply(inputs, rng)
    }

    /// A transform from a function of the column tensors (deterministic).
    pub fn from_fn<F>(name: &str, f: F) -> Transform
    where
        F: Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    {
        Transform(Arc::new(FnOp {
            name: name.to_string(),
            f: Box::new(move |x, _| f(x)),
        }))
    }

    /// A transform from a function that may draw from the per-row generator.
    pub fn from_random_fn<F>(name: &str, f: F) -> Transform
    where
        F: Fn(Vec<Tensor>, &mut Rng) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    {
        Transform(Arc::new(FnOp {
            name: name.to_string(),
            f: Box::new(f),
        }))
    }
}

impl fmt::Debug for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

type BoxedFn = Box<dyn Fn(Vec<Tensor>, &mut Rng) -> Result<Vec<Tensor>> + Send + Sync>;

struct FnOp {
    name: String,
    f: BoxedFn,
}

impl TensorOp for FnOp {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn apply(&self, inputs: Vec<Tensor>, rng: &mut Rng) -> Result<Vec<Tensor>> {
        (self.f)(inputs, rng)
    }
}

/// The single input of a one-to-one op, or an error naming the op.
pub(crate) fn single(op: &str, mut inputs: Vec<Tensor>) -> Result<Tensor> {
    if inputs.len() != 1 {
        return Err(Error::invalid(format!(
            "{op}: expected 1 input column, got {}; map each column separately",
            inputs.len()
        )));
    }
    Ok(inputs.remove(0))
}
