//! `Model` (MindSpore's `mindspore.Model`): trains a network with a loss and an optimizer,
//! evaluates metrics, predicts. In Graph mode each training step (forward, backward,
//! update) is one compiled graph; in PyNative mode the forward and backward passes run
//! op by op and the update as one compiled graph. (A loss-scaled mixed-precision step,
//! `amp_level` O2, is one graph in Graph mode too, the update applied under the overflow
//! check's flag; two graphs with the decision on the host in PyNative mode and in a
//! distributed job: see `spore_nn::amp`.)
//!
//! Data sinking follows seed 001: with `dataset_sink_mode`, a feeder thread moves batches
//! into a bounded queue and the training loop takes `sink_size` steps from it per host
//! interaction, with one callback step per sink. `sink_size = -1` trains the whole dataset
//! each epoch; `sink_size > 0` reads the dataset endlessly, each epoch taking `sink_size`
//! batches where the last one stopped. Without sinking there is one callback step per
//! training step and `sink_size` is ignored.
//!
//! ```no_run
//! use std::sync::Arc;
//! use spore_nn::prelude::*;
//! use spore_train::{callback::LossMonitor, model::{Model, TrainConfig}, metrics::Accuracy};
//! # fn data() -> spore_data::Dataset { unimplemented!() }
//! let net = LeNet5::new(10).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
//! let mut model = Model::new(net, loss, opt).metrics(vec![Box::new(Accuracy::new())]);
//! model.train(10, &data(), &mut [&mut LossMonitor::new()], TrainConfig::sink(1000)).unwrap();
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spore_core::debug::{self, profiler};
use spore_core::{Error, Result, Tensor};
use spore_data::Dataset;
use spore_nn::amp::{AmpLevel, AmpOptions, build_train_network};
use spore_nn::cell::{Cell, CellCall, CellExt};
use spore_nn::optim::Optimizer;
use spore_nn::wrap::{TrainOneStepCell, WithLossCell};

use crate::callback::{Callback, RunContext};
use crate::metrics::Metric;

/// How `train` feeds data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainConfig {
    pub dataset_sink_mode: bool,
    /// Steps per epoch when sinking: -1 for the whole dataset, or a positive count.
    pub sink_size: i64,
    /// Epochs already trained (resuming): training runs epochs `initial_epoch + 1 ..= epoch`.
    pub initial_epoch: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            dataset_sink_mode: false,
            sink_size: -1,
            initial_epoch: 0,
        }
    }
}

impl TrainConfig {
    /// One host interaction (and callback step) per training step.
    pub fn no_sink() -> Self {
        Self::default()
    }
    /// Dataset sink mode with `sink_size` steps per epoch (-1: the whole dataset).
    pub fn sink(sink_size: i64) -> Self {
        TrainConfig {
            dataset_sink_mode: true,
            sink_size,
            initial_epoch: 0,
        }
    }
    pub fn initial_epoch(mut self, e: usize) -> Self {
        self.initial_epoch = e;
        self
    }
}

/// Counters of the latest `train` call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrainStats {
    /// Training steps run.
    pub steps: usize,
    /// Batches taken from the dataset.
    pub batches_consumed: usize,
    /// Times control came back to the host (callback steps).
    pub host_interactions: usize,
}

pub struct Model {
    network: Arc<dyn Cell>,
    /// The network `eval` and `predict` run, when it differs from the trained one
    /// (MindSpore's `eval_network`).
    eval_network: Option<Arc<dyn Cell>>,
    loss_fn: Option<Arc<dyn Cell>>,
    optimizer: Option<Arc<dyn Optimizer>>,
    train_net: Option<Arc<dyn Cell>>,
    /// MindSpore's `amp_level` and the mixed-precision keyword arguments.
    amp: Option<(AmpLevel, AmpOptions)>,
    metrics: Vec<Box<dyn Metric>>,
    /// Counters of the latest `train` call.
    pub stats: TrainStats,
    /// Samples seen by the latest `eval` call.
    pub eval_samples: usize,
}

/// Capacity of the sink queue (batches ready ahead of the training loop).
const SINK_QUEUE: usize = 16;

impl Model {
    pub fn new<N: Cell, L: Cell, O: Optimizer>(
        network: Arc<N>,
        loss_fn: Arc<L>,
        optimizer: Arc<O>,
    ) -> Model {
        Model::new_dyn(network, Some(loss_fn), Some(optimizer))
    }

    pub fn new_dyn(
        network: Arc<dyn Cell>,
        loss_fn: Option<Arc<dyn Cell>>,
        optimizer: Option<Arc<dyn Optimizer>>,
    ) -> Model {
        Model {
            network,
            eval_network: None,
            loss_fn,
            optimizer,
            train_net: None,
            amp: None,
            metrics: vec![],
            stats: TrainStats::default(),
            eval_samples: 0,
        }
    }

    /// Metrics reported by [`Model::eval`].
    pub fn metrics(mut self, metrics: Vec<Box<dyn Metric>>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn network(&self) -> &Arc<dyn Cell> {
        &self.network
    }

    /// MindSpore's `Model(..., amp_level=...)`: trains with automatic mixed precision
    /// (see `spore_nn::amp`); the level's defaults for the 16-bit type (float16), BatchNorm
    /// and loss scaling.
    pub fn amp_level(self, level: AmpLevel) -> Self {
        self.amp(level, AmpOptions::default())
    }

    /// [`Model::amp_level`] with MindSpore's keyword arguments (`cast_model_type`,
    /// `keep_batchnorm_fp32`, `loss_scale_manager`) and the 16-bit type.
    /// The network must not have compiled yet (an `eval` in Graph mode compiles it): the
    /// first `train` then fails with `to_float`'s error.
    pub fn amp(mut self, level: AmpLevel, options: AmpOptions) -> Self {
        self.amp = Some((level, options));
        // The next `train` builds its step for this level.
        self.train_net = None;
        self
    }

    /// Evaluates and predicts with `net` instead of the trained network (it should share
    /// the trained parameters, e.g. the backbone with a different head).
    pub fn eval_network(mut self, net: Arc<dyn Cell>) -> Self {
        self.eval_network = Some(net);
        self
    }

    fn evaluated(&self) -> Arc<dyn Cell> {
        self.eval_network
            .clone()
            .unwrap_or_else(|| self.network.clone())
    }

    /// The training cell (network + loss + optimizer), built on first use: a
    /// `TrainOneStepCell`, or with [`Model::amp_level`] what `amp::build_train_network`
    /// builds for the level.
    pub fn train_network(&mut self) -> Result<Arc<dyn Cell>> {
        if let Some(t) = &self.train_net {
            return Ok(t.clone());
        }
        let (Some(loss), Some(opt)) = (&self.loss_fn, &self.optimizer) else {
            return Err(Error::invalid(
                "Model::train needs a loss function and an optimizer (Model::new(network, loss_fn, optimizer))",
            ));
        };
        let t: Arc<dyn Cell> = match &self.amp {
            Some((level, options)) => build_train_network(
                self.network.clone(),
                opt.clone(),
                Some(loss.clone()),
                *level,
                options.clone(),
            )?,
            None => TrainOneStepCell::new_dyn(
                WithLossCell::new_dyn(self.network.clone(), loss.clone()),
                opt.clone(),
            ),
        };
        self.train_net = Some(t.clone());
        Ok(t)
    }

    /// Trains epochs `config.initial_epoch + 1 ..= epoch`.
    pub fn train(
        &mut self,
        epoch: usize,
        dataset: &Dataset,
        callbacks: &mut [&mut dyn Callback],
        config: TrainConfig,
    ) -> Result<()> {
        if epoch == 0 || config.initial_epoch >= epoch {
            return Err(Error::invalid(format!(
                "Model::train: epoch must exceed initial_epoch (it is the total number of epochs); got epoch {epoch}, initial_epoch {}",
                config.initial_epoch
            )));
        }
        if config.dataset_sink_mode && (config.sink_size == 0 || config.sink_size < -1) {
            return Err(Error::invalid(format!(
                "Model::train: sink_size must be -1 or positive, got {}",
                config.sink_size
            )));
        }
        let net = self.train_network()?;
        net.set_train(true);
        let dataset_size = dataset.get_dataset_size()?;
        if dataset_size == 0 {
            return Err(Error::invalid(
                "Model::train: the dataset is empty (check batch size and drop_remainder)",
            ));
        }
        let sinking = config.dataset_sink_mode;
        let per_epoch = if sinking && config.sink_size > 0 {
            config.sink_size as usize
        } else {
            dataset_size
        };
        let mut ctx = RunContext::new(epoch, per_epoch, sinking);
        ctx.train_network = Some(net.clone());
        ctx.learning_rate = self.optimizer.as_ref().and_then(|o| o.learning_rate());
        self.stats = TrainStats::default();
        for cb in callbacks.iter_mut() {
            cb.on_train_begin(&mut ctx)?;
        }
        let result = if sinking {
            self.train_sinking(&net, epoch, dataset, callbacks, config, &mut ctx)
        } else {
            self.train_stepwise(&net, epoch, dataset, callbacks, config, &mut ctx)
        };
        let flushed = debug::flush();
        result?;
        flushed?;
        for cb in callbacks.iter_mut() {
            cb.on_train_end(&mut ctx)?;
        }
        Ok(())
    }

    fn begin_epoch(
        &mut self,
        e: usize,
        callbacks: &mut [&mut dyn Callback],
        ctx: &mut RunContext,
    ) -> Result<()> {
        ctx.cur_epoch_num = e;
        ctx.step_in_epoch = 0;
        ctx.epoch_started = Instant::now();
        for cb in callbacks.iter_mut() {
            cb.on_epoch_begin(ctx)?;
        }
        self.apply_learning_rate_request(ctx)
    }

    fn end_epoch(
        &mut self,
        callbacks: &mut [&mut dyn Callback],
        ctx: &mut RunContext,
    ) -> Result<()> {
        for cb in callbacks.iter_mut() {
            cb.on_epoch_end(ctx)?;
        }
        self.apply_learning_rate_request(ctx)
    }

    fn apply_learning_rate_request(&mut self, ctx: &mut RunContext) -> Result<()> {
        if let (Some(lr), Some(opt)) = (ctx.take_learning_rate_request(), &self.optimizer) {
            opt.set_learning_rate(lr)?;
            ctx.learning_rate = Some(lr);
        }
        Ok(())
    }

    /// One training step on a `(data, label)` row; returns the loss.
    fn step(&mut self, net: &Arc<dyn Cell>, row: &[Tensor]) -> Result<f64> {
        if row.len() < 2 {
            return Err(Error::invalid(format!(
                "Model::train: each dataset row must hold (data, label), got {} column(s)",
                row.len()
            )));
        }
        let loss = net.call_first(&row[..2])?.item()?;
        self.stats.steps += 1;
        Ok(loss)
    }

    fn train_stepwise(
        &mut self,
        net: &Arc<dyn Cell>,
        epoch: usize,
        dataset: &Dataset,
        callbacks: &mut [&mut dyn Callback],
        config: TrainConfig,
        ctx: &mut RunContext,
    ) -> Result<()> {
        let mut it = dataset
            .create_tuple_iterator(epoch)
            .starting_at_epoch(config.initial_epoch);
        for e in config.initial_epoch + 1..=epoch {
            self.begin_epoch(e, callbacks, ctx)?;
            let mut waited = Instant::now();
            for row in it.by_ref() {
                let row = row?;
                let data_wait = waited.elapsed();
                self.stats.batches_consumed += 1;
                ctx.step_started = Instant::now();
                for cb in callbacks.iter_mut() {
                    cb.on_step_begin(ctx)?;
                }
                let loss = self.step(net, &row)?;
                ctx.loss = Some(loss);
                ctx.cur_step_num += 1;
                ctx.step_in_epoch += 1;
                ctx.steps_in_last_call = 1;
                self.stats.host_interactions += 1;
                step_boundary(data_wait)?;
                for cb in callbacks.iter_mut() {
                    cb.on_step_end(ctx)?;
                }
                if ctx.stop_requested() {
                    break;
                }
                waited = Instant::now();
            }
            self.end_epoch(callbacks, ctx)?;
            if ctx.stop_requested() {
                break;
            }
        }
        Ok(())
    }

    fn train_sinking(
        &mut self,
        net: &Arc<dyn Cell>,
        epoch: usize,
        dataset: &Dataset,
        callbacks: &mut [&mut dyn Callback],
        config: TrainConfig,
        ctx: &mut RunContext,
    ) -> Result<()> {
        // The feeder thread: the pipeline runs ahead of training into a bounded queue.
        let whole = config.sink_size == -1;
        let mut queue = if whole {
            dataset.prefetch_from(config.initial_epoch, epoch, Some(SINK_QUEUE))?
        } else {
            // Endless traversal; a resumed run skips the batches earlier epochs consumed.
            let consumed = config.initial_epoch * config.sink_size as usize;
            let endless = dataset.repeat_forever();
            let endless = if consumed > 0 {
                endless.skip(consumed)?
            } else {
                endless
            };
            endless.prefetch(1, Some(SINK_QUEUE))?
        };
        for e in config.initial_epoch + 1..=epoch {
            self.begin_epoch(e, callbacks, ctx)?;
            ctx.step_started = Instant::now();
            for cb in callbacks.iter_mut() {
                cb.on_step_begin(ctx)?;
            }
            // Loop sinking: `sink_size` steps (or one dataset epoch) without the host.
            let mut done = 0;
            let mut last = f64::NAN;
            loop {
                if !whole && done == ctx.batch_num {
                    break;
                }
                let waited = Instant::now();
                let row = match queue.next() {
                    Some(row) => row?,
                    None if whole => break, // end of this dataset epoch
                    None => continue,       // an endless stream has no real end
                };
                let data_wait = waited.elapsed();
                self.stats.batches_consumed += 1;
                last = self.step(net, &row)?;
                done += 1;
                step_boundary(data_wait)?;
            }
            if done == 0 {
                return Err(Error::invalid(
                    "Model::train: the sink queue ended before the epoch began",
                ));
            }
            ctx.loss = Some(last);
            ctx.cur_step_num += done;
            ctx.step_in_epoch = done;
            ctx.steps_in_last_call = done;
            self.stats.host_interactions += 1;
            for cb in callbacks.iter_mut() {
                cb.on_step_end(ctx)?;
            }
            self.end_epoch(callbacks, ctx)?;
            if ctx.stop_requested() {
                break;
            }
        }
        Ok(())
    }

    /// Runs the network in evaluation mode over one epoch of `dataset` and returns every
    /// metric by name. In a data-parallel job, on a sharded dataset, each rank evaluates
    /// its shard and the metrics' sums are added up over the ranks: every rank must call
    /// `eval` (it is a collective) and every rank gets the whole dataset's metrics. On an
    /// unsharded dataset each rank evaluates everything by itself.
    pub fn eval(&mut self, dataset: &Dataset) -> Result<BTreeMap<String, f64>> {
        if self.metrics.is_empty() {
            return Err(Error::invalid(
                "Model::eval needs metrics: create the model with .metrics(vec![Box::new(Accuracy::new())])",
            ));
        }
        let net = self.evaluated();
        let was_training = net.is_training();
        net.set_train(false);
        let result = self.eval_inner(&net, dataset);
        net.set_train(was_training);
        result
    }

    fn eval_inner(
        &mut self,
        net: &Arc<dyn Cell>,
        dataset: &Dataset,
    ) -> Result<BTreeMap<String, f64>> {
        for m in &mut self.metrics {
            m.clear();
        }
        self.eval_samples = 0;
        for row in dataset.create_tuple_iterator(1) {
            let row = row?;
            if row.len() < 2 {
                return Err(Error::invalid(
                    "Model::eval: each dataset row must hold (data, label)",
                ));
            }
            self.eval_samples += row[1].shape().first().copied().unwrap_or(1);
            let logits = spore_core::no_grad(|| net.call(&row[..1]))?.remove(0);
            let loss = match &self.loss_fn {
                Some(l) => Some(
                    spore_core::no_grad(|| l.call(&[logits.clone(), row[1].clone()]))?
                        .remove(0)
                        .item()?,
                ),
                None => None,
            };
            for m in &mut self.metrics {
                m.update(&logits, &row[1], loss)?;
            }
        }
        // A sharded evaluation is only part of the answer on each rank; an unsharded one
        // is all of it (and may run on one rank alone).
        if let Some(d) = spore_nn::distributed::current()
            && dataset.is_sharded()
        {
            self.combine_across_ranks(&*d)?;
        }
        Ok(self.metrics.iter().map(|m| (m.name(), m.eval())).collect())
    }

    /// A data-parallel job evaluating a sharded dataset: the metrics' sums (and the
    /// sample count) are added up over the ranks, so every rank reports the whole
    /// dataset's.
    fn combine_across_ranks(&mut self, d: &dyn spore_nn::distributed::Distributed) -> Result<()> {
        if !d.is_data_parallel() {
            return Ok(());
        }
        let mut flat = vec![self.eval_samples as f64];
        let mut lengths = vec![];
        for m in &self.metrics {
            let state = m.state().ok_or_else(|| {
                Error::invalid(format!(
                    "Model::eval on {} ranks: the metric '{}' cannot be combined across ranks (it has no Metric::state)",
                    d.group_size(),
                    m.name()
                ))
            })?;
            lengths.push(state.len());
            flat.extend(state);
        }
        let total = d.sum_across_ranks(&flat)?;
        self.eval_samples = total[0] as usize;
        let mut at = 1;
        for (m, n) in self.metrics.iter_mut().zip(lengths) {
            m.set_state(&total[at..at + n])?;
            at += n;
        }
        Ok(())
    }

    /// The network's output for `inputs`, in evaluation mode.
    pub fn predict(&self, inputs: &[Tensor]) -> Result<Tensor> {
        let net = self.evaluated();
        let was_training = net.is_training();
        net.set_train(false);
        let out = spore_core::no_grad(|| net.call(inputs));
        net.set_train(was_training);
        out?.into_iter()
            .next()
            .ok_or_else(|| Error::invalid("Model::predict: the network returned no output"))
    }
}

/// Ends a training step for the observers: the profiler's iteration trace and the dump's
/// PyNative iteration.
fn step_boundary(data_wait: Duration) -> Result<()> {
    if let Some(p) = profiler::current() {
        p.step_end(data_wait);
    }
    debug::step_end()
}
