//! jit caches by input types; parameters are inputs (no recompile on new values) and
//! parameter assignments are stored back; compiled outputs stay differentiable.

use spore_compile::jit;
use spore_core::{DType, Parameter, Tensor, grad};

#[test]
fn parameters_update_in_place_without_recompiling() {
    let p = Parameter::new(Tensor::ones(&[2], DType::F32).unwrap(), "w");
    let pc = p.clone();
    let step = jit("accumulate", move |x: &[Tensor]| {
        let next = pc.value().add(&x[0])?;
        pc.assign(&next)?;
        Ok(vec![next.sum(&[], false)?])
    });
    for k in 1..=3 {
        let s = step
            .call(&[Tensor::ones(&[2], DType::F32).unwrap()])
            .unwrap()[0]
            .item()
            .unwrap();
        assert_eq!(s, 2.0 * (1.0 + k as f64));
    }
    assert_eq!(p.stored().to_vec::<f32>().unwrap(), vec![4.0, 4.0]);
    p.assign(&Tensor::zeros(&[2], DType::F32).unwrap()).unwrap(); // an outside change is seen, no recompile
    assert_eq!(
        step.call(&[Tensor::ones(&[2], DType::F32).unwrap()])
            .unwrap()[0]
            .item()
            .unwrap(),
        2.0
    );
    assert_eq!(step.compile_count(), 1);
    step.call(&[Tensor::ones(&[2], DType::F64)
        .unwrap()
        .cast(DType::F32)
        .unwrap()])
        .unwrap();
    assert_eq!(step.compile_count(), 1);
    assert!(
        step.call(&[Tensor::ones(&[1], DType::F32).unwrap()])
            .is_ok()
    );
    assert_eq!(step.compile_count(), 2, "a new input shape compiles again");
}

#[test]
fn compiled_functions_are_differentiable_in_pynative_mode() {
    let f = std::sync::Arc::new(jit("cube", |x: &[Tensor]| {
        Ok(vec![x[0].mul(&x[0])?.mul(&x[0])?])
    }));
    let fc = f.clone();
    let df = grad(
        move |x: &[Tensor]| fc.call(x)?.remove(0).sum(&[], false),
        &[0],
    );
    let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).unwrap();
    assert_eq!(
        df(&[x]).unwrap()[0].to_vec::<f64>().unwrap(),
        vec![3.0, 12.0]
    );
}

#[test]
fn dropout_in_a_compiled_graph_draws_fresh_masks_each_run() {
    let f = jit("drop", |x: &[Tensor]| Ok(vec![x[0].dropout(0.5, true)?]));
    let x = Tensor::ones(&[256], DType::F32).unwrap();
    let a = f.call(std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let b = f.call(std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    assert_ne!(a, b, "the mask must not be baked into the graph");
    let zeros = a.iter().filter(|&&v| v == 0.0).count();
    assert!((80..176).contains(&zeros), "{zeros} of 256 dropped");
}

/// `call_first` and `call_single` run the same compiled graph as `call` and check how many
/// outputs it has.
#[test]
fn single_output_calls_check_the_output_count() {
    let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], &[3]).unwrap();
    let two = jit("two", |a| Ok(vec![a[0].relu()?, a[0].neg()?]));
    let first = two.call_first(std::slice::from_ref(&x)).unwrap();
    assert_eq!(first.to_vec::<f32>().unwrap(), vec![1.0, 0.0, 3.0]);
    let err = two.call_single(std::slice::from_ref(&x)).unwrap_err();
    assert!(
        err.to_string()
            .contains("expected exactly one output, the function returned 2"),
        "{err}"
    );
    let one = jit("one", |a| Ok(vec![a[0].mul_scalar(2.0)?]));
    for _ in 0..2 {
        let y = one.call_single(std::slice::from_ref(&x)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0, -4.0, 6.0]);
    }
    assert_eq!(one.compile_count(), 1);
    let none = jit("none", |_| Ok(vec![]));
    assert!(none.call_first(std::slice::from_ref(&x)).is_err());
}
