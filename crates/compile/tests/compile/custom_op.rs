//! A primitive defined outside spore-core runs inside compiled graphs like a built-in one,
//! with its gradient rule recorded into the graph.

use std::sync::Arc;

use spore_compile::jit;
use spore_core::prims::custom::{CustomOp, CustomPrimitive};
use spore_core::{DType, Result, Tensor, TensorType, value_and_grad};

use super::assert_close;

/// y = x^3 + x, dy/dx = 3x^2 + 1.
#[derive(Debug)]
struct CubePlus;

impl CustomPrimitive for CubePlus {
    fn name(&self) -> &str {
        "CubePlus"
    }
    fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        match inputs {
            [x] if x.dtype.is_float() => Ok((*x).clone()),
            _ => Err("expected one float input".into()),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> Result<Tensor, String> {
        let v: Vec<f64> = inputs[0]
            .to_f64_vec()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|x| x * x * x + x)
            .collect();
        Tensor::from_f64(&v, inputs[0].shape(), inputs[0].dtype()).map_err(|e| e.to_string())
    }
    fn vjp(&self, inputs: &[Tensor], _out: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(g.mul(
            &inputs[0].square()?.mul_scalar(3.0)?.add_scalar(1.0)?,
        )?)])
    }
}

#[test]
fn custom_ops_compile_with_their_gradients() {
    let op = CustomOp::new(Arc::new(CubePlus));
    let loss = {
        let op = op.clone();
        move |x: &[Tensor]| x[0].custom(&op, &[])?.exp()?.sum(&[], false)
    };
    let x = Tensor::from_vec(vec![0.5f64, -0.25, 0.75], &[3]).unwrap();
    let eager =
        value_and_grad(loss.clone(), Some(&[0]), &[], false)(std::slice::from_ref(&x)).unwrap();
    let f = jit("custom_step", move |a: &[Tensor]| {
        let out = value_and_grad(loss.clone(), Some(&[0]), &[], false)(a)?;
        Ok(vec![out.value, out.input_grads[0].clone()])
    });
    let compiled = f.call(std::slice::from_ref(&x)).unwrap();
    assert_close(&compiled[0], &eager.value, 1e-12, "value");
    assert_close(&compiled[1], &eager.input_grads[0], 1e-12, "gradient");
    let g = f.graph_for(&[x.tensor_type().clone()]).unwrap();
    assert!(g.to_ir().contains("= CubePlus("), "{}", g.to_ir());
    // Its shape rule guards compiled calls too.
    let bad = jit("custom_bad", {
        let op = op.clone();
        move |a: &[Tensor]| Ok(vec![a[0].custom(&op, &[])?])
    });
    assert!(
        bad.call(&[Tensor::ones(&[2], DType::I32).unwrap()])
            .unwrap_err()
            .to_string()
            .contains("CubePlus")
    );
}
