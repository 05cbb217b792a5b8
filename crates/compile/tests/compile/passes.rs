//! Each pass is checked by running the reference interpreter before and after it on
//! graphs that exercise it, plus printed-IR snapshots.

use spore_compile::pass::Pass;
use spore_compile::passes::{ConstFold, Cse, Dce, FuseElementwise, Simplify};
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::trace::trace;
use spore_core::{DType, Result, Tensor, TensorType};
use spore_kernels::UnaryFn;

use super::{assert_close, bits};

/// A graph with something for every pass: a duplicate, an unused value, identities, a
/// foldable constant expression and an elementwise chain.
fn busy_graph() -> Graph {
    let ty = TensorType::new(&[3, 4], DType::F32);
    let mut g = trace(
        "busy",
        &[ty.clone(), TensorType::new(&[4], DType::F32)],
        |x| -> Result<Vec<Tensor>> {
            let a = x[0].exp()?;
            let b = x[0].exp()?; // duplicate of a
            let _unused = x[1].sin()?;
            let s = a.add(&b)?.mul_scalar(1.0)?.neg()?.neg()?; // identities
            let t = s.add(&x[1])?.relu()?.sub_scalar(0.5)?.tanh()?; // fusible chain
            let m = t.matmul(&x[0].transpose()?)?; // not elementwise
            Ok(vec![m.sigmoid()?, t])
        },
    )
    .unwrap();
    // A constant expression (tracing folds concrete ops itself, so build it by hand).
    let c = g.push(
        NodeKind::Constant(Tensor::scalar(0.25f32)),
        vec![TensorType::new(&[], DType::F32)],
        "c".into(),
        None,
    );
    let e = g.push(
        NodeKind::Op {
            op: Op::Unary(UnaryFn::Exp),
            args: vec![c],
        },
        vec![TensorType::new(&[], DType::F32)],
        "e".into(),
        None,
    );
    let out = g.outputs[1];
    let ty_out = g.nodes[out].ty().clone();
    let added = g.push(
        NodeKind::Op {
            op: Op::Binary(spore_kernels::BinaryFn::Add),
            args: vec![out, e],
        },
        vec![ty_out],
        "add_e".into(),
        None,
    );
    g.outputs[1] = added;
    g.verify().unwrap();
    g
}

fn inputs() -> Vec<Tensor> {
    vec![
        Tensor::randn(&[3, 4], DType::F32, Some(1)).unwrap(),
        Tensor::randn(&[4], DType::F32, Some(2)).unwrap(),
    ]
}

fn check_pass(pass: &dyn Pass) -> Graph {
    let mut g = busy_graph();
    let before = g.interpret(&inputs()).unwrap();
    let changed = pass.run(&mut g).unwrap();
    assert!(
        changed,
        "{} found nothing to do on a graph built for it",
        pass.name()
    );
    g.verify().unwrap();
    let after = g.interpret(&inputs()).unwrap();
    for (a, b) in after.outputs.iter().zip(&before.outputs) {
        assert_close(a, b, 1e-6, pass.name());
    }
    g
}

#[test]
fn dce_preserves_results_and_drops_dead_nodes() {
    let before = busy_graph().op_count();
    let g = check_pass(&Dce);
    assert!(g.op_count() < before);
    assert!(!g.to_ir().contains("Sin("));
}

#[test]
fn cse_preserves_results_and_merges_duplicates() {
    let mut g = check_pass(&Cse);
    Dce.run(&mut g).unwrap();
    assert_eq!(g.to_ir().matches("Exp(").count(), 2, "{}", g.to_ir()); // x.exp() once, plus the constant exp
}

#[test]
fn const_fold_preserves_results_and_folds() {
    let g = check_pass(&ConstFold);
    assert!(
        g.nodes
            .iter()
            .any(|n| n.name == "e" && matches!(n.kind, NodeKind::Constant(_)))
    );
}

#[test]
fn simplify_preserves_results_and_removes_identities() {
    let mut g = check_pass(&Simplify);
    Dce.run(&mut g).unwrap();
    assert!(!g.to_ir().contains("Neg("), "{}", g.to_ir());
}

#[test]
fn simplify_makes_the_transposed_weight_gradient_contiguous() {
    // (xᵀ dy)ᵀ, the weight gradient of `x @ Wᵀ`, becomes dyᵀ x.
    let mut g = trace(
        "dense_grad",
        &[
            TensorType::new(&[5, 3], DType::F32),
            TensorType::new(&[5, 4], DType::F32),
        ],
        |x| Ok(vec![x[0].transpose()?.matmul(&x[1])?.transpose()?]),
    )
    .unwrap();
    let before = g.interpret(&inputs_for_dense()).unwrap();
    assert!(Simplify.run(&mut g).unwrap());
    Dce.run(&mut g).unwrap();
    g.verify().unwrap();
    let after = g.interpret(&inputs_for_dense()).unwrap();
    assert_close(&after.outputs[0], &before.outputs[0], 1e-6, "dense_grad");
    let out = &g.nodes[g.outputs[0]];
    assert!(matches!(out.op(), Some(Op::MatMul)), "{}", g.to_ir());
    assert!(out.name.contains("MatMul"), "{}", g.to_ir());
    assert_eq!(g.to_ir().matches("Transpose(").count(), 1, "{}", g.to_ir());
}

#[test]
fn simplify_makes_the_batched_key_gradient_contiguous() {
    // Attention's key gradient: (qᵀ dS)ᵀ per batch and head becomes dSᵀ q, [2, 3, 5, 4]
    // laid out in order; a transpose of other axes is left alone.
    let (q, ds) = ([2, 3, 5, 4], [2, 3, 5, 5]);
    let types = [
        TensorType::new(&q, DType::F32),
        TensorType::new(&ds, DType::F32),
    ];
    let swap = [0, 1, 3, 2];
    let mut g = trace("key_grad", &types, |x| {
        Ok(vec![x[0].permute(&swap)?.matmul(&x[1])?.permute(&swap)?])
    })
    .unwrap();
    let inputs = vec![
        Tensor::randn(&q, DType::F32, Some(3)).unwrap(),
        Tensor::randn(&ds, DType::F32, Some(4)).unwrap(),
    ];
    let before = g.interpret(&inputs).unwrap();
    assert!(Simplify.run(&mut g).unwrap());
    Dce.run(&mut g).unwrap();
    g.verify().unwrap();
    let after = g.interpret(&inputs).unwrap();
    assert_close(&after.outputs[0], &before.outputs[0], 1e-6, "key_grad");
    assert!(
        matches!(g.nodes[g.outputs[0]].op(), Some(Op::MatMul)),
        "{}",
        g.to_ir()
    );

    let mut other = trace("heads", &types, |x| {
        Ok(vec![
            x[0].permute(&[1, 0, 3, 2])?
                .matmul(&x[1].permute(&[1, 0, 2, 3])?)?
                .permute(&[1, 0, 3, 2])?,
        ])
    })
    .unwrap();
    assert!(!Simplify.run(&mut other).unwrap(), "{}", other.to_ir());
}

#[test]
fn simplify_casts_before_broadcasting() {
    // A per-channel gradient broadcast over an activation and cast to bfloat16 (amp O2's
    // BatchNorm mean), added to a bfloat16 gradient: the cast moves before the broadcast,
    // which stays a view; values are the same bit for bit.
    let small = TensorType::new(&[1, 3, 1, 1], DType::F32);
    let full = TensorType::new(&[4, 3, 5, 5], DType::BF16);
    let mut g = trace("mean_grad", &[small.clone(), full], |x| {
        let wide = x[0].broadcast_to(&[4, 3, 5, 5])?;
        Ok(vec![wide.cast(DType::BF16)?.add(&x[1])?])
    })
    .unwrap();
    let inputs = vec![
        Tensor::randn(&[1, 3, 1, 1], DType::F32, Some(9)).unwrap(),
        Tensor::randn(&[4, 3, 5, 5], DType::F32, Some(10))
            .unwrap()
            .cast(DType::BF16)
            .unwrap(),
    ];
    let before = g.interpret(&inputs).unwrap();
    assert!(Simplify.run(&mut g).unwrap());
    Dce.run(&mut g).unwrap();
    g.verify().unwrap();
    let after = g.interpret(&inputs).unwrap();
    assert_eq!(bits(&after.outputs[0]), bits(&before.outputs[0]));
    let ir = g.to_ir();
    assert!(
        ir.contains("Cast(%0) {BF16} -> Tensor(BF16)[1, 3, 1, 1]"),
        "{ir}"
    );
    assert!(
        ir.contains("BroadcastTo") && ir.contains("-> Tensor(BF16)[4, 3, 5, 5]"),
        "{ir}"
    );

    // Left alone: a broadcast another op reads too, a cast the graph returns (it stays
    // dense), and a cast to the broadcast's own type (an identity, removed instead).
    let shared = |x: &[Tensor]| {
        let wide = x[0].broadcast_to(&[4, 3, 5, 5])?;
        Ok(vec![wide.cast(DType::BF16)?.neg()?, wide])
    };
    let returned = |x: &[Tensor]| Ok(vec![x[0].broadcast_to(&[4, 3, 5, 5])?.cast(DType::BF16)?]);
    for (name, f) in [
        ("shared", &shared as &dyn Fn(&[Tensor]) -> _),
        ("returned", &returned),
    ] {
        let mut other = trace(name, std::slice::from_ref(&small), f).unwrap();
        assert!(
            !Simplify.run(&mut other).unwrap(),
            "{name}: {}",
            other.to_ir()
        );
    }
    let mut same = trace("same_type", std::slice::from_ref(&small), |x| {
        Ok(vec![
            x[0].broadcast_to(&[4, 3, 5, 5])?.cast(DType::F32)?.neg()?,
        ])
    })
    .unwrap();
    Simplify.run(&mut same).unwrap();
    Dce.run(&mut same).unwrap();
    assert!(!same.to_ir().contains("= Cast("), "{}", same.to_ir());
}

#[test]
fn simplify_leaves_a_product_alone_while_something_else_reads_it() {
    // y = (xᵀ b) * 1 is an identity; y is also returned, so the product must survive as is
    // when the identity is removed and Transpose(y) is looked at.
    let ty = TensorType::new(&[3, 3], DType::F32);
    let mut g = trace("shared_product", &[ty.clone(), ty], |x| {
        let y = x[0].transpose()?.matmul(&x[1])?.mul_scalar(1.0)?;
        Ok(vec![y.clone(), y.transpose()?])
    })
    .unwrap();
    let inputs = vec![
        Tensor::randn(&[3, 3], DType::F32, Some(5)).unwrap(),
        Tensor::randn(&[3, 3], DType::F32, Some(6)).unwrap(),
    ];
    let before = g.interpret(&inputs).unwrap();
    spore_compile::pass::run_passes(&mut g, &spore_compile::pass::default_passes(), None).unwrap();
    let after = g.interpret(&inputs).unwrap();
    for (a, b) in after.outputs.iter().zip(&before.outputs) {
        assert_close(a, b, 1e-6, "shared_product");
    }
}

fn inputs_for_dense() -> Vec<Tensor> {
    vec![
        Tensor::randn(&[5, 3], DType::F32, Some(3)).unwrap(),
        Tensor::randn(&[5, 4], DType::F32, Some(4)).unwrap(),
    ]
}

#[test]
fn fusion_preserves_results_and_fuses_chains() {
    let mut g = check_pass(&FuseElementwise);
    Dce.run(&mut g).unwrap();
    let ir = g.to_ir();
    assert!(ir.contains("FusedElementwise"), "{ir}");
    assert!(!ir.contains("= ReLU("), "{ir}");
}

#[test]
fn full_pipeline_preserves_results() {
    let mut g = busy_graph();
    let before = g.interpret(&inputs()).unwrap();
    spore_compile::pass::run_passes(&mut g, &spore_compile::pass::default_passes(), None).unwrap();
    let after = g.interpret(&inputs()).unwrap();
    for (a, b) in after.outputs.iter().zip(&before.outputs) {
        assert_close(a, b, 1e-6, "pipeline");
    }
    // Executor equals interpreter on the optimised graph.
    let mut exe = spore_compile::executor::Executable::new(g).unwrap();
    for (a, b) in exe.run(&inputs()).unwrap().iter().zip(&before.outputs) {
        assert_close(a, b, 1e-6, "executor");
    }
}

/// The IR text without source locations (which depend on this file's line numbers).
fn without_locations(ir: &str) -> String {
    ir.lines()
        .map(|l| {
            l.split("    # In file")
                .next()
                .unwrap_or(l)
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn printed_ir_snapshots() {
    let mut g = trace("snap", &[TensorType::new(&[2, 3], DType::F32)], |x| {
        spore_core::trace::with_scope("network", || {
            Ok(vec![x[0].exp()?.add(&x[0].exp()?)?.relu()?])
        })
    })
    .unwrap();
    let traced = g.to_ir();
    assert!(
        traced
            .lines()
            .filter(|l| l.contains("= Exp(") || l.contains("= Add(") || l.contains("= ReLU("))
            .all(|l| l.contains("# In file crates/compile/tests/compile/passes.rs:")),
        "{traced}"
    );
    assert_eq!(
        without_locations(&traced),
        "# IR of snap: 5 nodes, 4 ops
funcgraph snap(
    %0 : Tensor(F32)[2, 3]    # input 0
) {
  %0 = Input(0) -> Tensor(F32)[2, 3]    # scope: x0
  %1 = Exp(%0) -> Tensor(F32)[2, 3]    # scope: Default/network/Exp-op0
  %2 = Exp(%0) -> Tensor(F32)[2, 3]    # scope: Default/network/Exp-op1
  %3 = Add(%1, %2) -> Tensor(F32)[2, 3]    # scope: Default/network/Add-op2
  %4 = ReLU(%3) -> Tensor(F32)[2, 3]    # scope: Default/network/ReLU-op3
  Return(%4)
}"
    );
    Cse.run(&mut g).unwrap();
    Dce.run(&mut g).unwrap();
    FuseElementwise.run(&mut g).unwrap();
    Dce.run(&mut g).unwrap();
    assert_eq!(
        without_locations(&g.to_ir()),
        // After CSE the Add reads one Exp twice; that Exp has no other user, so the
        // whole chain is one loop.
        "# IR of snap: 2 nodes, 1 ops
funcgraph snap(
    %0 : Tensor(F32)[2, 3]    # input 0
) {
  %0 = Input(0) -> Tensor(F32)[2, 3]    # scope: x0
  %1 = FusedElementwise(%0) {FusedProgram { num_inputs: 1, instrs: [Unary(Exp, 0), Binary(Add, 1, 1), Unary(Relu, 2)], compute: F32, out_dtype: F32 }} -> Tensor(F32)[2, 3]    # scope: Default/network/ReLU-op3
  Return(%1)
}"
    );
}

/// Sums whose only input is an elementwise chain become `FusedReduceSum` (the chain runs
/// inside the sum): BatchNorm's variance, a masked bias gradient (kept positions wrap
/// around chunks), a row sum and two full sums. A sum over non-adjacent kept axes stays as
/// it was. Every result equals the unfused graph's, the executor's, and (for the
/// variance) a naive f64 sum.
#[test]
fn sums_of_elementwise_chains_run_fused() {
    let x_ty = TensorType::new(&[6, 5, 40, 40], DType::F32);
    let y_ty = TensorType::new(&[64, 37], DType::F32);
    let mut g = trace("sums", &[x_ty, y_ty], |x| {
        let (x, y) = (&x[0], &x[1]);
        let centred = x.sub(&x.mean(&[0, 2, 3], true)?)?;
        let var = centred.mul(&centred)?.sum(&[0, 2, 3], false)?;
        let zero = Tensor::scalar(0.0f32);
        let masked = Tensor::select(&y.greater(&zero)?, &y.exp()?, &zero)?;
        let bias_grad = masked.sum(&[0], false)?;
        let rows = y.mul(y)?.sum(&[1], true)?;
        let total = y.sin()?.sum(&[], false)?;
        let apart = x.mul(x)?.sum(&[1, 3], false)?;
        let x_total = x.sin()?.sum(&[], false)?;
        Ok(vec![var, centred, bias_grad, rows, total, apart, x_total])
    })
    .unwrap();
    let inputs = vec![
        Tensor::randn(&[6, 5, 40, 40], DType::F32, Some(11)).unwrap(),
        Tensor::randn(&[64, 37], DType::F32, Some(12)).unwrap(),
    ];
    let before = g.interpret(&inputs).unwrap();
    assert!(FuseElementwise.run(&mut g).unwrap());
    Dce.run(&mut g).unwrap();
    g.verify().unwrap();
    let ir = g.to_ir();
    assert_eq!(ir.matches("= FusedReduceSum(").count(), 5, "{ir}");
    // The mean's sum reads x itself; `apart` keeps two axes that are not adjacent.
    assert_eq!(ir.matches("= ReduceSum(").count(), 2, "{ir}");
    let after = g.interpret(&inputs).unwrap();
    let mut exe = spore_compile::executor::Executable::new(g).unwrap();
    let executed = exe.run(&inputs).unwrap();
    for ((a, e), b) in after.outputs.iter().zip(&executed).zip(&before.outputs) {
        assert_close(a, b, 1e-5, "fused sum vs unfused");
        assert_close(e, b, 1e-5, "executor vs unfused");
    }
    // The full sum of 48,000 values and the variance against naive f64 sums.
    let x = inputs[0].to_f64_vec().unwrap();
    let x_total: f64 = x.iter().map(|v| v.sin()).sum();
    let magnitude: f64 = x.iter().map(|v| v.sin().abs()).sum();
    let got = after.outputs[6].item().unwrap();
    assert!(
        (got - x_total).abs() <= 1e-6 * magnitude,
        "full sum: {got} vs {x_total}"
    );
    let (n, c, hw) = (6, 5, 1600);
    let var = after.outputs[0].to_f64_vec().unwrap();
    for (ch, &v) in var.iter().enumerate() {
        let values = (0..n).flat_map(|i| x[(i * c + ch) * hw..][..hw].iter().copied());
        let mean = values.clone().sum::<f64>() / (n * hw) as f64;
        let expected: f64 = values.map(|v| (v - mean) * (v - mean)).sum();
        assert!(
            (v - expected).abs() <= 1e-5 * expected,
            "channel {ch}: {v} vs {expected}"
        );
    }
}

/// BatchNorm's `x - μ`, read by the variance's sum and by another elementwise loop, is
/// recomputed inside both instead of being stored; the results do not change. A
/// difference that is also a graph output stays stored.
#[test]
fn a_cheap_value_read_by_several_loops_is_recomputed_in_each() {
    let x_ty = TensorType::new(&[4, 3, 10, 10], DType::F32);
    let build = |centred_is_output: bool| {
        trace("remat", std::slice::from_ref(&x_ty), move |x| {
            let centred = x[0].sub(&x[0].mean(&[0, 2, 3], true)?)?;
            let var = centred.mul(&centred)?.sum(&[0, 2, 3], true)?;
            let scaled = centred.mul_scalar(2.0)?.add_scalar(1.0)?.exp()?;
            let mut out = vec![var, scaled];
            if centred_is_output {
                out.push(centred);
            }
            Ok(out)
        })
        .unwrap()
    };
    let inputs = vec![Tensor::randn(&[4, 3, 10, 10], DType::F32, Some(5)).unwrap()];
    for centred_is_output in [false, true] {
        let mut g = build(centred_is_output);
        let before = g.interpret(&inputs).unwrap();
        FuseElementwise.run(&mut g).unwrap();
        Dce.run(&mut g).unwrap();
        g.verify().unwrap();
        let ir = g.to_ir();
        assert_eq!(ir.contains("= Sub("), centred_is_output, "{ir}");
        assert_eq!(
            ir.matches("Binary(Sub,").count(),
            2 * usize::from(!centred_is_output),
            "{ir}"
        );
        let after = g.interpret(&inputs).unwrap();
        for (a, b) in after.outputs.iter().zip(&before.outputs) {
            assert_close(a, b, 1e-5, "recomputed vs stored");
        }
    }
}

/// ReLU's gradient after max pooling's becomes one `MaxPoolGradReLU` (2x2 windows on
/// planes the vector kernel covers, and 3x3 windows with padding on the scalar path), and
/// the input gradient equals the unfused graph's. Inputs include exact zeros and windows
/// whose values are all negative, where the mask decides.
#[test]
fn relu_gradient_folds_into_max_pool_gradient() {
    use spore_core::prims::{conv::PadMode, pool::Pool2dOptions};
    let cases = [
        ([2, 3, 8, 16], Pool2dOptions::new(2, 2)),
        (
            [2, 3, 7, 9],
            Pool2dOptions::new(3, 2).pad_mode(PadMode::Same),
        ),
    ];
    for (shape, opts) in cases {
        let d = spore_core::grad(
            move |x: &[Tensor]| x[0].relu()?.max_pool2d(&opts)?.mul(&x[1])?.sum(&[], false),
            &[0],
        );
        let ty = TensorType::new(&shape, DType::F32);
        let zeros = Tensor::zeros(&shape, DType::F32).unwrap();
        let pooled = zeros.max_pool2d(&opts).unwrap().tensor_type().clone();
        let mut g = trace("pool_relu", &[ty, pooled.clone()], |x| d(x)).unwrap();
        let n: usize = shape.iter().product();
        // Every third value exactly 0, the rest mixed; whole negative windows occur.
        let x: Vec<f32> = (0..n)
            .map(|i| {
                if i % 3 == 0 {
                    0.0
                } else {
                    ((i * 37 % 23) as f32) - 14.0
                }
            })
            .collect();
        let inputs = vec![
            Tensor::from_vec(x, &shape).unwrap(),
            Tensor::randn(&pooled.shape, DType::F32, Some(4)).unwrap(),
        ];
        let before = g.interpret(&inputs).unwrap();
        assert!(FuseElementwise.run(&mut g).unwrap());
        Dce.run(&mut g).unwrap();
        g.verify().unwrap();
        let ir = g.to_ir();
        assert!(ir.contains("= MaxPoolGradReLU("), "{ir}");
        assert!(!ir.contains("= MaxPoolGrad("), "{ir}");
        let after = g.interpret(&inputs).unwrap();
        assert_close(
            &after.outputs[0],
            &before.outputs[0],
            0.0,
            "masked pool gradient",
        );
    }
}

/// A ReLU that is a convolution's only reader joins it (`Conv2DReLU`), on the wide-position
/// path (one input channel, 6 outputs) and on the implicit GEMM (16 outputs), with the same
/// values as the two ops; a convolution whose value is also returned keeps its own ReLU.
#[test]
fn relu_folds_into_the_convolution_it_reads() {
    use spore_core::prims::conv::Conv2dOptions;
    let cases = [
        ([2, 1, 12, 12], [6, 1, 3, 3]),
        ([2, 6, 9, 9], [16, 6, 3, 3]),
    ];
    for (xs, ws) in cases {
        let types = [
            TensorType::new(&xs, DType::F32),
            TensorType::new(&ws, DType::F32),
        ];
        let opts = Conv2dOptions::default();
        let inputs = vec![
            Tensor::randn(&xs, DType::F32, Some(5)).unwrap(),
            Tensor::randn(&ws, DType::F32, Some(6)).unwrap(),
        ];
        let mut g = trace("conv_relu", &types, |x| {
            Ok(vec![x[0].conv2d(&x[1], &opts)?.relu()?])
        })
        .unwrap();
        let before = g.interpret(&inputs).unwrap();
        assert!(FuseElementwise.run(&mut g).unwrap());
        Dce.run(&mut g).unwrap();
        g.verify().unwrap();
        let ir = g.to_ir();
        assert!(ir.contains("= Conv2DReLU("), "{ir}");
        assert!(!ir.contains("= Conv2D(") && !ir.contains("= ReLU("), "{ir}");
        let after = g.interpret(&inputs).unwrap();
        // Negative sums occur (normal inputs), so the ReLU decides some outputs.
        assert!(before.outputs[0].to_vec::<f32>().unwrap().contains(&0.0));
        assert_close(&after.outputs[0], &before.outputs[0], 0.0, "fused ReLU");

        let mut kept = trace("conv_and_relu", &types, |x| {
            let y = x[0].conv2d(&x[1], &opts)?;
            Ok(vec![y.relu()?, y])
        })
        .unwrap();
        FuseElementwise.run(&mut kept).unwrap();
        let ir = kept.to_ir();
        assert!(!ir.contains("Conv2DReLU"), "{ir}");
    }
}
