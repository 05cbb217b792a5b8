//! Every operator the generator emits, in one network, against eager: convolutions with
//! stride, dilation, groups and every pad mode (with bias, BatchNorm, ReLU and ReLU6
//! fused in), BatchNorm on its own, max and average pooling (fused and not), Sigmoid,
//! Tanh, GELU in both forms, residual Add, Concat, global average pooling, Flatten,
//! Dense, Softmax, and ceil-mode pooling.

use std::sync::Arc;

use spore_codegen::{Options, Target, generate};
use spore_core::ops::{PadMode, Pool2dOptions};
use spore_core::{DType, Result, Tensor, TensorType};
use spore_nn::cell::{Cell, CellBase, CellCall, child};
use spore_nn::prelude::*;

use crate::build::{assert_freestanding, build, run_benchmark, write_inputs};
use crate::temp_dir;

struct Everything {
    base: CellBase,
    stem: Arc<Conv2d>,
    bn: Arc<BatchNorm2d>,
    depthwise: Arc<Conv2d>,
    dilated: Arc<Conv2d>,
    strided: Arc<Conv2d>,
    padded: Arc<Conv2d>,
    bn_alone: Arc<BatchNorm2d>,
    relu6: Arc<ReLU6>,
    avg: Arc<AvgPool2d>,
    max_same: Arc<MaxPool2d>,
    avg_tile: Arc<AvgPool2d>,
    avg_ceil: Arc<AvgPool2d>,
    max_ceil: Arc<MaxPool2d>,
    fc: Arc<Dense>,
    head: Arc<Dense>,
}

fn conv(cin: usize, cout: usize, k: usize) -> Conv2dConfig {
    Conv2d::config(cin, cout, k).weight_init(Initializer::normal(0.3))
}

impl Everything {
    fn new() -> Arc<Everything> {
        Arc::new(Everything {
            base: CellBase::new(),
            stem: conv(3, 8, 3)
                .pad_mode(PadMode::Same)
                .has_bias(true)
                .build()
                .unwrap(),
            bn: BatchNorm2d::new(8).unwrap(),
            depthwise: conv(8, 8, 3)
                .group(8)
                .pad_mode(PadMode::Pad([1, 1, 1, 1]))
                .build()
                .unwrap(),
            dilated: conv(8, 4, 3)
                .dilation(2)
                .pad_mode(PadMode::Same)
                .build()
                .unwrap(),
            strided: conv(4, 6, 3)
                .stride(2)
                .pad_mode(PadMode::Pad([0, 1, 1, 0]))
                .build()
                .unwrap(),
            padded: conv(8, 6, 2)
                .stride(2)
                .pad_mode(PadMode::Valid)
                .has_bias(true)
                .build()
                .unwrap(),
            bn_alone: BatchNorm2d::new(12).unwrap(),
            relu6: ReLU6::new(),
            avg: AvgPool2d::with_pad_mode(3, 1, PadMode::Same).unwrap(),
            max_same: MaxPool2d::with_pad_mode(3, 2, PadMode::Same).unwrap(),
            avg_tile: AvgPool2d::new(2, 2).unwrap(),
            // Ceil mode: the last window reaches past the padding, which the divisor
            // counts while the overhang is not counted.
            avg_ceil: AvgPool2d::with_options(
                Pool2dOptions::new(3, 2)
                    .pad_mode(PadMode::Pad([1, 0, 1, 0]))
                    .ceil_mode(true),
            )
            .unwrap(),
            max_ceil: MaxPool2d::with_options(Pool2dOptions::new(2, 2).ceil_mode(true)).unwrap(),
            fc: Dense::config(12 * 2 * 2 + 12 + 6 + 4 + 6, 16)
                .activation(ReLU::new())
                .build()
                .unwrap(),
            head: Dense::new(16, 5).unwrap(),
        })
    }
}

impl Cell for Everything {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = &inputs[0];
        // conv + bias + BatchNorm + ReLU6, fused.
        let a = self.relu6.call1(&self.bn.call1(&self.stem.call1(x)?)?)?; // [1, 8, 9, 9]
        let d = self.depthwise.call1(&a)?.sigmoid()?;
        let r = d.add(&a)?.relu()?; // residual Add + ReLU
        let t = self.dilated.call1(&r)?.tanh()?; // [1, 4, 9, 9]
        let s = self.strided.call1(&t)?.gelu(true)?; // [1, 6, 5, 5]
        let p = self.padded.call1(&self.avg.call1(&r)?)?.gelu(false)?; // [1, 6, 4, 4]
        let m = self.max_same.call1(&s)?.mean(&[2, 3], false)?; // [1, 6]
        let ceil_avg = self.avg_ceil.call1(&t)?.mean(&[2, 3], false)?; // [1, 4] from 5x5
        let ceil_max = self.max_ceil.call1(&s)?.mean(&[2, 3], false)?; // [1, 6] from 3x3
        let s4 = self.avg_tile.call1(&s.relu()?)?; // [1, 6, 2, 2]
        let p4 = self.avg_tile.call1(&p)?; // [1, 6, 2, 2]
        let c = Tensor::concat(&[&s4, &p4], 1)?; // [1, 12, 2, 2]
        let c = self.bn_alone.call1(&c)?;
        let pooled = c.mean(&[2, 3], false)?; // global average pool [1, 12]
        let flat = c.reshape(&[1, 48])?;
        let features = Tensor::concat(&[&flat, &pooled, &m, &ceil_avg, &ceil_max], 1)?;
        let h = self.fc.call1(&features)?;
        Ok(vec![self.head.call1(&h)?.softmax(-1)?, h])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("stem", &self.stem),
            child("bn", &self.bn),
            child("depthwise", &self.depthwise),
            child("dilated", &self.dilated),
            child("strided", &self.strided),
            child("padded", &self.padded),
            child("bn_alone", &self.bn_alone),
            child("fc", &self.fc),
            child("head", &self.head),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Everything"
    }
}

#[test]
fn every_supported_operator_matches_eager() {
    spore_core::rng::set_seed(11);
    let net = Everything::new();
    crate::fp32::randomise_batchnorm(&net);
    let project = generate(
        &*net,
        &[TensorType::new(&[1, 3, 9, 9], DType::F32)],
        &Options::new("everything", Target::X86),
    )
    .unwrap();
    let kinds: Vec<&str> = project
        .report
        .kernels
        .iter()
        .map(|(_, k)| k.as_str())
        .collect();
    for expected in [
        "Conv2D+BiasAdd+ReLU6",
        "Add+ReLU",
        "Concat",
        "MatMul+BiasAdd+ReLU",
        "AvgPool",
        "MaxPool",
    ] {
        assert!(
            kinds.contains(&expected),
            "no {expected} kernel in {kinds:?}"
        );
    }
    let dir = temp_dir("everything");
    project.write_to(&dir).unwrap();
    let bin = build(&dir);
    assert_freestanding(&dir);
    let x = Tensor::randn(&[4, 3, 9, 9], DType::F32, None).unwrap();
    write_inputs(&dir.join("x.bin"), &x.to_vec::<f32>().unwrap());
    let (rows, _) = run_benchmark(&bin, &dir.join("x.bin"), 1);
    assert_eq!(rows.len(), 4 * 2, "two outputs per sample");
    net.set_train(false);
    let mut worst = 0.0f32;
    for i in 0..4 {
        let xi = Tensor::from_vec(
            x.to_vec::<f32>().unwrap()[i * 243..(i + 1) * 243].to_vec(),
            &[1, 3, 9, 9],
        )
        .unwrap();
        let out = net.call(&[xi]).unwrap();
        for (k, o) in out.iter().enumerate() {
            for (a, b) in rows[2 * i + k].iter().zip(o.to_vec::<f32>().unwrap()) {
                worst = worst.max((a - b).abs());
            }
        }
    }
    eprintln!("every operator: largest difference from eager {worst:e}");
    assert!(worst <= 1e-5, "largest difference from eager: {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
