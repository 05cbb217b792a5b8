//! What the generator refuses, and how it says so.

use spore_codegen::{Options, Target, generate};
use spore_core::{DType, Result, Tensor, TensorType};
use spore_nn::cell::{Cell, CellBase};
use spore_nn::prelude::*;

/// Broadcasts its input: an operator the generator does not emit.
struct Broadcaster(CellBase);

impl Cell for Broadcaster {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].broadcast_to(&[2, 3])?])
    }
    fn base(&self) -> &CellBase {
        &self.0
    }
    fn class_name(&self) -> &'static str {
        "Broadcaster"
    }
}

#[test]
fn an_unsupported_operator_is_named_with_its_scope_and_line() {
    let err = generate(
        &Broadcaster(CellBase::new()),
        &[TensorType::new(&[1, 3], DType::F32)],
        &Options::new("broadcast", Target::X86),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("codegen: BroadcastTo at scope "), "{err}");
    assert!(err.contains("errors.rs"), "{err}");
    assert!(err.contains("Conv2D, MatMul/Dense"), "{err}");
}

#[test]
fn integer_inputs_are_refused() {
    let net = SequentialCell::new(vec![Embedding::new(10, 4).unwrap()]);
    let err = generate(
        &*net,
        &[TensorType::new(&[1, 3], DType::I32)],
        &Options::new("emb", Target::X86),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("float32"), "{err}");
}

#[test]
fn a_name_that_is_not_a_c_identifier_is_refused() {
    let net = Dense::new(4, 2).unwrap();
    let err = generate(
        &*net,
        &[TensorType::new(&[1, 4], DType::F32)],
        &Options::new("my-net", Target::X86),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("\"my-net\""), "{err}");
}

#[test]
fn a_non_finite_weight_is_refused_by_name() {
    let net = Dense::new(4, 2).unwrap();
    let w = net.weight.stored().to_vec::<f32>().unwrap();
    let mut bad = w.clone();
    bad[3] = f32::NAN;
    net.weight
        .store(spore_core::Tensor::from_vec(bad, &[2, 4]).unwrap());
    let err = generate(
        &*net,
        &[TensorType::new(&[1, 4], DType::F32)],
        &Options::new("dense", Target::X86),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("weight") && err.contains("NaN"), "{err}");
}

#[test]
fn an_unknown_target_is_an_error() {
    let err = Target::parse("riscv").unwrap_err().to_string();
    assert!(
        err.contains("x86 or cortex-m") && err.contains("riscv"),
        "{err}"
    );
}
