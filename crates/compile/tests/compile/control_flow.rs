//! cond / while_loop / fori_loop / scan run directly in PyNative mode and become
//! sub-graphs under jit, with the same results; a Rust `if` on a traced value is an error.

use spore_compile::jit;
use spore_core::control::{cond, fori_loop, scan, while_loop};
use spore_core::{DType, Result, Tensor};

use super::assert_close;

fn piecewise(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let pred = x[0].sum(&[], false)?.greater(&Tensor::scalar(0.0f32))?;
    let scale = x[1].clone(); // captured by both branches
    cond(
        &pred,
        &[x[0].clone()],
        |v| Ok(vec![v[0].mul(&scale)?]),
        |v| Ok(vec![v[0].neg()?.add(&scale)?]),
    )
}

fn collatz_steps(x: &[Tensor]) -> Result<Vec<Tensor>> {
    // Halve until below 1, counting steps: data-dependent trip count.
    let out = while_loop(
        |s| s[0].greater_equal(&Tensor::scalar(1.0f32))?.squeeze(&[]),
        |s| Ok(vec![s[0].mul_scalar(0.5)?, s[1].add_scalar(1.0)?]),
        &[x[0].sum(&[], false)?, Tensor::scalar(0.0f32)],
    )?;
    Ok(out)
}

fn power_sum(x: &[Tensor]) -> Result<Vec<Tensor>> {
    fori_loop(
        0,
        4,
        |i, s| Ok(vec![s[0].add(&x[0].pow(&i.cast(DType::F32)?)?)?]),
        &[x[0].zeros_like()],
    )
}

fn cumulative(x: &[Tensor]) -> Result<Vec<Tensor>> {
    scan(
        |c, xi| {
            let n = c[0].add(&xi[0])?;
            Ok((vec![n.clone()], vec![n.mul_scalar(2.0)?]))
        },
        &[Tensor::zeros(&[3], DType::F32).unwrap()],
        &[x[0].clone()],
    )
}

#[test]
fn control_flow_compiled_equals_eager() {
    let pos = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let neg = Tensor::from_vec(vec![-1.0f32, -2.0], &[2]).unwrap();
    let scale = Tensor::from_vec(vec![3.0f32], &[1]).unwrap();
    let f = jit("piecewise", piecewise);
    for x in [&pos, &neg] {
        let args = [x.clone(), scale.clone()];
        assert_close(
            &f.call(&args).unwrap()[0],
            &piecewise(&args).unwrap()[0],
            1e-6,
            "cond",
        );
    }
    assert_eq!(f.compile_count(), 1, "both branches live in one graph");
    assert!(
        f.graph_for(&[pos.tensor_type().clone(), scale.tensor_type().clone()])
            .unwrap()
            .to_ir()
            .contains("Cond(")
    );

    let w = jit("halving", collatz_steps);
    let x = Tensor::from_vec(vec![10.0f32, 3.0], &[2]).unwrap();
    let (e, c) = (
        collatz_steps(std::slice::from_ref(&x)).unwrap(),
        w.call(&[x]).unwrap(),
    );
    assert_eq!(e[1].item().unwrap(), 4.0); // 13 -> 6.5 -> 3.25 -> 1.625 -> 0.8125
    assert_close(&c[1], &e[1], 0.0, "while_loop");

    let p = jit("power_sum", power_sum);
    let x = Tensor::from_vec(vec![2.0f32, 3.0], &[2]).unwrap();
    assert_eq!(
        power_sum(std::slice::from_ref(&x)).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![15.0, 40.0]
    );
    assert_close(
        &p.call(&[x]).unwrap()[0],
        &power_sum(&[Tensor::from_vec(vec![2.0f32, 3.0], &[2]).unwrap()]).unwrap()[0],
        0.0,
        "fori_loop",
    );

    let s = jit("cumulative", cumulative);
    let xs = Tensor::arange(0.0, 12.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[4, 3])
        .unwrap();
    let (e, c) = (
        cumulative(std::slice::from_ref(&xs)).unwrap(),
        s.call(&[xs]).unwrap(),
    );
    assert_eq!(e[1].shape(), &[4, 3]);
    assert_eq!(e[0].to_vec::<f32>().unwrap(), vec![18.0, 22.0, 26.0]);
    for (a, b) in c.iter().zip(&e) {
        assert_close(a, b, 0.0, "scan");
    }
}

#[test]
fn rust_if_on_a_traced_value_is_an_error_naming_the_call_site() {
    let line = line!() + 2;
    let f = jit("branchy", |x: &[Tensor]| {
        if x[0].sum(&[], false)?.item()? > 0.0 {
            Ok(vec![x[0].clone()])
        } else {
            Ok(vec![x[0].neg()?])
        }
    });
    let err = f
        .call(&[Tensor::ones(&[2], DType::F32).unwrap()])
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("symbolic") && msg.contains("ops::cond"),
        "{msg}"
    );
    assert_eq!(err.location().map(|l| l.line()), Some(line), "{msg}");
}

#[test]
fn cond_branches_must_agree_and_gradients_through_an_unbounded_traced_while_loop_are_refused() {
    let f = jit("mismatch", |x: &[Tensor]| {
        let p = x[0].sum(&[], false)?.greater(&Tensor::scalar(0.0f32))?;
        cond(
            &p,
            &[x[0].clone()],
            |v| Ok(vec![v[0].clone()]),
            |v| Ok(vec![v[0].sum(&[], false)?]),
        )
    });
    assert!(
        f.call(&[Tensor::ones(&[2], DType::F32).unwrap()])
            .unwrap_err()
            .to_string()
            .contains("different types")
    );
    // A traced while_loop has no known trip count: a gradient through it is refused,
    // pointing to the bounded form (control_flow_grad.rs checks that one).
    let g = jit("grad_through_while", |x: &[Tensor]| {
        let vg = spore_core::value_and_grad(
            |v: &[Tensor]| {
                while_loop(
                    |s| s[0].sum(&[], false)?.less(&Tensor::scalar(10.0f32)),
                    |s| Ok(vec![s[0].mul_scalar(2.0)?]),
                    &[v[0].clone()],
                )?
                .remove(0)
                .sum(&[], false)
            },
            Some(&[0]),
            &[],
            false,
        );
        Ok(vg(x)?.input_grads)
    });
    let err = g
        .call(&[Tensor::ones(&[2], DType::F32).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("while_loop_bounded"), "{err}");
}
