//! Parameter updates written over the parameter's own buffer (an optimizer's moment and
//! weight steps): the same bits as the reference interpreter, never over a value the
//! user still holds, and never before a node that can fail on values, so that a failed
//! step leaves every parameter as it was.

use spore_compile::executor::Executable;
use spore_compile::pass::{default_passes, run_passes};
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::trace::trace;
use spore_core::{DType, Parameter, Tensor, TensorType};

/// Momentum's two steps on a weight gradient `xᵀ · g` (the shape of a Dense layer's, at
/// a batch of 64): `m' = 0.9 m + xᵀ g` and `w' = w - 0.01 m'`.
fn momentum_step(m: &Parameter, w: &Parameter) -> Graph {
    let types = [
        TensorType::new(&[64, 150], DType::F32),
        TensorType::new(&[64, 110], DType::F32),
    ];
    trace("momentum", &types, |a| {
        let grad = a[0].transpose()?.matmul(&a[1])?;
        let moment = m.value().mul_scalar(0.9)?.add(&grad)?;
        m.assign(&moment)?;
        w.assign(&w.value().sub(&moment.mul_scalar(0.01)?)?)?;
        Ok(vec![moment.sum(&[], false)?])
    })
    .unwrap()
}

fn optimised(graph: &Graph) -> Graph {
    let mut g = graph.clone();
    run_passes(&mut g, &default_passes(), None).unwrap();
    g
}

fn assert_same_bits(got: &Tensor, want: &Tensor, what: &str) {
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(g.len(), w.len(), "{what}: sizes");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "{what}: element {i}: {a} vs {b}");
    }
}

#[test]
fn moment_and_weight_steps_overwrite_their_parameters_with_the_interpreters_bits() {
    let m = Parameter::with_requires_grad(
        Tensor::randn(&[150, 110], DType::F32, Some(1)).unwrap(),
        "m",
        false,
    );
    let w = Parameter::new(
        Tensor::randn(&[150, 110], DType::F32, Some(2)).unwrap(),
        "w",
    );
    let graph = momentum_step(&m, &w);
    let compiled = optimised(&graph);
    let fused_product = compiled.nodes.iter().any(|n| {
        matches!(
            &n.kind,
            NodeKind::Op {
                op: Op::MatMulAdd { .. },
                ..
            }
        )
    });
    assert!(fused_product, "the moment step must become one MatMulAdd");
    let mut exe = Executable::new(compiled).unwrap();
    for run in 0..3u64 {
        let x = Tensor::randn(&[64, 150], DType::F32, Some(10 + run)).unwrap();
        let g = Tensor::randn(&[64, 110], DType::F32, Some(20 + run)).unwrap();
        let reference = graph.interpret(&[x.clone(), g.clone()]).unwrap();
        exe.run(&[x, g]).unwrap();
        for (p, want) in &reference.updates {
            assert_same_bits(&p.stored(), want, &format!("run {run}, {}", p.name()));
        }
        let per_run = if products_in_place() { 2 } else { 1 };
        assert_eq!(
            exe.in_place_updates(),
            per_run * (run as usize + 1),
            "run {run}"
        );
    }
}

#[test]
fn a_parameter_value_the_user_holds_keeps_its_values() {
    let m =
        Parameter::with_requires_grad(Tensor::zeros(&[150, 110], DType::F32).unwrap(), "m", false);
    let w = Parameter::new(Tensor::ones(&[150, 110], DType::F32).unwrap(), "w");
    let mut exe = Executable::new(optimised(&momentum_step(&m, &w))).unwrap();
    let held = w.value();
    let x = Tensor::ones(&[64, 150], DType::F32).unwrap();
    let g = Tensor::ones(&[64, 110], DType::F32).unwrap();
    exe.run(&[x, g]).unwrap();
    assert!(held.to_vec::<f32>().unwrap().iter().all(|&v| v == 1.0));
    // m' = 64 everywhere, w' = 1 - 0.64.
    let new_w = w.value().to_vec::<f32>().unwrap();
    assert!(
        new_w.iter().all(|&v| (v - 0.36).abs() < 1e-6),
        "{}",
        new_w[0]
    );
    let expected = usize::from(products_in_place());
    assert_eq!(
        exe.in_place_updates(),
        expected,
        "only m, which nobody else holds"
    );
}

/// Whether a product added to its addend is written over the addend: the GEMM's tiles do
/// that with AVX2; below it (`SPORE_MAX_ISA=baseline`) the sum is computed beside it.
fn products_in_place() -> bool {
    spore_kernels::isa::allows(spore_kernels::isa::Isa::Avx2)
}

/// `w' = w - 0.5 x`, and a gather of `x` at `idx`, before or after the update.
fn update_and_gather(w: &Parameter, gather_first: bool) -> Graph {
    let types = [
        TensorType::new(&[8], DType::F32),
        TensorType::new(&[2], DType::I32),
    ];
    trace("update_and_gather", &types, |a| {
        let picked = gather_first.then(|| a[0].gather(&a[1], 0)).transpose()?;
        w.assign(&w.value().sub(&a[0].mul_scalar(0.5)?)?)?;
        let picked = match picked {
            Some(p) => p,
            None => a[0].gather(&a[1], 0)?,
        };
        Ok(vec![picked])
    })
    .unwrap()
}

#[test]
fn a_step_that_fails_on_an_index_leaves_every_parameter_as_it_was() {
    for gather_first in [true, false] {
        let w = Parameter::new(Tensor::ones(&[8], DType::F32).unwrap(), "w");
        let mut exe = Executable::new(optimised(&update_and_gather(&w, gather_first))).unwrap();
        let x = Tensor::ones(&[8], DType::F32).unwrap();
        let bad = Tensor::from_vec(vec![1i32, 9], &[2]).unwrap();
        let err = exe.run(&[x.clone(), bad]).unwrap_err().to_string();
        assert!(err.contains("out of range"), "{err}");
        assert_eq!(
            w.value().to_vec::<f32>().unwrap(),
            vec![1.0; 8],
            "gather first: {gather_first}"
        );
        let good = Tensor::from_vec(vec![1i32, 7], &[2]).unwrap();
        exe.run(&[x, good]).unwrap();
        assert_eq!(w.value().to_vec::<f32>().unwrap(), vec![0.5; 8]);
        // The update may overwrite w only when the gather, which can fail, ran before it.
        assert_eq!(
            exe.in_place_updates(),
            usize::from(gather_first),
            "gather first: {gather_first}"
        );
    }
}

/// The memory plan counts an update written over its parameter's buffer once: the
/// weight step `w - 0.01 m` (w's last reader) reuses w's bytes, so the step's peak is
/// what it holds without the update, plus nothing.
#[test]
fn the_memory_plan_counts_a_donated_update_once() {
    use spore_compile::plan::MemoryPlan;
    let w = Parameter::new(
        Tensor::randn(&[256, 256], DType::F32, Some(3)).unwrap(),
        "w",
    );
    let types = [TensorType::new(&[256, 256], DType::F32)];
    let graph = trace("sgd", &types, |a| {
        w.assign(&w.value().sub(&a[0].mul_scalar(0.01)?)?)?;
        Ok(vec![])
    })
    .unwrap();
    let plan = MemoryPlan::new(&optimised(&graph));
    let matrix = 256 * 256 * 4;
    assert!(
        plan.donates.iter().any(Option::is_some),
        "the update is donated"
    );
    // The gradient, the weight and the constant 0.01: the new weight lies in the old
    // one's bytes (counted apart, the peak would be three matrices).
    assert_eq!(plan.peak_bytes, 2 * matrix + 4);
}
