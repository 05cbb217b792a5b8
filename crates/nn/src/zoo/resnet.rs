//! ResNet-18 in its CIFAR-10 form: a 3x3 stride-1 stem convolution with 64 channels and no
//! max pool, four stages of two [`BasicBlock`]s (64, 128, 256, 512 channels; stride 2 from
//! the second stage, with 1x1 stride-2 projection shortcuts), global average pooling and
//! `Dense(512, num_classes)`. Convolutions have no bias and are followed by BatchNorm.
//!
//! ```
//! use spore_nn::prelude::*;
//! let net = ResNet::resnet18(10).unwrap();
//! let n: usize = net.trainable_params().iter().map(|p| p.tensor_type().numel()).sum();
//! assert_eq!(n, 11_173_962);
//! ```

use std::sync::Arc;

use spore_core::ops::PadMode;
use spore_core::{Error, Result, Tensor};

use crate::cell::{Cell, CellBase, CellCall, child};
use crate::layers::{BatchNorm2d, Conv2d, Dense, ReLU, SequentialCell};

fn conv3x3(in_c: usize, out_c: usize, stride: usize) -> Result<Arc<Conv2d>> {
    Conv2d::config(in_c, out_c, 3)
        .stride(stride)
        .pad_mode(PadMode::Pad([1; 4]))
        .build()
}

/// Two 3x3 convolutions with BatchNorm and a residual connection.
pub struct BasicBlock {
    base: CellBase,
    pub conv1: Arc<Conv2d>,
    pub bn1: Arc<BatchNorm2d>,
    pub conv2: Arc<Conv2d>,
    pub bn2: Arc<BatchNorm2d>,
    relu: Arc<ReLU>,
    /// 1x1 projection + BatchNorm when the shape changes.
    pub downsample: Option<Arc<SequentialCell>>,
}

impl BasicBlock {
    pub fn new(in_c: usize, out_c: usize, stride: usize) -> Result<Arc<BasicBlock>> {
        let downsample = if stride != 1 || in_c != out_c {
            let proj = Conv2d::config(in_c, out_c, 1)
                .stride(stride)
                .pad_mode(PadMode::Valid)
                .build()?;
            Some(SequentialCell::new(vec![proj, BatchNorm2d::new(out_c)?]))
        } else {
            None
        };
        Ok(Arc::new(BasicBlock {
            base: CellBase::new(),
            conv1: conv3x3(in_c, out_c, stride)?,
            bn1: BatchNorm2d::new(out_c)?,
            conv2: conv3x3(out_c, out_c, 1)?,
            bn2: BatchNorm2d::new(out_c)?,
            relu: ReLU::new(),
            downsample,
        }))
    }
}

impl Cell for BasicBlock {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x] = inputs else {
            return Err(Error::invalid(format!(
                "BasicBlock: expected 1 input, got {}",
                inputs.len()
            )));
        };
        let out = self.relu.call1(&self.bn1.call1(&self.conv1.call1(x)?)?)?;
        let out = self.bn2.call1(&self.conv2.call1(&out)?)?;
        let identity = match &self.downsample {
            Some(d) => d.call1(x)?,
            None => x.clone(),
        };
        Ok(vec![self.relu.call1(&out.add(&identity)?)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        let mut v = vec![
            child("conv1", &self.conv1),
            child("bn1", &self.bn1),
            child("conv2", &self.conv2),
            child("bn2", &self.bn2),
            child("relu", &self.relu),
        ];
        if let Some(d) = &self.downsample {
            v.push(child("downsample", d));
        }
        v
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "BasicBlock"
    }
}

/// A CIFAR-style ResNet of [`BasicBlock`]s.
pub struct ResNet {
    base: CellBase,
    pub conv1: Arc<Conv2d>,
    pub bn1: Arc<BatchNorm2d>,
    relu: Arc<ReLU>,
    pub layers: Vec<Arc<SequentialCell>>,
    pub fc: Arc<Dense>,
}

impl ResNet {
    /// ResNet-18: stages of `[2, 2, 2, 2]` blocks.
    pub fn resnet18(num_classes: usize) -> Result<Arc<ResNet>> {
        ResNet::new(&[2, 2, 2, 2], num_classes)
    }

    /// Four stages with `blocks[i]` blocks of 64, 128, 256 and 512 channels.
    pub fn new(blocks: &[usize; 4], num_classes: usize) -> Result<Arc<ResNet>> {
        let widths = [64, 128, 256, 512];
        let mut in_c = 64;
        let mut layers = Vec::new();
        for (stage, (&n, &w)) in blocks.iter().zip(&widths).enumerate() {
            let mut cells: Vec<Arc<dyn Cell>> = Vec::new();
            for b in 0..n {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                cells.push(BasicBlock::new(in_c, w, stride)?);
                in_c = w;
            }
            layers.push(SequentialCell::new(cells));
        }
        Ok(Arc::new(ResNet {
            base: CellBase::new(),
            conv1: conv3x3(3, 64, 1)?,
            bn1: BatchNorm2d::new(64)?,
            relu: ReLU::new(),
            layers,
            fc: Dense::new(512, num_classes)?,
        }))
    }
}

impl Cell for ResNet {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x] = inputs else {
            return Err(Error::invalid(format!(
                "ResNet: expected 1 input, got {}",
                inputs.len()
            )));
        };
        let mut x = self.relu.call1(&self.bn1.call1(&self.conv1.call1(x)?)?)?;
        for layer in &self.layers {
            x = layer.call1(&x)?;
        }
        let pooled = x.mean(&[2, 3], false)?;
        Ok(vec![self.fc.call1(&pooled)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        let mut v = vec![
            child("conv1", &self.conv1),
            child("bn1", &self.bn1),
            child("relu", &self.relu),
        ];
        for (i, l) in self.layers.iter().enumerate() {
            v.push((format!("layer{}", i + 1), l.clone() as Arc<dyn Cell>));
        }
        v.push(child("fc", &self.fc));
        v
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "ResNet"
    }
}
