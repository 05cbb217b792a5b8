//! Autodiff beyond single ops: second derivatives against closed forms, PyTorch-style
//! backward, value_and_grad with weights and aux outputs, stop_gradient.

use spore_core::{DType, Result, Tensor, grad, value_and_grad};

fn xs() -> Tensor {
    Tensor::from_vec(vec![-1.3f64, -0.4, 0.2, 0.9, 1.7], &[5]).unwrap()
}

/// f''(x) computed as grad(grad(sum f)) elementwise.
fn second_derivative(f: fn(&Tensor) -> Result<Tensor>, x: &Tensor) -> Vec<f64> {
    let df = grad(move |v: &[Tensor]| f(&v[0])?.sum(&[], false), &[0]);
    let d2f = grad(move |v: &[Tensor]| df(v)?.remove(0).sum(&[], false), &[0]);
    d2f(std::slice::from_ref(x)).unwrap()[0]
        .to_f64_vec()
        .unwrap()
}

fn assert_close(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() < 1e-10 * (1.0 + w.abs()),
            "got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn second_derivatives_match_closed_forms() {
    let x = xs();
    let v = x.to_f64_vec().unwrap();
    assert_close(
        &second_derivative(|x| x.mul(x)?.mul(x), &x),
        &v.iter().map(|a| 6.0 * a).collect::<Vec<_>>(),
    );
    assert_close(
        &second_derivative(|x| x.sin(), &x),
        &v.iter().map(|a| -a.sin()).collect::<Vec<_>>(),
    );
    assert_close(
        &second_derivative(|x| x.tanh(), &x),
        &v.iter()
            .map(|a| -2.0 * a.tanh() * (1.0 - a.tanh().powi(2)))
            .collect::<Vec<_>>(),
    );
    assert_close(
        &second_derivative(|x| x.mul(x)?.exp(), &x),
        &v.iter()
            .map(|a| (2.0 + 4.0 * a * a) * (a * a).exp())
            .collect::<Vec<_>>(),
    );
    assert_close(
        &second_derivative(|x| x.sigmoid(), &x),
        &v.iter()
            .map(|a| {
                let s = 1.0 / (1.0 + (-a).exp());
                s * (1.0 - s) * (1.0 - 2.0 * s)
            })
            .collect::<Vec<_>>(),
    );
    assert_close(
        &second_derivative(|x| x.mul_scalar(2.0)?.exp()?.add_scalar(1.0)?.log(), &x),
        &v.iter()
            .map(|a| {
                let s = 1.0 / (1.0 + (-2.0 * a).exp());
                4.0 * s * (1.0 - s)
            })
            .collect::<Vec<_>>(),
    );
}

#[test]
fn backward_accumulates_into_leaves() {
    let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2])
        .unwrap()
        .with_requires_grad(true);
    let x = Tensor::from_vec(vec![3.0f32, 4.0], &[2]).unwrap();
    let loss = w.mul(&x).unwrap().sum(&[], false).unwrap();
    loss.backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
    // A second backward accumulates, as in PyTorch.
    w.mul(&x)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), vec![6.0, 8.0]);
    w.zero_grad();
    assert!(w.grad().is_none());
    // The gradient of a leaf-free tensor is an error, not a panic.
    assert!(x.sum(&[], false).unwrap().backward().is_err());
}

#[test]
fn value_and_grad_with_weights_and_aux() {
    let w = Tensor::from_vec(vec![0.5f64, -1.0], &[2])
        .unwrap()
        .with_requires_grad(true);
    let unused = Tensor::from_vec(vec![9.0f64], &[1])
        .unwrap()
        .with_requires_grad(true);
    let wc = w.clone();
    let f = move |inp: &[Tensor]| -> Result<Vec<Tensor>> {
        let y = wc.mul(&inp[0])?;
        Ok(vec![y.square()?.sum(&[], false)?, y])
    };
    let vg = value_and_grad(f, Some(&[0]), &[w.clone(), unused.clone()], true);
    let x = Tensor::from_vec(vec![2.0f64, 3.0], &[2]).unwrap();
    let out = vg(&[x]).unwrap();
    assert_eq!(out.value.item().unwrap(), 1.0 + 9.0);
    assert_eq!(out.aux[0].to_f64_vec().unwrap(), vec![1.0, -3.0]);
    // d/dx sum (w x)^2 = 2 w^2 x; d/dw = 2 w x^2
    assert_eq!(out.input_grads[0].to_f64_vec().unwrap(), vec![1.0, 6.0]);
    assert_eq!(out.weight_grads[0].to_f64_vec().unwrap(), vec![4.0, -18.0]);
    assert_eq!(out.weight_grads[1].to_f64_vec().unwrap(), vec![0.0]);
}

#[test]
fn value_and_grad_rejects_bad_arguments() {
    let plain = Tensor::ones(&[2], DType::F32).unwrap();
    let vg = value_and_grad(|x: &[Tensor]| x[0].sum(&[], false), None, &[plain], false);
    let err = vg(&[Tensor::ones(&[2], DType::F32).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not require grad"), "{err}");
    let vg = value_and_grad(|x: &[Tensor]| x[0].sum(&[], false), Some(&[3]), &[], false);
    assert!(
        vg(&[Tensor::ones(&[2], DType::F32).unwrap()])
            .unwrap_err()
            .to_string()
            .contains("grad_position 3")
    );
    let vg = value_and_grad(
        |x: &[Tensor]| x[0].cast(DType::F32)?.sum(&[], false),
        Some(&[0]),
        &[],
        false,
    );
    assert!(
        vg(&[Tensor::ones(&[2], DType::I32).unwrap()])
            .unwrap_err()
            .to_string()
            .contains("Int32")
    );
}

#[test]
fn stop_gradient_blocks_and_unreached_inputs_get_zeros() {
    let g = grad(
        |x: &[Tensor]| x[0].stop_gradient()?.mul(&x[1])?.sum(&[], false),
        &[0, 1],
    );
    let a = Tensor::from_vec(vec![2.0f32, 3.0], &[2]).unwrap();
    let b = Tensor::from_vec(vec![5.0f32, 7.0], &[2]).unwrap();
    let gs = g(&[a, b]).unwrap();
    assert_eq!(gs[0].to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    assert_eq!(gs[1].to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
}

#[test]
fn maximum_ties_split_the_gradient() {
    let g = grad(|x: &[Tensor]| x[0].maximum(&x[1])?.sum(&[], false), &[0, 1]);
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = Tensor::from_vec(vec![1.0f32, 5.0, 0.0], &[3]).unwrap();
    let gs = g(&[a, b]).unwrap();
    assert_eq!(gs[0].to_vec::<f32>().unwrap(), vec![0.5, 0.0, 1.0]);
    assert_eq!(gs[1].to_vec::<f32>().unwrap(), vec![0.5, 1.0, 0.0]);
    // ReduceMax shares among tied maxima.
    let g = grad(|x: &[Tensor]| x[0].max(&[], false), &[0]);
    let t = Tensor::from_vec(vec![4.0f32, 1.0, 4.0, 4.0], &[4]).unwrap();
    let third = 1.0f32 / 3.0;
    assert_eq!(
        g(&[t]).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![third, 0.0, third, third]
    );
}

#[test]
fn max_pool_gradient_goes_to_the_first_maximum() {
    let g = grad(
        |x: &[Tensor]| {
            x[0].max_pool2d(&spore_core::ops::Pool2dOptions::new(2, 2))?
                .sum(&[], false)
        },
        &[0],
    );
    let x = Tensor::from_vec(vec![1.0f32, 3.0, 3.0, 0.0], &[1, 1, 2, 2]).unwrap();
    assert_eq!(
        g(&[x]).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![0.0, 1.0, 0.0, 0.0]
    );
}

#[test]
fn deep_chains_do_not_overflow_the_stack() {
    let g = grad(
        |x: &[Tensor]| {
            let mut y = x[0].clone();
            for _ in 0..20_000 {
                y = y.add_scalar(1.0)?;
            }
            y.sum(&[], false)
        },
        &[0],
    );
    assert_eq!(
        g(&[Tensor::ones(&[1], DType::F32).unwrap()]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0]
    );
}

/// At top level the backward pass is not recorded (PyTorch's `create_graph=False`): the
/// gradients carry no autodiff links, so they do not keep the backward's intermediates
/// alive. Inside an outer differentiation it is recorded, which the second derivatives
/// above rely on.
#[test]
fn top_level_gradients_carry_no_autodiff_links() {
    let x = Tensor::from_vec(vec![0.5f64, -1.5, 2.0], &[3]).unwrap();
    let f = |v: &[Tensor]| v[0].exp()?.mul(&v[0])?.sum(&[], false);
    let out = value_and_grad(f, Some(&[0]), &[], false)(std::slice::from_ref(&x)).unwrap();
    let g = &out.input_grads[0];
    assert!(!g.requires_grad() && g.grad_fn().is_none());
    // (x + 1) e^x
    let expect: Vec<f64> = [0.5f64, -1.5, 2.0]
        .iter()
        .map(|v| (v + 1.0) * v.exp())
        .collect();
    for (a, b) in g.to_vec::<f64>().unwrap().iter().zip(&expect) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    // Inside an outer derivative the inner gradient stays differentiable: (x + 2) e^x.
    let d2 = grad(
        move |v: &[Tensor]| {
            let inner = value_and_grad(f, Some(&[0]), &[], false)(v)?;
            assert!(inner.input_grads[0].requires_grad());
            inner.input_grads[0].sum(&[], false)
        },
        &[0],
    )(std::slice::from_ref(&x))
    .unwrap();
    for (a, v) in d2[0]
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .zip([0.5f64, -1.5, 2.0])
    {
        assert!((a - (v + 2.0) * v.exp()).abs() < 1e-12, "{a}");
    }
}

#[test]
fn graph_flops_count_the_products_and_all_three_convolutions() {
    use spore_core::TensorType;
    use spore_core::ops::{Conv2dOptions, PadMode};
    let t = |s: &[usize]| TensorType::new(s, DType::F32);
    // x [2, 4, 7, 7] conv w [6, 2, 3, 3], groups 2, valid: y [2, 6, 5, 5]; then a product
    // of the flattened y [2, 150] with m [150, 3].
    let types = [t(&[2, 4, 7, 7]), t(&[6, 2, 3, 3]), t(&[150, 3])];
    let step = |x: &[Tensor]| {
        let opts = Conv2dOptions {
            groups: 2,
            pad_mode: PadMode::Valid,
            ..Conv2dOptions::default()
        };
        let y = x[0].conv2d(&x[1], &opts)?.reshape(&[2, 150])?;
        y.matmul(&x[2])?.sum(&[], false)
    };
    let forward = spore_core::trace::trace("forward", &types, |x| Ok(vec![step(x)?])).unwrap();
    // Per output value of the convolution: 2 input channels x 3 x 3 multiply-adds.
    let conv = 2 * (2 * 6 * 5 * 5) * (2 * 3 * 3);
    let product = 2 * (2 * 3) * 150;
    assert_eq!(forward.flops(), (conv + product) as u64);
    // The gradient with respect to all three inputs adds each convolution gradient (one
    // forward's worth each) and the two products' gradients.
    let df = grad(step, &[0, 1, 2]);
    let backward = spore_core::trace::trace("backward", &types, |x| df(x)).unwrap();
    assert_eq!(backward.flops(), (3 * conv + 3 * product) as u64);
}

/// `value_and_grad_reporting` reports each weight once, as soon as its gradient is
/// final: the last layer's weight before the first layer's, a shared weight only after
/// its last reader, an unused weight last (with zeros), and each reported gradient equal
/// to the returned one.
#[test]
fn weight_gradients_are_reported_when_complete() {
    use spore_core::autodiff::value_and_grad_reporting;
    let param = |v: f64| {
        Tensor::from_vec(vec![v], &[1])
            .unwrap()
            .with_requires_grad(true)
    };
    let (w1, w2, shared, unused) = (param(0.5), param(-1.5), param(2.0), param(7.0));
    let weights = [unused.clone(), w1.clone(), shared.clone(), w2.clone()];
    // y = w2 * tanh(shared * tanh(w1 * x)) * shared: `shared` is read first and last.
    let f = |x: &[Tensor]| -> Result<Tensor> {
        let h1 = x[0].mul(&w1)?.tanh()?;
        let h2 = h1.mul(&shared)?.tanh()?;
        h2.mul(&w2)?.mul(&shared)
    };
    let x = Tensor::from_vec(vec![0.8f64], &[1]).unwrap();
    let mut order = vec![];
    let mut reported = [None; 4];
    let out = value_and_grad_reporting(&f, None, &weights, false, &[x], &mut |i, g| {
        order.push(i);
        reported[i] = Some(g.item()?);
        Ok(())
    })
    .unwrap();
    // w2 is read by the last multiply but one; `shared` by the last and by the middle
    // layer, so it is complete only after w2; w1 after both; `unused` at the end.
    assert_eq!(order, [3, 2, 1, 0]);
    for (i, g) in out.weight_grads.iter().enumerate() {
        assert_eq!(reported[i], Some(g.item().unwrap()), "weight {i}");
    }
    assert_eq!(reported[0], Some(0.0));
}
