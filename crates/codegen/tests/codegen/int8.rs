//! Int8 code on small networks against eager float32: padded convolutions, ReLU6, an
//! average pool over padding (whose cells hold the zero point), a product as the output;
//! and the networks the int8 path refuses.

use std::sync::Arc;

use spore_codegen::{Options, Target, generate};
use spore_core::ops::{PadMode, Pool2dOptions};
use spore_core::{DType, Result, Tensor, TensorType};
use spore_nn::cell::{Cell, CellBase, CellCall, child};
use spore_nn::prelude::*;

use crate::build::{assert_freestanding, build, run_benchmark, write_inputs};
use crate::temp_dir;

struct Small {
    base: CellBase,
    conv: Arc<Conv2d>,
    relu6: Arc<ReLU6>,
    avg: Arc<AvgPool2d>,
    fc: Arc<Dense>,
    /// Return the hidden features too (an output a later kernel reads).
    both: bool,
}

impl Small {
    fn new(both: bool) -> Arc<Small> {
        let pool = Pool2dOptions::new(3, 2).pad_mode(PadMode::Pad([1, 1, 1, 1]));
        Arc::new(Small {
            base: CellBase::new(),
            conv: Conv2d::config(2, 4, 3)
                .pad_mode(PadMode::Pad([1, 1, 1, 1]))
                .has_bias(true)
                .build()
                .unwrap(),
            relu6: ReLU6::new(),
            avg: AvgPool2d::with_options(pool).unwrap(),
            fc: Dense::new(4 * 4 * 4, 3).unwrap(),
            both,
        })
    }
}

impl Cell for Small {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let h = self
            .avg
            .call1(&self.relu6.call1(&self.conv.call1(&inputs[0])?)?)?;
        let f = h.reshape(&[1, 64])?;
        let y = self.fc.call1(&f)?;
        Ok(if self.both { vec![y, f] } else { vec![y] })
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("conv", &self.conv),
            child("avg", &self.avg),
            child("fc", &self.fc),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Small"
    }
}

fn samples(n: usize, seed: u64) -> Vec<Tensor> {
    (0..n)
        .map(|k| Tensor::randn(&[1, 2, 8, 8], DType::F32, Some(seed + k as u64)).unwrap())
        .collect()
}

#[test]
fn int8_code_tracks_float32_within_quantization_error() {
    spore_core::rng::set_seed(21);
    let net = Small::new(false);
    let calibration: Vec<Vec<Tensor>> = samples(32, 100).into_iter().map(|t| vec![t]).collect();
    let options = Options::new("small", Target::X86).int8(calibration);
    let project = generate(
        &*net,
        &[TensorType::new(&[1, 2, 8, 8], DType::F32)],
        &options,
    )
    .unwrap();
    let dir = temp_dir("int8_small");
    project.write_to(&dir).unwrap();
    let bin = build(&dir);
    assert_freestanding(&dir);
    let inputs = samples(8, 500);
    let flat: Vec<f32> = inputs
        .iter()
        .flat_map(|t| t.to_vec::<f32>().unwrap())
        .collect();
    write_inputs(&dir.join("x.bin"), &flat);
    let (rows, _) = run_benchmark(&bin, &dir.join("x.bin"), 1);
    net.set_train(false);
    let (mut worst, mut range) = (0.0f32, 0.0f32);
    for (x, row) in inputs.iter().zip(&rows) {
        let e = net.call1(x).unwrap().to_vec::<f32>().unwrap();
        for (a, b) in row.iter().zip(&e) {
            worst = worst.max((a - b).abs());
            range = range.max(b.abs());
        }
    }
    eprintln!("int8 small network: largest difference {worst:e} on outputs up to {range}");
    // Three int8 roundings on the way (input, conv, pool): a few per cent of the range.
    assert!(
        worst <= 0.05 * range,
        "int8 differs by {worst} on outputs up to {range}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_output_read_by_a_later_kernel_is_refused_in_int8_only() {
    let net = Small::new(true);
    let ty = [TensorType::new(&[1, 2, 8, 8], DType::F32)];
    assert!(generate(&*net, &ty, &Options::new("both", Target::X86)).is_ok());
    let calibration = vec![vec![samples(1, 1).remove(0)]];
    let err = generate(
        &*net,
        &ty,
        &Options::new("both", Target::X86).int8(calibration),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("output") && err.contains("float32"), "{err}");
}

/// A dense layer applied twice (shared weights) and a pad with -inf before a max.
struct Shared {
    base: CellBase,
    fc: Arc<Dense>,
}

impl Cell for Shared {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let a = self.fc.call1(&inputs[0])?;
        let b = self.fc.call1(&a.tanh()?)?;
        let padded = b.pad(&[(0, 0), (1, 1)], f64::NEG_INFINITY)?;
        Ok(vec![padded.max(&[1], false)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("fc", &self.fc)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Shared"
    }
}

#[test]
fn a_shared_layer_and_an_infinite_pad_value_build() {
    let net = Arc::new(Shared {
        base: CellBase::new(),
        fc: Dense::config(4, 4).has_bias(true).build().unwrap(),
    });
    let project = generate(
        &*net,
        &[TensorType::new(&[2, 4], DType::F32)],
        &Options::new("shared", Target::X86),
    )
    .unwrap();
    let dir = temp_dir("shared");
    project.write_to(&dir).unwrap();
    let bin = build(&dir);
    let x = Tensor::randn(&[2, 4], DType::F32, Some(9)).unwrap();
    write_inputs(&dir.join("x.bin"), &x.to_vec::<f32>().unwrap());
    let (rows, _) = run_benchmark(&bin, &dir.join("x.bin"), 1);
    let e = net.call1(&x).unwrap().to_vec::<f32>().unwrap();
    for (a, b) in rows[0].iter().zip(&e) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
