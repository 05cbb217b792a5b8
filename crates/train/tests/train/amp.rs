//! `Model(..., amp_level=...)`: training builds the level's step (O2: float16 compute,
//! a loss-scaled step; O3: float16 everywhere but the loss), in both sink modes.

use spore_core::DType;
use spore_nn::amp::AmpLevel;
use spore_nn::layers::{Dense, ReLU, SequentialCell};
use spore_nn::prelude::*;
use spore_train::{Model, TrainConfig};

use super::{numbered, serial};

#[test]
fn model_trains_at_an_amp_level() {
    let _guard = serial();
    for (level, sink) in [(AmpLevel::O2, false), (AmpLevel::O3, true)] {
        spore_core::rng::set_seed(3);
        let net = SequentialCell::new(vec![
            Dense::new(4, 8).unwrap(),
            ReLU::new(),
            Dense::new(8, 3).unwrap(),
        ]);
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let opt = Momentum::new(net.trainable_params(), 0.05, 0.9).unwrap();
        let mut model = Model::new(net.clone(), loss, opt).amp_level(level);
        let config = if sink {
            TrainConfig::sink(-1)
        } else {
            TrainConfig::no_sink()
        };
        model
            .train(2, &numbered(12, false), &mut [], config)
            .unwrap();
        assert_eq!(model.stats.steps, 12, "{level:?}");
        assert_eq!(net.base().float_type(), Some(DType::F16), "{level:?}");
        let class = model.train_network().unwrap().class_name();
        let want = match level {
            AmpLevel::O2 => "TrainOneStepWithLossScaleCell",
            _ => "TrainOneStepCell",
        };
        assert_eq!(class, want);
        // The weights stay float32 (master weights).
        for p in net.trainable_params() {
            assert_eq!(p.value().dtype(), DType::F32);
        }
    }
}
