//! LeNet5 exactly as seed 001 defines it: `conv(1, 6, 5)` and `conv(6, 16, 5)` with
//! `TruncatedNormal(0.02)`, no bias, `valid` padding; `Dense(400, 120)`, `Dense(120, 84)`,
//! `Dense(84, num_class)` with weight and bias `TruncatedNormal(0.02)`; ReLU; MaxPool2d(2, 2);
//! a reshape to `(batch, -1)` before the dense layers. Input: `N x 1 x 32 x 32`.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let names: Vec<String> = net.parameters_and_names().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names[..3], ["conv1.weight", "conv2.weight", "fc1.weight"]);
//! assert_eq!(net.call1(&Tensor::ones(&[2, 1, 32, 32], DType::F32).unwrap()).unwrap().shape(), &[2, 10]);
//! ```

use std::sync::Arc;

use spore_core::ops::PadMode;
use spore_core::{Error, Result, Tensor};

use crate::cell::{Cell, CellBase, CellCall, child};
use crate::init::Initializer;
use crate::layers::{Conv2d, Dense, MaxPool2d, ReLU};

/// Seed 001's LeNet5.
pub struct LeNet5 {
    base: CellBase,
    pub num_class: usize,
    pub conv1: Arc<Conv2d>,
    pub conv2: Arc<Conv2d>,
    pub fc1: Arc<Dense>,
    pub fc2: Arc<Dense>,
    pub fc3: Arc<Dense>,
    relu: Arc<ReLU>,
    max_pool2d: Arc<MaxPool2d>,
}

fn conv(in_channels: usize, out_channels: usize, kernel_size: usize) -> Result<Arc<Conv2d>> {
    Conv2d::config(in_channels, out_channels, kernel_size)
        .weight_init(Initializer::truncated_normal(0.02))
        .has_bias(false)
        .pad_mode(PadMode::Valid)
        .build()
}

fn fc_with_initialize(input_channels: usize, out_channels: usize) -> Result<Arc<Dense>> {
    Dense::config(input_channels, out_channels)
        .weight_init(Initializer::truncated_normal(0.02))
        .bias_init(Initializer::truncated_normal(0.02))
        .build()
}

impl LeNet5 {
    pub fn new(num_class: usize) -> Result<Arc<LeNet5>> {
        Ok(Arc::new(LeNet5 {
            base: CellBase::new(),
            num_class,
            conv1: conv(1, 6, 5)?,
            conv2: conv(6, 16, 5)?,
            fc1: fc_with_initialize(16 * 5 * 5, 120)?,
            fc2: fc_with_initialize(120, 84)?,
            fc3: fc_with_initialize(84, num_class)?,
            relu: ReLU::new(),
            max_pool2d: MaxPool2d::new(2, 2)?,
        }))
    }
}

impl Cell for LeNet5 {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x] = inputs else {
            return Err(Error::invalid(format!(
                "LeNet5: expected 1 input, got {}",
                inputs.len()
            )));
        };
        let x = self.conv1.call1(x)?;
        let x = self.relu.call1(&x)?;
        let x = self.max_pool2d.call1(&x)?;
        let x = self.conv2.call1(&x)?;
        let x = self.relu.call1(&x)?;
        let x = self.max_pool2d.call1(&x)?;
        let batch = x.shape()[0];
        let x = x.reshape(&[batch, x.numel() / batch.max(1)])?;
        let x = self.fc1.call1(&x)?;
        let x = self.relu.call1(&x)?;
        let x = self.fc2.call1(&x)?;
        let x = self.relu.call1(&x)?;
        Ok(vec![self.fc3.call1(&x)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("conv1", &self.conv1),
            child("conv2", &self.conv2),
            child("fc1", &self.fc1),
            child("fc2", &self.fc2),
            child("fc3", &self.fc3),
            child("relu", &self.relu),
            child("max_pool2d", &self.max_pool2d),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "LeNet5"
    }
}
