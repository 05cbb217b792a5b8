//! `Model(..., amp_level=...)`: training builds the level's step (O2: float16 compute,
//! a loss-scaled step; O3: float16 everywhere but the loss) and trains, in both sink
//! modes.

use std::sync::Arc;

use spore_core::DType;
use spore_nn::amp::{AmpLevel, AmpOptions, FixedLossScaleManager};
use spore_nn::layers::{Dense, ReLU, SequentialCell};
use spore_nn::prelude::*;
use spore_train::{Model, TrainConfig};

use super::{numbered, serial};

fn weights(net: &Arc<SequentialCell>) -> Vec<f64> {
    net.trainable_params()
        .iter()
        .flat_map(|p| p.value().to_f64_vec().unwrap())
        .collect()
}

#[test]
fn model_trains_at_an_amp_level() {
    let _guard = serial();
    for level in [AmpLevel::O2, AmpLevel::O3] {
        for sink in [false, true] {
            spore_core::rng::set_seed(3);
            let net = SequentialCell::new(vec![
                Dense::new(4, 8).unwrap(),
                ReLU::new(),
                Dense::new(8, 3).unwrap(),
            ]);
            let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
            let opt = Momentum::new(net.trainable_params(), 0.05, 0.9).unwrap();
            // A scale that these gradients never overflow: every step updates.
            let options = AmpOptions {
                loss_scale_manager: Some(Arc::new(
                    FixedLossScaleManager::new(128.0, true).unwrap(),
                )),
                ..AmpOptions::default()
            };
            let options = if level == AmpLevel::O2 {
                options
            } else {
                AmpOptions::default()
            };
            let mut model = Model::new(net.clone(), loss, opt).amp(level, options);
            let before = weights(&net);
            let config = if sink {
                TrainConfig::sink(-1)
            } else {
                TrainConfig::no_sink()
            };
            model
                .train(2, &numbered(12, false), &mut [], config)
                .unwrap();
            let what = format!("{level:?}, sink {sink}");
            assert_eq!(model.stats.steps, 12, "{what}");
            assert_eq!(net.base().float_type(), Some(DType::F16), "{what}");
            let class = model.train_network().unwrap().class_name();
            let want = match level {
                AmpLevel::O2 => "TrainOneStepWithLossScaleCell",
                _ => "TrainOneStepCell",
            };
            assert_eq!(class, want, "{what}");
            let after = weights(&net);
            let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            assert!(
                moved > after.len() / 2,
                "{what}: {moved} of {} weights moved",
                after.len()
            );
            assert!(after.iter().all(|w| w.is_finite()), "{what}");
        }
    }
}
