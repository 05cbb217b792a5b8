//! [`TensorType`]: a tensor's shape and dtype, all that shape inference and errors need
//! (a leaf module: errors name types without knowing tensors).
//!
//! ```
//! use spore_core::{DType, TensorType};
//! let t = TensorType::new(&[2, 3], DType::F32);
//! assert_eq!((t.numel(), t.rank(), t.to_string()), (6, 2, "[2, 3] Float32".to_string()));
//! ```

use std::fmt;

use spore_kernels::{DType, Dims};

/// Shape and dtype: everything shape inference knows about a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Dims,
    pub dtype: DType,
}

impl TensorType {
    pub fn new(shape: &[usize], dtype: DType) -> TensorType {
        TensorType {
            shape: Dims::from_slice(shape),
            dtype,
        }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.shape, self.dtype)
    }
}
