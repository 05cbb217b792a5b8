//! PyNative mode's softmax and GELU operators (float32) against their composites of
//! primitives run in float64 as the reference: values, first gradients, and a second
//! derivative (a recorded backward pass, which the eager operators write with primitives).

use spore_core::{DType, Result, Tensor, grad, value_and_grad};

use super::Lcg;

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

/// `f(x)`, the gradient of `Σ f(x) · w`, and the gradient of `Σ (that gradient)²`.
fn run(f: fn(&Tensor) -> Result<Tensor>, x: &Tensor, w: &Tensor) -> (Tensor, Tensor, Tensor) {
    let w1 = w.clone();
    let first = move |a: &[Tensor]| -> Result<Tensor> { f(&a[0])?.mul(&w1)?.sum(&[], false) };
    let dx = grad(first.clone(), &[0])(std::slice::from_ref(x))
        .unwrap()
        .remove(0);
    let second = move |a: &[Tensor]| -> Result<Tensor> {
        let first = first.clone();
        let inner = value_and_grad(
            move |b: &[Tensor]| Ok(vec![first(b)?]),
            Some(&[0]),
            &[],
            false,
        )(a)?;
        inner.input_grads[0].square()?.sum(&[], false)
    };
    let d2 = grad(second, &[0])(std::slice::from_ref(x))
        .unwrap()
        .remove(0);
    (f(x).unwrap(), dx, d2)
}

fn check(name: &str, f: fn(&Tensor) -> Result<Tensor>, shape: &[usize], spread: f64) {
    let mut rng = Lcg(7);
    let n: usize = shape.iter().product();
    let xs: Vec<f64> = (0..n).map(|_| rng.uniform(-spread, spread)).collect();
    let ws: Vec<f64> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let x64 = Tensor::from_f64(&xs, shape, DType::F64).unwrap();
    let w64 = Tensor::from_f64(&ws, shape, DType::F64).unwrap();
    let (x32, w32) = (x64.cast(DType::F32).unwrap(), w64.cast(DType::F32).unwrap());
    let eager = f(&x32.with_requires_grad(true)).unwrap();
    assert_eq!(
        eager.grad_fn().unwrap().op.name(),
        name,
        "float32 runs the eager operator"
    );
    let composite = f(&x64.with_requires_grad(true)).unwrap();
    assert_ne!(
        composite.grad_fn().unwrap().op.name(),
        name,
        "float64 composes"
    );
    let (y, dx, d2) = run(f, &x32, &w32);
    let (y_ref, dx_ref, d2_ref) = run(f, &x64, &w64);
    close(&format!("{name} {shape:?} y"), &y, &y_ref, 1e-6);
    close(&format!("{name} {shape:?} dx"), &dx, &dx_ref, 1e-5);
    close(&format!("{name} {shape:?} d2"), &d2, &d2_ref, 1e-4);
}

#[test]
fn eager_softmax_matches_the_float64_composite() {
    let softmax: fn(&Tensor) -> Result<Tensor> = |x| x.softmax(-1);
    for shape in [&[1, 5][..], &[3, 4, 17][..], &[2, 130][..], &[9][..]] {
        check("Softmax", softmax, shape, 6.0);
    }
    // The last axis named by its index takes the same operator.
    let x = Tensor::ones(&[2, 3], DType::F32)
        .unwrap()
        .with_requires_grad(true);
    assert_eq!(
        x.softmax(1).unwrap().grad_fn().unwrap().op.name(),
        "Softmax"
    );
}

#[test]
fn eager_gelu_matches_the_float64_composite() {
    let gelu: fn(&Tensor) -> Result<Tensor> = |x| x.gelu(false);
    for shape in [&[7][..], &[3, 4, 1000][..], &[64, 65][..]] {
        check("GeLU", gelu, shape, 5.0);
    }
}

/// ReLU's gradient in a backward pass that is not recorded is one operator (`ReluGrad`):
/// the output gradient where ReLU's output is positive, else 0 (for NaN and both zeros
/// too), exactly, over enough values to split among threads.
#[test]
fn eager_relu_gradient_passes_the_gradient_where_the_output_is_positive() {
    let mut rng = Lcg(9);
    let n = 20_000;
    let xs: Vec<f32> = (0..n)
        .map(|i| match i % 97 {
            0 => f32::NAN,
            1 => -0.0,
            2 => 0.0,
            _ => rng.uniform(-3.0, 3.0) as f32,
        })
        .collect();
    let ws: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let x = Tensor::from_vec(xs.clone(), &[4, n / 4]).unwrap();
    let w = Tensor::from_vec(ws.clone(), &[4, n / 4]).unwrap();
    let f = move |a: &[Tensor]| -> Result<Tensor> { a[0].relu()?.mul(&w)?.sum(&[], false) };
    let dx = grad(f, &[0])(&[x])
        .unwrap()
        .remove(0)
        .to_vec::<f32>()
        .unwrap();
    for (i, ((&d, &xv), &wv)) in dx.iter().zip(&xs).zip(&ws).enumerate() {
        let want = if xv > 0.0 { wv } else { 0.0 };
        assert_eq!(d.to_bits(), want.to_bits(), "cell {i}: x {xv}, w {wv}");
    }
    // The kernel alone, on the same rule.
    let mut out = vec![1.0f32; n];
    spore_kernels::activation::relu_grad(&ws, &xs, &mut out);
    assert!(out.iter().zip(&dx).all(|(a, b)| a.to_bits() == b.to_bits()));
}
