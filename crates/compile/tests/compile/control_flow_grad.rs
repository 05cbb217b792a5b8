//! Gradients through `cond`, `fori_loop`, `scan` and `while_loop_bounded`, in Graph mode
//! (compiled with `jit`) and in PyNative mode, against the same computation unrolled in
//! plain tensor code and against central finite differences. A weight read inside the
//! branch or loop body (a captured value) gets its gradient too.

use spore_compile::jit;
use spore_core::control::{cond, fori_loop, scan, while_loop_bounded};
use spore_core::{DType, Result, Tensor, value_and_grad};

/// `f(x, w)`, a scalar, with its gradient with respect to both, in PyNative mode and
/// compiled; checks both against `unrolled` (the same function without control flow)
/// and against finite differences of `f`.
fn check(
    name: &str,
    f: fn(&Tensor, &Tensor) -> Result<Tensor>,
    unrolled: fn(&Tensor, &Tensor) -> Result<Tensor>,
    x: &Tensor,
    w: &Tensor,
) {
    let grads = move |g: fn(&Tensor, &Tensor) -> Result<Tensor>| {
        move |a: &[Tensor]| -> Result<Vec<Tensor>> {
            let vg = value_and_grad(|v: &[Tensor]| g(&v[0], &v[1]), Some(&[0, 1]), &[], false);
            let out = vg(a)?;
            Ok([vec![out.value], out.input_grads].concat())
        }
    };
    let args = [x.clone(), w.clone()];
    let eager = grads(f)(&args).unwrap_or_else(|e| panic!("{name} eager: {e}"));
    let compiled = jit(name, grads(f))
        .call(&args)
        .unwrap_or_else(|e| panic!("{name} compiled: {e}"));
    let reference = grads(unrolled)(&args).unwrap();
    for (what, got) in [("PyNative", &eager), ("Graph", &compiled)] {
        for (k, (g, r)) in got.iter().zip(&reference).enumerate() {
            let (g, r) = (g.to_f64_vec().unwrap(), r.to_f64_vec().unwrap());
            for (a, b) in g.iter().zip(&r) {
                assert!(
                    (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                    "{name} {what}: output {k}: {g:?} against unrolled {r:?}"
                );
            }
        }
    }
    // Central differences of f (f64), one coordinate at a time.
    let h = 1e-6;
    for (which, t) in [(0, x), (1, w)] {
        let base = t.to_f64_vec().unwrap();
        for i in 0..base.len() {
            let at = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                let moved = Tensor::from_vec(v, t.shape()).unwrap();
                let (a, b) = if which == 0 { (&moved, w) } else { (x, &moved) };
                f(a, b).unwrap().item().unwrap()
            };
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            let analytic = compiled[1 + which].to_f64_vec().unwrap()[i];
            assert!(
                (numeric - analytic).abs() <= 1e-5 * (1.0 + numeric.abs()),
                "{name}: d/d{} [{i}]: finite differences {numeric}, gradient {analytic}",
                ["x", "w"][which]
            );
        }
    }
}

fn values(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// cond on the sign of sum(x): x² · w on one side, sin(x) − w on the other.
fn with_cond(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let p = x.sum(&[], false)?.greater(&Tensor::scalar(0.0f64))?;
    let out = cond(
        &p,
        std::slice::from_ref(x),
        |a| Ok(vec![a[0].square()?.mul(w)?]),
        |a| Ok(vec![a[0].sin()?.sub(w)?]),
    )?;
    out[0].sum(&[], false)
}

fn with_cond_unrolled(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let y = if x.sum(&[], false)?.item()? > 0.0 {
        x.square()?.mul(w)?
    } else {
        x.sin()?.sub(w)?
    };
    y.sum(&[], false)
}

#[test]
fn gradients_through_cond_take_the_branch_the_predicate_chose() {
    let w = values(&[0.7, -1.3, 0.4], &[3]);
    check(
        "cond_then",
        with_cond,
        with_cond_unrolled,
        &values(&[0.5, 1.0, -0.2], &[3]),
        &w,
    );
    check(
        "cond_else",
        with_cond,
        with_cond_unrolled,
        &values(&[-0.5, -1.0, 0.3], &[3]),
        &w,
    );
}

/// Five steps of s = tanh(s · w + i): a recurrence whose weight is captured.
fn with_fori(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let out = fori_loop(
        0,
        5,
        |i, s| Ok(vec![s[0].mul(w)?.add(&i.cast(DType::F64)?)?.tanh()?]),
        std::slice::from_ref(x),
    )?;
    out[0].sum(&[], false)
}

fn with_fori_unrolled(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let mut s = x.clone();
    for i in 0..5 {
        s = s.mul(w)?.add_scalar(i as f64)?.tanh()?;
    }
    s.sum(&[], false)
}

#[test]
fn gradients_through_fori_loop_equal_the_unrolled_loop() {
    check(
        "fori",
        with_fori,
        with_fori_unrolled,
        &values(&[0.3, -0.8], &[2]),
        &values(&[0.9, 1.1], &[2]),
    );
}

/// An RNN: h = tanh(h · w + x_t) over 4 steps, summing every step's output and the last h.
fn with_scan(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let h0 = Tensor::zeros(&[2], DType::F64)?;
    let out = scan(
        |c, xt| {
            let h = c[0].mul(w)?.add(&xt[0])?.tanh()?;
            Ok((vec![h.clone()], vec![h.mul_scalar(2.0)?]))
        },
        &[h0],
        std::slice::from_ref(x),
    )?;
    out[0].sum(&[], false)?.add(&out[1].sum(&[], false)?)
}

fn with_scan_unrolled(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let mut h = Tensor::zeros(&[2], DType::F64)?;
    let mut total = Tensor::scalar(0.0f64);
    for t in 0..4 {
        let xt = x
            .gather(&Tensor::from_vec(vec![t as i64], &[1])?, 0)?
            .squeeze(&[0])?;
        h = h.mul(w)?.add(&xt)?.tanh()?;
        total = total.add(&h.mul_scalar(2.0)?.sum(&[], false)?)?;
    }
    total.add(&h.sum(&[], false)?)
}

#[test]
fn gradients_through_scan_reach_the_sequence_the_carry_and_the_weight() {
    let x = values(&[0.1, -0.4, 0.7, 0.2, -0.3, 0.5, 0.9, -0.6], &[4, 2]);
    check(
        "scan",
        with_scan,
        with_scan_unrolled,
        &x,
        &values(&[0.8, -0.5], &[2]),
    );
}

/// Doubles x·w until its sum passes 5 (at most 10 trips).
fn with_bounded_while(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let out = while_loop_bounded(
        |s| s[0].sum(&[], false)?.less(&Tensor::scalar(5.0f64)),
        |s| Ok(vec![s[0].mul(w)?.mul_scalar(2.0)?]),
        std::slice::from_ref(x),
        10,
    )?;
    out[0].sum(&[], false)
}

fn with_bounded_while_unrolled(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let mut s = x.clone();
    while s.sum(&[], false)?.item()? < 5.0 {
        s = s.mul(w)?.mul_scalar(2.0)?;
    }
    s.sum(&[], false)
}

#[test]
fn gradients_through_a_bounded_while_loop_equal_the_unrolled_loop() {
    check(
        "bounded_while",
        with_bounded_while,
        with_bounded_while_unrolled,
        &values(&[0.3, 0.4], &[2]),
        &values(&[0.9, 1.2], &[2]),
    );
    // Past its bound, the eager loop is an error.
    let err = while_loop_bounded(
        |s| s[0].sum(&[], false)?.less(&Tensor::scalar(1e9f64)),
        |s| Ok(vec![s[0].mul_scalar(2.0)?]),
        &[values(&[1.0], &[1])],
        3,
    )
    .unwrap_err();
    assert!(err.to_string().contains("bound of 3 trips"), "{err}");
}
