//! PyNative mode's BatchNorm and LayerNorm operators (float32) against the composites of
//! primitives they stand in for, run in float64 as the reference: outputs, moving
//! statistics, first gradients of input, gamma and beta, and a second derivative (a
//! recorded backward pass, which the eager operators write with primitives).

use std::sync::Arc;

use spore_core::{DType, Tensor, grad, value_and_grad};
use spore_nn::prelude::*;

use super::serial;

/// Deterministic values in about [-2, 2] with a per-channel offset, so means are not zero.
fn data(shape: &[usize], salt: u32) -> Vec<f64> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(salt * 97);
            ((h >> 8) % 4000) as f64 / 1000.0 - 2.0 + (i % 3) as f64 * 0.5
        })
        .collect()
}

fn close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= tol * scale,
            "{what}[{i}]: eager float32 {a} vs composite float64 {b}"
        );
    }
}

fn op_name(t: &Tensor) -> String {
    t.grad_fn().map(|f| f.op.name()).unwrap_or_default()
}

/// `y`, the gradient of `Σ y · w` for `x` and for each trainable parameter, and the
/// gradient for `x` of `Σ (that gradient)²` (a second derivative).
fn run(cell: &Arc<dyn Cell>, x: &Tensor, w: &Tensor) -> (Tensor, Vec<Tensor>, Tensor) {
    let weights: Vec<Tensor> = cell
        .parameters_and_names()
        .into_iter()
        .filter(|(_, p)| p.requires_grad())
        .map(|(_, p)| p.value())
        .collect();
    let first = {
        let (cell, w) = (cell.clone(), w.clone());
        move |inp: &[Tensor]| -> spore_core::Result<Vec<Tensor>> {
            let y = cell.call(inp)?.remove(0);
            Ok(vec![y.mul(&w)?.sum(&[], false)?, y])
        }
    };
    let out =
        value_and_grad(first.clone(), Some(&[0]), &weights, true)(std::slice::from_ref(x)).unwrap();
    let mut grads = vec![out.input_grads[0].clone()];
    grads.extend(out.weight_grads);
    let second = move |inp: &[Tensor]| -> spore_core::Result<Tensor> {
        let g = value_and_grad(first.clone(), Some(&[0]), &[], true)(inp)?;
        g.input_grads[0].square()?.sum(&[], false)
    };
    let hessian_term = grad(second, &[0])(std::slice::from_ref(x))
        .unwrap()
        .remove(0);
    (out.aux[0].clone(), grads, hessian_term)
}

fn compare(eager: &Arc<dyn Cell>, reference: &Arc<dyn Cell>, shape: &[usize], op: &str) {
    let x64 = Tensor::from_f64(&data(shape, 1), shape, DType::F64).unwrap();
    let w64 = Tensor::from_f64(&data(shape, 2), shape, DType::F64).unwrap();
    let (x32, w32) = (x64.cast(DType::F32).unwrap(), w64.cast(DType::F32).unwrap());
    assert_eq!(
        op_name(&eager.call1(&x32.with_requires_grad(true)).unwrap()),
        op,
        "{shape:?}: the eager operator runs"
    );
    assert_ne!(
        op_name(&reference.call1(&x64.with_requires_grad(true)).unwrap()),
        op,
        "{shape:?}: float64 composes"
    );
    let (y, grads, second) = run(eager, &x32, &w32);
    let (y_ref, grads_ref, second_ref) = run(reference, &x64, &w64);
    close(&format!("{op} {shape:?} y"), &y, &y_ref, 1e-5);
    for (i, (g, r)) in grads.iter().zip(&grads_ref).enumerate() {
        close(&format!("{op} {shape:?} gradient {i}"), g, r, 1e-4);
    }
    assert_eq!(grads.len(), grads_ref.len());
    close(
        &format!("{op} {shape:?} second derivative"),
        &second,
        &second_ref,
        1e-3,
    );
    for ((name, p), (_, r)) in eager
        .parameters_and_names()
        .iter()
        .zip(reference.parameters_and_names())
    {
        close(
            &format!("{op} {shape:?} {name}"),
            &p.value(),
            &r.value(),
            1e-5,
        );
    }
}

fn batch_norm(shape: &[usize], dtype: DType, training: bool, affine: bool) -> Arc<dyn Cell> {
    let c = shape[1];
    let gamma = Tensor::from_f64(&data(&[c], 5), &[c], dtype).unwrap();
    let config = BatchNorm2d::config(c)
        .dtype(dtype)
        .gamma_init(Initializer::Tensor(gamma))
        .beta_init(Initializer::constant(0.25))
        .moving_mean_init(Initializer::constant(0.5))
        .moving_var_init(Initializer::constant(2.0))
        .affine(affine);
    let cell: Arc<dyn Cell> = if shape.len() == 4 {
        config.build_2d().unwrap()
    } else {
        config.build_1d().unwrap()
    };
    cell.set_train(training);
    cell
}

#[test]
fn batch_norm_matches_the_float64_composite() {
    let _guard = serial();
    // (shape, training, affine): frozen gamma and beta get no gradient, x still does.
    for (shape, training, affine) in [
        (&[4, 3, 5, 7][..], true, true),
        (&[2, 3, 5, 7][..], false, true),
        (&[6, 5][..], true, true),
        (&[3, 4, 9][..], true, true),
        (&[4, 3, 5, 7][..], true, false),
    ] {
        let eager = batch_norm(shape, DType::F32, training, affine);
        let reference = batch_norm(shape, DType::F64, training, affine);
        compare(&eager, &reference, shape, "BatchNorm");
    }
}

fn layer_norm(normalized: &[usize], dtype: DType) -> Arc<dyn Cell> {
    let axis = -(normalized.len() as isize);
    let ln = LayerNorm::with_options(normalized, axis, axis, 1e-7).unwrap();
    let d: usize = normalized.iter().product();
    let gamma = Tensor::from_f64(&data(&[d], 7), normalized, dtype).unwrap();
    let beta = Tensor::from_f64(&data(&[d], 8), normalized, dtype).unwrap();
    // The reference's parameters in float64 too (`store` takes any dtype).
    ln.gamma.store(gamma);
    ln.beta.store(beta);
    ln
}

#[test]
fn layer_norm_matches_the_float64_composite() {
    let _guard = serial();
    // (input shape, normalised shape): one row of gamma's own shape (no axes to sum the
    // parameter gradients over), several axes normalised, many rows.
    for (shape, normalized) in [
        (&[4, 6][..], &[6][..]),
        (&[6][..], &[6][..]),
        (&[2, 3, 37][..], &[37][..]),
        (&[2, 3, 37][..], &[3, 37][..]),
        (&[130, 8][..], &[8][..]),
    ] {
        let (eager, reference) = (
            layer_norm(normalized, DType::F32),
            layer_norm(normalized, DType::F64),
        );
        compare(&eager, &reference, shape, "LayerNorm");
    }
}
