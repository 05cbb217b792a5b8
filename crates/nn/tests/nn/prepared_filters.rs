//! Convolutions of cells in evaluation mode reuse their weights' prepared filters
//! (`spore_core::prims::filter_cache`): results equal the per-call path bit for bit, and
//! never go stale when a training step or an assignment changes the weights, in both
//! modes.

use std::sync::Arc;

use spore_core::context::Mode;
use spore_core::ops::PadMode;
use spore_core::prims::filter_cache::{cached_weights, prepares_filters};
use spore_core::{DType, Tensor};
use spore_nn::prelude::*;

use super::{serial, set_mode};

/// The convolution computed directly (outside any cell call, so never from the cache).
fn direct(conv: &Conv2d, x: &Tensor) -> Vec<f32> {
    x.conv2d(&conv.weight.value(), conv.options())
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

/// One step of SGD on the sum of the outputs, through `TrainOneStepCell`.
fn train_step(conv: &Arc<Conv2d>, x: &Tensor) {
    struct SumLoss {
        base: CellBase,
        net: Arc<Conv2d>,
    }
    impl Cell for SumLoss {
        fn construct(&self, inputs: &[Tensor]) -> spore_core::Result<Vec<Tensor>> {
            Ok(vec![self.net.call1(&inputs[0])?.sum(&[], false)?])
        }
        fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
            vec![child("net", &self.net)]
        }
        fn base(&self) -> &CellBase {
            &self.base
        }
        fn class_name(&self) -> &'static str {
            "SumLoss"
        }
    }
    let loss = Arc::new(SumLoss {
        base: CellBase::new(),
        net: conv.clone(),
    });
    let opt = SGD::new(conv.trainable_params(), 0.01).unwrap();
    let step = TrainOneStepCell::new(loss, opt);
    step.set_train(true);
    step.call(std::slice::from_ref(x)).unwrap();
    conv.set_train(false);
}

#[test]
fn prepared_filters_match_and_follow_weight_updates_in_both_modes() {
    let _s = serial();
    for mode in [Mode::PyNative, Mode::Graph] {
        set_mode(mode);
        // Batch 4 of 8x8 (16 tiles: Winograd) and one 4x4 image (the packed panels).
        for (batch, side, channels) in [(4, 8, 16), (1, 4, 64)] {
            let conv = Conv2d::config(channels, channels, 3)
                .pad_mode(PadMode::Same)
                .build()
                .unwrap();
            conv.set_train(false);
            let x = Tensor::randn(&[batch, channels, side, side], DType::F32, Some(5)).unwrap();
            for _ in 0..2 {
                let y = conv.call1(&x).unwrap().to_vec::<f32>().unwrap();
                assert_eq!(y, direct(&conv, &x), "{mode:?} {batch}x{side}");
            }
            if prepares_filters() {
                assert!(
                    cached_weights() > 0,
                    "{mode:?}: the weight's filters were prepared"
                );
            }
            train_step(&conv, &x);
            let after = conv.call1(&x).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(after, direct(&conv, &x), "{mode:?}: after a training step");
            conv.weight
                .assign(&conv.weight.value().mul_scalar(0.5).unwrap())
                .unwrap();
            let assigned = conv.call1(&x).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(assigned, direct(&conv, &x), "{mode:?}: after an assignment");
        }
    }
    set_mode(Mode::PyNative);
}
