//! The loss-scaled step as one compiled graph (Graph mode, one process): an overflowed
//! step leaves every weight and moment and the step counter as they were, or applies the
//! update where the manager keeps overflowed steps; the overflow check reads the 16-bit
//! gradients in place and the update unscales them as it reads them, so no float32 copy
//! of a gradient is made; and PyNative mode (two graphs) computes the same values.

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
