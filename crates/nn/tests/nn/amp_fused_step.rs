//! The loss-scaled step as one compiled graph (Graph mode, one process): an overflowed
//! step leaves every weight and moment and the step counter as they were, or applies the
//! update where the manager keeps overflowed steps; the overflow check reads the 16-bit
//! gradients in place and the update unscales them as it reads them, so no float32 copy
//! of a gradient is made; and every optimizer's state under a dynamic scale, overflowed
//! steps dropped, follows the two graphs step by step.

use spore_core::context::Mode;
use spore_core::{DType, Tensor, TensorType};
use spore_nn::amp::{
    AmpLevel, AmpOptions, FixedLossScaleManager, TrainOneStepWithLossScaleCell, build_train_network,
};
use spore_nn::prelude::*;

use super::{serial, set_mode};

/// The values of every parameter of `cell` (weights, moments, the step counter).
fn state(cell: &dyn Cell) -> Vec<Vec<f64>> {
    cell.parameters_and_names()
        .iter()
        .map(|(_, p)| p.value().to_f64_vec().unwrap())
        .collect()
}

#[test]
fn an_overflowed_step_in_one_graph_keeps_or_applies_the_update_as_its_manager_says() {
    let _s = serial();
    set_mode(Mode::Graph);
    let x = Tensor::from_vec(vec![1e3f32, 1e3], &[1, 2]).unwrap();
    let y = Tensor::from_vec(vec![0.0f32], &[1, 1]).unwrap();
    for (drop, scale) in [(true, 1e38), (false, 1e38), (true, 4.0)] {
        let net = Dense::new(2, 1).unwrap();
        let opt = Momentum::new(net.trainable_params(), 1e-7, 0.9).unwrap();
        let step = TrainOneStepWithLossScaleCell::new(
            WithLossCell::new(net.clone(), MSELoss::new(Reduction::Mean)),
            opt,
            FixedLossScaleManager::new(scale, drop).unwrap(),
        );
        let before = state(&*step);
        let out = step.call(&[x.clone(), y.clone()]).unwrap();
        let overflow = out[1].item().unwrap() == 1.0;
        assert_eq!(overflow, scale > 1e30, "drop {drop}, scale {scale}");
        let after = state(&*step);
        let fused = step
            .fused_step()
            .expect("MindSpore's managers run in one graph");
        assert!(
            fused.base().compiled(true).is_some(),
            "the step compiled as one cell"
        );
        if overflow && drop {
            assert_eq!(after, before, "the dropped update left every value");
        } else {
            assert_ne!(
                after, before,
                "drop {drop}, scale {scale}: the update applied"
            );
        }
    }
    set_mode(Mode::PyNative);
}

#[test]
fn the_one_graph_step_checks_and_unscales_16_bit_gradients_in_place() {
    let _s = serial();
    set_mode(Mode::Graph);
    let net = Dense::new(16, 8).unwrap();
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let options = AmpOptions {
        dtype: Some(DType::BF16),
        ..AmpOptions::default()
    };
    let step = build_train_network(
        net,
        opt,
        Some(SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean)),
        AmpLevel::O2,
        options,
    )
    .unwrap();
    let x = Tensor::randn(&[4, 16], DType::F32, Some(3)).unwrap();
    let y = Tensor::from_vec(vec![0i32, 1, 7, 3], &[4]).unwrap();
    step.call(&[x.clone(), y.clone()]).unwrap();
    let scaled = step
        .as_any()
        .and_then(|a| a.downcast_ref::<TrainOneStepWithLossScaleCell>())
        .expect("O2 builds a loss-scaled step");
    let fused = scaled.fused_step().unwrap();
    let types = [
        x.tensor_type().clone(),
        y.tensor_type().clone(),
        TensorType::new(&[], DType::F32),
    ];
    let graph = fused
        .base()
        .compiled(true)
        .unwrap()
        .graph_for(&types)
        .unwrap();
    let ir = graph.to_ir();
    let check = graph
        .nodes
        .iter()
        .find(|n| n.op().is_some_and(|op| op.name() == "AllFinite"))
        .expect("one overflow check");
    for a in check.args() {
        assert_eq!(
            graph.nodes[a].ty().dtype,
            DType::BF16,
            "checks 16-bit values: {ir}"
        );
    }
    // The only casts to float32 are the logits' (for the loss): no gradient is widened
    // into a float32 copy.
    let widened: Vec<_> = graph
        .nodes
        .iter()
        .filter(|n| n.op().is_some_and(|op| op.name() == "Cast") && n.ty().dtype == DType::F32)
        .map(|n| n.ty().shape.to_vec())
        .collect();
    assert_eq!(widened, vec![vec![4, 8]], "{ir}");
    set_mode(Mode::PyNative);
}

/// Every optimizer's state under the one graph follows the two graphs (PyNative mode)
/// step by step, with a dynamic scale that starts at 2^24, so that the float16 gradients
/// overflow on the first steps (those updates dropped, the scale halved) and later
/// steps apply: the same overflows and scales, and weights and every state value
/// (moments, step counters, Adam's beta powers, SGD's first-step flag) equal up to
/// float32 rounding.
#[test]
fn every_optimizers_state_under_the_one_graph_follows_the_two_graphs() {
    use spore_nn::amp::DynamicLossScaleManager;
    use spore_nn::optim::{Adam, Optimizer, RMSProp, SGD};
    use std::sync::Arc;
    type Make = fn(Vec<spore_core::Parameter>) -> Arc<dyn Optimizer>;
    let optimizers: [(&str, Make); 5] = [
        ("Momentum, nesterov", |p| {
            Momentum::config(p, 0.01, 0.9)
                .nesterov(true)
                .build()
                .unwrap()
        }),
        ("SGD, momentum", |p| {
            SGD::config(p, 0.01).momentum(0.9).build().unwrap()
        }),
        ("Adam", |p| Adam::new(p, 0.001).unwrap()),
        ("Adam, nesterov", |p| {
            Adam::config(p, 0.001).nesterov(true).build().unwrap()
        }),
        ("RMSProp, centered", |p| {
            RMSProp::config(p, 0.001)
                .momentum(0.5)
                .centered(true)
                .build()
                .unwrap()
        }),
    ];
    let _s = serial();
    for (name, make) in optimizers {
        let run = |mode: Mode| {
            spore_core::context::set_context(
                spore_core::context::ContextUpdate::new().mode(mode).seed(9),
            )
            .unwrap();
            let net = Dense::new(16, 4).unwrap();
            let opt = make(net.trainable_params());
            let options = AmpOptions {
                loss_scale_manager: Some(Arc::new(
                    DynamicLossScaleManager::new(2f64.powi(24), 2.0, 3).unwrap(),
                )),
                ..AmpOptions::default()
            };
            let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
            let step = build_train_network(net, opt, Some(loss), AmpLevel::O2, options).unwrap();
            let x = Tensor::randn(&[8, 16], DType::F32, Some(4)).unwrap();
            let y = Tensor::from_vec(vec![0i32, 1, 2, 3, 3, 2, 1, 0], &[8]).unwrap();
            (0..8)
                .map(|_| {
                    let out = step.call(&[x.clone(), y.clone()]).unwrap();
                    let overflow = out[1].item().unwrap() == 1.0;
                    (overflow, out[2].item().unwrap(), state(&*step))
                })
                .collect::<Vec<_>>()
        };
        let two = run(Mode::PyNative);
        let one = run(Mode::Graph);
        assert!(
            two.iter().any(|s| s.0) && two.iter().any(|s| !s.0),
            "{name}: {two:?}"
        );
        for (k, (t, o)) in two.iter().zip(&one).enumerate() {
            assert_eq!(
                (t.0, t.1),
                (o.0, o.1),
                "{name}, step {k}: overflow and scale"
            );
            for (a, b) in t.2.iter().flatten().zip(o.2.iter().flatten()) {
                assert!(
                    (a - b).abs() <= 1e-4 * a.abs().max(1e-2),
                    "{name}, step {k}: {a} vs {b}"
                );
            }
        }
    }
    set_mode(Mode::PyNative);
}
