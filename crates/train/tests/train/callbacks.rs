//! ModelCheckpoint keeps the newest files; EarlyStopping stops training; History writes
//! CSV and a PNG; LearningRateScheduler changes the optimizer's rate.

use spore_core::Result;
use spore_nn::prelude::*;
use spore_train::callback::{
    Callback, CheckpointConfig, EarlyStopping, History, LearningRateScheduler, ModelCheckpoint,
    RunContext, TimeMonitor,
};
use spore_train::{Model, TrainConfig};

use super::{Recorder, numbered};

fn model(lr: f64) -> Model {
    let net = Recorder::new();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), lr, 0.9).unwrap();
    Model::new(net, loss, opt)
}

#[test]
fn model_checkpoint_saves_every_n_steps_and_keeps_the_newest() {
    let _guard = super::serial();
    let dir = std::env::temp_dir().join(format!("spore-ckpt-cb-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let mut ckpt = ModelCheckpoint::new(
        "lenet",
        &dir,
        CheckpointConfig {
            save_checkpoint_steps: 2,
            keep_checkpoint_max: 2,
        },
    )
    .unwrap();
    let mut m = model(0.01);
    m.train(
        2,
        &numbered(10, false),
        &mut [&mut ckpt],
        TrainConfig::no_sink(),
    )
    .unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    // Saves after steps 2, 4, 6 (epoch 2 step 1), 8 (epoch 2 step 3) and 10; keeps two.
    assert_eq!(files, vec!["lenet-2_3.ckpt", "lenet-2_5.ckpt"]);
    let dict = spore_nn::checkpoint::load_checkpoint(dir.join("lenet-2_5.ckpt")).unwrap();
    assert!(
        dict.keys().any(|k| k.contains("dense.weight"))
            && dict.keys().any(|k| k.starts_with("moments.")),
        "{:?}",
        dict.keys().collect::<Vec<_>>()
    );
    assert!(
        ModelCheckpoint::new(
            "x",
            &dir,
            CheckpointConfig {
                save_checkpoint_steps: 0,
                keep_checkpoint_max: 1
            }
        )
        .is_err()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Reports a loss that stops improving after the second epoch.
struct FlatLoss(usize);

impl Callback for FlatLoss {
    fn on_epoch_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        self.0 += 1;
        ctx.loss = Some(if self.0 <= 2 {
            1.0 / self.0 as f64
        } else {
            0.5
        });
        Ok(())
    }
}

#[test]
fn early_stopping_ends_training_and_history_records_epochs() {
    let _guard = super::serial();
    let mut m = model(0.01);
    let mut flat = FlatLoss(0);
    let mut stop = EarlyStopping::new("loss", 1, 0.0);
    let mut history = History::new();
    let mut time = TimeMonitor::quiet();
    m.train(
        10,
        &numbered(10, false),
        &mut [&mut flat, &mut stop, &mut history, &mut time],
        TrainConfig::sink(-1),
    )
    .unwrap();
    // Losses 1.0, 0.5, 0.5: epoch 3 is the first without improvement, and with patience 1
    // it is the last (MindSpore and Keras stop when `wait >= patience`).
    assert_eq!(stop.stopped_epoch, Some(3));
    assert_eq!(history.epochs.len(), 3);
    assert_eq!(time.epochs.len(), 3);
    let dir = std::env::temp_dir().join(format!("spore-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    history.write_csv(dir.join("h.csv")).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("h.csv"))
            .unwrap()
            .lines()
            .count(),
        4
    );
    history.plot_png(dir.join("h.png"), 320, 200).unwrap();
    let img = image::open(dir.join("h.png")).unwrap();
    assert_eq!((img.width(), img.height()), (320, 200));
    std::fs::remove_dir_all(&dir).ok();
    let mut bad = EarlyStopping::new("val_accuracy", 1, 0.0);
    let err = model(0.01)
        .train(
            1,
            &numbered(10, false),
            &mut [&mut bad],
            TrainConfig::sink(-1),
        )
        .unwrap_err();
    assert!(err.to_string().contains("val_accuracy"), "{err}");
}

#[test]
fn learning_rate_scheduler_sets_the_optimizer_rate() {
    let _guard = super::serial();
    let net = Recorder::new();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.1, 0.9).unwrap();
    let mut m = Model::new(net, loss, opt.clone());
    let mut sched = LearningRateScheduler::new(|epoch, lr| if epoch == 3 { lr * 0.1 } else { lr });
    m.train(
        3,
        &numbered(10, false),
        &mut [&mut sched],
        TrainConfig::sink(-1),
    )
    .unwrap();
    assert!(
        (opt.learning_rate().unwrap() - 0.01).abs() < 1e-7,
        "{:?}",
        opt.learning_rate()
    );
}

/// MindSpore's and Keras's rule: with patience `p`, training stops at the epoch that is
/// the `p`-th in a row without improvement (`wait >= patience`), not one epoch later.
#[test]
fn early_stopping_stops_at_the_patience_th_epoch_without_improvement() {
    for (patience, losses, stop_at) in [
        (0, vec![1.0, 0.9, 0.95, 0.8], Some(3)),
        (2, vec![1.0, 0.9, 0.95, 0.93, 0.8], Some(4)),
        (2, vec![1.0, 0.9, 0.95, 0.85, 0.86, 0.87], Some(6)),
        (3, vec![1.0, 1.1, 1.2], None),
    ] {
        let mut stop = EarlyStopping::new("loss", patience, 0.0);
        let mut ctx = RunContext::new(losses.len(), 1, false);
        let mut stopped = None;
        for (epoch, loss) in losses.iter().enumerate() {
            ctx.cur_epoch_num = epoch + 1;
            ctx.loss = Some(*loss);
            stop.on_epoch_end(&mut ctx).unwrap();
            if ctx.stop_requested() {
                stopped = Some(epoch + 1);
                break;
            }
        }
        assert_eq!(stopped, stop_at, "patience {patience}, losses {losses:?}");
        assert_eq!(stop.stopped_epoch, stop_at);
    }
}
