//! Mixed precision at the cell level: `to_float` makes a cell's ops compute in 16 bits
//! with float32 master weights; the levels set BatchNorm and the loss as MindSpore does;
//! the casts are ops in the compiled graph under the layers' scope names; Graph mode
//! computes what PyNative mode computes; loss scaling skips overflowed steps.

use std::sync::Arc;

use spore_core::context::Mode;
use spore_core::{DType, Tensor};
use spore_nn::amp::{
    AmpLevel, DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager,
    TrainOneStepWithLossScaleCell, all_finite, all_finite_tensor, auto_mixed_precision,
};
use spore_nn::prelude::*;

use super::{serial, set_mode};

fn small_net() -> Arc<dyn Cell> {
    SequentialCell::new(vec![
        Conv2d::new(1, 4, 3).unwrap(),
        BatchNorm2d::new(4).unwrap(),
        ReLU::new(),
        Flatten::new(),
        Dense::new(4 * 8 * 8, 3).unwrap(),
    ])
}

#[test]
fn levels_set_the_compute_dtypes_mindspore_names() {
    let _s = serial();
    let dtypes = |net: &Arc<dyn Cell>| -> Vec<(String, Option<DType>)> {
        net.cells_and_names()
            .into_iter()
            .map(|(n, c)| (n, c.base().float_type()))
            .collect()
    };
    let net = small_net();
    auto_mixed_precision(&net, AmpLevel::O2, DType::F16).unwrap();
    assert_eq!(net.base().float_type(), Some(DType::F16));
    let d = dtypes(&net);
    assert!(
        d.contains(&("1".to_string(), Some(DType::F32))),
        "O2 keeps BatchNorm in float32: {d:?}"
    );
    let net = small_net();
    auto_mixed_precision(&net, AmpLevel::O1, DType::BF16).unwrap();
    let d = dtypes(&net);
    for (name, want) in [
        ("0", Some(DType::BF16)),
        ("1", None),
        ("2", Some(DType::BF16)),
        ("4", Some(DType::BF16)),
    ] {
        assert!(
            d.contains(&(name.to_string(), want)),
            "O1 white list: {name} {want:?} in {d:?}"
        );
    }
    assert_eq!(
        net.base().float_type(),
        Some(DType::F32),
        "O1 runs the rest in float32"
    );
    let err = auto_mixed_precision(&small_net(), AmpLevel::O2, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Float16 or BFloat16"), "{err}");
    let err = "O4".parse::<AmpLevel>().unwrap_err().to_string();
    assert!(
        err.contains("'O0', 'O1', 'O2', 'O3', 'auto'") && err.contains("O4"),
        "{err}"
    );
}

#[test]
fn a_cell_in_float16_casts_its_inputs_and_weights_and_graph_mode_agrees() {
    let _s = serial();
    let x = Tensor::randn(&[2, 1, 8, 8], DType::F32, Some(3)).unwrap();
    let run = |mode: Mode| {
        set_mode(mode);
        spore_core::rng::set_seed(5);
        let net = small_net();
        auto_mixed_precision(&net, AmpLevel::O2, DType::F16).unwrap();
        let y = net.call1(&x).unwrap();
        let graph = net
            .base()
            .compiled(false)
            .and_then(|j| j.graph_for(&[x.tensor_type().clone()]));
        set_mode(Mode::PyNative);
        (y, graph)
    };
    let (eager, _) = run(Mode::PyNative);
    let (compiled, graph) = run(Mode::Graph);
    assert_eq!(eager.dtype(), DType::F16);
    assert_eq!(
        compiled.to_f64_vec().unwrap(),
        eager.to_f64_vec().unwrap(),
        "Graph equals PyNative"
    );
    let ir = graph.expect("the compiled graph").to_ir();
    // The convolution's weight is cast under its scope; BatchNorm computes in float32.
    let casts: Vec<&str> = ir.lines().filter(|l| l.contains("Cast")).collect();
    assert!(
        casts
            .iter()
            .any(|l| l.contains("Default/0/") && l.contains("F16")),
        "{ir}"
    );
    // BatchNorm's float32 loop reads the convolution's float16 output itself, widening
    // it as it loads it (the widening cast went into the loop: `widening_casts`).
    assert!(
        ir.lines().any(|l| l.contains("Default/1/")
            && l.contains("compute: F32")
            && l.contains("Tensor(F32)")),
        "{ir}"
    );
}

/// O3 runs BatchNorm in 16 bits too; training it still updates its float32 moving
/// statistics (their momentum update computes in their own dtype).
#[test]
fn batchnorm_trains_in_16_bits_and_keeps_float32_statistics() {
    let _s = serial();
    for mode in [Mode::PyNative, Mode::Graph] {
        set_mode(mode);
        let net = small_net();
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
        let step = spore_nn::amp::build_train_network(
            net.clone(),
            opt,
            Some(loss),
            AmpLevel::O3,
            Default::default(),
        )
        .unwrap();
        let x = Tensor::randn(&[4, 1, 8, 8], DType::F32, Some(7)).unwrap();
        let y = Tensor::from_vec(vec![0i32, 1, 2, 1], &[4]).unwrap();
        let first = step.call(&[x.clone(), y.clone()]).unwrap()[0]
            .item()
            .unwrap();
        for _ in 0..5 {
            step.call(&[x.clone(), y.clone()]).unwrap();
        }
        let last = step.call(&[x, y]).unwrap()[0].item().unwrap();
        assert!(
            last < first,
            "{mode:?}: the loss fell from {first} to {last}"
        );
        let stats: Vec<_> = net
            .parameters_and_names()
            .into_iter()
            .filter(|(n, _)| n.contains("moving_"))
            .collect();
        assert_eq!(stats.len(), 2);
        for (name, p) in stats {
            assert_eq!(p.value().dtype(), DType::F32, "{name}");
        }
        set_mode(Mode::PyNative);
    }
}

#[test]
fn loss_scaled_steps_skip_overflow_and_follow_mindspores_rule() {
    let _s = serial();
    // The state machine with overflows at chosen steps: window 3, factor 2.
    let m = DynamicLossScaleManager::new(8.0, 2.0, 3).unwrap();
    let overflow_at = [
        false, false, true, false, false, false, false, false, true, true,
    ];
    let mut seen = vec![];
    for &o in &overflow_at {
        let applied = m.update(o);
        assert_eq!(applied, !o);
        seen.push(m.loss_scale());
    }
    // Grows when cur_iter - last_overflow_iter >= 3 (first at step 3, which overflowed
    // instead), halves on overflow, never below 1.
    assert_eq!(seen, [8.0, 8.0, 4.0, 4.0, 4.0, 8.0, 8.0, 8.0, 4.0, 2.0]);
    assert!(DynamicLossScaleManager::new(0.5, 2.0, 10).is_err());
    assert!(FixedLossScaleManager::new(f64::NAN, true).is_err());
    assert!(
        FixedLossScaleManager::new(1e39, true).is_err(),
        "beyond float32"
    );

    // A step whose gradients overflow leaves the weights as they were.
    let net = Dense::new(2, 1).unwrap();
    let before = net.weight.value().to_vec::<f32>().unwrap();
    let loss = MSELoss::new(Reduction::Mean);
    let opt = SGD::new(net.trainable_params(), 0.1).unwrap();
    let step = TrainOneStepWithLossScaleCell::new(
        WithLossCell::new(net.clone(), loss),
        opt,
        FixedLossScaleManager::new(1e38, true).unwrap(),
    );
    let x = Tensor::from_vec(vec![1e3f32, 1e3], &[1, 2]).unwrap();
    let y = Tensor::from_vec(vec![0.0f32], &[1, 1]).unwrap();
    let out = step.call(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(out[1].item().unwrap(), 1.0, "the scaled gradients overflow");
    assert_eq!(
        net.weight.value().to_vec::<f32>().unwrap(),
        before,
        "the update was dropped"
    );
    let step = TrainOneStepWithLossScaleCell::new(
        WithLossCell::new(net.clone(), MSELoss::new(Reduction::Mean)),
        SGD::new(net.trainable_params(), 1e-7).unwrap(),
        FixedLossScaleManager::new(4.0, true).unwrap(),
    );
    let out = step.call(&[x, y]).unwrap();
    assert_eq!(out[1].item().unwrap(), 0.0);
    assert_ne!(
        net.weight.value().to_vec::<f32>().unwrap(),
        before,
        "a clean step updates"
    );
}

/// O2's loss-scaled step in Graph mode (one compiled graph, the update applied under the
/// overflow flag) follows PyNative mode (two graphs, the manager's decision on the host
/// between them) step by step: the same overflows, the
/// same loss scales, and losses equal up to float32 rounding. The default dynamic scale
/// starts at 2^24, so the float16 gradients overflow on the first steps.
#[test]
fn loss_scaled_steps_in_graph_mode_follow_pynative_mode() {
    let _s = serial();
    let run = |mode: Mode| {
        spore_core::context::set_context(
            spore_core::context::ContextUpdate::new().mode(mode).seed(5),
        )
        .unwrap();
        let net = small_net();
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
        let step = spore_nn::amp::build_train_network(
            net.clone(),
            opt,
            Some(loss),
            AmpLevel::O2,
            Default::default(),
        )
        .unwrap();
        let x = Tensor::randn(&[4, 1, 8, 8], DType::F32, Some(7)).unwrap();
        let y = Tensor::from_vec(vec![0i32, 1, 2, 1], &[4]).unwrap();
        (0..12)
            .map(|_| {
                let out = step.call(&[x.clone(), y.clone()]).unwrap();
                let v: Vec<f64> = out.iter().map(|t| t.item().unwrap()).collect();
                (v[0], v[1] == 1.0, v[2])
            })
            .collect::<Vec<_>>()
    };
    let eager = run(Mode::PyNative);
    let graph = run(Mode::Graph);
    assert!(eager.iter().any(|s| s.1), "some step overflows: {eager:?}");
    assert!(eager.iter().any(|s| !s.1), "some step applies: {eager:?}");
    for (k, (e, g)) in eager.iter().zip(&graph).enumerate() {
        assert_eq!((e.1, e.2), (g.1, g.2), "step {k}: overflow and scale");
        assert!(
            (e.0 - g.0).abs() <= 1e-4 * e.0.abs(),
            "step {k}: loss {} vs {}",
            e.0,
            g.0
        );
    }
    set_mode(Mode::PyNative);
}

/// A compiled child (Dense) of a cell that runs eagerly (BatchNorm updates state), under a
/// 16-bit compute dtype and differentiated from outside: its backward pass recomputes it
/// later, outside the caller's compute dtype, and must still cast as the forward did.
/// Gradients equal PyNative mode's.
#[test]
fn a_compiled_child_under_to_float_is_differentiable_from_outside() {
    let _s = serial();
    let grads = |mode: Mode| {
        spore_core::context::set_context(
            spore_core::context::ContextUpdate::new().mode(mode).seed(3),
        )
        .unwrap();
        let net: Arc<dyn Cell> = SequentialCell::new(vec![
            BatchNorm1d::new(4).unwrap(),
            Dense::new(4, 3).unwrap(),
        ]);
        net.base().to_float(DType::F16).unwrap();
        net.set_train(true);
        let x = Tensor::randn(&[8, 4], DType::F32, Some(1)).unwrap();
        let w: Vec<Tensor> = net.trainable_params().iter().map(|p| p.value()).collect();
        let loss = move |x: &[Tensor]| {
            net.call_first(x)?
                .cast(DType::F32)?
                .square()?
                .sum(&[], false)
        };
        let out = spore_core::value_and_grad(loss, None, &w, false)(&[x]).unwrap();
        let flat: Vec<Vec<f32>> = out
            .weight_grads
            .iter()
            .map(|g| g.cast(DType::F32).unwrap().to_vec().unwrap())
            .collect();
        flat
    };
    let eager = grads(Mode::PyNative);
    let graph = grads(Mode::Graph);
    set_mode(Mode::PyNative);
    assert_eq!(eager.len(), graph.len());
    for (e, g) in eager.iter().zip(&graph) {
        assert_eq!(e.len(), g.len());
        for (a, b) in e.iter().zip(g) {
            assert!((a - b).abs() <= 1e-3 * a.abs().max(1.0), "{e:?} vs {g:?}");
        }
    }
}

/// float16 parameters under a loss scale beyond float16's range (2^17): the gradients are
/// unscaled in float32, so a clean step updates the weights (the scale as a float16
/// divisor would be an infinity and every gradient zero).
#[test]
fn float16_gradients_unscale_in_float32_under_a_large_scale() {
    let _s = serial();
    let net = Dense::new(2, 1).unwrap();
    for p in net.trainable_params() {
        p.store(p.stored().cast(DType::F16).unwrap());
    }
    let before = net
        .weight
        .value()
        .cast(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    // The loss in float32, as amp levels keep it.
    let loss = MSELoss::new(Reduction::Mean);
    loss.base().to_float(DType::F32).unwrap();
    let step = TrainOneStepWithLossScaleCell::new(
        WithLossCell::new(net.clone(), loss),
        SGD::new(net.trainable_params(), 0.1).unwrap(),
        FixedLossScaleManager::new(2f64.powi(17), true).unwrap(),
    );
    let x = Tensor::from_vec(vec![0.5f32, 0.25], &[1, 2])
        .unwrap()
        .cast(DType::F16)
        .unwrap();
    // A target near the prediction: the scaled gradients (about 2^17 * 2e-2) stay finite
    // in float16, though the scale itself does not fit.
    let prediction = spore_core::no_grad(|| net.call1(&x)).unwrap();
    let y = prediction
        .cast(DType::F32)
        .unwrap()
        .add_scalar(1e-2)
        .unwrap();
    let out = step.call(&[x, y]).unwrap();
    assert_eq!(out[1].item().unwrap(), 0.0, "no overflow");
    let after = net
        .weight
        .value()
        .cast(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_ne!(after, before, "the weights moved");
}

/// The dynamic loss scale's state travels in checkpoints under MindSpore's names: a step
/// cell loaded from one continues the schedule (scales and losses) of the run it was
/// saved from.
#[test]
fn the_loss_scale_state_is_saved_and_restored_with_checkpoints() {
    let _s = serial();
    let make = || {
        let net = Dense::new(4, 3).unwrap();
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
        let m = DynamicLossScaleManager::new(1024.0, 2.0, 2).unwrap();
        TrainOneStepWithLossScaleCell::new(WithLossCell::new(net, loss), opt, m)
    };
    let batch = |s: usize| {
        let mut v: Vec<f32> = (0..8)
            .map(|i| ((i * 5 + s) % 7) as f32 * 0.3 - 1.0)
            .collect();
        if s == 2 {
            v[3] = f32::INFINITY; // an overflow: the scale halves, the step is dropped
        }
        let x = Tensor::from_vec(v, &[2, 4]).unwrap();
        let y = Tensor::from_vec(vec![(s % 3) as i32, 1], &[2]).unwrap();
        vec![x, y]
    };
    let run = |step: &Arc<TrainOneStepWithLossScaleCell>, steps: std::ops::Range<usize>| {
        steps
            .map(|s| {
                let out = step.call(&batch(s)).unwrap();
                (out[0].item().unwrap(), out[2].item().unwrap())
            })
            .collect::<Vec<_>>()
    };
    let first = make();
    run(&first, 0..5);
    // Doubled at step 1, halved at step 2 (the overflow), doubled at step 4: a state
    // that differs from a fresh manager's.
    assert_eq!(first.manager().loss_scale(), 2048.0);
    assert_ne!(first.manager().state(), make().manager().state());
    let dir = std::env::temp_dir().join(format!("spore-loss-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("step.ckpt");
    spore_nn::checkpoint::save_checkpoint(&*first, &path).unwrap();
    let dict = spore_nn::checkpoint::load_checkpoint(&path).unwrap();
    let names: Vec<&str> = dict.keys().map(|n| n.as_str()).collect();
    for name in [
        "scale_sense",
        "current_iterator_step",
        "last_overflow_iterator_step",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let resumed = make();
    spore_nn::checkpoint::load_checkpoint_into(&*resumed, &path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let (a, b) = (run(&first, 5..9), run(&resumed, 5..9));
    assert_eq!(a, b, "the resumed run follows the saved one");
    assert_eq!(first.manager().loss_scale(), resumed.manager().loss_scale());
    // A checkpoint holding an impossible state is refused with what was wrong.
    let params = resumed.parameters_and_names();
    let (_, scale) = params.iter().find(|(n, _)| n == "scale_sense").unwrap();
    scale.store(Tensor::scalar(0.5f32));
    let e = resumed.call(&batch(9)).unwrap_err().to_string();
    assert!(
        e.contains("scale from 1 to float32's largest") && e.contains("got scale 0.5"),
        "{e}"
    );
}

/// The manager is shared (`manager()`, `AmpOptions`): a change made to it directly stands
/// at the next step; only parameters changed since the step wrote them (a checkpoint
/// load) are handed back to it. The dynamic scale never grows past float32's largest.
#[test]
fn direct_changes_to_a_shared_manager_stand_and_scales_stay_float32() {
    let _s = serial();
    let net = Dense::new(4, 3).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
    let m = DynamicLossScaleManager::new(1024.0, 2.0, 1).unwrap();
    let step = TrainOneStepWithLossScaleCell::new(WithLossCell::new(net, loss), opt, m);
    let x = Tensor::ones(&[2, 4], DType::F32).unwrap();
    let y = Tensor::from_vec(vec![0i32, 2], &[2]).unwrap();
    step.call(&[x.clone(), y.clone()]).unwrap();
    let mut state = step.manager().state();
    state.scale = 64.0;
    step.manager().restore(state).unwrap();
    let out = step.call(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(
        out[2].item().unwrap(),
        64.0,
        "the step used the manager's own scale"
    );
    let big = DynamicLossScaleManager::new(f64::from(f32::MAX), 2.0, 1).unwrap();
    assert!(big.update(false) && big.update(false));
    assert_eq!(big.loss_scale(), f64::from(f32::MAX));
}

/// The overflow check is one operator over all the gradients, in PyNative mode and in a
/// compiled graph alike: it finds an infinity or a NaN in any of them, of any float type
/// and in a strided view, and nothing outside a view counts.
#[test]
fn one_all_finite_operator_checks_every_gradient() {
    let _s = serial();
    let grads = |bad: Option<(usize, f32)>| -> Vec<Tensor> {
        let mut values = [vec![0.5f32; 40], vec![-2.0f32; 3], vec![1e4f32; 6]];
        if let Some((which, v)) = bad {
            let last = values[which].len() - 1;
            values[which][last] = v;
        }
        vec![
            Tensor::from_vec(values[0].clone(), &[8, 5]).unwrap(),
            Tensor::from_vec(values[1].clone(), &[3])
                .unwrap()
                .cast(DType::BF16)
                .unwrap(),
            Tensor::from_vec(values[2].clone(), &[2, 3])
                .unwrap()
                .cast(DType::F16)
                .unwrap(),
        ]
    };
    let compiled = spore_compile::jit("check", |t: &[Tensor]| Ok(vec![all_finite_tensor(t)?]));
    let mut cases = vec![(None, true)];
    for which in 0..3 {
        for v in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            cases.push((Some((which, v)), false));
        }
    }
    // 1e5 is finite in float32 and bfloat16 but overflows float16 (largest 65504).
    cases.push((Some((1, 1e5)), true));
    cases.push((Some((2, 1e5)), false));
    for (bad, want) in cases {
        let g = grads(bad);
        let eager = all_finite_tensor(&g).unwrap();
        assert_eq!(eager.dtype(), DType::Bool);
        assert_eq!(eager.item().unwrap() != 0.0, want, "PyNative, {bad:?}");
        assert_eq!(all_finite(&g).unwrap(), want, "host check, {bad:?}");
        let graph = compiled.call(&g).unwrap();
        assert_eq!(graph[0].item().unwrap() != 0.0, want, "Graph mode, {bad:?}");
    }
    let types: Vec<_> = grads(None)
        .iter()
        .map(|t| t.tensor_type().clone())
        .collect();
    let graph = compiled.graph_for(&types).expect("compiled");
    let checks = graph
        .nodes
        .iter()
        .filter(|n| n.op().is_some_and(|op| op.name() == "AllFinite"));
    assert_eq!(checks.count(), 1, "{}", graph.to_ir());
    // Views: the transposed matrix is read through its strides; a slice ignores the rest.
    let mut m = vec![1.0f32; 12];
    m[7] = f32::NAN;
    let m = Tensor::from_vec(m, &[3, 4]).unwrap();
    assert!(!all_finite(&[m.transpose().unwrap()]).unwrap());
    assert!(all_finite(&[m.narrow(0, 2, 1).unwrap()]).unwrap());
    assert!(!all_finite(&[m.narrow(0, 1, 1).unwrap()]).unwrap());
    assert!(all_finite_tensor(&[]).is_err());
}
