//! Seed 004's `Network`: `Flatten` then `SequentialCell(Dense(784, 512), ReLU,
//! Dense(512, 512), ReLU, Dense(512, 10))`, with MindSpore's default initialisation.
//! Input: `N x 1 x 28 x 28`.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = Mlp::new().unwrap();
//! let names: Vec<String> = net.parameters_and_names().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names[0], "dense_relu_sequential.0.weight");
//! assert_eq!(net.call1(&Tensor::ones(&[3, 1, 28, 28], DType::F32).unwrap()).unwrap().shape(), &[3, 10]);
//! ```

use std::sync::Arc;

use spore_core::{Result, Tensor};

use crate::cell::{Cell, CellBase, CellCall, child};
use crate::layers::{Dense, Flatten, ReLU, SequentialCell};

/// The 784-512-512-10 network of seed 004.
pub struct Mlp {
    base: CellBase,
    pub flatten: Arc<Flatten>,
    pub dense_relu_sequential: Arc<SequentialCell>,
}

impl Mlp {
    pub fn new() -> Result<Arc<Mlp>> {
        Ok(Arc::new(Mlp {
            base: CellBase::new(),
            flatten: Flatten::new(),
            dense_relu_sequential: SequentialCell::new(vec![
                Dense::new(28 * 28, 512)?,
                ReLU::new(),
                Dense::new(512, 512)?,
                ReLU::new(),
                Dense::new(512, 10)?,
            ]),
        }))
    }
}

impl Cell for Mlp {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = self.flatten.call(inputs)?;
        self.dense_relu_sequential.call(&x)
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("flatten", &self.flatten),
            child("dense_relu_sequential", &self.dense_relu_sequential),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Network"
    }
}
