//! Softmax, GELU, LayerNorm and a training BatchNorm inside a `jit` graph run as whole
//! operators, as in PyNative mode: the first three with the values and gradients of the
//! float64 composites, BatchNorm with PyNative's (its kernels are checked against float64
//! in `eager_norm.rs`); a trace made outside `jit` (as ONNX export and code generation
//! make theirs) and mixed precision keep the primitives; and since the whole operators
//! cannot fail on values, a parameter update before one is still written in place.

use std::sync::Arc;

use spore_compile::jit;
use spore_core::trace::trace;
use spore_core::{DType, Parameter, Result, Tensor, TensorType, value_and_grad};
use spore_nn::prelude::*;

use super::serial;

/// Values in about [-2, 2] plus an offset per column, so that no row is centred already.
fn data(shape: &[usize], salt: u64) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let cols = *shape.last().unwrap_or(&1);
    (0..n as u64)
        .map(|i| {
            let h = i.wrapping_mul(2_654_435_761).wrapping_add(salt * 97);
            ((h >> 8) % 4000) as f64 / 1000.0 - 2.0 + (i % cols as u64) as f64 * 0.1
        })
        .collect()
}

/// A LayerNorm over the last axis with gamma and beta in `dtype`.
fn layer_norm(d: usize, dtype: DType) -> Arc<LayerNorm> {
    let ln = LayerNorm::new(&[d]).unwrap();
    ln.gamma
        .store(Tensor::from_f64(&data(&[d], 3), &[d], dtype).unwrap());
    ln.beta
        .store(Tensor::from_f64(&data(&[d], 4), &[d], dtype).unwrap());
    ln
}

/// `Σ softmax(gelu(LayerNorm(x))) · w` and its gradients for `x`, gamma and beta.
fn step(ln: Arc<LayerNorm>, w: Tensor) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Clone {
    move |inputs: &[Tensor]| {
        let params: Vec<Tensor> = [&ln.gamma, &ln.beta].iter().map(|p| p.value()).collect();
        let (ln, w) = (ln.clone(), w.clone());
        let loss = move |x: &[Tensor]| -> Result<Vec<Tensor>> {
            let y = ln.call1(&x[0])?.gelu(false)?.softmax(-1)?;
            Ok(vec![y.mul(&w)?.sum(&[], false)?])
        };
        let out = value_and_grad(loss, Some(&[0]), &params, false)(inputs)?;
        let mut all = vec![out.value, out.input_grads[0].clone()];
        all.extend(out.weight_grads);
        Ok(all)
    }
}

fn op_names(g: &spore_core::ir::Graph) -> Vec<String> {
    g.nodes
        .iter()
        .filter_map(|n| n.op().map(|op| op.name()))
        .collect()
}

#[test]
fn softmax_gelu_and_layer_norm_are_whole_operators_in_a_jit_graph() {
    let _s = serial();
    let shape = [3, 5, 24];
    let x64 = Tensor::from_f64(&data(&shape, 1), &shape, DType::F64).unwrap();
    let w64 = Tensor::from_f64(&data(&shape, 2), &shape, DType::F64).unwrap();
    let (x, w) = (x64.cast(DType::F32).unwrap(), w64.cast(DType::F32).unwrap());

    let compiled = jit("whole_ops", step(layer_norm(24, DType::F32), w.clone()));
    let got = compiled.call(std::slice::from_ref(&x)).unwrap();
    let graph = compiled
        .graph_for(&[TensorType::new(&shape, DType::F32)])
        .expect("compiled once");
    let names = op_names(&graph);
    for op in [
        "LayerNorm",
        "GeLU",
        "Softmax",
        "LayerNormGrad",
        "LayerNormGradParams",
        "GeLUGrad",
        "SoftmaxGrad",
    ] {
        assert!(names.iter().any(|n| n == op), "{op} missing from {names:?}");
    }
    // Fusion folds a composite's `Erf` into a loop, so its program is searched too.
    let ir = graph.to_ir();
    assert!(
        !ir.contains("Erf") && !names.iter().any(|n| n == "ReduceMax"),
        "a composite was traced:\n{ir}"
    );

    // The float64 composites, eagerly (whole operators take float32 only).
    let want = step(layer_norm(24, DType::F64), w64)(std::slice::from_ref(&x64)).unwrap();
    let what = ["loss", "dx", "dgamma", "dbeta"];
    assert_eq!(got.len(), what.len());
    for ((name, g), r) in what.iter().zip(&got).zip(&want) {
        let (g, r) = (g.to_f64_vec().unwrap(), r.to_f64_vec().unwrap());
        let scale = r.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in g.iter().zip(&r).enumerate() {
            assert!(
                (a - b).abs() <= 2e-5 * scale,
                "{name}[{i}]: graph float32 {a} vs float64 composite {b}"
            );
        }
    }
}

#[test]
fn a_trace_outside_jit_keeps_the_primitives() {
    let _s = serial();
    let ln = layer_norm(8, DType::F32);
    let bn = BatchNorm2d::new(2).unwrap();
    bn.set_train(true);
    let g = trace("export", &[TensorType::new(&[2, 8], DType::F32)], |x| {
        let normed = bn.call1(&x[0].reshape(&[2, 2, 2, 2])?)?.reshape(&[2, 8])?;
        Ok(vec![ln.call1(&normed)?.gelu(false)?.softmax(-1)?])
    })
    .unwrap();
    let names = op_names(&g);
    for whole in [
        "LayerNorm",
        "GeLU",
        "Softmax",
        "BatchNormMoments",
        "BatchNorm",
    ] {
        assert!(!names.iter().any(|n| n == whole), "{whole} in {names:?}");
    }
    assert!(names.iter().any(|n| n == "Erf") && names.iter().any(|n| n == "ReduceMax"));
}

#[test]
fn mixed_precision_keeps_the_composites_in_a_jit_graph() {
    let _s = serial();
    // 16-bit values, and float32 values under a 16-bit compute dtype (AMP).
    for (dtype, compute) in [(DType::F16, None), (DType::F32, Some(DType::BF16))] {
        let x = Tensor::from_f64(&data(&[2, 8], 5), &[2, 8], dtype).unwrap();
        let bn = BatchNorm2d::new(2).unwrap();
        bn.set_train(true);
        let compiled = jit("half", move |x: &[Tensor]| {
            spore_core::autocast::with_compute_dtype(compute, || {
                // BatchNorm under AMP (its float32 parameters take float32 inputs only
                // there, where it casts them).
                let normed = match compute {
                    Some(_) => bn.call1(&x[0].reshape(&[2, 2, 2, 2])?)?.reshape(&[2, 8])?,
                    None => x[0].clone(),
                };
                Ok(vec![normed.gelu(false)?.softmax(-1)?])
            })
        });
        compiled.call(std::slice::from_ref(&x)).unwrap();
        let graph = compiled
            .graph_for(&[TensorType::new(&[2, 8], dtype)])
            .unwrap();
        let names = op_names(&graph);
        assert!(
            !names
                .iter()
                .any(|n| n == "GeLU" || n == "Softmax" || n.starts_with("BatchNorm")),
            "{dtype} under {compute:?}: {names:?}"
        );
        assert!(graph.to_ir().contains("Erf"), "{dtype} under {compute:?}");
    }
}

/// The whole operators cannot fail on values once their types are accepted, so a
/// parameter update traced before one is still written over the parameter's buffer (a
/// step that may fail keeps every parameter until its last such op has run).
#[test]
fn an_update_before_a_whole_operator_is_written_in_place() {
    let _s = serial();
    let start = data(&[64], 6);
    let p = Parameter::new(Tensor::from_f64(&start, &[64], DType::F32).unwrap(), "p");
    let q = p.clone();
    let step = jit("update_then_softmax", move |x: &[Tensor]| {
        // Two ops, so that they fuse into a loop, which may write over its input.
        q.assign(&q.value().mul_scalar(0.5)?.add_scalar(1.0)?)?;
        Ok(vec![x[0].softmax(-1)?])
    });
    let x = Tensor::from_f64(&data(&[4, 16], 7), &[4, 16], DType::F32).unwrap();
    for _ in 0..3 {
        step.call(std::slice::from_ref(&x)).unwrap();
    }
    let types = [x.tensor_type().clone()];
    let graph = step.graph_for(&types).unwrap();
    assert!(op_names(&graph).iter().any(|n| n == "Softmax"));
    assert_eq!(step.in_place_updates_for(&types), Some(3));
    for (got, s) in p.value().to_f64_vec().unwrap().iter().zip(&start) {
        // Three steps of p / 2 + 1.
        assert!((got - (s / 8.0 + 1.75)).abs() <= 1e-6 * s.abs().max(1.0));
    }
}

/// A training BatchNorm inside a `jit` graph runs as the whole operators (statistics,
/// normalisation and both gradients), with PyNative mode's values, gradients and moving
/// statistics; in evaluation the graph keeps the composite, one multiply-add per value
/// that fusion merges with what follows.
#[test]
fn batch_norm_is_whole_when_training_and_a_composite_in_evaluation() {
    let _s = serial();
    let shape = [4, 3, 5, 5];
    let x = Tensor::from_f64(&data(&shape, 6), &shape, DType::F32).unwrap();
    let make = || {
        let bn = BatchNorm2d::new(3).unwrap();
        bn.state
            .gamma
            .store(Tensor::from_f64(&data(&[3], 7), &[3], DType::F32).unwrap());
        bn.state
            .beta
            .store(Tensor::from_f64(&data(&[3], 8), &[3], DType::F32).unwrap());
        bn.set_train(true);
        bn
    };
    let run = |bn: Arc<BatchNorm2d>| {
        move |inputs: &[Tensor]| -> Result<Vec<Tensor>> {
            let params: Vec<Tensor> = [&bn.state.gamma, &bn.state.beta]
                .iter()
                .map(|p| p.value())
                .collect();
            let bn = bn.clone();
            let loss = move |x: &[Tensor]| -> Result<Vec<Tensor>> {
                let y = bn.call1(&x[0])?.relu()?;
                Ok(vec![y.mul(&y)?.sum(&[], false)?])
            };
            let out = value_and_grad(loss, Some(&[0]), &params, false)(inputs)?;
            let mut all = vec![out.value, out.input_grads[0].clone()];
            all.extend(out.weight_grads);
            Ok(all)
        }
    };
    let (eager_bn, graph_bn) = (make(), make());
    let compiled = jit("bn_train", run(graph_bn.clone()));
    // Equal up to float32 rounding: fusion computes the loss's gradient in one loop.
    let close = |g: &Tensor, w: &Tensor, what: &str| {
        let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
        assert_eq!(g.len(), w.len(), "{what}");
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                "{what}[{i}]: {a} vs {b}"
            );
        }
    };
    // Three calls: each reads the moving statistics the one before wrote (over their own
    // buffers: two updates per call written in place).
    let types = [TensorType::new(&shape, DType::F32)];
    for call in 1..=3 {
        let want = run(eager_bn.clone())(std::slice::from_ref(&x)).unwrap();
        let got = compiled.call(std::slice::from_ref(&x)).unwrap();
        let names = ["loss", "dx", "dgamma", "dbeta"];
        for (name, (g, w)) in names.iter().zip(got.iter().zip(&want)) {
            close(g, w, &format!("call {call}, {name}"));
        }
        let (graph_state, eager_state) = (&graph_bn.state, &eager_bn.state);
        let means = (&graph_state.moving_mean, &eager_state.moving_mean);
        close(&means.0.value(), &means.1.value(), "moving mean");
        let variances = (&graph_state.moving_variance, &eager_state.moving_variance);
        close(
            &variances.0.value(),
            &variances.1.value(),
            "moving variance",
        );
        assert_eq!(compiled.in_place_updates_for(&types), Some(2 * call));
    }
    let graph = compiled
        .graph_for(&[TensorType::new(&shape, DType::F32)])
        .unwrap();
    let names = op_names(&graph);
    for op in [
        "BatchNormMoments",
        "BatchNorm",
        "BatchNormGrad",
        "BatchNormGradParams",
    ] {
        assert!(names.iter().any(|n| n == op), "{op} missing from {names:?}");
    }

    graph_bn.set_train(false);
    let bn = graph_bn.clone();
    let infer = jit("bn_eval", move |x: &[Tensor]| {
        Ok(vec![bn.call1(&x[0])?.relu()?])
    });
    let got = infer.call(std::slice::from_ref(&x)).unwrap();
    eager_bn.set_train(false);
    let want = eager_bn.call1(&x).unwrap().relu().unwrap();
    close(&got[0], &want, "evaluation");
    let graph = infer
        .graph_for(&[TensorType::new(&shape, DType::F32)])
        .unwrap();
    let names = op_names(&graph);
    assert!(
        !names.iter().any(|n| n.starts_with("BatchNorm")),
        "{names:?}"
    );
}
