//! Activation cells: `ReLU`, `ReLU6`, `Sigmoid`, `Tanh`, `GELU` (tanh approximation by default, as
//! MindSpore) and `Softmax` (last axis by default).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_nn::prelude::*;
//! let x = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0], &[3]).unwrap();
//! assert_eq!(ReLU::new().call1(&x).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.0, 2.0]);
//! let g = GELU::new().call1(&x).unwrap().to_vec::<f32>().unwrap();
//! assert!((g[2] - 1.9546).abs() < 1e-3);
//! ```

use std::sync::Arc;

use spore_core::{Result, Tensor};

use super::single;
use crate::cell::{Cell, CellBase};

macro_rules! unary_activation {
    ($(#[$doc:meta])* $name:ident, $class:literal, $method:ident) => {
        $(#[$doc])*
        pub struct $name {
            base: CellBase,
        }
        impl $name {
            pub fn new() -> Arc<$name> {
                Arc::new($name { base: CellBase::new() })
            }
        }
        impl Cell for $name {
            fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
                Ok(vec![single(&self.base, $class, inputs)?.$method()?])
            }
            fn base(&self) -> &CellBase {
                &self.base
            }
            fn class_name(&self) -> &'static str {
                $class
            }
        }
    };
}

unary_activation!(
    /// `max(x, 0)`.
    ReLU,
    "ReLU",
    relu
);
unary_activation!(
    /// `min(max(x, 0), 6)`.
    ReLU6,
    "ReLU6",
    relu6
);
unary_activation!(
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    "Sigmoid",
    sigmoid
);
unary_activation!(
    /// Hyperbolic tangent.
    Tanh,
    "Tanh",
    tanh
);

/// GELU; `approximate` (the default) uses the tanh form, otherwise the erf form.
pub struct GELU {
    base: CellBase,
    pub approximate: bool,
}

impl GELU {
    /// MindSpore's default: the tanh approximation.
    pub fn new() -> Arc<GELU> {
        GELU::with_approximate(true)
    }
    pub fn with_approximate(approximate: bool) -> Arc<GELU> {
        Arc::new(GELU {
            base: CellBase::new(),
            approximate,
        })
    }
}

impl Cell for GELU {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![
            single(&self.base, "GELU", inputs)?.gelu(self.approximate)?,
        ])
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "GELU"
    }
}

/// Softmax along `axis` (default -1).
pub struct Softmax {
    base: CellBase,
    pub axis: isize,
}

impl Softmax {
    pub fn new() -> Arc<Softmax> {
        Softmax::with_axis(-1)
    }
    pub fn with_axis(axis: isize) -> Arc<Softmax> {
        Arc::new(Softmax {
            base: CellBase::new(),
            axis,
        })
    }
}

impl Cell for Softmax {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![
            single(&self.base, "Softmax", inputs)?.softmax(self.axis)?,
        ])
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Softmax"
    }
}
