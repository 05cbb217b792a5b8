//! ResNet-50 in its ImageNet form (MindSpore's model-zoo `resnet50`, torchvision's
//! `resnet50`): a 7x7 stride-2 stem convolution with 64 channels, BatchNorm, ReLU and a 3x3
//! stride-2 max pool; four stages of 3, 4, 6 and 3 [`Bottleneck`] blocks (widths 64, 128,
//! 256, 512, four times as many output channels); global average pooling and
//! `Dense(2048, num_classes)`. The stride of a stage sits on its first block's 3x3
//! convolution (the "v1.5" placement both zoos use). Convolutions have no bias.
//!
//! ```
//! use spore_nn::prelude::*;
//! let net = ImageNetResNet::resnet50(1000).unwrap();
//! let n: usize = net.trainable_params().iter().map(|p| p.tensor_type().numel()).sum();
//! assert_eq!(n, 25_557_032); // torchvision's count
//! ```

use std::sync::Arc;

use spore_core::ops::{PadMode, Pool2dOptions};
use spore_core::{Error, Result, Tensor};

use crate::cell::{Cell, CellBase, CellCall, child};
use crate::layers::{BatchNorm2d, Conv2d, Dense, MaxPool2d, ReLU, SequentialCell};

/// A `k x k` convolution without bias, padded to keep the size at stride 1.
fn conv(in_c: usize, out_c: usize, k: usize, stride: usize) -> Result<Arc<Conv2d>> {
    let pad = PadMode::Pad([k / 2; 4]);
    Conv2d::config(in_c, out_c, k)
        .stride(stride)
        .pad_mode(if k == 1 { PadMode::Valid } else { pad })
        .build()
}

/// 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), each with BatchNorm, and a
/// residual connection (a 1x1 projection with BatchNorm when the shape changes).
pub struct Bottleneck {
    base: CellBase,
    pub conv1: Arc<Conv2d>,
    pub bn1: Arc<BatchNorm2d>,
    pub conv2: Arc<Conv2d>,
    pub bn2: Arc<BatchNorm2d>,
    pub conv3: Arc<Conv2d>,
    pub bn3: Arc<BatchNorm2d>,
    relu: Arc<ReLU>,
    pub downsample: Option<Arc<SequentialCell>>,
}

impl Bottleneck {
    /// Output channels are `4 * width`.
    pub const EXPANSION: usize = 4;

    pub fn new(in_c: usize, width: usize, stride: usize) -> Result<Arc<Bottleneck>> {
        let out_c = width * Self::EXPANSION;
        let downsample = if stride != 1 || in_c != out_c {
            let proj = conv(in_c, out_c, 1, stride)?;
            Some(SequentialCell::new(vec![proj, BatchNorm2d::new(out_c)?]))
        } else {
            None
        };
        Ok(Arc::new(Bottleneck {
            base: CellBase::new(),
            conv1: conv(in_c, width, 1, 1)?,
            bn1: BatchNorm2d::new(width)?,
            conv2: conv(width, width, 3, stride)?,
            bn2: BatchNorm2d::new(width)?,
            conv3: conv(width, out_c, 1, 1)?,
            bn3: BatchNorm2d::new(out_c)?,
            relu: ReLU::new(),
            downsample,
        }))
    }
}

impl Cell for Bottleneck {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x] = inputs else {
            return Err(Error::invalid(format!(
                "Bottleneck: expected 1 input, got {}",
                inputs.len()
            )));
        };
        let out = self.relu.call1(&self.bn1.call1(&self.conv1.call1(x)?)?)?;
        let out = self
            .relu
            .call1(&self.bn2.call1(&self.conv2.call1(&out)?)?)?;
        let out = self.bn3.call1(&self.conv3.call1(&out)?)?;
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
            child("conv3", &self.conv3),
            child("bn3", &self.bn3),
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
        "Bottleneck"
    }
}

/// An ImageNet-style ResNet of [`Bottleneck`]s, for `N x 3 x H x W` inputs (224 x 224 in
/// the benchmarks; any size from 32 x 32 works).
pub struct ImageNetResNet {
    base: CellBase,
    pub conv1: Arc<Conv2d>,
    pub bn1: Arc<BatchNorm2d>,
    relu: Arc<ReLU>,
    pub maxpool: Arc<MaxPool2d>,
    pub layers: Vec<Arc<SequentialCell>>,
    pub fc: Arc<Dense>,
}

impl ImageNetResNet {
    /// ResNet-50: stages of `[3, 4, 6, 3]` blocks.
    pub fn resnet50(num_classes: usize) -> Result<Arc<ImageNetResNet>> {
        ImageNetResNet::new(&[3, 4, 6, 3], num_classes)
    }

    /// Four stages with `blocks[i]` bottlenecks of width 64, 128, 256 and 512.
    pub fn new(blocks: &[usize; 4], num_classes: usize) -> Result<Arc<ImageNetResNet>> {
        let mut in_c = 64;
        let mut layers = Vec::new();
        for (stage, (&n, width)) in blocks.iter().zip([64, 128, 256, 512]).enumerate() {
            let mut cells: Vec<Arc<dyn Cell>> = Vec::new();
            for b in 0..n {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                cells.push(Bottleneck::new(in_c, width, stride)?);
                in_c = width * Bottleneck::EXPANSION;
            }
            layers.push(SequentialCell::new(cells));
        }
        let pool = Pool2dOptions::new(3, 2).pad_mode(PadMode::Pad([1; 4]));
        Ok(Arc::new(ImageNetResNet {
            base: CellBase::new(),
            conv1: conv(3, 64, 7, 2)?,
            bn1: BatchNorm2d::new(64)?,
            relu: ReLU::new(),
            maxpool: MaxPool2d::with_options(pool)?,
            layers,
            fc: Dense::new(in_c, num_classes)?,
        }))
    }
}

impl Cell for ImageNetResNet {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x] = inputs else {
            return Err(Error::invalid(format!(
                "ImageNetResNet: expected 1 input, got {}",
                inputs.len()
            )));
        };
        let x = self.relu.call1(&self.bn1.call1(&self.conv1.call1(x)?)?)?;
        let mut x = self.maxpool.call1(&x)?;
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
            child("maxpool", &self.maxpool),
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
