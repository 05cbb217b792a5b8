//! Seed 001's sinking rules: callback invocations, printed steps and consumed batches for
//! sink_size -1, sink_size smaller than the dataset (continuing across epochs), and
//! non-sink mode; Graph and PyNative training give the same losses.

use std::sync::Arc;

use spore_core::Result;
use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_nn::prelude::*;
use spore_train::callback::{Callback, LossMonitor, RunContext};
use spore_train::{Model, TrainConfig};

use super::{Recorder, numbered};

/// Records (epoch, step_in_epoch, cur_step_num) at every step end.
#[derive(Default)]
struct Steps(Vec<(usize, usize, usize)>, usize, usize);

impl Callback for Steps {
    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        self.0
            .push((ctx.cur_epoch_num, ctx.step_in_epoch, ctx.cur_step_num));
        Ok(())
    }
    fn on_epoch_begin(&mut self, _: &mut RunContext) -> Result<()> {
        self.1 += 1;
        Ok(())
    }
    fn on_train_end(&mut self, _: &mut RunContext) -> Result<()> {
        self.2 += 1;
        Ok(())
    }
}

fn model(net: &Arc<Recorder>) -> Model {
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    Model::new(net.clone(), loss, opt)
}

#[test]
fn sink_size_minus_one_trains_the_whole_dataset_once_per_callback_step() {
    let _guard = super::serial();
    let net = Recorder::new();
    let mut m = model(&net);
    let (mut monitor, printed) = LossMonitor::capturing(1);
    let mut steps = Steps::default();
    m.train(
        3,
        &numbered(10, false),
        &mut [&mut monitor, &mut steps],
        TrainConfig::sink(-1),
    )
    .unwrap();
    assert_eq!(steps.0, vec![(1, 5, 5), (2, 5, 10), (3, 5, 15)]);
    assert_eq!((steps.1, steps.2), (3, 1));
    assert_eq!(
        (
            m.stats.steps,
            m.stats.batches_consumed,
            m.stats.host_interactions
        ),
        (15, 15, 3)
    );
    let text = printed.lock().unwrap().clone();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for (e, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("epoch: {} step: 5, loss is ", e + 1)),
            "{l}"
        );
    }
    let seen = net.seen.lock().unwrap().clone();
    assert_eq!(seen, [0.0, 2.0, 4.0, 6.0, 8.0].repeat(3));
}

#[test]
fn sink_size_smaller_than_the_dataset_continues_across_epochs() {
    let _guard = super::serial();
    let net = Recorder::new();
    let mut m = model(&net);
    let (mut monitor, printed) = LossMonitor::capturing(1);
    let mut steps = Steps::default();
    m.train(
        4,
        &numbered(10, false),
        &mut [&mut monitor, &mut steps],
        TrainConfig::sink(2),
    )
    .unwrap();
    assert_eq!(steps.0, vec![(1, 2, 2), (2, 2, 4), (3, 2, 6), (4, 2, 8)]);
    assert_eq!(
        (
            m.stats.steps,
            m.stats.batches_consumed,
            m.stats.host_interactions
        ),
        (8, 8, 4)
    );
    // The dataset (5 batches) is traversed endlessly: the next epoch continues where the
    // last one stopped, and the total is epoch * sink_size.
    assert_eq!(
        *net.seen.lock().unwrap(),
        vec![0.0, 2.0, 4.0, 6.0, 8.0, 0.0, 2.0, 4.0]
    );
    assert_eq!(
        printed
            .lock()
            .unwrap()
            .lines()
            .filter(|l| l.contains("step: 2, loss is"))
            .count(),
        4
    );
}

#[test]
fn non_sink_mode_has_one_callback_step_per_step_and_ignores_sink_size() {
    let _guard = super::serial();
    let net = Recorder::new();
    let mut m = model(&net);
    let (mut monitor, printed) = LossMonitor::capturing(2);
    let mut steps = Steps::default();
    let config = TrainConfig {
        dataset_sink_mode: false,
        sink_size: 3,
        initial_epoch: 0,
    };
    m.train(
        2,
        &numbered(10, false),
        &mut [&mut monitor, &mut steps],
        config,
    )
    .unwrap();
    let expect: Vec<(usize, usize, usize)> = (1..=2)
        .flat_map(|e| (1..=5).map(move |s| (e, s, (e - 1) * 5 + s)))
        .collect();
    assert_eq!(steps.0, expect);
    assert_eq!(
        (
            m.stats.steps,
            m.stats.batches_consumed,
            m.stats.host_interactions
        ),
        (10, 10, 10)
    );
    // per_print_times = 2: steps 2 and 4 of each epoch.
    let printed: Vec<String> = printed
        .lock()
        .unwrap()
        .lines()
        .map(|l| l.split(", loss").next().unwrap().to_string())
        .collect();
    assert_eq!(
        printed,
        vec![
            "epoch: 1 step: 2",
            "epoch: 1 step: 4",
            "epoch: 2 step: 2",
            "epoch: 2 step: 4"
        ]
    );
}

#[test]
fn graph_and_pynative_training_give_the_same_losses() {
    let _guard = super::serial();
    let run = |mode: Mode, sink: bool| -> Vec<f64> {
        spore_core::rng::set_seed(3);
        let net = Mlp::new().unwrap();
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
        let mut m = Model::new(net, loss, opt);
        set_context(ContextUpdate::new().mode(mode)).unwrap();
        let x =
            spore_core::Tensor::randn(&[8, 1, 28, 28], spore_core::DType::F32, Some(5)).unwrap();
        let y = spore_core::Tensor::from_vec(vec![0i32, 1, 2, 3, 4, 5, 6, 7], &[8]).unwrap();
        let ds = spore_data::NumpySlicesDataset::new(vec![("x", x), ("y", y)])
            .unwrap()
            .shuffle(false)
            .build()
            .unwrap()
            .batch(4, true)
            .unwrap();
        let mut losses = Losses(vec![]);
        let config = if sink {
            TrainConfig::sink(-1)
        } else {
            TrainConfig::no_sink()
        };
        let r = m.train(3, &ds, &mut [&mut losses], config);
        set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
        r.unwrap();
        losses.0
    };
    let eager = run(Mode::PyNative, false);
    let graph = run(Mode::Graph, false);
    assert_eq!(eager.len(), 6);
    for (a, b) in eager.iter().zip(&graph) {
        assert!(
            (a - b).abs() < 1e-5 * (1.0 + a.abs()),
            "{eager:?} vs {graph:?}"
        );
    }
    let sunk = run(Mode::Graph, true);
    assert_eq!(sunk.len(), 3, "one loss per sink");
    assert!((sunk[2] - eager[5]).abs() < 1e-5 * (1.0 + eager[5].abs()));
}

struct Losses(Vec<f64>);

impl Callback for Losses {
    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        self.0.push(ctx.loss.unwrap_or(f64::NAN));
        Ok(())
    }
}

#[test]
fn bad_arguments_are_errors() {
    let _guard = super::serial();
    let net = Recorder::new();
    let mut m = model(&net);
    let ds = numbered(10, false);
    assert!(
        m.train(0, &ds, &mut [], TrainConfig::no_sink())
            .unwrap_err()
            .to_string()
            .contains("epoch")
    );
    assert!(
        m.train(2, &ds, &mut [], TrainConfig::sink(0))
            .unwrap_err()
            .to_string()
            .contains("sink_size")
    );
    assert!(
        m.train(2, &ds, &mut [], TrainConfig::sink(-3))
            .unwrap_err()
            .to_string()
            .contains("sink_size")
    );
    assert!(
        m.train(2, &ds, &mut [], TrainConfig::no_sink().initial_epoch(2))
            .is_err()
    );
    let single = ds.project(["x"]).unwrap();
    assert!(
        m.train(1, &single, &mut [], TrainConfig::no_sink())
            .unwrap_err()
            .to_string()
            .contains("(data, label)")
    );
    assert!(m.eval(&ds).unwrap_err().to_string().contains("metrics"));
    let empty = numbered(1, false);
    assert!(
        m.train(1, &empty, &mut [], TrainConfig::no_sink())
            .unwrap_err()
            .to_string()
            .contains("empty")
    );
}

/// Always predicts class 0.
struct ClassZero(spore_nn::cell::CellBase);

impl spore_nn::cell::Cell for ClassZero {
    fn construct(&self, inputs: &[spore_core::Tensor]) -> Result<Vec<spore_core::Tensor>> {
        let n = inputs[0].shape()[0];
        let row = [1.0f32, 0.0, 0.0];
        Ok(vec![spore_core::Tensor::from_vec(row.repeat(n), &[n, 3])?])
    }
    fn base(&self) -> &spore_nn::cell::CellBase {
        &self.0
    }
    fn class_name(&self) -> &'static str {
        "ClassZero"
    }
}

#[test]
fn eval_and_predict_use_the_eval_network_when_given() {
    let _guard = super::serial();
    let net = Recorder::new();
    let mut m = model(&net)
        .metrics(vec![Box::new(spore_train::metrics::Accuracy::new())])
        .eval_network(Arc::new(ClassZero(spore_nn::cell::CellBase::new())));
    // Labels of rows 0..10 are i % 3: four of them are class 0.
    let acc = m.eval(&numbered(10, false)).unwrap()["accuracy"];
    assert!((acc - 0.4).abs() < 1e-12, "{acc}");
    assert_eq!(m.eval_samples, 10);
    let p = m.predict(&[super::ones(&[2, 4])]).unwrap();
    assert_eq!(
        p.to_vec::<f32>().unwrap(),
        vec![1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    );
    assert!(
        net.seen.lock().unwrap().is_empty(),
        "the trained network was not run"
    );
}
