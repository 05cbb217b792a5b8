//! [`Parameter`]: a named, mutable variable holding a tensor (a weight). Reading it inside
//! a traced function makes it a graph input, and assigning to it makes the new value a
//! graph output that the executor stores back, so new weights never trigger a recompile.
//!
//! ```
//! use spore_core::{Parameter, Tensor, DType};
//! let p = Parameter::new(Tensor::ones(&[2], DType::F32).unwrap(), "fc.weight");
//! p.assign(&p.value().mul_scalar(3.0).unwrap()).unwrap();
//! assert_eq!(p.value().to_vec::<f32>().unwrap(), vec![3.0, 3.0]);
//! assert!(p.value().requires_grad());
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::tensor::{Tensor, TensorType};

struct ParamInner {
    id: u64,
    name: RwLock<String>,
    requires_grad: bool,
    value: RwLock<Tensor>,
}

/// A shared handle: clones refer to the same variable.
#[derive(Clone)]
pub struct Parameter(Arc<ParamInner>);

static NEXT_PARAM: AtomicU64 = AtomicU64::new(1);

impl Parameter {
    /// A trainable parameter (its values require grad).
    pub fn new(value: Tensor, name: &str) -> Parameter {
        Parameter::with_requires_grad(value, name, true)
    }

    /// A parameter that is not trained (e.g. BatchNorm's moving statistics).
    pub fn with_requires_grad(value: Tensor, name: &str, requires_grad: bool) -> Parameter {
        Parameter(Arc::new(ParamInner {
            id: NEXT_PARAM.fetch_add(1, Ordering::Relaxed),
            name: RwLock::new(name.to_string()),
            requires_grad,
            value: RwLock::new(value.detach().with_requires_grad(requires_grad)),
        }))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    pub fn name(&self) -> String {
        self.0.name.read().map(|n| n.clone()).unwrap_or_default()
    }

    /// Renames the parameter (cells name their parameters when they are registered).
    pub fn set_name(&self, name: &str) {
        if let Ok(mut n) = self.0.name.write() {
            *n = name.to_string();
        }
    }

    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    pub fn tensor_type(&self) -> TensorType {
        self.stored().tensor_type().clone()
    }

    /// The stored concrete value, bypassing any trace.
    pub fn stored(&self) -> Tensor {
        self.0
            .value
            .read()
            .map(|v| v.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Swaps the stored tensor for `value` exactly as given (no type check, no new
    /// header) and returns the one it replaces. For executors: one lends a parameter's
    /// buffer to the op that computes the parameter's new value by storing a stand-in
    /// meanwhile, and stores the new value (or the old one back) before its run returns.
    pub fn swap_stored(&self, value: Tensor) -> Tensor {
        match self.0.value.write() {
            Ok(mut slot) => std::mem::replace(&mut *slot, value),
            Err(p) => std::mem::replace(&mut *p.into_inner(), value),
        }
    }

    /// Stores a concrete value and returns the one it replaces (executors write graph
    /// updates back with this, and recycle the old buffer).
    pub fn store(&self, value: Tensor) -> Tensor {
        // One new header (a leaf with this parameter's flag), not two.
        let v = value.with_requires_grad(self.0.requires_grad);
        match self.0.value.write() {
            Ok(mut slot) => std::mem::replace(&mut *slot, v),
            Err(p) => std::mem::replace(&mut *p.into_inner(), v),
        }
    }
}

impl fmt::Debug for Parameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Parameter({}, {})", self.name(), self.tensor_type())
    }
}

impl PartialEq for Parameter {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}
