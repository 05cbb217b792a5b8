//! Training 2 epochs, saving, and resuming for 2 more gives bit-identical parameters to 4
//! uninterrupted epochs (shuffled data, Momentum state restored).

use std::sync::Arc;

use spore_nn::prelude::*;
use spore_train::callback::{CheckpointConfig, ModelCheckpoint};
use spore_train::{Model, TrainConfig};

use super::numbered;

fn fresh() -> (Arc<Mlp2>, Model) {
    spore_core::rng::set_seed(11);
    // Shuffles are reproducible only with a dataset seed (MindSpore's dataset.config.set_seed).
    spore_data::config::set_seed(5);
    let net = Mlp2::build();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.05, 0.9).unwrap();
    (net.clone(), Model::new(net, loss, opt))
}

/// A two-layer perceptron on 4 features.
type Mlp2 = SequentialCell;

trait Build {
    fn build() -> Arc<SequentialCell>;
}

impl Build for Mlp2 {
    fn build() -> Arc<SequentialCell> {
        SequentialCell::new(vec![
            Dense::new(4, 8).unwrap(),
            ReLU::new(),
            Dense::new(8, 3).unwrap(),
        ])
    }
}

fn params(net: &Arc<SequentialCell>) -> Vec<Vec<f32>> {
    net.trainable_params()
        .iter()
        .map(|p| p.stored().to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn resuming_from_a_checkpoint_is_bit_identical() {
    let _guard = super::serial();
    for sink in [false, true] {
        let config = |c: TrainConfig| {
            if sink {
                TrainConfig {
                    dataset_sink_mode: true,
                    sink_size: -1,
                    ..c
                }
            } else {
                c
            }
        };
        let (net_a, mut a) = fresh();
        a.train(
            4,
            &numbered(12, true),
            &mut [],
            config(TrainConfig::no_sink()),
        )
        .unwrap();

        let dir = std::env::temp_dir().join(format!("spore-resume-{}-{sink}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        let (_, mut b) = fresh();
        let mut ckpt = ModelCheckpoint::new(
            "mlp",
            &dir,
            CheckpointConfig {
                save_checkpoint_steps: 6,
                keep_checkpoint_max: 1,
            },
        )
        .unwrap();
        b.train(
            2,
            &numbered(12, true),
            &mut [&mut ckpt],
            config(TrainConfig::no_sink()),
        )
        .unwrap();
        let saved = ckpt.latest().unwrap().clone();

        let (net_c, mut c) = fresh();
        let train_net = c.train_network().unwrap();
        let report = spore_nn::checkpoint::load_checkpoint_into(&*train_net, &saved).unwrap();
        report.ensure_complete().unwrap();
        c.train(
            4,
            &numbered(12, true),
            &mut [],
            config(TrainConfig::no_sink().initial_epoch(2)),
        )
        .unwrap();
        assert_eq!(
            params(&net_c),
            params(&net_a),
            "sink {sink}: resumed parameters differ"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
