//! A primitive defined outside spore-core behaves like a built-in one.

use std::sync::Arc;

use spore_core::prims::custom::{CustomOp, CustomPrimitive};
use spore_core::{DType, Result, Tensor, TensorType, grad};

/// softplus(x) = log(1 + e^x), with derivative sigmoid(x).
#[derive(Debug)]
struct Softplus;

impl CustomPrimitive for Softplus {
    fn name(&self) -> &str {
        "Softplus"
    }
    fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        match inputs {
            [x] if x.dtype.is_float() => Ok((*x).clone()),
            _ => Err(format!("expected one float input, got {}", inputs.len())),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> Result<Tensor, String> {
        let v: Vec<f64> = inputs[0]
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|x| x.exp().ln_1p())
            .collect();
        Tensor::from_f64(&v, inputs[0].shape(), inputs[0].dtype()).map_err(|e| e.to_string())
    }
    fn vjp(&self, inputs: &[Tensor], _out: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(g.mul(&inputs[0].sigmoid()?)?)])
    }
}

#[test]
fn custom_op_runs_eagerly_with_gradients_and_errors() {
    let op = CustomOp::new(Arc::new(Softplus));
    let x = Tensor::from_vec(vec![-1.0f64, 0.0, 2.0], &[3]).unwrap();
    let y = x.custom(&op, &[]).unwrap();
    let want: Vec<f64> = [-1.0f64, 0.0, 2.0]
        .iter()
        .map(|v| (1.0 + v.exp()).ln())
        .collect();
    for (a, b) in y.to_f64_vec().unwrap().iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
    let opc = op.clone();
    let g = grad(
        move |v: &[Tensor]| v[0].custom(&opc, &[])?.sum(&[], false),
        &[0],
    );
    let gs = g(std::slice::from_ref(&x)).unwrap()[0]
        .to_f64_vec()
        .unwrap();
    for (a, v) in gs.iter().zip([-1.0f64, 0.0, 2.0]) {
        assert!((a - 1.0 / (1.0 + (-v).exp())).abs() < 1e-12);
    }
    let err = Tensor::zeros(&[2], DType::I32)
        .unwrap()
        .custom(&op, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Softplus") && err.contains("float"), "{err}");
}
